// SPDX-License-Identifier: GPL-2.0-only
//! DCQCN, RoCEv2's congestion control (Zhu et al., "Congestion Control for Large-Scale RDMA
//! Deployments", SIGCOMM 2015), as pure state machines over plain numbers: the reaction point
//! ([`Rp`], a sender's per-QP rate), the notification point's CNP spacing ([`CnpGate`]), and a
//! pacer that turns a rate into permission to send ([`Pacer`]).
//!
//! Time is in microseconds from any origin, rates in kbit/s, α in 1/1024 units (mlx5's fixed
//! point). The parameters carry mlx5's names and ConnectX's documented defaults ([`Params`]);
//! the equations are the paper's, in that fixed point:
//! * a CNP (at most one rate cut per `rp_rate_reduce_monitor_period`): `Rt = Rc`, then
//!   `Rc -= Rc * α / 2^rp_gd` (with α in 1/1024 and `rp_gd` 11, the paper's `Rc (1 - α/2)`),
//!   bounded below by `rp_min_dec_fac` percent of the old rate and by `rp_min_rate`; the
//!   increase counters start over;
//! * every `rp_dce_tcp_rtt`: `α = α * G / 1024 + (1024 - G)` if a CNP came in the period, else
//!   `α = α * G / 1024` (`G` = `rp_dce_tcp_g`; the paper's `g` is `(1024 - G) / 1024`);
//! * every `rp_time_reset` without a CNP the timer counter `T` grows, every `rp_byte_reset`
//!   bytes sent the byte counter `BC` grows, and each growth is an increase event: fast
//!   recovery `Rc = (Rt + Rc) / 2` while `max(T, BC) <= F`, hyper increase
//!   `Rt += (min(T, BC) - F) * rp_hai_rate` once `min(T, BC) > F`, additive increase
//!   `Rt += rp_ai_rate` in between, then `Rc = (Rt + Rc) / 2` (`F` = `rp_threshold`);
//! * a rate back at the line rate stops limiting (the QP is not paced until the next CNP).
//!
//! Every loop is bounded: a caller that comes back after a long time catches up at most
//! [`MAX_CATCH_UP`] periods one by one, then jumps.

/// Periods (α updates or timer increases) one call replays one by one at most; the rest of a
/// longer absence is applied at once (α decays to its floor, the rate returns to the line).
pub const MAX_CATCH_UP: u32 = 64;

/// The parameters (per device), under mlx5's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Target-rate step of additive increase, kbit/s (mlx5 `rpg_ai_rate`: 5 Mb/s).
    pub rp_ai_rate: u64,
    /// Target-rate step of hyper increase, kbit/s (`rpg_hai_rate`: 50 Mb/s).
    pub rp_hai_rate: u64,
    /// α to rate-cut shift (`rpg_gd`: 11, so α = 1023 cuts the rate by about half).
    pub rp_gd: u32,
    /// A cut keeps at least this percentage of the rate (`rpg_min_dec_fac`: 50).
    pub rp_min_dec_fac: u32,
    /// The rate never goes below this, kbit/s (`rpg_min_rate`: 1 Mb/s).
    pub rp_min_rate: u64,
    /// Time between timer increase events, µs (`rpg_time_reset`: 300).
    pub rp_time_reset: u64,
    /// Bytes between byte-counter increase events (`rpg_byte_reset`: 32767).
    pub rp_byte_reset: u64,
    /// `F`: increase events of each kind before additive, then hyper increase
    /// (`rpg_threshold`: 1).
    pub rp_threshold: u32,
    /// α at the first CNP of a flow, 1/1024 units (`initial_alpha_value`: 1023).
    pub rp_initial_alpha_value: u32,
    /// α's decay factor `G`, 1/1024 units (`dce_tcp_g`: 1019).
    pub rp_dce_tcp_g: u32,
    /// α update period, µs (`dce_tcp_rtt`: 1; the paper's K is 55).
    pub rp_dce_tcp_rtt: u64,
    /// Minimum time between two rate cuts, µs (`rate_reduce_monitor_period`: 4).
    pub rp_rate_reduce_monitor_period: u64,
    /// Minimum time between two CNPs a receiving QP sends, µs (the paper's N: 50).
    pub np_min_time_between_cnps: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            rp_ai_rate: 5_000,
            rp_hai_rate: 50_000,
            rp_gd: 11,
            rp_min_dec_fac: 50,
            rp_min_rate: 1_000,
            rp_time_reset: 300,
            rp_byte_reset: 32_767,
            rp_threshold: 1,
            rp_initial_alpha_value: 1023,
            rp_dce_tcp_g: 1019,
            rp_dce_tcp_rtt: 1,
            rp_rate_reduce_monitor_period: 4,
            np_min_time_between_cnps: 50,
        }
    }
}

/// Why a parameter set is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamError {
    /// A period or a step of zero, α or `G` above 1023, a percentage above 100, or `rp_gd`
    /// above 31.
    OutOfRange,
}

impl Params {
    /// Checks a parameter set an administrator wrote.
    pub const fn check(&self) -> Result<(), ParamError> {
        if self.rp_time_reset == 0
            || self.rp_byte_reset == 0
            || self.rp_dce_tcp_rtt == 0
            || self.rp_min_rate == 0
            || self.rp_initial_alpha_value > 1023
            || self.rp_dce_tcp_g > 1023
            || self.rp_min_dec_fac > 100
            || self.rp_gd > 31
        {
            return Err(ParamError::OutOfRange);
        }
        Ok(())
    }
}

/// The increase phase an event was applied in (for counters and tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    FastRecovery,
    Additive,
    Hyper,
}

/// A sender's DCQCN state for one QP (the reaction point).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rp {
    /// Limiting: a CNP came and the rate has not yet returned to the line rate.
    pub active: bool,
    /// Current rate `Rc`, kbit/s.
    pub rc: u64,
    /// Target rate `Rt`, kbit/s.
    pub rt: u64,
    /// α, 1/1024 units (as configured and reported).
    pub alpha: u32,
    /// α, 1/2^20 units: the updates are made at this precision (at 1/1024, `G` = 1019's
    /// increments and decays round to the same 5 units and α could never climb past about
    /// 0.8).
    alpha_hp: u64,
    /// Timer and byte-counter increase events since the last cut.
    pub t: u32,
    pub bc: u32,
    /// Bytes sent since the last byte-counter event.
    pub bytes: u64,
    /// A CNP came in the current α period.
    cnp_in_period: bool,
    /// When the last cut was made, the next α update and the next timer event are due.
    last_cut: Option<u64>,
    next_alpha: u64,
    next_inc: u64,
    /// The line rate (ceiling), kbit/s.
    pub line: u64,
    /// Cuts made, and CNPs that came too soon after one to cut again.
    pub cuts: u64,
    pub cnps_ignored: u64,
}

impl Rp {
    /// A QP that sends at `line` kbit/s until its first CNP.
    pub const fn new(line: u64) -> Self {
        Rp {
            active: false,
            rc: line,
            rt: line,
            alpha: 0,
            alpha_hp: 0,
            t: 0,
            bc: 0,
            bytes: 0,
            cnp_in_period: false,
            last_cut: None,
            next_alpha: 0,
            next_inc: 0,
            line,
            cuts: 0,
            cnps_ignored: 0,
        }
    }

    /// The rate the QP may send at now, kbit/s (`None`: not limited).
    pub fn rate(&self) -> Option<u64> {
        self.active.then_some(self.rc)
    }

    /// A CNP for this QP came at `now`. Returns whether the rate was cut.
    pub fn on_cnp(&mut self, p: &Params, now: u64) -> bool {
        if !self.active {
            self.active = true;
            self.alpha = p.rp_initial_alpha_value;
            self.alpha_hp = u64::from(p.rp_initial_alpha_value) << 10;
            self.rc = self.line;
            self.rt = self.line;
            self.next_alpha = now.saturating_add(p.rp_dce_tcp_rtt);
        }
        self.cnp_in_period = true;
        // The increase counters start over on every CNP, cut or not.
        self.t = 0;
        self.bc = 0;
        self.bytes = 0;
        self.next_inc = now.saturating_add(p.rp_time_reset);
        if let Some(last) = self.last_cut {
            if now.saturating_sub(last) < p.rp_rate_reduce_monitor_period {
                self.cnps_ignored += 1;
                return false;
            }
        }
        self.last_cut = Some(now);
        self.rt = self.rc;
        let shift = 1u64
            .checked_shl(p.rp_gd.saturating_add(10))
            .unwrap_or(u64::MAX);
        let cut = mul_div(self.rc, self.alpha_hp, shift);
        let floor = mul_div(self.rc, u64::from(p.rp_min_dec_fac), 100);
        self.rc = self
            .rc
            .saturating_sub(cut)
            .max(floor)
            .max(p.rp_min_rate)
            .min(self.line);
        self.cuts += 1;
        true
    }

    /// `n` bytes were sent at `now` (a limited QP's byte counter; nothing while unlimited).
    /// Returns the phases of the increase events it caused (at most [`MAX_CATCH_UP`]).
    pub fn on_sent(&mut self, p: &Params, n: u64, now: u64) -> u32 {
        if !self.active {
            return 0;
        }
        self.tick(p, now);
        self.bytes = self.bytes.saturating_add(n);
        let mut events = 0;
        while self.active && self.bytes >= p.rp_byte_reset && events < MAX_CATCH_UP {
            self.bytes -= p.rp_byte_reset;
            self.bc = self.bc.saturating_add(1);
            self.increase(p);
            events += 1;
        }
        if events == MAX_CATCH_UP {
            self.bytes = self.bytes.checked_rem(p.rp_byte_reset).unwrap_or(0);
        }
        events
    }

    /// Brings the timers up to `now`: α updates, and timer increase events.
    pub fn tick(&mut self, p: &Params, now: u64) {
        if !self.active {
            return;
        }
        let mut n = 0;
        while self.next_alpha <= now && n < MAX_CATCH_UP {
            self.update_alpha(p);
            self.next_alpha = self.next_alpha.saturating_add(p.rp_dce_tcp_rtt);
            n += 1;
        }
        if self.next_alpha <= now {
            // A long absence without a CNP: α has decayed to nothing.
            self.alpha_hp = 0;
            self.alpha = 0;
            self.next_alpha = now.saturating_add(p.rp_dce_tcp_rtt);
        }
        let mut n = 0;
        while self.active && self.next_inc <= now && n < MAX_CATCH_UP {
            self.t = self.t.saturating_add(1);
            self.increase(p);
            self.next_inc = self.next_inc.saturating_add(p.rp_time_reset);
            n += 1;
        }
        if self.active && self.next_inc <= now {
            // Longer than MAX_CATCH_UP increase periods without a CNP: back to the line.
            self.rc = self.line;
            self.rt = self.line;
            self.active = false;
        }
    }

    /// When the next timer is due (the caller's timer), if limiting.
    #[cfg_attr(MODULE, expect(dead_code))]
    pub fn next_due(&self) -> Option<u64> {
        self.active.then(|| self.next_alpha.min(self.next_inc))
    }

    fn update_alpha(&mut self, p: &Params) {
        let g = u64::from(p.rp_dce_tcp_g);
        let a = self.alpha_hp * g / 1024;
        let a = if core::mem::take(&mut self.cnp_in_period) {
            a + ((1024 - g) << 10)
        } else {
            a
        };
        self.alpha_hp = a.min(1023 << 10);
        self.alpha = (self.alpha_hp >> 10) as u32;
    }

    /// One increase event (the counters were just advanced). Returns its phase.
    fn increase(&mut self, p: &Params) -> Phase {
        let f = p.rp_threshold;
        let phase = if self.t.max(self.bc) <= f {
            Phase::FastRecovery
        } else if self.t.min(self.bc) > f {
            Phase::Hyper
        } else {
            Phase::Additive
        };
        match phase {
            Phase::FastRecovery => {}
            Phase::Additive => self.rt = self.rt.saturating_add(p.rp_ai_rate),
            Phase::Hyper => {
                let i = u64::from(self.t.min(self.bc) - f);
                self.rt = self.rt.saturating_add(i.saturating_mul(p.rp_hai_rate));
            }
        }
        self.rt = self.rt.min(self.line);
        // Halfway to the target, rounded towards it (so that the rate reaches the line).
        self.rc = if self.rt >= self.rc {
            self.rc + (self.rt - self.rc).div_ceil(2)
        } else {
            self.rt + (self.rc - self.rt) / 2
        }
        .min(self.line);
        if self.rc >= self.line {
            self.active = false;
            self.rc = self.line;
            self.rt = self.line;
        }
        phase
    }
}

/// `a * b / c`, saturating: exact for the ranges used here (rates up to 100 Tb/s in kbit/s
/// times α in 1/2^20, or a day in µs times such a rate, stay below 2^64); no 128-bit division,
/// which the kernel does not link.
fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    a.saturating_mul(b) / c.max(1)
}

/// The notification point's spacing of CNPs for one QP: at most one per
/// `np_min_time_between_cnps`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CnpGate {
    last: Option<u64>,
}

impl CnpGate {
    /// A CE-marked packet came at `now`: whether to send a CNP for it.
    pub fn may_send(&mut self, p: &Params, now: u64) -> bool {
        match self.last {
            Some(l) if now.saturating_sub(l) < p.np_min_time_between_cnps => false,
            _ => {
                self.last = Some(now);
                true
            }
        }
    }
}

/// Turns a rate into permission to send: a byte budget that grows with time at the rate, up to
/// `burst` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pacer {
    credit: u64,
    last: u64,
    pub burst: u64,
}

impl Pacer {
    /// Full budget at `now`.
    pub const fn new(burst: u64, now: u64) -> Self {
        Pacer {
            credit: burst,
            last: now,
            burst,
        }
    }

    /// Asks to send `len` bytes at `now` at `rate` kbit/s: `Ok` (spent), or `Err(us)`: the
    /// wait until it may.
    pub fn take(&mut self, len: u64, rate: u64, now: u64) -> Result<(), u64> {
        let dt = now.saturating_sub(self.last);
        self.last = self.last.max(now);
        // kbit/s = 1000 bit / s = 1 bit / ms = 1/8000 byte per µs.
        let earned = mul_div(dt, rate, 8000);
        self.credit = self.credit.saturating_add(earned).min(self.burst.max(len));
        if self.credit >= len {
            self.credit -= len;
            return Ok(());
        }
        let short = len - self.credit;
        Err(mul_div(short, 8000, rate.max(1)).max(1))
    }
}

/// The ECN field of a RoCEv2 packet's IP header (the low two bits of the TOS byte / traffic
/// class): ECT(0), as RoCE NICs send with congestion control on.
pub const ECN_ECT0: u8 = 0b10;
/// Congestion Experienced: a switch (or qdisc) on the path marked the packet.
pub const ECN_CE: u8 = 0b11;

/// The TOS / traffic-class byte of an outgoing packet: ECT(0) in the ECN field when `mark`
/// (and never for a CNP, which goes ECN not-capable), the address vector's class above it.
pub const fn tos(traffic_class: u8, mark: bool, cnp: bool) -> u8 {
    let dscp = traffic_class & !0b11;
    if mark && !cnp {
        dscp | ECN_ECT0
    } else {
        dscp
    }
}

/// Whether a received TOS / traffic-class byte carries Congestion Experienced.
pub const fn is_ce(tos: u8) -> bool {
    tos & 0b11 == ECN_CE
}

/// Bytes of a CNP: BTH, 16 reserved bytes, ICRC (IBTA Annex A17).
pub const CNP_LEN: usize = 12 + 16 + 4;

/// A CNP to QP `dest_qpn` (the sender of the marked packets) with P_Key `pkey`: BTH opcode
/// 0x81, PSN 0, zeros elsewhere; the ICRC bytes are left for the transmit path to fill.
pub const fn cnp(dest_qpn: u32, pkey: u16) -> [u8; CNP_LEN] {
    let mut p = [0u8; CNP_LEN];
    p[0] = super::wire::CNP_OPCODE;
    let k = pkey.to_be_bytes();
    p[2] = k[0];
    p[3] = k[1];
    let q = (dest_qpn & 0xff_ffff).to_be_bytes();
    p[5] = q[1];
    p[6] = q[2];
    p[7] = q[3];
    p
}

/// The destination QP of a received CNP (`None`: not a CNP, or too short to be one).
pub fn cnp_dest_qp(pkt: &[u8]) -> Option<u32> {
    if pkt.len() < CNP_LEN || pkt[0] != super::wire::CNP_OPCODE {
        return None;
    }
    Some(u32::from_be_bytes([0, pkt[5], pkt[6], pkt[7]]))
}

/// Whether an outgoing RC packet is one DCQCN paces: a request (SEND, WRITE, READ request,
/// atomics, FLUSH, ATOMIC WRITE), not an acknowledgement, a READ response or a CNP.
pub const fn paced_opcode(op: u8) -> bool {
    op >> 5 == 0
        && matches!(
            op & 0x1f,
            0x00..=0x0c | 0x13 | 0x14 | 0x16 | 0x17 | 0x1c | 0x1d
        )
}

/// The names of the settings, in the order [`Settings::show`] prints them: the two switches,
/// then [`Params`] under mlx5's names.
pub const NAMES: [&str; 15] = [
    "ecn",
    "cc",
    "rp_ai_rate",
    "rp_hai_rate",
    "rp_gd",
    "rp_min_dec_fac",
    "rp_min_rate",
    "rp_time_reset",
    "rp_byte_reset",
    "rp_threshold",
    "rp_initial_alpha_value",
    "rp_dce_tcp_g",
    "rp_dce_tcp_rtt",
    "rp_rate_reduce_monitor_period",
    "np_min_time_between_cnps",
];

/// A device's DCQCN settings: the switches (ECN marking and CNPs; the rate reaction) and the
/// parameters. Rates are shown and set in Mb/s (mlx5's unit); times in µs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    pub ecn: bool,
    pub cc: bool,
    pub params: Params,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            ecn: true,
            cc: true,
            params: Params::default(),
        }
    }
}

impl Settings {
    /// The value of setting `NAMES[i]` as shown.
    pub fn get(&self, i: usize) -> Option<u64> {
        let p = &self.params;
        Some(match i {
            0 => u64::from(self.ecn),
            1 => u64::from(self.cc),
            2 => p.rp_ai_rate / 1000,
            3 => p.rp_hai_rate / 1000,
            4 => u64::from(p.rp_gd),
            5 => u64::from(p.rp_min_dec_fac),
            6 => p.rp_min_rate / 1000,
            7 => p.rp_time_reset,
            8 => p.rp_byte_reset,
            9 => u64::from(p.rp_threshold),
            10 => u64::from(p.rp_initial_alpha_value),
            11 => u64::from(p.rp_dce_tcp_g),
            12 => p.rp_dce_tcp_rtt,
            13 => p.rp_rate_reduce_monitor_period,
            14 => p.np_min_time_between_cnps,
            _ => return None,
        })
    }

    /// Applies one `name value` line (what a write to the device's `dcqcn` file carries; a
    /// trailing newline is allowed). Nothing changes unless the line names a setting, the
    /// value parses and the resulting parameters pass [`Params::check`].
    pub fn apply(&mut self, line: &[u8]) -> Result<(), ParamError> {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let text = core::str::from_utf8(line).map_err(|_| ParamError::OutOfRange)?;
        let mut it = text.split_ascii_whitespace();
        let (Some(name), Some(value), None) = (it.next(), it.next(), it.next()) else {
            return Err(ParamError::OutOfRange);
        };
        let v: u64 = value.parse().map_err(|_| ParamError::OutOfRange)?;
        let i = NAMES
            .iter()
            .position(|n| *n == name)
            .ok_or(ParamError::OutOfRange)?;
        let small = |v: u64| u32::try_from(v).map_err(|_| ParamError::OutOfRange);
        let mbps = |v: u64| v.checked_mul(1000).ok_or(ParamError::OutOfRange);
        let mut s = *self;
        let p = &mut s.params;
        match i {
            0 | 1 if v > 1 => return Err(ParamError::OutOfRange),
            0 => s.ecn = v == 1,
            1 => s.cc = v == 1,
            2 => p.rp_ai_rate = mbps(v)?,
            3 => p.rp_hai_rate = mbps(v)?,
            4 => p.rp_gd = small(v)?,
            5 => p.rp_min_dec_fac = small(v)?,
            6 => p.rp_min_rate = mbps(v)?,
            7 => p.rp_time_reset = v,
            8 => p.rp_byte_reset = v,
            9 => p.rp_threshold = small(v)?,
            10 => p.rp_initial_alpha_value = small(v)?,
            11 => p.rp_dce_tcp_g = small(v)?,
            12 => p.rp_dce_tcp_rtt = v,
            13 => p.rp_rate_reduce_monitor_period = v,
            _ => p.np_min_time_between_cnps = v,
        }
        s.params.check()?;
        *self = s;
        Ok(())
    }

    /// Writes every setting as a `name value` line into `out`; returns the bytes written
    /// (truncated at `out`'s end).
    pub fn show(&self, out: &mut [u8]) -> usize {
        let values = NAMES
            .iter()
            .enumerate()
            .map(|(i, name)| (*name, self.get(i).unwrap_or(0)));
        super::kv::write_lines(out, values)
    }
}
