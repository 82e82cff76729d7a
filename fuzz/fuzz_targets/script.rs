#![no_main]
//! cargo-fuzz target: `vmspace_fuzz::script::check` (`fuzz/README.md`).

libfuzzer_sys::fuzz_target!(|data: &[u8]| vmspace_fuzz::script::check(data));
