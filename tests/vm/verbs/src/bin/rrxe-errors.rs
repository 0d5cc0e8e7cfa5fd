//! rrxe-errors: error paths of the data path, on RC QPs (loopback on one device, or across two
//! devices with --dev2).
//!
//!   rrxe-errors [--dev rrxe0] [--dev2 rrxe1] [--no-hostile] checks
//!       bad_rkey:  an RDMA WRITE with a wrong rkey completes with IBV_WC_REM_ACCESS_ERR, the
//!                  WRs posted behind it (and one posted afterwards) with IBV_WC_WR_FLUSH_ERR,
//!                  and the QP is in the error state;
//!       bad_lkey:  a SEND from a wrong lkey completes with IBV_WC_LOC_PROT_ERR, the next WR
//!                  is flushed;
//!       destroy_outstanding: QPs destroyed with many WRs outstanding (sender first, and
//!                  receiver first), everything destroyed cleanly, then a new pair works;
//!       hostile:   (issue 9) the process scribbles on its own rings through the mapping: a
//!                  receive-ring producer index out of range -> a SEND to that QP completes
//!                  promptly with an error at the sender, the receiver is in ERR with exactly
//!                  one QP_FATAL; a send-ring producer index out of range -> 50 raw doorbells
//!                  return promptly, the QP is in ERR with exactly one QP_FATAL; modify_qp(ERR)
//!                  returns promptly on both; a new pair works afterwards;
//!       solicited: ibv_req_notify_cq(cq, 1) on the receiver's CQ: a SEND without
//!                  IBV_SEND_SOLICITED raises no event, one with it does, so does an
//!                  RDMA_WRITE_WITH_IMM with it, and so does an unsuccessful receive
//!                  completion (a SEND longer than the receive buffer; IBTA 11.4.2.2);
//!       user_lists: (issue 25) raw uverbs commands that carry work requests on user objects, as
//!                  a hostile process would write them on its command fd: POST_SEND with an
//!                  inline SEND whose SGE names kernel memory (linux_banner from
//!                  /proc/kallsyms, and an unmapped kernel address, and a user address) in
//!                  RESET, INIT and RTS -> EINVAL every time, no kernel byte in any of the
//!                  process's uverbs mappings, no completion, and the QP still works through
//!                  its rings. POST_RECV, POST_SRQ_RECV and POLL_CQ -> EOPNOTSUPP: ib_uverbs
//!                  does not offer them for the device (its command mask enables POST_SEND,
//!                  the doorbell, and REQ_NOTIFY_CQ only, as rdma_rxe's does);
//!       cq:        a CQ overflow moves the QP to ERR with exactly one CQ_ERR event;
//!                  ibv_resize_cq to fewer entries than completions waiting fails with EINVAL
//!                  and every waiting completion is still there.
//!   rrxe-errors [--dev ...] traffic      keeps RDMA WRITEs and SENDs in flight forever; prints
//!                                        RUNNING once traffic flows (for a SIGKILL test)
//!   rrxe-errors [--dev ...] hold GOFILE  sets up a working pair, prints HOLDING, waits for
//!                                        GOFILE to exist, tries one more transfer, prints
//!                                        "AFTER ok" or "AFTER failed: ...", then tears down and
//!                                        prints "TEARDOWN ..." (for the rmmod test)
//!
//! Prints PASS/FAIL lines and "N passed, N failed" (checks); exits non-zero on failure.

use rrxe_verbs_test::{dp, ffi, util, verbs};

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use dp::{Dev, Rng, Side};
use ffi::*;
use util::{ename, Report};
use verbs::{Channel, Qp};

const T: Duration = Duration::from_secs(30);
const MR: usize = 1 << 22;

fn cap(wr: u32) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: wr,
        max_recv_wr: wr,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

fn pair(da: &Dev, db: &Dev, wr: u32, seed: u64) -> Result<(Side, Side), String> {
    let a = Side::new(da, IBV_QPT_RC, cap(wr), 4 * wr as i32, MR)?;
    let b = Side::new(db, IBV_QPT_RC, cap(wr), 4 * wr as i32, MR)?;
    dp::connect(da, &a, db, &b, IBV_QPT_RC, 0, &mut Rng::new(seed))?;
    Ok((a, b))
}

fn send_wr(id: u64, op: u32, sge: &mut ibv_sge) -> ibv_send_wr {
    ibv_send_wr {
        wr_id: id,
        opcode: op,
        send_flags: IBV_SEND_SIGNALED,
        num_sge: 1,
        sg_list: sge,
        ..zeroed()
    }
}

fn recv(side: &Side, id: u64, off: usize, len: usize) -> Result<(), String> {
    let mut sge = side.sge(off, len);
    let mut w = ibv_recv_wr {
        wr_id: id,
        num_sge: 1,
        sg_list: &mut sge,
        ..zeroed()
    };
    dp::post_recv(&side.qp, &mut w)
}

/// Posts WR `id` of opcode `op`, `len` bytes at `off` of `s`, RDMA to `r` at `roff` with `rkey`.
#[allow(clippy::too_many_arguments)]
fn post(
    s: &Side,
    r: &Side,
    id: u64,
    op: u32,
    off: usize,
    len: usize,
    roff: usize,
    rkey: u32,
    lkey: u32,
) -> Result<(), String> {
    let mut sge = s.sge(off, len);
    sge.lkey = lkey;
    let mut w = send_wr(id, op, &mut sge);
    w.wr.rdma.remote_addr = r.addr() + roff as u64;
    w.wr.rdma.rkey = rkey;
    dp::post_send(&s.qp, &mut w)
}

fn expect(got: &[ibv_wc], want: &[(u64, u32)]) -> Result<(), String> {
    let g: Vec<(u64, u32)> = got.iter().map(|w| (w.wr_id, w.status)).collect();
    if g == want {
        return Ok(());
    }
    Err(format!(
        "completions [{}], want [{}]",
        got.iter().map(dp::wc_str).collect::<Vec<_>>().join("; "),
        want.iter()
            .map(|(i, s)| format!("wr_id {i} {}", dp::status_str(*s)))
            .collect::<Vec<_>>()
            .join("; ")
    ))
}

fn poll(s: &Side, n: usize) -> Result<Vec<ibv_wc>, String> {
    dp::poll_n(&s.cq, n, T).map_err(|(got, e)| {
        format!(
            "{e}: [{}]",
            got.iter().map(dp::wc_str).collect::<Vec<_>>().join("; ")
        )
    })
}

fn bad_rkey(da: &Dev, db: &Dev, r: &mut Report) -> Result<(), String> {
    let (a, b) = pair(da, db, 16, 1)?;
    for i in 0..4 {
        recv(&b, 100 + i, 4096 * i as usize, 4096)?;
    }
    let bad = b.rkey() ^ 0x5a;
    post(&a, &b, 1, IBV_WR_RDMA_WRITE, 0, 64, 0, bad, a.lkey())?;
    post(&a, &b, 2, IBV_WR_SEND, 64, 64, 0, 0, a.lkey())?;
    post(&a, &b, 3, IBV_WR_RDMA_WRITE, 128, 64, 0, b.rkey(), a.lkey())?;
    post(&a, &b, 4, IBV_WR_RDMA_READ, 192, 64, 0, b.rkey(), a.lkey())?;
    let got = poll(&a, 4)?;
    let first = expect(&got[..1], &[(1, IBV_WC_REM_ACCESS_ERR)]);
    let rest = expect(
        &got[1..],
        &[
            (2, IBV_WC_WR_FLUSH_ERR),
            (3, IBV_WC_WR_FLUSH_ERR),
            (4, IBV_WC_WR_FLUSH_ERR),
        ],
    );
    r.result("errors.bad_rkey.rem_access_err", first);
    r.result("errors.bad_rkey.later_wrs_flushed", rest);
    let st = dp::qp_state(&a.qp)?;
    r.result(
        "errors.bad_rkey.requester_in_error",
        if st == IBV_QPS_ERR {
            Ok(())
        } else {
            Err(format!("requester QP state {st} (want ERR {IBV_QPS_ERR})"))
        },
    );
    // A WR posted to a QP in the error state completes with a flush error.
    let after = post(&a, &b, 5, IBV_WR_SEND, 0, 16, 0, 0, a.lkey())
        .and_then(|()| poll(&a, 1))
        .and_then(|g| expect(&g, &[(5, IBV_WC_WR_FLUSH_ERR)]));
    r.result("errors.bad_rkey.post_in_error_flushed", after);
    let extra = dp::drain(&a.cq, Duration::from_millis(100));
    r.result(
        "errors.bad_rkey.no_extra_completions",
        if extra.is_empty() {
            Ok(())
        } else {
            Err(extra.iter().map(dp::wc_str).collect::<Vec<_>>().join("; "))
        },
    );
    let resp: Vec<String> = dp::drain(&b.cq, Duration::ZERO)
        .iter()
        .map(dp::wc_str)
        .collect();
    r.info(
        "errors.bad_rkey",
        format!(
            "responder QP state {:?}, its completions: [{}]",
            dp::qp_state(&b.qp),
            resp.join("; ")
        ),
    );
    Ok(())
}

fn bad_lkey(da: &Dev, db: &Dev, r: &mut Report) -> Result<(), String> {
    let (a, b) = pair(da, db, 16, 2)?;
    for i in 0..2 {
        recv(&b, 100 + i, 4096 * i as usize, 4096)?;
    }
    post(&a, &b, 1, IBV_WR_SEND, 0, 64, 0, 0, a.lkey() ^ 0x5a)?;
    post(&a, &b, 2, IBV_WR_SEND, 64, 64, 0, 0, a.lkey())?;
    let got = poll(&a, 2)?;
    r.result(
        "errors.bad_lkey.loc_prot_err",
        expect(&got[..1], &[(1, IBV_WC_LOC_PROT_ERR)]),
    );
    r.result(
        "errors.bad_lkey.next_wr_flushed",
        expect(&got[1..], &[(2, IBV_WC_WR_FLUSH_ERR)]),
    );
    let extra = dp::drain(&a.cq, Duration::from_millis(100));
    r.result(
        "errors.bad_lkey.no_extra_completions",
        if extra.is_empty() {
            Ok(())
        } else {
            Err(extra.iter().map(dp::wc_str).collect::<Vec<_>>().join("; "))
        },
    );

    // A receive buffer with a wrong lkey (reported, not checked: what the requester sees is
    // left to the implementation; the responder's receive fails).
    let (a, b) = pair(da, db, 16, 3)?;
    let mut sge = b.sge(0, 4096);
    sge.lkey ^= 0x5a;
    let mut w = ibv_recv_wr {
        wr_id: 7,
        num_sge: 1,
        sg_list: &mut sge,
        ..zeroed()
    };
    dp::post_recv(&b.qp, &mut w)?;
    post(&a, &b, 8, IBV_WR_SEND, 0, 64, 0, 0, a.lkey())?;
    let ga = dp::poll_n(&a.cq, 1, Duration::from_secs(10)).unwrap_or_else(|(g, _)| g);
    let gb = dp::poll_n(&b.cq, 1, Duration::from_secs(2)).unwrap_or_else(|(g, _)| g);
    r.info(
        "errors.bad_lkey.recv",
        format!(
            "requester [{}], responder [{}]",
            ga.iter().map(dp::wc_str).collect::<Vec<_>>().join("; "),
            gb.iter().map(dp::wc_str).collect::<Vec<_>>().join("; ")
        ),
    );
    Ok(())
}

/// A SEND round trip a -> b (the pair works).
fn round_trip(a: &Side, b: &Side) -> Result<(), String> {
    recv(b, 900, 0, 4096)?;
    a.mem(8192, 100).copy_from_slice(&[0x3c; 100]);
    post(a, b, 901, IBV_WR_SEND, 8192, 100, 0, 0, a.lkey())?;
    let ga = poll(a, 1)?;
    let gb = poll(b, 1)?;
    expect(&ga, &[(901, IBV_WC_SUCCESS)])?;
    expect(&gb, &[(900, IBV_WC_SUCCESS)])?;
    if b.mem(0, 100) != [0x3c; 100] {
        return Err("data received differs".into());
    }
    Ok(())
}

fn destroy_outstanding(da: &Dev, db: &Dev, r: &mut Report) -> Result<(), String> {
    for (k, sender_first) in [(0u64, true), (1, false)] {
        let name = if sender_first {
            "sender_first"
        } else {
            "receiver_first"
        };
        let (a, b) = pair(da, db, 64, 10 + k)?;
        for i in 0..64 {
            recv(&b, 1000 + i, 0, 65536)?;
        }
        let mut posted = 0;
        for i in 0..64u64 {
            let (op, len) = match i % 3 {
                0 => (IBV_WR_RDMA_WRITE, 65536),
                1 => (IBV_WR_SEND, 65536),
                _ => (IBV_WR_RDMA_READ, 65536),
            };
            let off = (i as usize % 32) * 65536;
            if post(&a, &b, i, op, off, len, off, b.rkey(), a.lkey()).is_ok() {
                posted += 1;
            }
        }
        let Side {
            qp: qa,
            mr: ma,
            cq: ca,
            pd: pa,
        } = a;
        let Side {
            qp: qb,
            mr: mb,
            cq: cb,
            pd: pb,
        } = b;
        let mut errs = Vec::new();
        let mut d = |what: &str, res: Result<(), i32>| {
            if let Err(e) = res {
                errs.push(format!("{what}: {}", ename(e)));
            }
        };
        if sender_first {
            d("destroy sender QP", qa.destroy());
            d("destroy receiver QP", qb.destroy());
        } else {
            d("destroy receiver QP", qb.destroy());
            std::thread::sleep(Duration::from_millis(200));
            d("destroy sender QP", qa.destroy());
        }
        d("dereg MR", ma.destroy());
        d("dereg MR", mb.destroy());
        d("destroy CQ", ca.destroy());
        d("destroy CQ", cb.destroy());
        d("dealloc PD", pa.destroy());
        d("dealloc PD", pb.destroy());
        r.result(
            &format!("errors.destroy_outstanding.{name}"),
            if posted == 64 && errs.is_empty() {
                Ok(())
            } else {
                Err(format!("{posted} of 64 WRs posted; {}", errs.join(", ")))
            },
        );
    }
    let res = pair(da, db, 16, 20).and_then(|(a, b)| round_trip(&a, &b));
    r.result("errors.destroy_outstanding.new_pair_works", res);
    Ok(())
}

unsafe extern "C" {
    /// libibverbs' private `ibv_cmd_post_send`: with a NULL list it is the provider's doorbell
    /// (`POST_SEND` with no WRs), rung here behind the provider's back; with a list it writes
    /// the WRs into the uverbs command itself. Returns 0 or an errno.
    fn ibv_cmd_post_send(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad: *mut *mut ibv_send_wr) -> i32;
    /// uverbs `POST_RECV` with the WRs in the command. Returns 0 or an errno.
    fn ibv_cmd_post_recv(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad: *mut *mut ibv_recv_wr) -> i32;
    /// uverbs `POST_SRQ_RECV` with the WRs in the command. Returns 0 or an errno.
    fn ibv_cmd_post_srq_recv(
        srq: *mut ibv_srq,
        wr: *mut ibv_recv_wr,
        bad: *mut *mut ibv_recv_wr,
    ) -> i32;
    /// uverbs `POLL_CQ`: the number of completions, or -1 with errno set.
    fn ibv_cmd_poll_cq(cq: *mut ibv_cq, ne: i32, wc: *mut ibv_wc) -> i32;
}

/// The address of kernel symbol `name` from /proc/kallsyms (0 when hidden).
fn kallsym(name: &str) -> u64 {
    let all = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    all.lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            let (a, _, n) = (f.next()?, f.next()?, f.next()?);
            (n == name)
                .then(|| u64::from_str_radix(a, 16).ok())
                .flatten()
        })
        .unwrap_or(0)
}

/// The uverbs mappings of this process: (start, end, permissions).
fn uverbs_maps() -> Result<Vec<(usize, usize, String)>, String> {
    let maps =
        std::fs::read_to_string("/proc/self/maps").map_err(|e| format!("/proc/self/maps: {e}"))?;
    Ok(maps
        .lines()
        .filter(|l| l.contains("uverbs"))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (range, perms) = (f.next()?, f.next()?);
            let (lo, hi) = range.split_once('-')?;
            let (lo, hi) = (
                usize::from_str_radix(lo, 16).ok()?,
                usize::from_str_radix(hi, 16).ok()?,
            );
            Some((lo, hi, perms.to_owned()))
        })
        .collect())
}

/// Whether any readable uverbs mapping of this process holds `needle`.
fn uverbs_maps_hold(needle: &[u8]) -> bool {
    for (lo, hi, perms) in uverbs_maps().unwrap_or_default() {
        if !perms.starts_with('r') {
            continue;
        }
        // SAFETY: a live readable mapping of the process, read byte by byte (volatile: the
        // kernel writes it).
        let bytes: Vec<u8> = (lo..hi)
            .map(|a| unsafe { std::ptr::read_volatile(a as *const u8) })
            .collect();
        if bytes.windows(needle.len()).any(|w| w == needle) {
            return true;
        }
    }
    false
}

/// One raw POST_SEND of an inline SEND from kernel address `addr` (48 bytes): EINVAL; then one
/// raw POST_RECV with a receive buffer at `addr`: EOPNOTSUPP (not offered by ib_uverbs).
fn raw_lists_refused(qp: &Qp, addr: u64, at: &str) -> Result<(), String> {
    let mut sge = ibv_sge {
        addr,
        length: 48,
        lkey: 0,
    };
    let mut w = ibv_send_wr {
        wr_id: 0xbad,
        opcode: IBV_WR_SEND,
        send_flags: IBV_SEND_INLINE | IBV_SEND_SIGNALED,
        num_sge: 1,
        sg_list: &mut sge,
        ..zeroed()
    };
    let mut bad = std::ptr::null_mut();
    // SAFETY: a live QP and a valid one-WR list (its SGE names kernel memory: the point).
    let rs = unsafe { ibv_cmd_post_send(qp.ptr, &mut w, &mut bad) };
    let mut rsge = ibv_sge {
        addr,
        length: 48,
        lkey: 0,
    };
    let mut rw = ibv_recv_wr {
        wr_id: 0xbad,
        num_sge: 1,
        sg_list: &mut rsge,
        ..zeroed()
    };
    let mut rbad = std::ptr::null_mut();
    // SAFETY: as above, for a receive list.
    let rr = unsafe { ibv_cmd_post_recv(qp.ptr, &mut rw, &mut rbad) };
    if rs != libc::EINVAL || rr != libc::EOPNOTSUPP {
        return Err(format!(
            "{at}, address {addr:#x}: POST_SEND returned {}, POST_RECV {}, want EINVAL, EOPNOTSUPP",
            ename(rs),
            ename(rr)
        ));
    }
    Ok(())
}

fn user_lists(da: &Dev, db: &Dev, r: &mut Report) -> Result<(), String> {
    let banner = kallsym("linux_banner");
    let unmapped = 0xffff_ffff_ff00_0000u64;
    r.info("errors.user_lists", format!("linux_banner at {banner:#x}"));
    let mut addrs = vec![unmapped];
    if banner != 0 {
        addrs.insert(0, banner);
    }
    let c = ibv_qp_cap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let a = Side::new(da, IBV_QPT_RC, c, 64, MR)?;
    let mut res = Ok(());
    for &addr in &addrs {
        res = res.and_then(|_| raw_lists_refused(&a.qp, addr, "RESET"));
    }
    r.result("errors.user_lists.reset_einval", res);
    let init = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        port_num: 1,
        qp_access_flags: IBV_ACCESS_LOCAL_WRITE,
        ..zeroed()
    };
    a.qp.modify(
        &init,
        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
    )
    .map_err(|e| format!("modify_qp(INIT): {}", ename(e)))?;
    let mut res = Ok(());
    for &addr in &addrs {
        res = res.and_then(|_| raw_lists_refused(&a.qp, addr, "INIT"));
    }
    r.result("errors.user_lists.init_einval", res);
    drop(a);

    let (a, b) = pair(da, db, 16, 25)?;
    let mut res = Ok(());
    for &addr in &addrs {
        res = res.and_then(|_| raw_lists_refused(&a.qp, addr, "RTS"));
    }
    r.result("errors.user_lists.rts_einval", res);
    // A user address through the command path is refused the same way: WRs of a user QP
    // travel through its SQ ring only.
    r.result(
        "errors.user_lists.user_address_einval",
        raw_lists_refused(&a.qp, a.addr(), "RTS"),
    );
    r.result(
        "errors.user_lists.no_completion",
        match dp::drain(&a.cq, Duration::from_millis(300))[..] {
            [] => Ok(()),
            ref w => Err(format!(
                "unexpected completions: {}",
                w.iter().map(dp::wc_str).collect::<Vec<_>>().join("; ")
            )),
        },
    );
    r.result("errors.user_lists.qp_still_works", round_trip(&a, &b));

    // SAFETY: a live PD; a zeroed init attr with a small queue.
    let srq = unsafe {
        let mut ia: ibv_srq_init_attr = zeroed();
        ia.attr.max_wr = 16;
        ia.attr.max_sge = 1;
        ibv_create_srq(a.pd.ptr, &mut ia)
    };
    if srq.is_null() {
        r.fail(
            "errors.user_lists.srq_refused",
            format!("ibv_create_srq: {}", ename(util::errno())),
        );
    } else {
        let mut rsge = a.sge(0, 64);
        let mut rw = ibv_recv_wr {
            wr_id: 0xbad,
            num_sge: 1,
            sg_list: &mut rsge,
            ..zeroed()
        };
        let mut rbad = std::ptr::null_mut();
        // SAFETY: a live SRQ and a valid one-WR list.
        let rc = unsafe { ibv_cmd_post_srq_recv(srq, &mut rw, &mut rbad) };
        r.result(
            "errors.user_lists.srq_refused",
            if rc == libc::EOPNOTSUPP {
                Ok(())
            } else {
                Err(format!(
                    "POST_SRQ_RECV returned {}, want EOPNOTSUPP",
                    ename(rc)
                ))
            },
        );
        // SAFETY: the SRQ was created above and nothing uses it.
        unsafe { ibv_destroy_srq(srq) };
    }
    let mut wc: ibv_wc = zeroed();
    // SAFETY: a live CQ and room for one completion.
    let n = unsafe { ibv_cmd_poll_cq(a.cq.ptr, 1, &mut wc) };
    let e = util::errno();
    r.result(
        "errors.user_lists.poll_cq_eopnotsupp",
        if n < 0 && e == libc::EOPNOTSUPP {
            Ok(())
        } else {
            Err(format!("POLL_CQ returned {n} ({})", ename(e)))
        },
    );
    r.result(
        "errors.user_lists.no_kernel_bytes_in_rings",
        if uverbs_maps_hold(b"Linux version") {
            Err("a uverbs mapping holds \"Linux version\"".into())
        } else {
            Ok(())
        },
    );
    drop((a, b));
    Ok(())
}

/// Offsets in the ring header (uapi `RingHeader`: 64-byte cache lines).
const RING_PRODUCER: usize = 0;
const RING_CONSUMER: usize = 64;
const RING_LOG2_SLOTS: usize = 128;

/// The ring of this process (a read-write uverbs mapping) whose header says 2^`log2` slots;
/// exactly one must exist.
fn ring_with(log2: u32) -> Result<*mut u8, String> {
    let mut found = Vec::new();
    for (lo, hi, perms) in uverbs_maps()? {
        if !perms.starts_with("rw") || hi - lo < 4096 {
            continue;
        }
        let p = lo as *mut u8;
        // SAFETY: a live read-write mapping of at least a page; the header is its first bytes.
        let l2 = unsafe { std::ptr::read_volatile(p.add(RING_LOG2_SLOTS).cast::<u32>()) };
        if l2 == log2 {
            found.push(p);
        }
    }
    match found[..] {
        [p] => Ok(p),
        _ => Err(format!(
            "{} uverbs mappings with 2^{log2} slots, want 1",
            found.len()
        )),
    }
}

/// Writes a producer index far out of range into the ring at `p`.
fn scribble(p: *mut u8) {
    // SAFETY: `p` is a ring header in a live read-write mapping (ring_with).
    unsafe {
        let cons = std::ptr::read_volatile(p.add(RING_CONSUMER).cast::<u32>());
        std::ptr::write_volatile(
            p.add(RING_PRODUCER).cast::<u32>(),
            cons.wrapping_add(1_000_003),
        );
    }
}

/// Reads (and acknowledges) the async events queued for `ctx` without blocking: (type, QP).
fn async_events(ctx: *mut ibv_context) -> Vec<(u32, usize)> {
    let mut v = Vec::new();
    // SAFETY: a live context; its async fd is switched to non-blocking and back; each event
    // read is acknowledged once.
    unsafe {
        let fd = (*ctx).async_fd;
        let fl = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
        loop {
            let mut ev: ibv_async_event = std::mem::zeroed();
            if ibv_get_async_event(ctx, &mut ev) != 0 {
                break;
            }
            // The raw value (the field's Rust enum type cannot hold an unknown one).
            let ty = std::ptr::addr_of!(ev.event_type).cast::<u32>().read();
            v.push((ty, ev.element.qp as usize));
            ibv_ack_async_event(&mut ev);
        }
        libc::fcntl(fd, libc::F_SETFL, fl);
    }
    v
}

fn fatal_count(ev: &[(u32, usize)], qp: &Qp) -> usize {
    ev.iter()
        .filter(|(t, q)| *t == IBV_EVENT_QP_FATAL && *q == qp.ptr as usize)
        .count()
}

fn in_err(qp: &Qp) -> Result<(), String> {
    match dp::qp_state(qp)? {
        IBV_QPS_ERR => Ok(()),
        st => Err(format!("QP state {st}, want ERR ({IBV_QPS_ERR})")),
    }
}

fn modify_err_prompt(qp: &Qp) -> Result<(), String> {
    let t0 = std::time::Instant::now();
    let a = ibv_qp_attr {
        qp_state: IBV_QPS_ERR,
        ..zeroed()
    };
    qp.modify(&a, IBV_QP_STATE)
        .map_err(|e| format!("modify_qp(ERR): {}", ename(e)))?;
    let dt = t0.elapsed();
    if dt > Duration::from_secs(3) {
        return Err(format!("modify_qp(ERR) took {dt:?}"));
    }
    Ok(())
}

fn side(d: &Dev, send: u32, recv: u32, cqe: i32) -> Result<Side, String> {
    let c = ibv_qp_cap {
        max_send_wr: send,
        max_recv_wr: recv,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    Side::new(d, IBV_QPT_RC, c, cqe, MR)
}

fn hostile(da: &Dev, db: &Dev, r: &mut Report) -> Result<(), String> {
    // Ring sizes unique in the process, so that each ring is found by its header: pair 1
    // (SQ/RQ/CQ) a 32/2/1024, b 4/128/2048; pair 2 a 8/16/512, b 64/256/4096.
    let a = side(da, 32, 2, 1000)?;
    let b = side(db, 4, 128, 2000)?;
    dp::connect(da, &a, db, &b, IBV_QPT_RC, 0, &mut Rng::new(50))?;
    round_trip(&a, &b)?;
    async_events(db.ctx.ptr);
    scribble(ring_with(7)?);
    let t0 = std::time::Instant::now();
    post(&a, &b, 1, IBV_WR_SEND, 0, 64, 0, 0, a.lkey())?;
    let got = dp::poll_n(&a.cq, 1, Duration::from_secs(20));
    let dt = t0.elapsed();
    r.result(
        "errors.hostile.rq.sender_completes_promptly",
        match &got {
            Ok(g) if g[0].status != IBV_WC_SUCCESS => Ok(()),
            Ok(g) => Err(format!("{} after {dt:?}", dp::wc_str(&g[0]))),
            Err((_, e)) => Err(e.clone()),
        },
    );
    if let Ok(g) = &got {
        r.info(
            "errors.hostile.rq",
            format!("sender: {} after {dt:?}", dp::wc_str(&g[0])),
        );
    }
    r.result("errors.hostile.rq.receiver_in_error", in_err(&b.qp));
    r.result(
        "errors.hostile.rq.modify_err_returns",
        modify_err_prompt(&b.qp),
    );
    std::thread::sleep(Duration::from_millis(200));
    let n = fatal_count(&async_events(db.ctx.ptr), &b.qp);
    r.result(
        "errors.hostile.rq.one_qp_fatal",
        if n == 1 {
            Ok(())
        } else {
            Err(format!("{n} QP_FATAL events for the receiver, want 1"))
        },
    );
    drop((a, b));

    let a = side(da, 8, 16, 300)?;
    let b = side(db, 64, 256, 3000)?;
    dp::connect(da, &a, db, &b, IBV_QPT_RC, 0, &mut Rng::new(51))?;
    round_trip(&a, &b)?;
    async_events(da.ctx.ptr);
    scribble(ring_with(3)?);
    let t0 = std::time::Instant::now();
    let mut rets = Vec::new();
    for _ in 0..50 {
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP; a NULL list reads no WR.
        rets.push(unsafe { ibv_cmd_post_send(a.qp.ptr, std::ptr::null_mut(), &mut bad) });
    }
    let dt = t0.elapsed();
    rets.dedup();
    r.info(
        "errors.hostile.sq",
        format!("50 doorbells in {dt:?}, returned {rets:?}"),
    );
    r.result(
        "errors.hostile.sq.doorbells_return_promptly",
        if dt < Duration::from_secs(5) {
            Ok(())
        } else {
            Err(format!("50 doorbells took {dt:?}"))
        },
    );
    r.result("errors.hostile.sq.sender_in_error", in_err(&a.qp));
    r.result(
        "errors.hostile.sq.modify_err_returns",
        modify_err_prompt(&a.qp),
    );
    std::thread::sleep(Duration::from_millis(200));
    let n = fatal_count(&async_events(da.ctx.ptr), &a.qp);
    r.result(
        "errors.hostile.sq.one_qp_fatal",
        if n == 1 {
            Ok(())
        } else {
            Err(format!("{n} QP_FATAL events for the sender, want 1"))
        },
    );
    drop((a, b));
    let res = pair(da, db, 16, 52).and_then(|(a, b)| round_trip(&a, &b));
    r.result("errors.hostile.device_works_afterwards", res);
    Ok(())
}

fn cq(da: &Dev, db: &Dev, r: &mut Report) -> Result<(), String> {
    // Overflow: 8 signalled WRITEs into a CQ of 4.
    let a = side(da, 16, 16, 4)?;
    let b = side(db, 16, 16, 64)?;
    dp::connect(da, &a, db, &b, IBV_QPT_RC, 0, &mut Rng::new(60))?;
    async_events(da.ctx.ptr);
    for i in 0..8u64 {
        post(&a, &b, i, IBV_WR_RDMA_WRITE, 0, 64, 0, b.rkey(), a.lkey())?;
    }
    std::thread::sleep(Duration::from_secs(2));
    r.result("errors.cq.overflow_qp_in_error", in_err(&a.qp));
    let n = async_events(da.ctx.ptr)
        .iter()
        .filter(|(t, _)| *t == IBV_EVENT_CQ_ERR)
        .count();
    r.result(
        "errors.cq.overflow_one_cq_err",
        if n == 1 {
            Ok(())
        } else {
            Err(format!("{n} CQ_ERR events, want 1"))
        },
    );
    drop((a, b));

    // Resize below what is waiting: refused, nothing lost.
    let a = side(da, 16, 16, 16)?;
    let b = side(db, 16, 16, 64)?;
    dp::connect(da, &a, db, &b, IBV_QPT_RC, 0, &mut Rng::new(61))?;
    for i in 0..8u64 {
        post(&a, &b, i, IBV_WR_RDMA_WRITE, 0, 64, 0, b.rkey(), a.lkey())?;
    }
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: a live CQ of ours.
    let ret = unsafe { ibv_resize_cq(a.cq.ptr, 4) };
    r.result(
        "errors.cq.resize_below_pending_einval",
        if ret == libc::EINVAL || (ret == -1 && util::errno() == libc::EINVAL) {
            Ok(())
        } else {
            Err(format!("ibv_resize_cq(4) with 8 waiting returned {ret}"))
        },
    );
    let got = poll(&a, 8)
        .and_then(|g| expect(&g, &(0..8).map(|i| (i, IBV_WC_SUCCESS)).collect::<Vec<_>>()));
    r.result("errors.cq.resize_refused_drops_nothing", got);
    // SAFETY: as above.
    let ret = unsafe { ibv_resize_cq(a.cq.ptr, 32) };
    r.result(
        "errors.cq.resize_up_works",
        if ret == 0 {
            round_trip(&a, &b)
        } else {
            Err(format!("ibv_resize_cq(32) returned {ret}"))
        },
    );
    Ok(())
}

/// Arms `cq` for solicited completions only.
fn arm_solicited(cq: &verbs::Cq) -> Result<(), String> {
    // SAFETY: a live CQ of ours.
    let ret = unsafe { vt_req_notify_cq(cq.ptr, 1) };
    if ret == 0 {
        Ok(())
    } else {
        Err(format!("ibv_req_notify_cq(cq, 1): {}", ename(ret)))
    }
}

/// Whether an event comes within `t` (acknowledged if it does).
fn event_within(ch: &Channel, t: Duration) -> Result<bool, String> {
    ch.wait(t)
        .map_err(|e| format!("completion channel: {}", ename(e)))
}

fn solicited(da: &Dev, db: &Dev, r: &mut Report) -> Result<(), String> {
    let ch =
        Channel::create(&db.ctx).map_err(|e| format!("ibv_create_comp_channel: {}", ename(e)))?;
    let a = side(da, 16, 16, 64)?;
    let b = Side::new_on(db, IBV_QPT_RC, cap(16), 64, MR, Some(&ch))?;
    dp::connect(da, &a, db, &b, IBV_QPT_RC, 0, &mut Rng::new(70))?;
    for i in 0..4u64 {
        recv(&b, 200 + i, 4096 * i as usize, 4096)?;
    }
    let quiet = Duration::from_millis(500);
    let send = |id: u64, op: u32, len: usize, flags: u32| -> Result<(), String> {
        let mut sge = a.sge(0, len);
        let mut w = send_wr(id, op, &mut sge);
        w.send_flags |= flags;
        w.imm_data_invalidated_rkey_union.imm_data = 0x5117_u32.to_be();
        w.wr.rdma.remote_addr = b.addr() + (1 << 20);
        w.wr.rdma.rkey = b.rkey();
        dp::post_send(&a.qp, &mut w)
    };
    arm_solicited(&b.cq)?;
    send(1, IBV_WR_SEND, 64, 0)?;
    let got = poll(&b, 1)?;
    let quiet_ok = match event_within(&ch, quiet)? {
        false => expect(&got, &[(200, IBV_WC_SUCCESS)]),
        true => Err("an event for a SEND sent without IBV_SEND_SOLICITED".to_owned()),
    };
    r.result("errors.solicited.unsolicited_send_no_event", quiet_ok);
    // Still armed: the solicited SEND raises the event; then, armed again, a solicited
    // RDMA_WRITE_WITH_IMM.
    for (name, id, op, len) in [
        (
            "errors.solicited.solicited_send_event",
            2,
            IBV_WR_SEND,
            3000,
        ),
        (
            "errors.solicited.write_with_imm_event",
            3,
            IBV_WR_RDMA_WRITE_WITH_IMM,
            64,
        ),
    ] {
        if id == 3 {
            arm_solicited(&b.cq)?;
        }
        send(id, op, len, IBV_SEND_SOLICITED)?;
        let ev = event_within(&ch, T)?;
        let got = poll(&b, 1)?;
        r.result(
            name,
            if ev {
                expect(&got, &[(199 + id, IBV_WC_SUCCESS)])
            } else {
                Err("no event within 30 s".to_owned())
            },
        );
    }
    poll(&a, 3)?;
    // An unsuccessful completion is always solicited: a SEND longer than the receive buffer.
    arm_solicited(&b.cq)?;
    send(4, IBV_WR_SEND, 8000, 0)?;
    let ev = event_within(&ch, T)?;
    let got = poll(&b, 1)?;
    r.result(
        "errors.solicited.error_event",
        match (ev, got.first()) {
            (true, Some(w)) if w.wr_id == 203 && w.status != IBV_WC_SUCCESS => Ok(()),
            (true, _) => Err(format!(
                "event, but completion {:?}",
                got.iter().map(dp::wc_str).collect::<Vec<_>>()
            )),
            (false, _) => Err(format!(
                "no event within 30 s for the receive completion [{}]",
                got.iter().map(dp::wc_str).collect::<Vec<_>>().join("; ")
            )),
        },
    );
    Ok(())
}

/// Keeps WRITEs and SENDs in flight until killed.
fn traffic(da: &Dev, db: &Dev) -> Result<(), String> {
    let (a, b) = pair(da, db, 64, 30)?;
    for i in 0..64 {
        recv(&b, i, (i as usize % 16) * 65536, 65536)?;
    }
    let mut outstanding = 0usize;
    let mut done = 0u64;
    let mut id = 0u64;
    let mut wc = zeroed::<[ibv_wc; 16]>();
    let mut running = false;
    loop {
        while outstanding < 32 {
            let off = (id as usize % 32) * 65536;
            if id.is_multiple_of(2) {
                post(
                    &a,
                    &b,
                    id,
                    IBV_WR_RDMA_WRITE,
                    off,
                    65536,
                    off,
                    b.rkey(),
                    a.lkey(),
                )?;
            } else {
                post(&a, &b, id, IBV_WR_SEND, off, 65536, 0, 0, a.lkey())?;
            }
            id += 1;
            outstanding += 1;
        }
        let k = dp::poll_once(&a.cq, &mut wc)?;
        for w in &wc[..k] {
            if w.status != IBV_WC_SUCCESS {
                return Err(format!("sender: {}", dp::wc_str(w)));
            }
            outstanding -= 1;
            done += 1;
        }
        let k = dp::poll_once(&b.cq, &mut wc)?;
        for w in &wc[..k] {
            if w.status != IBV_WC_SUCCESS {
                return Err(format!("receiver: {}", dp::wc_str(w)));
            }
            recv(&b, w.wr_id, (w.wr_id as usize % 16) * 65536, 65536)?;
        }
        if done >= 16 && !running {
            running = true;
            println!("RUNNING");
            let _ = std::io::stdout().flush();
        }
        if k == 0 {
            std::thread::yield_now();
        }
    }
}

fn hold(da: &Dev, db: &Dev, go: &str) -> Result<(), String> {
    let (a, b) = pair(da, db, 16, 40)?;
    round_trip(&a, &b)?;
    println!("HOLDING");
    let _ = std::io::stdout().flush();
    for _ in 0..3000 {
        if std::path::Path::new(go).exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    match round_trip(&a, &b) {
        Ok(()) => println!("AFTER ok"),
        Err(e) => println!("AFTER failed: {e}"),
    }
    let _ = std::io::stdout().flush();
    let mut errs = Vec::new();
    for (n, s) in [("a", a), ("b", b)] {
        let Side { qp, mr, cq, pd } = s;
        for (what, r) in [
            ("destroy_qp", qp.destroy()),
            ("dereg_mr", mr.destroy()),
            ("destroy_cq", cq.destroy()),
            ("dealloc_pd", pd.destroy()),
        ] {
            if let Err(e) = r {
                errs.push(format!("{n}.{what}: {}", ename(e)));
            }
        }
    }
    println!(
        "TEARDOWN {}",
        if errs.is_empty() {
            "ok".to_owned()
        } else {
            errs.join(", ")
        }
    );
    Ok(())
}

fn main() -> ExitCode {
    let mut dev = "rrxe0".to_owned();
    let mut dev2: Option<String> = None;
    let mut mode = "checks".to_owned();
    let mut go = String::new();
    let mut hostile_rings = true;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let r = match a.as_str() {
            "--dev" => dp::arg_val(&mut args, &a).map(|v| dev = v),
            "--dev2" => dp::arg_val(&mut args, &a).map(|v| dev2 = Some(v)),
            // rdma_rxe's rings have another layout, and its CQ overflow other rules: the
            // hostile and cq checks are rrxe's; so is user_lists (rdma_rxe ignores a user
            // QP's list in RTS and polls user CQs through uverbs).
            "--no-hostile" => {
                hostile_rings = false;
                Ok(())
            }
            "checks" | "traffic" => {
                mode = a.clone();
                Ok(())
            }
            "hold" => {
                mode = a.clone();
                dp::arg_val(&mut args, &a).map(|v| go = v)
            }
            _ => Err(format!("unknown argument {a}")),
        };
        if let Err(e) = r {
            eprintln!("rrxe-errors: {e}");
            return ExitCode::from(2);
        }
    }
    let mut r = Report::new(Vec::new(), Vec::new());
    let devs = Dev::open(&dev).and_then(|a| match &dev2 {
        Some(n) => Dev::open(n).map(|b| (a, Some(b))),
        None => Ok((a, None)),
    });
    let (da, db) = match devs {
        Ok(d) => d,
        Err(e) => {
            r.fail("errors.setup", e);
            r.summary();
            return ExitCode::FAILURE;
        }
    };
    let db = db.as_ref().unwrap_or(&da);
    match mode.as_str() {
        "traffic" => {
            if let Err(e) = traffic(&da, db) {
                eprintln!("rrxe-errors traffic: {e}");
            }
            return ExitCode::FAILURE;
        }
        "hold" => {
            return match hold(&da, db, &go) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    println!("HOLD failed: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        _ => {}
    }
    for (name, f) in [
        (
            "errors.bad_rkey",
            bad_rkey as fn(&Dev, &Dev, &mut Report) -> Result<(), String>,
        ),
        ("errors.bad_lkey", bad_lkey),
        ("errors.destroy_outstanding", destroy_outstanding),
        ("errors.hostile", hostile),
        ("errors.solicited", solicited),
        ("errors.cq", cq),
        ("errors.user_lists", user_lists),
    ] {
        let rrxe_only = ["errors.hostile", "errors.cq", "errors.user_lists"];
        if rrxe_only.contains(&name) && !hostile_rings {
            continue;
        }
        if let Err(e) = f(&da, db, &mut r) {
            r.fail(name, e);
        }
    }
    r.summary();
    if r.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
