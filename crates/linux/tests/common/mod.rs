//! What the kernel runner's integration tests share: the arena's base address, running a script's text on the
//! live kernel, and a maps block read back relative to the arena.

use vmspace_linux::replay::replay_kernel;
use vmspace_script::{Output, Script};

/// The start of the runner's arena ([`vmspace_script::Arena`]'s default), where the scripts map.
pub const BASE: u64 = 0x2000_0000_0000;

/// Parses `text` and runs it on the live kernel; a parse or runner error fails the test with the script.
pub fn run(text: &str) -> Output {
    let s = Script::parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    replay_kernel(&s).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// A maps block as `(start - BASE, end - BASE, perms)` per line.
pub fn rows(lines: &[String]) -> Vec<(u64, u64, String)> {
    lines
        .iter()
        .map(|l| {
            let m: vmspace_proc::MapsLine = l.parse().unwrap();
            (m.start - BASE, m.end - BASE, l.split_whitespace().nth(1).unwrap().to_string())
        })
        .collect()
}
