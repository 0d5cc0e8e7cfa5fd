//! stderr output. Errors are always printed; the trace only with `RRXE_DEBUG=1`.
//!
//! Writes ignore I/O errors: `eprintln!` would panic (and, with `panic = "abort"`, kill the
//! application) if stderr were closed.

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::util::{debug_enabled_by, PFX};

const UNKNOWN: u8 = 0;
const OFF: u8 = 1;
const ON: u8 = 2;

static DEBUG: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Whether `RRXE_DEBUG` enables the trace (read once per process).
pub fn debug_enabled() -> bool {
    match DEBUG.load(Ordering::Relaxed) {
        ON => true,
        OFF => false,
        _ => {
            let on = debug_enabled_by(std::env::var_os("RRXE_DEBUG").as_deref());
            DEBUG.store(if on { ON } else { OFF }, Ordering::Relaxed);
            on
        }
    }
}

/// Prints one `librrxe: ...` line to stderr.
pub fn line(args: fmt::Arguments<'_>) {
    raw_line(&format!("{PFX}: {args}"));
}

/// Prints an already complete line (it carries its own `librrxe:` prefix) to stderr, with a
/// single write (stderr is unbuffered: `writeln!` would issue one write per piece).
pub fn raw_line(msg: &str) {
    let mut buf = String::with_capacity(msg.len() + 1);
    buf.push_str(msg);
    buf.push('\n');
    let _ = std::io::stderr().lock().write_all(buf.as_bytes());
}

/// `trace!(...)`: a `format!`-style line on stderr when `RRXE_DEBUG` is set.
macro_rules! trace {
    ($($arg:tt)*) => {
        if $crate::log::debug_enabled() {
            $crate::log::line(format_args!($($arg)*));
        }
    };
}
pub(crate) use trace;
