//! Errno helpers, mask-bit names and the PASS/FAIL report.

use std::io::Write;

pub const EINVAL: i32 = libc::EINVAL;
pub const EOPNOTSUPP: i32 = libc::EOPNOTSUPP;

/// The calling thread's `errno`.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Normalizes a verb's `int` result: 0 is success; libibverbs returns a positive errno, but a
/// provider may also return -1 with `errno` set or a negative errno.
pub fn ret_errno(r: i32) -> Result<(), i32> {
    match r {
        0 => Ok(()),
        r if r > 0 => Err(r),
        -1 => Err(match errno() {
            0 => -1,
            e => e,
        }),
        r => Err(-r),
    }
}

/// `EINVAL(22)`-style name of an errno.
pub fn ename(e: i32) -> String {
    let n = match e {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ERANGE => "ERANGE",
        libc::ENOSYS => "ENOSYS",
        libc::ENODATA => "ENODATA",
        libc::EOVERFLOW => "EOVERFLOW",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ENETDOWN => "ENETDOWN",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::EHOSTDOWN => "EHOSTDOWN",
        libc::EHOSTUNREACH => "EHOSTUNREACH",
        _ => "?",
    };
    format!("{n}({e})")
}

/// Names of the `ibv_qp_attr_mask` bits 0..=20 (`IBV_QP_STATE`..`IBV_QP_DEST_QPN`).
const BIT_NAMES: [&str; 21] = [
    "STATE",
    "CUR_STATE",
    "EN_SQD_ASYNC_NOTIFY",
    "ACCESS_FLAGS",
    "PKEY_INDEX",
    "PORT",
    "QKEY",
    "AV",
    "PATH_MTU",
    "TIMEOUT",
    "RETRY_CNT",
    "RNR_RETRY",
    "RQ_PSN",
    "MAX_QP_RD_ATOMIC",
    "ALT_PATH",
    "MIN_RNR_TIMER",
    "SQ_PSN",
    "MAX_DEST_RD_ATOMIC",
    "PATH_MIG_STATE",
    "CAP",
    "DEST_QPN",
];

/// `STATE|PKEY_INDEX|0x2000000`-style rendering of a mask.
pub fn mask_str(mask: u32) -> String {
    let mut parts = Vec::new();
    let mut rest = mask;
    for (i, n) in BIT_NAMES.iter().enumerate() {
        if mask & (1 << i) != 0 {
            parts.push((*n).to_owned());
            rest &= !(1 << i);
        }
    }
    if rest != 0 || parts.is_empty() {
        parts.push(format!("{rest:#x}"));
    }
    parts.join("|")
}

/// The single bits of `mask`, lowest first.
pub fn bits(mask: u32) -> impl Iterator<Item = u32> {
    (0..32).map(|i| 1u32 << i).filter(move |b| mask & b != 0)
}

/// Prints `PASS name` / `FAIL name: reason` / `SKIP name: reason` / `INFO name: text` lines
/// and counts them; `--only`/`--skip` select checks by dotted-name prefix.
pub struct Report {
    only: Vec<String>,
    skip: Vec<String>,
    pub passed: u32,
    pub failed: u32,
}

/// Whether `name` is `prefix` or lies below it (`mask.rc` covers `mask.rc.init_rtr.extra`).
fn under(name: &str, prefix: &str) -> bool {
    name == prefix || (name.starts_with(prefix) && name.as_bytes().get(prefix.len()) == Some(&b'.'))
}

impl Report {
    pub fn new(only: Vec<String>, skip: Vec<String>) -> Report {
        Report {
            only,
            skip,
            passed: 0,
            failed: 0,
        }
    }

    /// Whether the check `name` is selected.
    pub fn wants(&self, name: &str) -> bool {
        (self.only.is_empty() || self.only.iter().any(|p| under(name, p)))
            && !self.skip.iter().any(|p| under(name, p))
    }

    /// Whether any check below `prefix` may be selected (to skip whole groups cheaply).
    pub fn wants_any(&self, prefix: &str) -> bool {
        (self.only.is_empty()
            || self
                .only
                .iter()
                .any(|p| under(p, prefix) || under(prefix, p)))
            && !self.skip.iter().any(|p| under(prefix, p))
    }

    fn line(&self, s: String) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{s}");
        let _ = out.flush();
    }

    pub fn pass(&mut self, name: &str) {
        self.passed += 1;
        self.line(format!("PASS {name}"));
    }

    pub fn fail(&mut self, name: &str, why: impl AsRef<str>) {
        self.failed += 1;
        let why = why.as_ref().replace('\n', " ");
        self.line(format!("FAIL {name}: {why}"));
    }

    pub fn skip(&mut self, name: &str, why: impl AsRef<str>) {
        self.line(format!("SKIP {name}: {}", why.as_ref()));
    }

    pub fn info(&mut self, name: &str, what: impl AsRef<str>) {
        self.line(format!("INFO {name}: {}", what.as_ref()));
    }

    /// PASS when `res` is Ok, FAIL with its message otherwise.
    pub fn result(&mut self, name: &str, res: Result<(), String>) {
        match res {
            Ok(()) => self.pass(name),
            Err(e) => self.fail(name, e),
        }
    }

    /// PASS when no sub-case failed, else FAIL listing the failed sub-cases out of `total`.
    pub fn cases(&mut self, name: &str, errs: Vec<String>, total: usize) {
        if errs.is_empty() {
            self.pass(name);
        } else {
            self.fail(
                name,
                format!("{} of {} cases: {}", errs.len(), total, errs.join("; ")),
            );
        }
    }

    pub fn summary(&self) {
        self.line(format!("{} passed, {} failed", self.passed, self.failed));
    }
}
