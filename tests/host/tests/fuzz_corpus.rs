//! Replays the kept corpus of the coverage-guided fuzz targets (`tests/host/fuzz/`): every file
//! under `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/` goes through the same target
//! function the libFuzzer harness calls (`fuzz/targets/`), here on the stable toolchain with the
//! test profile's overflow checks. `make fuzz` explores further and keeps new entries.
//!
//! `RRXE_FUZZ_REPLAY=path` replays that one file (or every file of that directory) instead,
//! naming the target with `RRXE_FUZZ_TARGET` (default: from the path); `RRXE_FUZZ_TRACE=1`
//! makes the engine target print every call it makes. The input of a crash that was fixed goes
//! to `fuzz/regressions/<target>/` (replayed here for good, never minimized away).

mod common;
#[path = "../fuzz/targets/mod.rs"]
mod targets;

use std::path::{Path, PathBuf};

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_file()
                    && !p
                        .file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

fn replay(target: &str, path: &Path) {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // Name the input if the target panics.
    struct Name<'a>(&'a Path, &'a str);
    impl Drop for Name<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                eprintln!(
                    "fuzz corpus: target {} failed on {}",
                    self.1,
                    self.0.display()
                );
            }
        }
    }
    let _n = Name(path, target);
    targets::run(target, &data);
}

#[test]
fn corpus_replays() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    if let Ok(p) = std::env::var("RRXE_FUZZ_REPLAY") {
        let p = PathBuf::from(p);
        let target = std::env::var("RRXE_FUZZ_TARGET").unwrap_or_else(|_| {
            targets::TARGETS
                .iter()
                .find(|t| p.components().any(|c| c.as_os_str() == **t))
                .expect("RRXE_FUZZ_TARGET names the target")
                .to_string()
        });
        let list = if p.is_dir() { files(&p) } else { vec![p] };
        for f in &list {
            replay(&target, f);
        }
        println!("fuzz corpus: {target}: {} inputs replayed", list.len());
        return;
    }
    let start = std::time::Instant::now();
    let mut figures = Vec::new();
    for t in targets::TARGETS {
        let corpus = files(&root.join("corpus").join(t));
        assert!(!corpus.is_empty(), "no corpus for fuzz target {t}");
        let regressions = files(&root.join("regressions").join(t));
        for f in corpus.iter().chain(&regressions) {
            replay(t, f);
        }
        figures.push(format!("{t} {}+{}", corpus.len(), regressions.len()));
    }
    println!(
        "fuzz corpus: {} inputs (corpus+regressions) replayed in {:.1} s",
        figures.join(", "),
        start.elapsed().as_secs_f64()
    );
}
