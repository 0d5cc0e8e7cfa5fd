//! The bodies of the coverage-guided fuzz targets, as plain functions of the input bytes.
//!
//! Compiled twice: by the libFuzzer harnesses (`tests/host/fuzz/fuzz_targets/*.rs`, built by
//! `cargo fuzz` with overflow checks and debug assertions on, as the test kernel has them), and
//! by the stable `cargo test` that replays the kept corpus (`tests/host/tests/fuzz_corpus.rs`).
//! Both include this file with `#[path]` next to `tests/host/tests/common/mod.rs` as
//! `crate::common`, the model environment the engine target drives the engine with.
//!
//! A target returns normally for every input; a broken invariant panics.
#![allow(dead_code)]

pub mod engine;
pub mod wire;

/// The names of the targets, as the corpus directories and the harness binaries are named.
pub const TARGETS: [&str; 2] = ["wire", "engine"];

/// Runs target `name` on `data`.
pub fn run(name: &str, data: &[u8]) {
    match name {
        "wire" => wire::run(data),
        "engine" => engine::run(data),
        _ => panic!("no fuzz target {name}"),
    }
}

/// The fuzzer's bytes, read front to back; past the end every read is 0 (so every input means
/// something, and a shorter input is a prefix of a longer one's meaning).
#[derive(Clone, Copy)]
pub struct Input<'a> {
    d: &'a [u8],
}

impl<'a> Input<'a> {
    pub fn new(d: &'a [u8]) -> Self {
        Input { d }
    }

    pub fn is_empty(&self) -> bool {
        self.d.is_empty()
    }

    pub fn u8(&mut self) -> u8 {
        match self.d.split_first() {
            Some((&b, rest)) => {
                self.d = rest;
                b
            }
            None => 0,
        }
    }

    pub fn bool(&mut self) -> bool {
        self.u8() & 1 != 0
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | u64::from(self.u32()) << 32
    }

    /// One of `items`.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.u8() as usize % items.len()]
    }

    /// Up to `n` bytes (fewer at the end of the input).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (a, b) = self.d.split_at(n.min(self.d.len()));
        self.d = b;
        a
    }
}
