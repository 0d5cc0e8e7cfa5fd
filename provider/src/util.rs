//! Pure helpers: no FFI, no unsafe (constants from `abi` only). Everything here is unit-tested on the host.

use core::ffi::c_char;
use core::fmt;

use rrxe_uapi::{AllocUcontextResp, LAYOUT_FINGERPRINT, SYSFS_UABI_ATTR, UABI_MAGIC, UABI_VERSION};

use crate::abi::{
    IBV_CQ_INIT_ATTR_MASK_FLAGS, IBV_CREATE_CQ_ATTR_SINGLE_THREADED, IBV_QPT_RC, IBV_QPT_UC,
    IBV_QPT_UD, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
    IBV_QP_EX_WITH_ATOMIC_WRITE, IBV_QP_EX_WITH_BIND_MW, IBV_QP_EX_WITH_LOCAL_INV,
    IBV_QP_EX_WITH_RDMA_READ, IBV_QP_EX_WITH_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM,
    IBV_QP_EX_WITH_SEND, IBV_QP_EX_WITH_SEND_WITH_IMM, IBV_QP_EX_WITH_SEND_WITH_INV,
    IBV_QP_INIT_ATTR_CREATE_FLAGS, IBV_QP_INIT_ATTR_PD, IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
    IBV_WC_EX_WITH_BYTE_LEN, IBV_WC_EX_WITH_DLID_PATH_BITS, IBV_WC_EX_WITH_IMM,
    IBV_WC_EX_WITH_QP_NUM, IBV_WC_EX_WITH_SL, IBV_WC_EX_WITH_SLID, IBV_WC_EX_WITH_SRC_QP,
};

/// Prefix of every line the provider prints.
pub const PFX: &str = "librrxe";

/// Parses the content of the sysfs attribute `rrxe_uabi` (decimal, optional trailing
/// whitespace/newline). Anything else, including an empty value, is `None`.
pub fn parse_uabi(raw: &[u8]) -> Option<u32> {
    let s = core::str::from_utf8(raw)
        .ok()?
        .trim_end_matches(['\n', '\r', ' ', '\t', '\0']);
    if s.is_empty() || s.len() > 10 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `fw_ver` as every rdma-core provider prints it: the kernel's `u64` split into
/// `(fw >> 32) & 0xffff`, `(fw >> 16) & 0xffff` and `fw & 0xffff`, as `major.minor.sub`.
pub fn format_fw_ver(raw: u64) -> String {
    format!(
        "{}.{}.{}",
        (raw >> 32) & 0xffff,
        (raw >> 16) & 0xffff,
        raw & 0xffff
    )
}

/// Copies `s` into the C string buffer `dst`, truncating if needed; the result is always
/// NUL-terminated (unless `dst` is empty, which is left alone), like `snprintf`.
pub fn write_c_string(dst: &mut [c_char], s: &str) {
    let Some(max) = dst.len().checked_sub(1) else {
        return;
    };
    let n = s.len().min(max);
    for (d, &b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = b as c_char;
    }
    dst[n] = 0;
}

/// A NUL-terminated (or full) C `char` array as a Rust string, lossily.
pub fn c_chars_to_string(src: &[c_char]) -> String {
    let bytes: Vec<u8> = src
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Whether `RRXE_DEBUG` (given its value) enables the stderr trace: set, non-empty, not "0".
pub fn debug_enabled_by(value: Option<&std::ffi::OsStr>) -> bool {
    matches!(value, Some(v) if !v.is_empty() && v != "0")
}

/// Why the provider refuses to open a device whose module was built from a different tree.
/// Each is reported once per failed open, as one line on stderr, and fails with `EPROTO`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UabiProblem {
    /// The kernel (sysfs attribute or `GET_CONTEXT` response) speaks another uABI version.
    Mismatch { kernel: u32 },
    /// The sysfs attribute is missing or does not hold a decimal number.
    Unreadable { raw: String },
    /// The `GET_CONTEXT` response does not carry [`UABI_MAGIC`].
    BadMagic { magic: u32 },
    /// The kernel refused the provider's uABI version or layout (`GET_CONTEXT` failed with
    /// `EPROTO`).
    KernelRefused,
    /// Same version, but the kernel's ring and command layouts differ from the provider's.
    LayoutMismatch { kernel: u32 },
}

impl UabiProblem {
    /// The one-line message printed to stderr for device `ibdev`.
    pub fn message(&self, ibdev: &str) -> String {
        MismatchMessage {
            problem: self,
            ibdev,
        }
        .to_string()
    }
}

struct MismatchMessage<'a> {
    problem: &'a UabiProblem,
    ibdev: &'a str,
}

impl fmt::Display for MismatchMessage<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dev = self.ibdev;
        match self.problem {
            UabiProblem::Mismatch { kernel } => write!(
                f,
                "{PFX}: device {dev} speaks rrxe uABI {kernel} but this provider was built for uABI {UABI_VERSION}"
            )?,
            UabiProblem::Unreadable { raw } => write!(
                f,
                "{PFX}: device {dev} has an unreadable {SYSFS_UABI_ATTR} sysfs attribute ({raw:?}) but this provider was built for uABI {UABI_VERSION}"
            )?,
            UabiProblem::BadMagic { magic } => write!(
                f,
                "{PFX}: device {dev} answered GET_CONTEXT without the rrxe magic (0x{magic:08x}, expected 0x{UABI_MAGIC:08x}); this provider was built for uABI {UABI_VERSION}"
            )?,
            UabiProblem::KernelRefused => write!(
                f,
                "{PFX}: device {dev} refused this provider's rrxe uABI {UABI_VERSION} / layout {LAYOUT_FINGERPRINT:#010x} (EPROTO)"
            )?,
            UabiProblem::LayoutMismatch { kernel } => write!(
                f,
                "{PFX}: device {dev} has rrxe ABI layout {kernel:#010x} but this provider was built for layout {LAYOUT_FINGERPRINT:#010x}"
            )?,
        }
        f.write_str("; rebuild the provider and the module from the same tree")
    }
}

/// Checks the sysfs attribute read at open time (`None`: could not be read).
pub fn check_sysfs_uabi(raw: Option<&[u8]>) -> Result<u32, UabiProblem> {
    let Some(raw) = raw else {
        return Err(UabiProblem::Unreadable {
            raw: "<missing>".into(),
        });
    };
    match parse_uabi(raw) {
        Some(v) if v == UABI_VERSION => Ok(v),
        Some(v) => Err(UabiProblem::Mismatch { kernel: v }),
        None => Err(UabiProblem::Unreadable {
            raw: String::from_utf8_lossy(raw).into_owned(),
        }),
    }
}

/// Why `alloc_context` failed after `GET_CONTEXT`: the errno to return, and the message to
/// print if the failure is a uABI problem.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GetContextError {
    pub errno: i32,
    pub problem: Option<UabiProblem>,
}

/// Judges the outcome of `ibv_cmd_get_context` (`ret`: 0 or a positive errno) and the
/// driver-private response the kernel wrote.
pub fn check_get_context(ret: i32, resp: &AllocUcontextResp) -> Result<(), GetContextError> {
    if ret == libc::EPROTO {
        return Err(GetContextError {
            errno: libc::EPROTO,
            problem: Some(UabiProblem::KernelRefused),
        });
    }
    if ret != 0 {
        let errno = if ret > 0 { ret } else { libc::EIO };
        return Err(GetContextError {
            errno,
            problem: None,
        });
    }
    if resp.magic != UABI_MAGIC {
        return Err(GetContextError {
            errno: libc::EPROTO,
            problem: Some(UabiProblem::BadMagic { magic: resp.magic }),
        });
    }
    if resp.uabi_version != UABI_VERSION {
        return Err(GetContextError {
            errno: libc::EPROTO,
            problem: Some(UabiProblem::Mismatch {
                kernel: resp.uabi_version,
            }),
        });
    }
    if resp.layout != LAYOUT_FINGERPRINT {
        return Err(GetContextError {
            errno: libc::EPROTO,
            problem: Some(UabiProblem::LayoutMismatch {
                kernel: resp.layout,
            }),
        });
    }
    Ok(())
}

/// `ibv_qp_init_attr_ex::comp_mask` bits `create_qp_ex` accepts: the PD, create flags (which
/// the kernel judges) and send ops flags (the `ibv_wr_*` API; see [`check_send_ops_flags`]).
pub const CREATE_QP_EX_MASK: u32 =
    IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;

/// Checks `ibv_qp_init_attr_ex::comp_mask` for `create_qp_ex`; the error is the errno.
///
/// Everything outside [`CREATE_QP_EX_MASK`] is `EOPNOTSUPP`:
/// * `XRCD` and `IND_TABLE` need objects this provider cannot create (`open_xrcd`,
///   `create_rwq_ind_table` are not implemented);
/// * `MAX_TSO_HEADER` and `RX_HASH` would be dropped silently by `ibv_cmd_create_qp_ex2`.
///
/// A missing PD is left to libibverbs, which answers `EINVAL` as for any provider.
pub fn check_create_qp_ex_mask(comp_mask: u32) -> Result<(), i32> {
    if comp_mask & !CREATE_QP_EX_MASK != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(())
}

/// The `IBV_QP_EX_WITH_*` builders each QP type offers: the operations the kernel executes on
/// it (the same as `post_send` accepts).
pub fn supported_send_ops(qp_type: u32) -> u64 {
    let ud = u64::from(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM);
    let uc = ud
        | u64::from(
            IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_BIND_MW,
        );
    let rc = uc
        | u64::from(
            IBV_QP_EX_WITH_RDMA_READ
                | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
                | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
                | IBV_QP_EX_WITH_LOCAL_INV
                | IBV_QP_EX_WITH_SEND_WITH_INV
                | IBV_QP_EX_WITH_ATOMIC_WRITE,
        );
    match qp_type {
        IBV_QPT_RC => rc,
        IBV_QPT_UC => uc,
        IBV_QPT_UD => ud,
        _ => 0,
    }
}

/// Checks `send_ops_flags` of a `create_qp_ex` with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`: any
/// operation the QP type does not offer ([`supported_send_ops`]: `TSO`, `FLUSH`
/// (rdma-core 44's `ibv_qp_ex` has no `wr_flush`: rrxe takes FLUSH through `ibv_post_send`),
/// unknown bits, READ/atomics/invalidation/ATOMIC WRITE on UC/UD, `BIND_MW` on UD, ...) is
/// `EOPNOTSUPP`.
pub fn check_send_ops_flags(qp_type: u32, flags: u64) -> Result<(), i32> {
    if flags & !supported_send_ops(qp_type) != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(())
}

/// The `IBV_WC_EX_WITH_*` fields an rrxe `ibv_cq_ex` reads: the standard ones
/// (`IBV_WC_STANDARD_FLAGS`). Completion timestamps are not among them: the kernel stamps no
/// time on a completion, and a time taken when the provider polls would not be the
/// completion's.
pub const SUPPORTED_WC_EX_FLAGS: u64 = (IBV_WC_EX_WITH_BYTE_LEN
    | IBV_WC_EX_WITH_IMM
    | IBV_WC_EX_WITH_QP_NUM
    | IBV_WC_EX_WITH_SRC_QP
    | IBV_WC_EX_WITH_SLID
    | IBV_WC_EX_WITH_SL
    | IBV_WC_EX_WITH_DLID_PATH_BITS) as u64;

/// Checks a `create_cq_ex` request (`flags`: `ibv_cq_init_attr_ex::flags` when `comp_mask` has
/// `IBV_CQ_INIT_ATTR_MASK_FLAGS`, else 0): `wc_flags` outside [`SUPPORTED_WC_EX_FLAGS`]
/// (timestamps, CVLAN, flow tag, TM info), a parent domain (`IBV_CQ_INIT_ATTR_MASK_PD`),
/// unknown `comp_mask` bits and any create flag but the `SINGLE_THREADED` hint
/// (`IGNORE_OVERRUN` is a kernel CQ flag rrxe refuses) are `EOPNOTSUPP`.
pub fn check_create_cq_ex(wc_flags: u64, comp_mask: u32, flags: u32) -> Result<(), i32> {
    if wc_flags & !SUPPORTED_WC_EX_FLAGS != 0
        || comp_mask & !IBV_CQ_INIT_ATTR_MASK_FLAGS != 0
        || flags & !IBV_CREATE_CQ_ATTR_SINGLE_THREADED != 0
    {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(())
}

/// The rdma-core release whose libibverbs private structures `src/abi/` declares: the
/// layouts of `verbs_qp`/`ibv_qp_ex` (which libibverbs itself writes into) changed within the
/// span of private ABI 34 (rdma-core 34..56), so the symbol version `IBVERBS_PRIVATE_34` alone
/// does not tell a compatible libibverbs from an incompatible one.
pub const LIBIBVERBS_RELEASE: u32 = 44;

/// The rdma-core release in a libibverbs file name: rdma-core names the library
/// `libibverbs.so.<soname 1>.<map version>.<PACKAGE_VERSION>` (Debian 12:
/// `libibverbs.so.1.14.44.0`). `None` when the name does not have that shape.
pub fn libibverbs_release(file_name: &str) -> Option<(u32, String)> {
    let rest = file_name.strip_prefix("libibverbs.so.1.")?;
    let mut parts = rest.split('.');
    let _map: u32 = parts.next()?.parse().ok()?;
    let release: u32 = parts.next()?.parse().ok()?;
    let minor = parts.next()?;
    if minor.is_empty() || !minor.bytes().all(|b| b.is_ascii_digit()) || parts.next().is_some() {
        return None;
    }
    Some((release, format!("{release}.{minor}")))
}

/// Decides whether the provider may register with the libibverbs loaded from `path` (its
/// real path, symlinks resolved): `Err` holds the one line to print when it may not.
pub fn check_libibverbs(path: &str) -> Result<(), String> {
    let name = path.rsplit('/').next().unwrap_or(path);
    match libibverbs_release(name) {
        Some((r, _)) if r == LIBIBVERBS_RELEASE => Ok(()),
        Some((_, version)) => Err(format!(
            "{PFX}: {path} is rdma-core {version}, but this provider declares libibverbs' private structures as in rdma-core {LIBIBVERBS_RELEASE} (their layouts differ between releases of private ABI 34); the rrxe provider is not registered: rebuild it against this libibverbs"
        )),
        None => Err(format!(
            "{PFX}: cannot tell which rdma-core release {path} is (expected libibverbs.so.1.<n>.{LIBIBVERBS_RELEASE}.<m>); the rrxe provider, built for rdma-core {LIBIBVERBS_RELEASE}, is not registered"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_uabi_accepts_decimal_with_newline() {
        assert_eq!(parse_uabi(b"1"), Some(1));
        assert_eq!(parse_uabi(b"1\n"), Some(1));
        assert_eq!(parse_uabi(b"42 \n"), Some(42));
        assert_eq!(parse_uabi(b"4294967295"), Some(u32::MAX));
    }

    #[test]
    fn parse_uabi_rejects_garbage() {
        for raw in [
            &b""[..],
            b"\n",
            b"x",
            b"-1",
            b"+1",
            b" 1",
            b"1.0",
            b"0x1",
            b"4294967296",
            b"12345678901",
            b"\xff",
        ] {
            assert_eq!(parse_uabi(raw), None, "{raw:?}");
        }
    }

    #[test]
    fn fw_ver_is_major_minor_sub() {
        assert_eq!(format_fw_ver(0), "0.0.0");
        assert_eq!(format_fw_ver((1 << 32) | (2 << 16) | 3), "1.2.3");
        // Bits above 48 are ignored, each part is 16 bits, printed in decimal.
        assert_eq!(format_fw_ver(u64::MAX), "65535.65535.65535");
        assert_eq!(format_fw_ver(0x0007_0010_0100), "7.16.256");
    }

    #[test]
    fn c_string_truncates_and_terminates() {
        let mut buf = [0x7f as c_char; 64];
        write_c_string(&mut buf, "1.2.3");
        assert_eq!(c_chars_to_string(&buf), "1.2.3");
        assert_eq!(buf[5], 0);
        let mut small = [0x7f as c_char; 4];
        write_c_string(&mut small, "65535.65535.65535");
        assert_eq!(c_chars_to_string(&small), "655");
        assert_eq!(small[3], 0);
        let mut empty: [c_char; 0] = [];
        write_c_string(&mut empty, "x");
        let full = [b'a' as c_char; 3];
        assert_eq!(c_chars_to_string(&full), "aaa");
    }

    #[test]
    fn debug_env() {
        use std::ffi::OsStr;
        assert!(!debug_enabled_by(None));
        assert!(!debug_enabled_by(Some(OsStr::new(""))));
        assert!(!debug_enabled_by(Some(OsStr::new("0"))));
        assert!(debug_enabled_by(Some(OsStr::new("1"))));
        assert!(debug_enabled_by(Some(OsStr::new("yes"))));
    }

    #[test]
    fn mismatch_message_is_one_clear_line() {
        let kernel = UABI_VERSION + 1;
        let msg = UabiProblem::Mismatch { kernel }.message("rrxe0");
        assert_eq!(
            msg,
            format!(
                "librrxe: device rrxe0 speaks rrxe uABI {kernel} but this provider was built for uABI {UABI_VERSION}; rebuild the provider and the module from the same tree"
            )
        );
        for p in [
            UabiProblem::Mismatch { kernel: 7 },
            UabiProblem::Unreadable {
                raw: "abc\n".into(),
            },
            UabiProblem::BadMagic { magic: 0 },
            UabiProblem::KernelRefused,
        ] {
            let m = p.message("zz0");
            assert!(m.starts_with("librrxe: device zz0 "), "{m}");
            assert!(
                m.ends_with("rebuild the provider and the module from the same tree"),
                "{m}"
            );
            assert!(!m.contains('\n'), "{m}");
        }
        assert!(UabiProblem::BadMagic { magic: 0x1234 }
            .message("d")
            .contains("0x00001234"));
    }

    #[test]
    fn sysfs_check() {
        let ours = UABI_VERSION.to_string();
        assert_eq!(check_sysfs_uabi(Some(ours.as_bytes())), Ok(UABI_VERSION));
        assert_eq!(
            check_sysfs_uabi(Some(b"999")),
            Err(UabiProblem::Mismatch { kernel: 999 })
        );
        assert_eq!(
            check_sysfs_uabi(Some(b"abc")),
            Err(UabiProblem::Unreadable { raw: "abc".into() })
        );
        assert!(matches!(
            check_sysfs_uabi(None),
            Err(UabiProblem::Unreadable { .. })
        ));
    }

    #[test]
    fn get_context_check() {
        let good = AllocUcontextResp {
            magic: UABI_MAGIC,
            uabi_version: UABI_VERSION,
            max_inline_data: 64,
            layout: LAYOUT_FINGERPRINT,
        };
        assert_eq!(check_get_context(0, &good), Ok(()));
        assert_eq!(
            check_get_context(libc::EPROTO, &good),
            Err(GetContextError {
                errno: libc::EPROTO,
                problem: Some(UabiProblem::KernelRefused)
            })
        );
        assert_eq!(
            check_get_context(libc::ENOMEM, &good),
            Err(GetContextError {
                errno: libc::ENOMEM,
                problem: None
            })
        );
        assert_eq!(check_get_context(-1, &good).unwrap_err().errno, libc::EIO);
        // A kernel that wrote nothing (response left zeroed).
        let zero = AllocUcontextResp::default();
        assert_eq!(
            check_get_context(0, &zero),
            Err(GetContextError {
                errno: libc::EPROTO,
                problem: Some(UabiProblem::BadMagic { magic: 0 })
            })
        );
        let other = AllocUcontextResp {
            uabi_version: UABI_VERSION + 1,
            ..good
        };
        assert_eq!(
            check_get_context(0, &other),
            Err(GetContextError {
                errno: libc::EPROTO,
                problem: Some(UabiProblem::Mismatch {
                    kernel: UABI_VERSION + 1
                })
            })
        );
        // Same version, another layout (a module and a provider from different builds).
        let moved = AllocUcontextResp {
            layout: LAYOUT_FINGERPRINT ^ 1,
            ..good
        };
        let e = check_get_context(0, &moved).unwrap_err();
        assert_eq!(e.errno, libc::EPROTO);
        assert_eq!(
            e.problem,
            Some(UabiProblem::LayoutMismatch {
                kernel: LAYOUT_FINGERPRINT ^ 1
            })
        );
        assert!(e.problem.unwrap().message("rrxe0").contains("layout"));
    }

    #[test]
    fn create_qp_ex_mask() {
        use crate::abi::{
            IBV_QP_INIT_ATTR_IND_TABLE, IBV_QP_INIT_ATTR_MAX_TSO_HEADER, IBV_QP_INIT_ATTR_RX_HASH,
            IBV_QP_INIT_ATTR_XRCD,
        };
        assert_eq!(
            check_create_qp_ex_mask(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS),
            Ok(())
        );
        assert_eq!(check_create_qp_ex_mask(IBV_QP_INIT_ATTR_PD), Ok(()));
        assert_eq!(
            check_create_qp_ex_mask(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS),
            Ok(())
        );
        // No PD: libibverbs' own check (EINVAL) decides.
        assert_eq!(check_create_qp_ex_mask(0), Ok(()));
        for bit in [
            IBV_QP_INIT_ATTR_XRCD,
            IBV_QP_INIT_ATTR_MAX_TSO_HEADER,
            IBV_QP_INIT_ATTR_IND_TABLE,
            IBV_QP_INIT_ATTR_RX_HASH,
            1 << 7,
            1 << 31,
        ] {
            assert_eq!(
                check_create_qp_ex_mask(IBV_QP_INIT_ATTR_PD | bit),
                Err(libc::EOPNOTSUPP),
                "{bit:#x}"
            );
        }
    }

    #[test]
    fn send_ops_flags_per_qp_type() {
        use crate::abi::*;
        let all_rc = u64::from(
            IBV_QP_EX_WITH_RDMA_WRITE
                | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
                | IBV_QP_EX_WITH_SEND
                | IBV_QP_EX_WITH_SEND_WITH_IMM
                | IBV_QP_EX_WITH_RDMA_READ
                | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
                | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD
                | IBV_QP_EX_WITH_LOCAL_INV
                | IBV_QP_EX_WITH_SEND_WITH_INV
                | IBV_QP_EX_WITH_ATOMIC_WRITE
                | IBV_QP_EX_WITH_BIND_MW,
        );
        assert_eq!(check_send_ops_flags(IBV_QPT_RC, all_rc), Ok(()));
        assert_eq!(
            check_send_ops_flags(IBV_QPT_UC, u64::from(IBV_QP_EX_WITH_BIND_MW)),
            Ok(())
        );
        assert_eq!(check_send_ops_flags(IBV_QPT_RC, 0), Ok(()));
        assert_eq!(
            check_send_ops_flags(
                IBV_QPT_UD,
                u64::from(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM)
            ),
            Ok(())
        );
        assert_eq!(
            check_send_ops_flags(IBV_QPT_UC, u64::from(IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)),
            Ok(())
        );
        for (qpt, bad) in [
            (IBV_QPT_UD, IBV_QP_EX_WITH_BIND_MW),
            (IBV_QPT_RC, IBV_QP_EX_WITH_TSO),
            (IBV_QPT_RC, 1 << 13),
            (IBV_QPT_UC, IBV_QP_EX_WITH_LOCAL_INV),
            (IBV_QPT_UC, IBV_QP_EX_WITH_SEND_WITH_INV),
            (IBV_QPT_UC, IBV_QP_EX_WITH_ATOMIC_WRITE),
            (IBV_QPT_RC, 1 << 11),
            (IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_READ),
            (IBV_QPT_UC, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD),
            (IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE),
            (IBV_QPT_UD, IBV_QP_EX_WITH_TSO),
            (IBV_QPT_XRC_SEND, IBV_QP_EX_WITH_SEND),
        ] {
            assert_eq!(
                check_send_ops_flags(qpt, u64::from(bad) | u64::from(IBV_QP_EX_WITH_SEND)),
                Err(libc::EOPNOTSUPP),
                "qp type {qpt}, {bad:#x}"
            );
        }
    }

    #[test]
    fn create_cq_ex_refuses_what_cannot_be_honest() {
        use crate::abi::*;
        // verbs.h: IBV_WC_STANDARD_FLAGS = BYTE_LEN | IMM | QP_NUM | SRC_QP | SLID | SL |
        // DLID_PATH_BITS (an anonymous enum, which bindgen does not emit).
        let std = 0x7f_u64;
        assert_eq!(SUPPORTED_WC_EX_FLAGS, std);
        assert_eq!(check_create_cq_ex(0, 0, 0), Ok(()));
        assert_eq!(check_create_cq_ex(std, 0, 0), Ok(()));
        assert_eq!(
            check_create_cq_ex(
                std,
                IBV_CQ_INIT_ATTR_MASK_FLAGS,
                IBV_CREATE_CQ_ATTR_SINGLE_THREADED
            ),
            Ok(())
        );
        for wc in [
            IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
            IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK,
            IBV_WC_EX_WITH_CVLAN,
            IBV_WC_EX_WITH_FLOW_TAG,
            IBV_WC_EX_WITH_TM_INFO,
            1 << 20,
        ] {
            assert_eq!(
                check_create_cq_ex(std | u64::from(wc), 0, 0),
                Err(libc::EOPNOTSUPP),
                "{wc:#x}"
            );
        }
        assert_eq!(
            check_create_cq_ex(std, IBV_CQ_INIT_ATTR_MASK_PD, 0),
            Err(libc::EOPNOTSUPP)
        );
        assert_eq!(
            check_create_cq_ex(
                std,
                IBV_CQ_INIT_ATTR_MASK_FLAGS,
                IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN
            ),
            Err(libc::EOPNOTSUPP)
        );
    }

    #[test]
    fn libibverbs_release_from_the_file_name() {
        assert_eq!(
            libibverbs_release("libibverbs.so.1.14.44.0"),
            Some((44, "44.0".into()))
        );
        assert_eq!(
            libibverbs_release("libibverbs.so.1.14.44.12"),
            Some((44, "44.12".into()))
        );
        assert_eq!(
            libibverbs_release("libibverbs.so.1.14.45.0"),
            Some((45, "45.0".into()))
        );
        for bad in [
            "libibverbs.so.1",
            "libibverbs.so",
            "libibverbs.so.1.14",
            "libibverbs.so.1.14.44",
            "libibverbs.so.1.14.44.",
            "libibverbs.so.1.14.44.0.1",
            "libibverbs.so.2.14.44.0",
            "libfoo.so.1.14.44.0",
            "libibverbs.so.1.x.44.0",
        ] {
            assert_eq!(libibverbs_release(bad), None, "{bad}");
        }
        assert_eq!(
            check_libibverbs("/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0"),
            Ok(())
        );
        assert_eq!(check_libibverbs("libibverbs.so.1.14.44.3"), Ok(()));
        let e = check_libibverbs("/opt/rdma/lib/libibverbs.so.1.14.50.0").unwrap_err();
        assert!(
            e.starts_with("librrxe: /opt/rdma/lib/libibverbs.so.1.14.50.0 is rdma-core 50.0"),
            "{e}"
        );
        assert!(!e.contains('\n'));
        let e = check_libibverbs("/tmp/libibverbs.so").unwrap_err();
        assert!(e.contains("cannot tell"), "{e}");
    }
}
