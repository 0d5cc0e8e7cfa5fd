//! Data-path helpers shared by the rrxe-integrity, rrxe-syscalls and rrxe-errors programs:
//! a seeded PRNG, a device with its RoCE v2 IPv4 GID, one "side" of a connection (PD, CQ, MR,
//! QP), the QP bring-up to RTS, and the fast-path verbs with a bounded poll.
//!
//! Works against any RoCE device (rrxe or the kernel's rdma_rxe).

use std::ffi::CStr;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use crate::ffi::*;
use crate::util::{ename, errno, ret_errno};
use crate::verbs::{Channel, Cq, Ctx, Mr, Pd, Qp};

/// splitmix64: small, seedable, identical everywhere.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn u32(&mut self) -> u32 {
        (self.u64() >> 32) as u32
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.u64() % n.max(1)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    pub fn coin(&mut self) -> bool {
        self.u64() & 1 == 1
    }

    pub fn fill(&mut self, b: &mut [u8]) {
        for c in b.chunks_mut(8) {
            let v = self.u64().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

/// A seed from the clock (printed by the programs, so that a failure can be replayed).
pub fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}

/// An open device, port 1, and the GID of its netdev's IPv4 address (RoCE v2).
pub struct Dev {
    pub name: String,
    pub port: u8,
    pub gid_index: u8,
    pub gid: [u8; 16],
    pub attr: ibv_device_attr,
    pub port_attr: ibv_port_attr,
    pub ctx: Ctx,
}

impl Dev {
    pub fn open(name: &str) -> Result<Dev, String> {
        let ctx = Ctx::open(name)?;
        let port = 1u8;
        let attr = ctx
            .query_device()
            .map_err(|e| format!("ibv_query_device({name}): {}", ename(e)))?;
        let port_attr = ctx
            .query_port(port)
            .map_err(|e| format!("ibv_query_port({name}): {}", ename(e)))?;
        let mut found = None;
        for i in 0..port_attr.gid_tbl_len.max(0) as u32 {
            let Ok(e) = ctx.query_gid_ex(port, i) else {
                continue;
            };
            // SAFETY: every bit pattern is a valid [u8; 16].
            let raw = unsafe { e.gid.raw };
            if e.gid_type == IBV_GID_TYPE_ROCE_V2 && Ipv6Addr::from(raw).to_ipv4_mapped().is_some()
            {
                found = Some((i, raw));
                break;
            }
        }
        let (i, gid) = found.ok_or_else(|| format!("{name}: no RoCE v2 GID of an IPv4 address"))?;
        Ok(Dev {
            name: name.to_owned(),
            port,
            gid_index: u8::try_from(i).map_err(|_| format!("{name}: GID index {i} > 255"))?,
            gid,
            attr,
            port_attr,
            ctx,
        })
    }

    pub fn ipv4(&self) -> Ipv4Addr {
        Ipv6Addr::from(self.gid)
            .to_ipv4_mapped()
            .unwrap_or(Ipv4Addr::UNSPECIFIED)
    }

    /// The active MTU in bytes.
    pub fn mtu(&self) -> usize {
        128usize << self.port_attr.active_mtu.clamp(IBV_MTU_256, IBV_MTU_4096)
    }
}

pub const ACCESS_ALL: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC;

/// One end of a connection: its QP, memory region, CQ and PD (fields drop in this order).
pub struct Side {
    pub qp: Qp,
    pub mr: Mr,
    pub cq: Cq,
    pub pd: Pd,
}

impl Side {
    /// A PD, a CQ of `cqe` entries, an MR of `mr_len` bytes (all access rights) and a QP of
    /// type `t`, asking for `cap` and, should the device refuse, for less inline data.
    pub fn new(
        dev: &Dev,
        t: u32,
        cap: ibv_qp_cap,
        cqe: i32,
        mr_len: usize,
    ) -> Result<Side, String> {
        Self::new_on(dev, t, cap, cqe, mr_len, None)
    }

    /// [`Side::new`] with the CQ's events going to `chan` (which must outlive the side).
    pub fn new_on(
        dev: &Dev,
        t: u32,
        cap: ibv_qp_cap,
        cqe: i32,
        mr_len: usize,
        chan: Option<&Channel>,
    ) -> Result<Side, String> {
        let pd = Pd::alloc(&dev.ctx).map_err(|e| format!("ibv_alloc_pd: {}", ename(e)))?;
        let cq = Cq::create_on(&dev.ctx, cqe, 0, chan)
            .map_err(|e| format!("ibv_create_cq({cqe}): {}", ename(e)))?;
        let mr = Mr::reg(&pd, mr_len, ACCESS_ALL)
            .map_err(|e| format!("ibv_reg_mr({mr_len}): {}", ename(e)))?;
        let mut last = 0;
        for inline in [cap.max_inline_data, 64, 0] {
            if inline > cap.max_inline_data {
                continue;
            }
            let c = ibv_qp_cap {
                max_inline_data: inline,
                ..cap
            };
            match Qp::create(&pd, &cq, t, c, false) {
                Ok(qp) => return Ok(Side { qp, mr, cq, pd }),
                Err(e) => last = e,
            }
        }
        Err(format!(
            "ibv_create_qp(type {t}, send_wr {} recv_wr {} send_sge {} recv_sge {}): {}",
            cap.max_send_wr,
            cap.max_recv_wr,
            cap.max_send_sge,
            cap.max_recv_sge,
            ename(last)
        ))
    }

    pub fn addr(&self) -> u64 {
        // SAFETY: a registered MR.
        unsafe { (*self.mr.ptr).addr as u64 }
    }

    // The registered buffer's length, not a collection size: an `is_empty` would mean nothing.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        // SAFETY: a registered MR.
        unsafe { (*self.mr.ptr).length }
    }

    pub fn lkey(&self) -> u32 {
        // SAFETY: a registered MR.
        unsafe { (*self.mr.ptr).lkey }
    }

    pub fn rkey(&self) -> u32 {
        // SAFETY: a registered MR.
        unsafe { (*self.mr.ptr).rkey }
    }

    /// The MR's bytes `off..off + len`. The device writes this memory asynchronously: callers
    /// take short-lived slices only between verbs calls, never across a poll.
    #[allow(clippy::mut_from_ref)]
    pub fn mem(&self, off: usize, len: usize) -> &mut [u8] {
        assert!(
            off + len <= self.len(),
            "MR access {off}+{len} beyond {}",
            self.len()
        );
        // SAFETY: inside the MR's buffer (owned by the Mr, alive while self is); the test is
        // single-threaded and no two slices are alive at once.
        unsafe { std::slice::from_raw_parts_mut((self.addr() as *mut u8).add(off), len) }
    }

    pub fn sge(&self, off: usize, len: usize) -> ibv_sge {
        ibv_sge {
            addr: self.addr() + off as u64,
            length: len as u32,
            lkey: self.lkey(),
        }
    }
}

/// The RC requester's transport attributes set at RTS (`ibv_qp_attr.timeout`, `retry_cnt`,
/// `rnr_retry`). Default (18, 7, 7).
#[derive(Clone, Copy, Debug)]
pub struct RcParams {
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
}

impl Default for RcParams {
    fn default() -> RcParams {
        RcParams {
            // 4.096 us * 2^18 = 1.07 s: under TCG with KASAN a packet costs about 1 ms end to
            // end, so perftest's usual 14 (67 ms) would make windows time out and go back N.
            timeout: 18,
            retry_cnt: 7,
            rnr_retry: 7,
        }
    }
}

impl RcParams {
    /// The local ACK timeout in microseconds: 4.096 us * 2^timeout (0: infinite, None).
    pub fn ack_timeout_us(&self) -> Option<u64> {
        (self.timeout != 0).then(|| (4096u64 << self.timeout.min(31)) / 1000)
    }
}

/// Brings `qp` (type `t`) on `dev` through INIT and RTR to RTS, connected (RC/UC) to QP
/// `remote_qpn` at `remote_gid`.
#[allow(clippy::too_many_arguments)]
pub fn to_rts(
    dev: &Dev,
    qp: &Qp,
    t: u32,
    remote_qpn: u32,
    remote_gid: [u8; 16],
    rq_psn: u32,
    sq_psn: u32,
    qkey: u32,
) -> Result<(), String> {
    to_rts_with(
        dev,
        qp,
        t,
        remote_qpn,
        remote_gid,
        rq_psn,
        sq_psn,
        qkey,
        RcParams::default(),
    )
}

/// [`to_rts`] with explicit RC requester attributes.
#[allow(clippy::too_many_arguments)]
pub fn to_rts_with(
    dev: &Dev,
    qp: &Qp,
    t: u32,
    remote_qpn: u32,
    remote_gid: [u8; 16],
    rq_psn: u32,
    sq_psn: u32,
    qkey: u32,
    rc: RcParams,
) -> Result<(), String> {
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_INIT,
        pkey_index: 0,
        port_num: dev.port,
        qkey,
        qp_access_flags: IBV_ACCESS_REMOTE_WRITE
            | IBV_ACCESS_REMOTE_READ
            | IBV_ACCESS_REMOTE_ATOMIC,
        ..zeroed()
    };
    let mut mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    mask |= if t == IBV_QPT_UD {
        IBV_QP_QKEY
    } else {
        IBV_QP_ACCESS_FLAGS
    };
    qp.modify(&a, mask)
        .map_err(|e| format!("{} qp {:#x} ->INIT: {}", dev.name, qp.qpn(), ename(e)))?;

    let rd_atom = dev.attr.max_qp_rd_atom.clamp(1, 16) as u8;
    let init_rd_atom = dev.attr.max_qp_init_rd_atom.clamp(1, 16) as u8;
    a.qp_state = IBV_QPS_RTR;
    mask = IBV_QP_STATE;
    if t != IBV_QPT_UD {
        a.path_mtu = dev.port_attr.active_mtu;
        a.dest_qp_num = remote_qpn;
        a.rq_psn = rq_psn;
        a.ah_attr.is_global = 1;
        a.ah_attr.port_num = dev.port;
        a.ah_attr.grh.dgid.raw = remote_gid;
        a.ah_attr.grh.sgid_index = dev.gid_index;
        a.ah_attr.grh.hop_limit = 64;
        mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    }
    if t == IBV_QPT_RC {
        a.max_dest_rd_atomic = rd_atom;
        a.min_rnr_timer = 12;
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
    qp.modify(&a, mask)
        .map_err(|e| format!("{} qp {:#x} ->RTR: {}", dev.name, qp.qpn(), ename(e)))?;

    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = sq_psn;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if t == IBV_QPT_RC {
        a.timeout = rc.timeout;
        a.retry_cnt = rc.retry_cnt;
        a.rnr_retry = rc.rnr_retry;
        a.max_rd_atomic = init_rd_atom;
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    qp.modify(&a, mask)
        .map_err(|e| format!("{} qp {:#x} ->RTS: {}", dev.name, qp.qpn(), ename(e)))
}

/// Connects `a` (on `da`) and `b` (on `db`) to each other; PSNs from `rng` close to the
/// 24-bit wrap, so that a run crosses it.
pub fn connect(
    da: &Dev,
    a: &Side,
    db: &Dev,
    b: &Side,
    t: u32,
    qkey: u32,
    rng: &mut Rng,
) -> Result<(), String> {
    connect_with(da, a, db, b, t, qkey, rng, RcParams::default())
}

/// [`connect`] with explicit RC requester attributes (both QPs get the same).
#[allow(clippy::too_many_arguments)]
pub fn connect_with(
    da: &Dev,
    a: &Side,
    db: &Dev,
    b: &Side,
    t: u32,
    qkey: u32,
    rng: &mut Rng,
    rc: RcParams,
) -> Result<(), String> {
    let pa = (0xff_ffff - rng.below(200)) as u32;
    let pb = (0xff_ffff - rng.below(200)) as u32;
    to_rts_with(da, &a.qp, t, b.qp.qpn(), db.gid, pb, pa, qkey, rc)?;
    to_rts_with(db, &b.qp, t, a.qp.qpn(), da.gid, pa, pb, qkey, rc)
}

pub fn post_send(qp: &Qp, wr: &mut ibv_send_wr) -> Result<(), String> {
    let mut bad = std::ptr::null_mut();
    // SAFETY: valid QP; the WR (and the SGE array it points to) lives across the call.
    ret_errno(unsafe { vt_post_send(qp.ptr, wr, &mut bad) })
        .map_err(|e| format!("ibv_post_send: {}", ename(e)))
}

pub fn post_recv(qp: &Qp, wr: &mut ibv_recv_wr) -> Result<(), String> {
    let mut bad = std::ptr::null_mut();
    // SAFETY: valid QP; the WR (and its SGE array) lives across the call.
    ret_errno(unsafe { vt_post_recv(qp.ptr, wr, &mut bad) })
        .map_err(|e| format!("ibv_post_recv: {}", ename(e)))
}

/// One `ibv_poll_cq` for up to `wc.len()` entries; the count.
pub fn poll_once(cq: &Cq, wc: &mut [ibv_wc]) -> Result<usize, String> {
    // SAFETY: valid CQ and output array of wc.len() entries.
    let n = unsafe { vt_poll_cq(cq.ptr, wc.len() as i32, wc.as_mut_ptr()) };
    if n < 0 {
        return Err(format!("ibv_poll_cq: {n} (errno {})", ename(errno())));
    }
    Ok(n as usize)
}

/// Polls until `n` completions arrived or `timeout` passed (then: what arrived, and an error).
///
/// It spins while completions keep coming, and naps ([`IDLE_NAP`]) once none came for
/// [`IDLE_AFTER`]: a wait for a retransmit timer or a slow peer then leaves the CPU to the
/// kernel's work (the guest runs under TCG beside another, and a spinning vCPU costs a host
/// core).
pub fn poll_n(cq: &Cq, n: usize, timeout: Duration) -> Result<Vec<ibv_wc>, (Vec<ibv_wc>, String)> {
    let mut got: Vec<ibv_wc> = Vec::with_capacity(n);
    let mut buf = zeroed::<[ibv_wc; 16]>();
    let end = Instant::now() + timeout;
    let mut last = Instant::now();
    let mut spins = 0u32;
    while got.len() < n {
        let want = (n - got.len()).min(buf.len());
        match poll_once(cq, &mut buf[..want]) {
            Ok(0) => {}
            Ok(k) => {
                got.extend(buf[..k].iter().map(Zeroed::bitcopy));
                last = Instant::now();
            }
            Err(e) => return Err((got, e)),
        }
        if got.len() >= n {
            break;
        }
        spins += 1;
        if spins.is_multiple_of(64) {
            let now = Instant::now();
            if now > end {
                let msg = format!("{} of {n} completions after {timeout:?}", got.len());
                return Err((got, msg));
            }
            if now.duration_since(last) > IDLE_AFTER {
                std::thread::sleep(IDLE_NAP);
            } else {
                std::thread::yield_now();
            }
        }
    }
    Ok(got)
}

/// How long [`poll_n`] spins without a completion before it naps between polls.
pub const IDLE_AFTER: Duration = Duration::from_millis(2);
/// The nap of an idle [`poll_n`].
pub const IDLE_NAP: Duration = Duration::from_micros(500);

/// Whatever else is in the CQ right now (after a short grace period).
pub fn drain(cq: &Cq, grace: Duration) -> Vec<ibv_wc> {
    std::thread::sleep(grace);
    let mut out = Vec::new();
    let mut buf = zeroed::<[ibv_wc; 16]>();
    while let Ok(k) = poll_once(cq, &mut buf) {
        if k == 0 {
            break;
        }
        out.extend(buf[..k].iter().map(Zeroed::bitcopy));
    }
    out
}

pub fn status_str(s: u32) -> String {
    // SAFETY: libibverbs returns a static string for any value.
    let p = unsafe { ibv_wc_status_str(s) };
    let name = if p.is_null() {
        "?".to_owned()
    } else {
        // SAFETY: NUL-terminated static string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    };
    format!("{name}({s})")
}

pub fn wc_opcode_str(o: u32) -> &'static str {
    match o {
        IBV_WC_SEND => "SEND",
        IBV_WC_RDMA_WRITE => "RDMA_WRITE",
        IBV_WC_RDMA_READ => "RDMA_READ",
        IBV_WC_COMP_SWAP => "COMP_SWAP",
        IBV_WC_FETCH_ADD => "FETCH_ADD",
        IBV_WC_BIND_MW => "BIND_MW",
        IBV_WC_LOCAL_INV => "LOCAL_INV",
        IBV_WC_RECV => "RECV",
        IBV_WC_RECV_RDMA_WITH_IMM => "RECV_RDMA_WITH_IMM",
        _ => "?",
    }
}

/// `wr_id 3 SEND SUCCESS(0) len 12 qp 0x11 ...` for messages.
pub fn wc_str(w: &ibv_wc) -> String {
    // SAFETY: a union of two u32.
    let imm = unsafe { w.imm_data_invalidated_rkey_union.imm_data };
    format!(
        "wr_id {} {} {} len {} qp {:#x} src_qp {:#x} flags {:#x} imm {:#x}",
        w.wr_id,
        wc_opcode_str(w.opcode),
        status_str(w.status),
        w.byte_len,
        w.qp_num,
        w.src_qp,
        w.wc_flags,
        imm
    )
}

pub fn qp_state(qp: &Qp) -> Result<u32, String> {
    qp.query()
        .map(|(a, _)| a.qp_state)
        .map_err(|e| format!("ibv_query_qp: {}", ename(e)))
}

/// `--name value` parsing helper: the value after `a`, parsed.
pub fn arg_val<T: std::str::FromStr>(
    args: &mut impl Iterator<Item = String>,
    a: &str,
) -> Result<T, String>
where
    T::Err: std::fmt::Display,
{
    let v = args.next().ok_or_else(|| format!("{a} needs a value"))?;
    let v = v.trim();
    let parsed = if let Some(h) = v.strip_prefix("0x") {
        u64::from_str_radix(h, 16)
            .map_err(|e| e.to_string())
            .and_then(|n| n.to_string().parse::<T>().map_err(|e| e.to_string()))
    } else {
        v.parse::<T>().map_err(|e| e.to_string())
    };
    parsed.map_err(|e| format!("{a} {v}: {e}"))
}
