//! DCQCN (kmod/logic/dcqcn.rs, issue 29): the reaction point against a reference model of the
//! paper's equations in floating point, step by step; CNP spacing; the rate's floor and
//! ceiling; recovery after the marks stop; the pacer.

use proptest::prelude::*;
use rrxe_host_tests::logic::dcqcn::{CnpGate, Pacer, Params, Rp, MAX_CATCH_UP};

const LINE: u64 = 10_000_000; // 10 Gb/s in kbit/s

/// The paper's reaction point in f64, with the same parameters and event order.
#[derive(Debug)]
struct Model {
    active: bool,
    rc: f64,
    rt: f64,
    alpha: f64,
    t: u32,
    bc: u32,
    bytes: u64,
    cnp_in_period: bool,
    last_cut: Option<u64>,
    next_alpha: u64,
    next_inc: u64,
}

impl Model {
    fn new() -> Self {
        Model {
            active: false,
            rc: LINE as f64,
            rt: LINE as f64,
            alpha: 0.0,
            t: 0,
            bc: 0,
            bytes: 0,
            cnp_in_period: false,
            last_cut: None,
            next_alpha: 0,
            next_inc: 0,
        }
    }

    fn cnp(&mut self, p: &Params, now: u64) {
        if !self.active {
            self.active = true;
            self.alpha = f64::from(p.rp_initial_alpha_value) / 1024.0;
            self.rc = LINE as f64;
            self.rt = LINE as f64;
            self.next_alpha = now + p.rp_dce_tcp_rtt;
        }
        self.cnp_in_period = true;
        self.t = 0;
        self.bc = 0;
        self.bytes = 0;
        self.next_inc = now + p.rp_time_reset;
        if matches!(self.last_cut, Some(l) if now - l < p.rp_rate_reduce_monitor_period) {
            return;
        }
        self.last_cut = Some(now);
        self.rt = self.rc;
        // Rc (1 - α / 2^(gd - 10)): with gd = 11, the paper's Rc (1 - α/2).
        let cut = self.rc * self.alpha * 1024.0 / f64::from(1u32 << p.rp_gd);
        self.rc = (self.rc - cut)
            .max(self.rc * f64::from(p.rp_min_dec_fac) / 100.0)
            .max(p.rp_min_rate as f64);
    }

    fn increase(&mut self, p: &Params) {
        let f = p.rp_threshold;
        if self.t.max(self.bc) <= f {
        } else if self.t.min(self.bc) > f {
            self.rt += f64::from(self.t.min(self.bc) - f) * p.rp_hai_rate as f64;
        } else {
            self.rt += p.rp_ai_rate as f64;
        }
        self.rt = self.rt.min(LINE as f64);
        self.rc = ((self.rt + self.rc) / 2.0).min(LINE as f64);
        if self.rc > LINE as f64 - 1.0 {
            self.active = false;
            self.rc = LINE as f64;
            self.rt = LINE as f64;
        }
    }

    fn tick(&mut self, p: &Params, now: u64) {
        if !self.active {
            return;
        }
        while self.next_alpha <= now {
            // The paper's α = (1 - g) α (+ g), g = (1024 - G) / 1024.
            let g = f64::from(p.rp_dce_tcp_g) / 1024.0;
            let a = self.alpha * g;
            self.alpha = (a + if self.cnp_in_period { 1.0 - g } else { 0.0 }).min(1023.0 / 1024.0);
            self.cnp_in_period = false;
            self.next_alpha += p.rp_dce_tcp_rtt;
        }
        while self.active && self.next_inc <= now {
            self.t += 1;
            self.increase(p);
            self.next_inc += p.rp_time_reset;
        }
    }

    fn sent(&mut self, p: &Params, n: u64, now: u64) {
        if !self.active {
            return;
        }
        self.tick(p, now);
        self.bytes += n;
        while self.active && self.bytes >= p.rp_byte_reset {
            self.bytes -= p.rp_byte_reset;
            self.bc += 1;
            self.increase(p);
        }
    }
}

#[derive(Clone, Debug)]
enum Ev {
    Cnp,
    Sent(u64),
    Tick,
}

/// A slower α period than the default 1 µs, so that a scripted run stays within the catch-up
/// bound (the model replays every period).
fn params() -> Params {
    Params {
        rp_dce_tcp_rtt: 55,
        ..Params::default()
    }
}

fn close(a: u64, b: f64, what: &str, step: usize) {
    let tol = (b * 0.002).max(64.0);
    assert!(
        (a as f64 - b).abs() <= tol,
        "step {step}: {what}: fixed point {a}, model {b:.1}"
    );
}

fn run(p: &Params, evs: &[(u64, Ev)]) {
    let mut rp = Rp::new(LINE);
    let mut m = Model::new();
    for (i, (now, ev)) in evs.iter().enumerate() {
        match ev {
            Ev::Cnp => {
                rp.tick(p, *now);
                m.tick(p, *now);
                rp.on_cnp(p, *now);
                m.cnp(p, *now);
            }
            Ev::Sent(n) => {
                rp.on_sent(p, *n, *now);
                m.sent(p, *n, *now);
            }
            Ev::Tick => {
                rp.tick(p, *now);
                m.tick(p, *now);
            }
        }
        assert_eq!(rp.active, m.active, "step {i}: active");
        close(rp.rc, m.rc, "Rc", i);
        close(rp.rt, m.rt, "Rt", i);
        if rp.active {
            let a = f64::from(rp.alpha) / 1024.0;
            assert!(
                (a - m.alpha).abs() < 0.01,
                "step {i}: α {a} model {}",
                m.alpha
            );
        }
    }
}

#[test]
fn first_cnp_halves_the_rate() {
    let p = Params::default();
    let mut rp = Rp::new(LINE);
    assert_eq!(rp.rate(), None);
    assert!(rp.on_cnp(&p, 1000));
    // α = 1023/1024: Rc (1 - α/2), just above half.
    let r = rp.rate().unwrap();
    assert!(r > LINE / 2 && r < LINE / 2 + LINE / 1000, "{r}");
    assert_eq!(rp.rt, LINE);
}

#[test]
fn follows_the_model_step_by_step() {
    let p = params();
    let mut evs = vec![];
    let mut now = 10;
    // Marks for a while, then sending without marks, then marks again.
    for _ in 0..20 {
        evs.push((now, Ev::Cnp));
        now += 60;
        evs.push((now, Ev::Sent(4096)));
        now += 40;
    }
    for _ in 0..200 {
        evs.push((now, Ev::Sent(16_384)));
        now += 50;
        evs.push((now, Ev::Tick));
    }
    evs.push((now, Ev::Cnp));
    for _ in 0..50 {
        now += 300;
        evs.push((now, Ev::Tick));
    }
    run(&p, &evs);
}

#[test]
fn cuts_are_spaced_by_the_monitor_period() {
    let p = Params::default();
    let mut rp = Rp::new(LINE);
    assert!(rp.on_cnp(&p, 100));
    let r = rp.rc;
    assert!(!rp.on_cnp(&p, 101));
    assert!(!rp.on_cnp(&p, 103));
    assert_eq!(rp.rc, r);
    assert_eq!(rp.cnps_ignored, 2);
    assert!(rp.on_cnp(&p, 104));
    assert!(rp.rc < r);
}

#[test]
fn floor_holds_under_a_storm_of_cnps() {
    let p = Params::default();
    let mut rp = Rp::new(LINE);
    let mut prev = LINE;
    for i in 0..10_000u64 {
        let now = i * p.rp_rate_reduce_monitor_period;
        rp.tick(&p, now);
        rp.on_cnp(&p, now);
        assert!(rp.rc >= p.rp_min_rate);
        // A single cut keeps at least rp_min_dec_fac percent.
        assert!(rp.rc * 100 >= prev * u64::from(p.rp_min_dec_fac) || rp.rc == p.rp_min_rate);
        prev = rp.rc;
    }
    assert_eq!(rp.rc, p.rp_min_rate);
}

#[test]
fn recovers_to_line_rate_after_the_marks_stop() {
    let p = Params::default();
    let mut rp = Rp::new(LINE);
    for i in 0..50u64 {
        rp.tick(&p, i * 10);
        rp.on_cnp(&p, i * 10);
    }
    assert!(rp.rc < LINE / 100);
    // The QP keeps sending at its rate and no mark comes: timer and byte-counter events, fast
    // recovery, additive then hyper increase; back at the line rate within a bounded time,
    // and no longer limited.
    let mut now = 500;
    let mut steps = 0u64;
    while rp.active {
        now += 100;
        let bytes = rp.rc * 100 / 8000;
        rp.on_sent(&p, bytes, now);
        assert!(rp.rc <= rp.rt && rp.rt <= LINE);
        steps += 1;
        assert!(steps < 100_000, "no recovery: {rp:?}");
    }
    assert_eq!(rp.rate(), None);
    assert_eq!(rp.rc, LINE);
    // Hyper increase makes it far quicker than additive steps alone (one per timer period).
    let additive_only = (LINE / p.rp_ai_rate) * p.rp_time_reset;
    assert!(now < additive_only / 4, "{now} µs");
}

#[test]
fn a_long_absence_catches_up_in_bounded_work() {
    let p = Params::default();
    let mut rp = Rp::new(LINE);
    rp.on_cnp(&p, 0);
    // A day later: at most MAX_CATCH_UP periods replayed, then back to the line.
    rp.tick(&p, 86_400_000_000);
    assert!(!rp.active);
    assert_eq!(rp.rc, LINE);
    let mut rp = Rp::new(LINE);
    rp.on_cnp(&p, 0);
    assert!(rp.on_sent(&p, u64::MAX / 2, 1) <= MAX_CATCH_UP);
}

#[test]
fn alpha_grows_with_marks_and_decays_without() {
    let p = params();
    let mut rp = Rp::new(LINE);
    rp.on_cnp(&p, 0);
    let a0 = rp.alpha;
    // No CNP for many periods: α decays.
    rp.tick(&p, 20 * 55);
    let a1 = rp.alpha;
    assert!(a1 < a0, "{a0} -> {a1}");
    // CNPs in every period: α climbs back.
    for i in 21..200u64 {
        rp.on_cnp(&p, i * 55);
        rp.tick(&p, i * 55 + 1);
    }
    assert!(rp.alpha > a1);
    assert!(rp.alpha <= 1023);
}

#[test]
fn cnp_gate_spaces_cnps() {
    let p = Params::default();
    let mut g = CnpGate::default();
    let sent: Vec<u64> = (0..1000u64).filter(|&t| g.may_send(&p, t)).collect();
    assert_eq!(sent.len(), 20);
    assert!(sent
        .windows(2)
        .all(|w| w[1] - w[0] >= p.np_min_time_between_cnps));
}

#[test]
fn pacer_sends_at_the_rate() {
    // 1 Gb/s = 125 bytes per µs; 4 KiB packets over one second.
    let rate = 1_000_000;
    let mut pc = Pacer::new(8192, 0);
    let mut now = 0u64;
    let mut sent = 0u64;
    while now < 1_000_000 {
        match pc.take(4096, rate, now) {
            Ok(()) => sent += 4096,
            Err(w) => now += w,
        }
    }
    let want = 125_000_000u64;
    assert!(
        sent.abs_diff(want) <= 16_384,
        "{sent} bytes in 1 s at 1 Gb/s"
    );
}

#[test]
fn params_are_checked() {
    assert!(Params::default().check().is_ok());
    for bad in [
        Params {
            rp_time_reset: 0,
            ..Params::default()
        },
        Params {
            rp_initial_alpha_value: 1024,
            ..Params::default()
        },
        Params {
            rp_min_dec_fac: 101,
            ..Params::default()
        },
        Params {
            rp_gd: 32,
            ..Params::default()
        },
    ] {
        assert!(bad.check().is_err(), "{bad:?}");
    }
}

proptest! {
    /// Any sequence of CNPs, sends and ticks: the model agrees, and the invariants hold.
    #[test]
    fn any_sequence_follows_the_model(
        steps in proptest::collection::vec((1u64..400, 0u8..3, 1u64..70_000), 1..300),
    ) {
        let p = params();
        let mut now = 0;
        let evs: Vec<(u64, Ev)> = steps
            .iter()
            .map(|&(dt, k, n)| {
                now += dt;
                (now, match k { 0 => Ev::Cnp, 1 => Ev::Sent(n), _ => Ev::Tick })
            })
            .collect();
        run(&p, &evs);
        let mut rp = Rp::new(LINE);
        for (now, ev) in &evs {
            match ev {
                Ev::Cnp => { rp.tick(&p, *now); rp.on_cnp(&p, *now); }
                Ev::Sent(n) => { rp.on_sent(&p, *n, *now); }
                Ev::Tick => rp.tick(&p, *now),
            }
            prop_assert!(rp.rc >= p.rp_min_rate && rp.rc <= LINE);
            prop_assert!(rp.rt <= LINE);
            prop_assert!(!rp.active || rp.rc <= rp.rt);
            prop_assert!(rp.alpha <= 1023);
        }
    }
}

#[test]
fn settings_show_and_apply() {
    use rrxe_host_tests::logic::dcqcn::{Settings, NAMES};
    let mut s = Settings::default();
    let mut buf = [0u8; 4096];
    let n = s.show(&mut buf);
    let text = std::str::from_utf8(&buf[..n]).unwrap();
    assert_eq!(text.lines().count(), NAMES.len());
    assert!(text.starts_with("ecn 1\ncc 1\nrp_ai_rate 5\nrp_hai_rate 50\nrp_gd 11\n"));
    assert!(text.contains("np_min_time_between_cnps 50\n"));
    s.apply(b"ecn 0\n").unwrap();
    assert!(!s.ecn);
    s.apply(b"rp_ai_rate 20").unwrap();
    assert_eq!(s.params.rp_ai_rate, 20_000);
    s.apply(b"np_min_time_between_cnps 4\n").unwrap();
    assert_eq!(s.params.np_min_time_between_cnps, 4);
    let before = s;
    for bad in [
        &b"ecn 2"[..],
        b"rp_time_reset 0",
        b"rp_gd 40",
        b"rp_initial_alpha_value 1024",
        b"nonsense 1",
        b"rp_ai_rate",
        b"rp_ai_rate 1 2",
        b"rp_ai_rate -1",
        b"rp_ai_rate 99999999999999999999",
        b"\xff\xfe 1",
        b"",
    ] {
        assert!(s.apply(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        assert_eq!(s, before, "a refused line changed nothing");
    }
    // A small buffer is never overrun.
    let mut small = [0u8; 7];
    assert_eq!(s.show(&mut small), 7);
}

#[test]
fn ecn_field_and_cnp_format() {
    use rrxe_host_tests::logic::dcqcn::{cnp, cnp_dest_qp, is_ce, paced_opcode, tos, CNP_LEN};
    // ECT(0) under the traffic class's DSCP; a CNP, or marking off, leaves the field clear.
    assert_eq!(tos(0, true, false), 0b10);
    assert_eq!(tos(0xb8 | 0b11, true, false), 0xb8 | 0b10);
    assert_eq!(tos(0xb8 | 0b10, true, true), 0xb8);
    assert_eq!(tos(0xb8, false, false), 0xb8);
    assert!(is_ce(0xb8 | 0b11) && !is_ce(0b10) && !is_ce(0b01) && !is_ce(0));
    // BTH opcode 0x81, P_Key, destination QP, PSN 0; 16 reserved bytes and the ICRC.
    let p = cnp(0x12_3456, 0xffff);
    assert_eq!(p.len(), CNP_LEN);
    assert_eq!(
        &p[..12],
        &[0x81, 0, 0xff, 0xff, 0, 0x12, 0x34, 0x56, 0, 0, 0, 0]
    );
    assert!(p[12..].iter().all(|&b| b == 0));
    assert_eq!(cnp_dest_qp(&p), Some(0x12_3456));
    assert_eq!(cnp_dest_qp(&p[..CNP_LEN - 1]), None);
    assert_eq!(cnp_dest_qp(&[0x04; CNP_LEN]), None);
    // RC requests are paced; acknowledgements, READ responses, CNPs and other transports not.
    for op in [
        0x00, 0x04, 0x06, 0x0a, 0x0c, 0x13, 0x14, 0x16, 0x17, 0x1c, 0x1d,
    ] {
        assert!(paced_opcode(op), "{op:#x}");
    }
    for op in [0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12, 0x81, 0x24, 0x64] {
        assert!(!paced_opcode(op), "{op:#x}");
    }
}

/// The device gauge the shell keeps from `Rp::active` is listed by `rdma statistic` under
/// the name docs/congestion-control.md gives it, and it follows the reaction point: on at the
/// first CNP, off once the rate is back at the line.
#[test]
fn rate_limited_gauge_follows_the_reaction_point() {
    use rrxe_host_tests::logic::stats::{Stat, NAMES};
    assert_eq!(NAMES[Stat::RateLimitedQps.index()], "rate_limited_qps\0");
    let p = params();
    let mut rp = Rp::new(LINE);
    assert!(!rp.active && rp.rate().is_none());
    rp.on_cnp(&p, 1_000);
    assert!(rp.active && rp.rate().is_some());
    // Long after the last CNP the timer increases have brought it back: no longer limited.
    rp.tick(&p, 1_000 + 10_000_000_000);
    assert!(!rp.active && rp.rate().is_none());
}
