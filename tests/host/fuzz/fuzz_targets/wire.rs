//! libFuzzer harness of target `wire` (the body: targets/wire.rs).
#![no_main]

#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "../targets/mod.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::wire::run(data));
