//! Where a result came from: the build of the program that measured it and the CPU it ran on.
//!
//! Every report set a `vmspace` command writes carries one [`Provenance`] ([`crate::report::ReportSet`]'s
//! `provenance`), so that any figure can be traced to the exact source (the git commit, and whether the working
//! tree had uncommitted changes), the way it was compiled (profile, optimisation level, debug assertions, the
//! compiler) and the CPU (model and feature flags) it was measured with.
//!
//! This module is plain data. The facts are established elsewhere: [`Build`] at compile time by the `vmspace`
//! command's build script (`crates/cli/build.rs`: `git rev-parse HEAD`, `git status --porcelain`, `rustc -V`,
//! cargo's profile settings), [`CpuFacts`] at run time from `/proc/cpuinfo` by `vmspace_host` (the one crate
//! that reads the host's configuration). The command stamps every set it writes with both.
//!
//! A fact that could not be established is written as `"unknown"` (the commit of a build made outside a git
//! checkout, e.g. from a source archive) or `null` (whether such a tree was dirty), never guessed.

use serde::{Deserialize, Serialize};

/// The commit of a build made outside a git checkout.
pub const UNKNOWN: &str = "unknown";

/// How the program was built: facts fixed at compile time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Build {
    /// The vmspace version (the workspace's `version`, e.g. `0.1.0`).
    pub version: String,
    /// The git commit the program was built from: 40 lower-case hex digits, or [`UNKNOWN`] when it was built
    /// outside a git checkout.
    pub commit: String,
    /// Whether the working tree had changes not committed (`git status --porcelain` printed anything,
    /// untracked files included) when the program was built; `None` when unknown (no git checkout).
    pub dirty: Option<bool>,
    /// Cargo's profile kind: `release` (the release and bench profiles and those inheriting from them) or
    /// `debug` (dev, test and theirs).
    pub profile: String,
    /// The optimisation level the program was compiled with (`0` to `3`, `s`, `z`).
    pub opt_level: String,
    /// Whether debug assertions were compiled in (`cfg!(debug_assertions)`).
    pub debug_assertions: bool,
    /// The compiler, as `rustc -V` printed it at build time.
    pub rustc: String,
    /// The target triple, e.g. `x86_64-unknown-linux-gnu`.
    pub target: String,
}

impl Build {
    /// A build whose facts are all unknown (what a consumer assumes for a set written before provenance was
    /// recorded).
    pub fn unknown() -> Build {
        Build {
            version: UNKNOWN.into(),
            commit: UNKNOWN.into(),
            dirty: None,
            profile: UNKNOWN.into(),
            opt_level: UNKNOWN.into(),
            debug_assertions: false,
            rustc: UNKNOWN.into(),
            target: UNKNOWN.into(),
        }
    }

    /// Whether timings of this build are meaningless for the engine: it was compiled without optimisation
    /// (`opt-level` 0) or with debug assertions, whose checks (every `debug_assert!`, integer overflow checks)
    /// sit on the hot paths that the benchmarks time.
    pub fn is_debug(&self) -> bool {
        self.debug_assertions || self.opt_level == "0"
    }

    /// Whether `commit` has the shape of a commit id (40 hex digits) rather than [`UNKNOWN`].
    pub fn commit_known(&self) -> bool {
        is_commit_id(&self.commit)
    }

    /// The commit, shortened to 12 digits, with `-dirty` appended when the tree had changes not committed:
    /// `f1788d6c2a4b-dirty`; `unknown` outside git.
    pub fn short_commit(&self) -> String {
        if !self.commit_known() {
            return self.commit.clone();
        }
        let mut s = self.commit[..12].to_string();
        match self.dirty {
            Some(true) => s.push_str("-dirty"),
            Some(false) => {}
            None => s.push_str("-dirty?"),
        }
        s
    }

    /// What the dirty flag says, in words: `clean`, `dirty (uncommitted changes)` or `unknown`.
    pub fn tree_state(&self) -> &'static str {
        match self.dirty {
            Some(false) => "clean",
            Some(true) => "dirty (uncommitted changes)",
            None => "unknown",
        }
    }

    /// The profile in words: `release profile, opt-level 3, debug assertions off`.
    pub fn profile_line(&self) -> String {
        format!(
            "{} profile, opt-level {}, debug assertions {}",
            self.profile,
            self.opt_level,
            if self.debug_assertions { "on" } else { "off" }
        )
    }

    /// One line for terminal headers and pages: `vmspace 0.1.0, commit f1788d6c2a4b-dirty, release profile,
    /// opt-level 3, debug assertions off, rustc 1.95.0 (59807616e 2026-04-14)`.
    pub fn one_line(&self) -> String {
        format!(
            "vmspace {}, commit {}, {}, {}",
            self.version,
            self.short_commit(),
            self.profile_line(),
            self.rustc
        )
    }

    /// The loud warning a timed command prints (and a page shows) when it ran from a debug build, `None` for
    /// an optimised build.
    pub fn debug_warning(&self) -> Option<String> {
        self.is_debug().then(|| {
            format!(
                "measured with a DEBUG build ({}): its timings are not the engine's; rebuild with `cargo build \
                 --release` before quoting any figure",
                self.profile_line()
            )
        })
    }
}

/// Whether `s` is a full commit id: 40 lower-case hex digits.
pub fn is_commit_id(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The CPU the result was measured on, from `/proc/cpuinfo` (its first processor).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuFacts {
    /// `model name`, `None` when `/proc/cpuinfo` has none.
    pub model: Option<String>,
    /// The feature flags: the `flags` line as the kernel prints it, space-separated (`fpu vme de ... avx2 ...
    /// pku ospke ...`); empty when unknown.
    pub flags: String,
}

impl CpuFacts {
    /// Whether the CPU lists feature `flag`.
    pub fn has(&self, flag: &str) -> bool {
        self.flags.split_whitespace().any(|f| f == flag)
    }
}

/// Where a report set came from: the program's build and the CPU it ran on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provenance {
    /// The build of the program that wrote the set.
    pub build: Build,
    /// The CPU it ran on.
    pub cpu: CpuFacts,
}

impl Provenance {
    /// One line: the build's, then the CPU model.
    pub fn one_line(&self) -> String {
        format!(
            "{}; CPU {} ({} flags)",
            self.build.one_line(),
            self.cpu.model.as_deref().unwrap_or("unknown"),
            self.cpu.flags.split_whitespace().count()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(commit: &str, dirty: Option<bool>, opt: &str, asserts: bool) -> Build {
        Build {
            version: "0.1.0".into(),
            commit: commit.into(),
            dirty,
            profile: if asserts { "debug".into() } else { "release".into() },
            opt_level: opt.into(),
            debug_assertions: asserts,
            rustc: "rustc 1.95.0 (59807616e 2026-04-14)".into(),
            target: "x86_64-unknown-linux-gnu".into(),
        }
    }

    #[test]
    fn commit_ids_and_short_forms() {
        let id = "f1788d6c2a4b0e1f9d8c7b6a5f4e3d2c1b0a9f8e";
        assert!(is_commit_id(id));
        assert!(!is_commit_id(UNKNOWN) && !is_commit_id(&id[..39]) && !is_commit_id(&id.to_uppercase()));
        assert_eq!(build(id, Some(false), "3", false).short_commit(), "f1788d6c2a4b");
        assert_eq!(build(id, Some(true), "3", false).short_commit(), "f1788d6c2a4b-dirty");
        assert_eq!(build(UNKNOWN, None, "3", false).short_commit(), "unknown");
        let line = build(id, Some(true), "3", false).one_line();
        assert!(line.contains("commit f1788d6c2a4b-dirty") && line.contains("opt-level 3"), "{line}");
    }

    #[test]
    fn debug_builds_are_told_apart() {
        let id = "0123456789abcdef0123456789abcdef01234567";
        assert!(!build(id, Some(false), "3", false).is_debug());
        assert!(build(id, Some(false), "0", false).is_debug());
        assert!(build(id, Some(false), "1", true).is_debug());
        assert!(build(id, Some(false), "3", false).debug_warning().is_none());
        assert!(build(id, Some(false), "1", true).debug_warning().unwrap().contains("DEBUG build"));
    }

    #[test]
    fn roundtrip() {
        let p = Provenance {
            build: build(UNKNOWN, None, "0", true),
            cpu: CpuFacts { model: Some("Some CPU".into()), flags: "fpu pku".into() },
        };
        assert!(p.cpu.has("pku") && !p.cpu.has("pk"));
        let text = serde_json::to_string(&p).unwrap();
        assert!(text.contains("\"dirty\":null") && text.contains("\"commit\":\"unknown\""), "{text}");
        assert_eq!(serde_json::from_str::<Provenance>(&text).unwrap(), p);
    }
}
