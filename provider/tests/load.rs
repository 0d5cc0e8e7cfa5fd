//! Loads the built provider (`librrxe.so`, built by cargo next to this test) with `dlopen`,
//! the way libibverbs does, in a child process (the constructor registers the provider with
//! libibverbs for the rest of the process; keep that out of the test harness).

use std::ffi::{CStr, CString};
use std::path::PathBuf;
use std::process::Command;

const CHILD_ENV: &str = "RRXE_LOAD_TEST_CHILD";

fn provider_so() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("deps dir");
    for dir in [deps, deps.parent().unwrap_or(deps)] {
        let p = dir.join("librrxe.so");
        if p.exists() {
            return p;
        }
    }
    panic!("librrxe.so not found next to {}", exe.display());
}

fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a valid C string owned by libc.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "?".into()
    } else {
        // SAFETY: non-null, NUL-terminated (see above).
        unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
    }
}

/// Runs in the child only: dlopen with RTLD_NOW (every import must resolve against the
/// installed libibverbs), check nothing is exported, then let libibverbs enumerate devices
/// with the provider registered (on a host without RDMA this fails with ENOSYS; in the VM it
/// runs `match_device` on every device).
#[test]
fn dlopen_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let so = CString::new(provider_so().into_os_string().into_encoded_bytes()).unwrap();
    // SAFETY: valid C string; loading runs the provider's constructor, which is the point.
    let h = unsafe { libc::dlopen(so.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!h.is_null(), "dlopen: {}", dlerror());
    for sym in [
        c"rrxe_register",
        c"RRXE_DEVICE_OPS",
        c"match_device",
        c"alloc_context",
    ] {
        // SAFETY: valid handle and C string.
        let p = unsafe { libc::dlsym(h, sym.as_ptr()) };
        assert!(p.is_null(), "{sym:?} is exported");
    }

    // SAFETY: valid C string.
    let ibv = unsafe { libc::dlopen(c"libibverbs.so.1".as_ptr(), libc::RTLD_NOW) };
    assert!(!ibv.is_null(), "dlopen libibverbs: {}", dlerror());
    // SAFETY: valid handle and C strings.
    let (get, free) = unsafe {
        (
            libc::dlsym(ibv, c"ibv_get_device_list".as_ptr()),
            libc::dlsym(ibv, c"ibv_free_device_list".as_ptr()),
        )
    };
    assert!(!get.is_null() && !free.is_null());
    type GetList = unsafe extern "C" fn(*mut libc::c_int) -> *mut *mut libc::c_void;
    type FreeList = unsafe extern "C" fn(*mut *mut libc::c_void);
    // SAFETY: these are the public libibverbs functions with these C signatures.
    let (get, free) = unsafe {
        (
            std::mem::transmute::<*mut libc::c_void, GetList>(get),
            std::mem::transmute::<*mut libc::c_void, FreeList>(free),
        )
    };
    let mut n = 0;
    // SAFETY: `n` is a valid out-pointer; the list is freed with its own free function.
    unsafe {
        let list = get(&mut n);
        if !list.is_null() {
            free(list);
        }
    }
    eprintln!("child: dlopen ok, {n} device(s)");
}

#[test]
fn dlopen_runs_the_constructor() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "dlopen_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .env("RRXE_DEBUG", "1")
        .output()
        .expect("spawn child");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(
        stderr.contains("child: dlopen ok"),
        "child did not run:\n{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("librrxe: registering provider rrxe"),
        "constructor did not run:\n{stderr}"
    );
}

#[test]
fn exports_no_dynamic_symbols() {
    let Ok(out) = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(provider_so())
        .output()
    else {
        eprintln!("nm not available; skipped");
        return;
    };
    assert!(out.status.success());
    let syms = String::from_utf8_lossy(&out.stdout);
    assert!(syms.trim().is_empty(), "exported symbols:\n{syms}");
}

/// A libibverbs whose file name says another rdma-core release (a copy of the installed one,
/// renamed, found first through `LD_LIBRARY_PATH`): the constructor prints one line and does
/// not register.
#[test]
fn other_rdma_core_release_is_refused_with_one_line() {
    let real = std::fs::canonicalize("/usr/lib/x86_64-linux-gnu/libibverbs.so.1");
    let Ok(real) = real else {
        eprintln!("no installed libibverbs.so.1; skipped");
        return;
    };
    let dir = std::env::temp_dir().join(format!("rrxe-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fake = dir.join("libibverbs.so.1.14.45.0");
    std::fs::copy(&real, &fake).unwrap();
    let link = dir.join("libibverbs.so.1");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink("libibverbs.so.1.14.45.0", &link).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "dlopen_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .env("RRXE_DEBUG", "1")
        .env("LD_LIBRARY_PATH", &dir)
        .output()
        .expect("spawn child");
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{stderr}");
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("librrxe:"))
        .collect();
    assert_eq!(lines.len(), 1, "exactly one line:\n{stderr}");
    assert!(
        lines[0].contains("libibverbs.so.1.14.45.0 is rdma-core 45.0")
            && lines[0].contains("not registered"),
        "{}",
        lines[0]
    );
    assert!(!stderr.contains("registering provider rrxe"), "{stderr}");
}
