// SPDX-License-Identifier: GPL-2.0-only
//! `name value` lines: the text format of rrxe's sysfs files (`dcqcn`, `udp_counters`).

/// Writes one `name value\n` line per pair into `out`, the value in decimal, and returns the
/// bytes written. Output that does not fit is cut at `out.len()` (sysfs gives a page, which
/// every file of rrxe's fits in many times over).
pub fn write_lines<'a>(out: &mut [u8], lines: impl IntoIterator<Item = (&'a str, u64)>) -> usize {
    let mut n = 0;
    for (name, value) in lines {
        let mut digits = [0u8; 20];
        let mut v = value;
        let mut d = digits.len();
        loop {
            d -= 1;
            digits[d] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        let line = name
            .as_bytes()
            .iter()
            .chain(b" ")
            .chain(&digits[d..])
            .chain(b"\n");
        for &b in line {
            let Some(slot) = out.get_mut(n) else {
                return n;
            };
            *slot = b;
            n += 1;
        }
    }
    n
}
