#![no_main]
//! cargo-fuzz target: `vmspace_fuzz::engine::check` (`fuzz/README.md`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| vmspace_fuzz::engine::check(data));
