//! libFuzzer harness of target `engine` (the body: targets/engine.rs).
#![no_main]

#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "../targets/mod.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::engine::run(data));
