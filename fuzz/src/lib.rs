//! The checks behind vmspace's cargo-fuzz targets, one module per target (`fuzz/README.md`).
//!
//! Each module has a `check(&[u8])` that decodes the fuzzer's bytes and panics when a property breaks; the
//! targets in `fuzz_targets/` only call it. The same modules are compiled into the stable test
//! `crates/mm/tests/fuzz_regressions.rs`, which replays every input saved under `fuzz/regressions/`.

pub mod engine;
pub mod query;
pub mod script;
