//! Helpers shared by the robustness programs (rrxe-fuzz-packets, rrxe-fuzz-verbs,
//! rrxe-failnth, rrxe-scale): device counters from `rdma statistic`, `rdma res` totals, a
//! verified RC transfer that runs in its own thread while something hostile happens, and
//! network-namespace switching.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::dp::{self, Dev, Rng, Side};
use crate::ffi::*;

/// The counters `rdma statistic show link DEV/1` prints (name -> value); empty when the
/// device exports none.
pub fn stats(dev: &str) -> Result<BTreeMap<String, u64>, String> {
    let out = Command::new("rdma")
        .args(["statistic", "show", "link", &format!("{dev}/1")])
        .output()
        .map_err(|e| format!("rdma statistic: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "rdma statistic show link {dev}/1: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let toks: Vec<&str> = text.split_whitespace().collect();
    let mut m = BTreeMap::new();
    let mut i = 0;
    while i + 1 < toks.len() {
        if let Ok(v) = toks[i + 1].parse::<u64>() {
            if toks[i]
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '_' || c.is_ascii_digit())
            {
                m.insert(toks[i].to_owned(), v);
                i += 2;
                continue;
            }
        }
        i += 1;
    }
    Ok(m)
}

/// `rdma res show` as text (the per-device object counts), for baseline comparisons.
pub fn res_summary() -> String {
    Command::new("rdma")
        .args(["res", "show"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// Moves the calling thread into the network namespace `name` (`/var/run/netns/NAME`), or
/// back to the one `/proc/1/ns/net` is in for `None`.
pub fn enter_netns(name: Option<&str>) -> Result<(), String> {
    let path = match name {
        Some(n) => format!("/var/run/netns/{n}"),
        None => "/proc/1/ns/net".to_owned(),
    };
    let c = std::ffi::CString::new(path.clone()).map_err(|e| e.to_string())?;
    // SAFETY: plain syscalls on a path we own.
    unsafe {
        let fd = libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(format!("open {path}: {}", std::io::Error::last_os_error()));
        }
        let r = libc::setns(fd, libc::CLONE_NEWNET);
        let e = std::io::Error::last_os_error();
        libc::close(fd);
        if r != 0 {
            return Err(format!("setns {path}: {e}"));
        }
    }
    Ok(())
}

/// What a [`Transfer`] did.
#[derive(Debug, Default)]
pub struct TransferResult {
    pub ops: u64,
    pub bytes: u64,
    pub error: Option<String>,
}

/// A verified RC transfer between two devices (or one device to itself) in its own thread:
/// RDMA WRITE, RDMA READ back and SEND of random sizes, every byte compared. Runs until
/// [`Transfer::stop`]; the QPNs are published once connected.
pub struct Transfer {
    stop: Arc<AtomicBool>,
    pub ops: Arc<AtomicU64>,
    pub qpns: std::sync::mpsc::Receiver<(u32, u32)>,
    handle: Option<std::thread::JoinHandle<TransferResult>>,
}

impl Transfer {
    pub fn start(dev_a: &str, dev_b: &str, seed: u64, max_size: usize) -> Transfer {
        let stop = Arc::new(AtomicBool::new(false));
        let ops = Arc::new(AtomicU64::new(0));
        let (tx, rx) = std::sync::mpsc::channel();
        let (a, b, s, o) = (
            dev_a.to_owned(),
            dev_b.to_owned(),
            stop.clone(),
            ops.clone(),
        );
        let handle = std::thread::spawn(move || {
            let mut r = TransferResult::default();
            if let Err(e) = transfer_loop(&a, &b, seed, max_size, &s, &o, &tx, &mut r) {
                r.error = Some(e);
            }
            r.ops = o.load(Ordering::Relaxed);
            r
        });
        Transfer {
            stop,
            ops,
            qpns: rx,
            handle: Some(handle),
        }
    }

    /// Waits up to `t` for the QPNs (a side, b side); `None` when the transfer failed first.
    pub fn wait_qpns(&self, t: Duration) -> Option<(u32, u32)> {
        self.qpns.recv_timeout(t).ok()
    }

    /// Whether the loop ended by itself (an error).
    pub fn handle_finished(&self) -> bool {
        self.handle.as_ref().is_none_or(|h| h.is_finished())
    }

    /// Stops the loop (after the operation in progress) and returns what it did.
    pub fn stop(mut self) -> TransferResult {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(r)) => r,
            _ => TransferResult {
                error: Some("transfer thread panicked".into()),
                ..Default::default()
            },
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn transfer_loop(
    dev_a: &str,
    dev_b: &str,
    seed: u64,
    max_size: usize,
    stop: &AtomicBool,
    ops: &AtomicU64,
    tx: &std::sync::mpsc::Sender<(u32, u32)>,
    r: &mut TransferResult,
) -> Result<(), String> {
    let da = Dev::open(dev_a)?;
    let db = if dev_b == dev_a {
        Dev::open(dev_a)?
    } else {
        Dev::open(dev_b)?
    };
    let cap = ibv_qp_cap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let half = max_size.max(64);
    let a = Side::new(&da, IBV_QPT_RC, cap, 64, 2 * half)?;
    let b = Side::new(&db, IBV_QPT_RC, cap, 64, 2 * half)?;
    let mut rng = Rng::new(seed);
    dp::connect(&da, &a, &db, &b, IBV_QPT_RC, 0, &mut rng)?;
    let _ = tx.send((a.qp.qpn(), b.qp.qpn()));
    let t = Duration::from_secs(30);
    let mut n = 0u64;
    let started = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let len = rng.range(1, half as u64) as usize;
        let kind = n % 3;
        n += 1;
        // pattern in a[0..len], b's target cleared
        rng.fill(a.mem(0, len));
        b.mem(0, len).fill(0);
        let mut sge = a.sge(0, len);
        let mut wr = ibv_send_wr {
            wr_id: n,
            sg_list: &mut sge,
            num_sge: 1,
            send_flags: IBV_SEND_SIGNALED,
            ..zeroed()
        };
        if kind == 2 {
            let mut rsge = b.sge(0, len);
            let mut rwr = ibv_recv_wr {
                wr_id: n,
                sg_list: &mut rsge,
                num_sge: 1,
                ..zeroed()
            };
            dp::post_recv(&b.qp, &mut rwr)?;
            wr.opcode = IBV_WR_SEND;
        } else {
            wr.opcode = IBV_WR_RDMA_WRITE;
            wr.wr.rdma.remote_addr = b.addr();
            wr.wr.rdma.rkey = b.rkey();
        }
        dp::post_send(&a.qp, &mut wr)?;
        let wc = wait_one(&a.cq, t, stop).map_err(|e| format!("op {n}: {e}"))?;
        if wc.status != IBV_WC_SUCCESS {
            return Err(format!("op {n}: {}", dp::wc_str(&wc)));
        }
        if kind == 2 {
            let wc = wait_one(&b.cq, t, stop).map_err(|e| format!("op {n} recv: {e}"))?;
            if wc.status != IBV_WC_SUCCESS || wc.byte_len as usize != len {
                return Err(format!("op {n} recv: {}", dp::wc_str(&wc)));
            }
        }
        if a.mem(0, len) != b.mem(0, len) {
            return Err(format!(
                "op {n}: data mismatch after {} of {len} bytes",
                first_diff(a.mem(0, len), b.mem(0, len))
            ));
        }
        // READ it back into a[half..]
        a.mem(half, len).fill(0);
        let mut sge = a.sge(half, len);
        let mut wr = ibv_send_wr {
            wr_id: n,
            sg_list: &mut sge,
            num_sge: 1,
            opcode: IBV_WR_RDMA_READ,
            send_flags: IBV_SEND_SIGNALED,
            ..zeroed()
        };
        wr.wr.rdma.remote_addr = b.addr();
        wr.wr.rdma.rkey = b.rkey();
        dp::post_send(&a.qp, &mut wr)?;
        let wc = wait_one(&a.cq, t, stop).map_err(|e| format!("op {n} read: {e}"))?;
        if wc.status != IBV_WC_SUCCESS {
            return Err(format!("op {n} read: {}", dp::wc_str(&wc)));
        }
        if a.mem(half, len) != a.mem(0, len) {
            return Err(format!("op {n}: READ data mismatch"));
        }
        r.bytes += 2 * len as u64;
        ops.fetch_add(2, Ordering::Relaxed);
    }
    let _ = started;
    Ok(())
}

/// How long the operation in progress may still take once the transfer was told to stop. A
/// transfer whose device or peer was deleted under it never gets its completion; a healthy one
/// gets it within a second or two even beside a fuzzer under TCG.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// One completion of `cq` within `t` (polled as [`dp::poll_n`] does), given up [`STOP_GRACE`]
/// after `stop` was set: a transfer told to stop does not wait out the whole `t` for a
/// completion that a deleted device will never deliver.
fn wait_one(cq: &crate::verbs::Cq, t: Duration, stop: &AtomicBool) -> Result<ibv_wc, String> {
    let start = Instant::now();
    let mut stopped: Option<Instant> = None;
    let mut wc = [zeroed::<ibv_wc>()];
    let mut spins = 0u32;
    loop {
        if dp::poll_once(cq, &mut wc)? == 1 {
            return Ok(wc[0].bitcopy());
        }
        spins += 1;
        if !spins.is_multiple_of(64) {
            continue;
        }
        let now = Instant::now();
        if now.duration_since(start) > t {
            return Err(format!("0 of 1 completions after {t:?}"));
        }
        if stop.load(Ordering::Relaxed) {
            let s = *stopped.get_or_insert(now);
            if now.duration_since(s) > STOP_GRACE {
                return Err(format!(
                    "0 of 1 completions {STOP_GRACE:?} after the stop request"
                ));
            }
        }
        if now.duration_since(start) > dp::IDLE_AFTER {
            std::thread::sleep(dp::IDLE_NAP);
        } else {
            std::thread::yield_now();
        }
    }
}

fn first_diff(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).position(|(x, y)| x != y).unwrap_or(a.len())
}
