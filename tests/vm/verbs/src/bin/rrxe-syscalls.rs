//! rrxe-syscalls: counts the system calls the fast-path verbs make. A forked child (traced with
//! PTRACE_SYSCALL) sets up two connected RC QPs on one device and runs, between marker system
//! calls (`close(1000000 + phase)`):
//!
//!   1. N x ibv_post_recv (one WR each)                       -> 0 system calls
//!   2. N x ibv_post_send (one signaled 8-byte SEND each)     -> at most N (1 per call)
//!   3. ibv_poll_cq until the 2N completions are in           -> 0 system calls
//!   4. N x ibv_poll_cq on an empty CQ                        -> 0 system calls
//!   5. N/8 x ibv_post_send with a list of 8 WRs              -> at most N/8 (1 per call)
//!      (the receives for them are posted as lists too, outside the measured phases)
//!
//! The parent counts the child's system call entries between the markers.
//!
//!   rrxe-syscalls [--dev rrxe0] [--calls 1000]
//!
//! Prints PASS/FAIL lines and "N passed, N failed"; exits non-zero on failure.

use rrxe_verbs_test::{dp, ffi, util};

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use dp::{Dev, Rng, Side};
use ffi::*;
use util::Report;

const MARK: u64 = 1_000_000;
const PHASES: [&str; 5] = [
    "post_recv",
    "post_send",
    "poll_cq_completions",
    "poll_cq_empty",
    "post_send_lists_of_8",
];
const LIST: usize = 8;

fn marker(phase: u64) {
    // SAFETY: close() of a descriptor that cannot exist: a recognizable no-op system call.
    unsafe { libc::syscall(libc::SYS_close, (MARK + phase) as libc::c_long) };
}

/// The traced workload. Returns the exit code; prints what it did on stderr (after the last
/// marker, so that nothing it prints lands inside a measured phase).
fn child(dev: &str, n: usize) -> i32 {
    let res =
        (|| -> Result<String, String> {
            let d = Dev::open(dev)?;
            let depth = (n + 2 * LIST).next_power_of_two() as u32;
            let max_wr = (d.attr.max_qp_wr.max(1) as u32).min(depth);
            if (max_wr as usize) < n + LIST {
                return Err(format!(
                    "{dev}: max_qp_wr {} < {}",
                    d.attr.max_qp_wr,
                    n + LIST
                ));
            }
            let cap = ibv_qp_cap {
                max_send_wr: max_wr,
                max_recv_wr: max_wr,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            };
            let cqe = (4 * max_wr as i32).min(d.attr.max_cqe.max(1));
            let a = Side::new(&d, IBV_QPT_RC, cap, cqe, 1 << 16)?;
            let b = Side::new(&d, IBV_QPT_RC, cap, cqe, 1 << 16)?;
            let mut rng = Rng::new(1);
            dp::connect(&d, &a, &d, &b, IBV_QPT_RC, 0, &mut rng)?;

            // Work requests prepared up front: no allocation inside a phase.
            let mut rsge: Vec<ibv_sge> = (0..n).map(|i| b.sge(8 * (i % 1024), 8)).collect();
            let mut rwr: Vec<ibv_recv_wr> = (0..n)
                .map(|i| ibv_recv_wr {
                    wr_id: i as u64,
                    num_sge: 1,
                    ..zeroed()
                })
                .collect();
            for (w, s) in rwr.iter_mut().zip(rsge.iter_mut()) {
                w.sg_list = s;
            }
            let mut ssge: Vec<ibv_sge> = (0..n).map(|i| a.sge(8 * (i % 1024), 8)).collect();
            let mut swr: Vec<ibv_send_wr> = (0..n)
                .map(|i| ibv_send_wr {
                    wr_id: i as u64,
                    num_sge: 1,
                    opcode: IBV_WR_SEND,
                    send_flags: IBV_SEND_SIGNALED,
                    ..zeroed()
                })
                .collect();
            for (w, s) in swr.iter_mut().zip(ssge.iter_mut()) {
                w.sg_list = s;
            }
            let mut wc = zeroed::<[ibv_wc; 32]>();
            let mut bad_s: *mut ibv_send_wr = std::ptr::null_mut();
            let mut bad_r: *mut ibv_recv_wr = std::ptr::null_mut();
            let mut errs = 0usize;
            let mut good = 0usize;
            let mut polls = 0u64;

            // Warm-up: one message through every verb (lazy binding, first faults).
            {
                let mut w = rwr[0];
                dp::post_recv(&b.qp, &mut w)?;
                let mut w = swr[0].bitcopy();
                dp::post_send(&a.qp, &mut w)?;
                dp::poll_n(&a.cq, 1, Duration::from_secs(30)).map_err(|(_, e)| e)?;
                dp::poll_n(&b.cq, 1, Duration::from_secs(30)).map_err(|(_, e)| e)?;
            }

            marker(1);
            for w in rwr.iter_mut() {
                // SAFETY: valid QP; the WR and its SGE live in the vectors above.
                if unsafe { vt_post_recv(b.qp.ptr, w, &mut bad_r) } != 0 {
                    errs += 1;
                }
            }
            marker(2);
            for w in swr.iter_mut() {
                // SAFETY: as above.
                if unsafe { vt_post_send(a.qp.ptr, w, &mut bad_s) } != 0 {
                    errs += 1;
                }
            }
            marker(3);
            let mut limit = 50_000_000u64;
            while good < 2 * n && limit > 0 {
                for cq in [&a.cq, &b.cq] {
                    // SAFETY: valid CQ and array.
                    let k = unsafe { vt_poll_cq(cq.ptr, wc.len() as i32, wc.as_mut_ptr()) };
                    polls += 1;
                    if k < 0 {
                        errs += 1;
                        limit = 1;
                    }
                    for w in &wc[..k.max(0) as usize] {
                        if w.status == IBV_WC_SUCCESS {
                            good += 1;
                        } else {
                            errs += 1;
                        }
                    }
                }
                limit -= 1;
            }
            marker(4);
            let mut extra = 0;
            for _ in 0..n {
                // SAFETY: valid CQ and array.
                let k = unsafe { vt_poll_cq(a.cq.ptr, 1, wc.as_mut_ptr()) };
                if k != 0 {
                    extra += 1;
                }
            }
            marker(5);
            let lists = n / LIST;
            // Untraced: the receives for the lists (posted as lists too).
            marker(6);
            for l in 0..lists {
                let ws = &mut rwr[l * LIST..(l + 1) * LIST];
                for j in 0..LIST - 1 {
                    ws[j].next = &mut ws[j + 1];
                }
                ws[LIST - 1].next = std::ptr::null_mut();
                // SAFETY: valid QP; a chain of WRs inside the vector.
                if unsafe { vt_post_recv(b.qp.ptr, &mut ws[0], &mut bad_r) } != 0 {
                    errs += 1;
                }
            }
            for l in 0..lists {
                let ws = &mut swr[l * LIST..(l + 1) * LIST];
                for j in 0..LIST - 1 {
                    ws[j].next = &mut ws[j + 1];
                }
                ws[LIST - 1].next = std::ptr::null_mut();
            }
            marker(7);
            for l in 0..lists {
                // SAFETY: valid QP; a chain of WRs inside the vector.
                if unsafe { vt_post_send(a.qp.ptr, &mut swr[l * LIST], &mut bad_s) } != 0 {
                    errs += 1;
                }
            }
            marker(8);
            let got_a = dp::poll_n(&a.cq, lists * LIST, Duration::from_secs(60));
            let got_b = dp::poll_n(&b.cq, lists * LIST, Duration::from_secs(60));
            let fails = |r: &Result<Vec<ibv_wc>, (Vec<ibv_wc>, String)>| match r {
                Ok(v) => v.iter().filter(|w| w.status != IBV_WC_SUCCESS).count(),
                Err((_, _)) => 1,
            };
            errs += fails(&got_a) + fails(&got_b);
            let msg =
                format!(
            "{good} of {} completions in {polls} poll_cq calls, {extra} from the empty CQ, \
             {errs} errors (post failures / bad completions), lists: {}/{}",
            2 * n,
            got_a.as_ref().map_or_else(|e| e.1.clone(), |v| v.len().to_string()),
            got_b.as_ref().map_or_else(|e| e.1.clone(), |v| v.len().to_string()),
        );
            if errs > 0 || good != 2 * n || extra != 0 {
                return Err(msg);
            }
            Ok(msg)
        })();
    match res {
        Ok(m) => {
            eprintln!("child: ok: {m}");
            0
        }
        Err(e) => {
            eprintln!("child: FAILED: {e}");
            1
        }
    }
}

fn main() -> ExitCode {
    let mut dev = "rrxe0".to_owned();
    let mut n = 1000usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let r = match a.as_str() {
            "--dev" => dp::arg_val(&mut args, &a).map(|v| dev = v),
            "--calls" => dp::arg_val(&mut args, &a).map(|v| n = v),
            _ => Err(format!("unknown argument {a}")),
        };
        if let Err(e) = r {
            eprintln!("rrxe-syscalls: {e}");
            return ExitCode::from(2);
        }
    }
    let n = n.max(LIST);
    let mut r = Report::new(Vec::new(), Vec::new());

    // SAFETY: the process is single-threaded here; the child only runs the workload and exits.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        r.fail("syscalls.setup", "fork failed");
        r.summary();
        return ExitCode::FAILURE;
    }
    if pid == 0 {
        // SAFETY: plain ptrace/raise calls in the child.
        unsafe {
            libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0);
            libc::raise(libc::SIGSTOP);
        }
        let rc = child(&dev, n);
        // SAFETY: leave without running the parent's atexit handlers twice.
        unsafe { libc::_exit(rc) };
    }

    // Tracer.
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    // SAFETY: the child is stopped; options for it only.
    unsafe {
        libc::ptrace(
            libc::PTRACE_SETOPTIONS,
            pid,
            0,
            libc::PTRACE_O_TRACESYSGOOD | libc::PTRACE_O_EXITKILL,
        )
    };
    let mut phase = 0u64;
    let mut counts: BTreeMap<u64, BTreeMap<i64, u64>> = BTreeMap::new();
    let mut in_call = false;
    let mut sig = 0;
    let exit_code;
    loop {
        // SAFETY: resuming our traced child.
        unsafe { libc::ptrace(libc::PTRACE_SYSCALL, pid, 0, sig) };
        sig = 0;
        // SAFETY: waiting for our own child.
        if unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
            exit_code = -1;
            break;
        }
        if libc::WIFEXITED(status) {
            exit_code = libc::WEXITSTATUS(status);
            break;
        }
        if libc::WIFSIGNALED(status) {
            exit_code = 128 + libc::WTERMSIG(status);
            break;
        }
        if !libc::WIFSTOPPED(status) {
            continue;
        }
        let s = libc::WSTOPSIG(status);
        if s != (libc::SIGTRAP | 0x80) {
            sig = s; // a real signal: deliver it
            continue;
        }
        in_call = !in_call;
        if !in_call {
            continue; // syscall exit
        }
        // SAFETY: user_regs_struct is plain data; the child is in a syscall-enter stop.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        unsafe { libc::ptrace(libc::PTRACE_GETREGS, pid, 0, &mut regs) };
        let nr = regs.orig_rax as i64;
        if nr == libc::SYS_close && regs.rdi >= MARK && regs.rdi < MARK + 100 {
            phase = regs.rdi - MARK;
            continue;
        }
        *counts.entry(phase).or_default().entry(nr).or_default() += 1;
    }

    let total = |p: u64| counts.get(&p).map_or(0, |m| m.values().sum::<u64>());
    let detail = |p: u64| {
        counts.get(&p).map_or("none".to_owned(), |m| {
            m.iter()
                .map(|(nr, c)| format!("syscall {nr} x{c}"))
                .collect::<Vec<_>>()
                .join(", ")
        })
    };
    r.result(
        "syscalls.child_completed",
        if exit_code == 0 {
            Ok(())
        } else {
            Err(format!(
                "traced child exited with {exit_code} (see its stderr)"
            ))
        },
    );
    let lists = (n / LIST) as u64;
    let checks: [(u64, &str, u64, u64); 5] = [
        (1, PHASES[0], n as u64, 0),
        (2, PHASES[1], n as u64, n as u64),
        (3, PHASES[2], 0, 0),
        (4, PHASES[3], n as u64, 0),
        (7, PHASES[4], lists, lists),
    ];
    for (p, name, calls, max) in checks {
        let c = total(p);
        let what = if p == 3 {
            "until all completions".to_owned()
        } else {
            format!("{calls} calls")
        };
        r.info(
            &format!("syscalls.{name}"),
            format!("{c} system calls during {what}: {}", detail(p)),
        );
        let res = if c <= max {
            Ok(())
        } else {
            Err(format!(
                "{c} system calls (at most {max} allowed): {}",
                detail(p)
            ))
        };
        r.result(&format!("syscalls.{name}"), res);
    }
    r.summary();
    if r.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
