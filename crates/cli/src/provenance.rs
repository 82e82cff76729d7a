//! This program's provenance: the facts of its build (recorded at compile time by `build.rs`) and the CPU it
//! runs on (`vmspace_host`), in the shape every report set carries ([`vmspace_results::provenance`]).
//!
//! Every command stamps the sets it writes with [`provenance`] ([`crate::common::JsonOut::write`], and `vmspace
//! report` before it draws its page), `vmspace --version` prints [`long_version`], and the commands that time
//! something refuse to run from a debug build unless told to ([`crate::common::check_build`]).

use std::sync::LazyLock;
use vmspace_results::provenance::{Build, CpuFacts, Provenance};

/// How this program was built.
pub fn build() -> Build {
    Build {
        version: env!("CARGO_PKG_VERSION").to_string(),
        commit: env!("VMSPACE_GIT_COMMIT").to_string(),
        dirty: match env!("VMSPACE_GIT_DIRTY") {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        },
        profile: env!("VMSPACE_PROFILE").to_string(),
        opt_level: env!("VMSPACE_OPT_LEVEL").to_string(),
        debug_assertions: cfg!(debug_assertions),
        rustc: env!("VMSPACE_RUSTC").to_string(),
        target: env!("VMSPACE_TARGET").to_string(),
    }
}

/// The CPU this program runs on, from `/proc/cpuinfo`.
pub fn cpu() -> CpuFacts {
    let c = vmspace_host::Cpu::probe();
    CpuFacts { model: c.model, flags: c.flags.join(" ") }
}

/// This program's build and the CPU it runs on.
pub fn provenance() -> Provenance {
    Provenance { build: build(), cpu: cpu() }
}

/// `vmspace -V`: the version, the short commit and the profile on one line.
pub fn version() -> &'static str {
    static LINE: LazyLock<String> = LazyLock::new(|| {
        let b = build();
        format!("{} ({}, {})", b.version, b.short_commit(), b.profile_line())
    });
    LINE.as_str()
}

/// `vmspace --version`: the version, then the full commit, whether the tree was dirty, the profile, the compiler
/// and the target, one per line.
pub fn long_version() -> &'static str {
    static TEXT: LazyLock<String> = LazyLock::new(|| {
        let b = build();
        format!(
            "{}\ncommit:   {}\ntree:     {}\nprofile:  {}\nrustc:    {}\ntarget:   {}",
            b.version,
            b.commit,
            b.tree_state(),
            b.profile_line(),
            b.rustc,
            b.target
        )
    });
    TEXT.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmspace_results::provenance::{UNKNOWN, is_commit_id};

    #[test]
    fn the_build_facts_are_plausible() {
        let b = build();
        assert!(is_commit_id(&b.commit) || b.commit == UNKNOWN, "{}", b.commit);
        assert_eq!(b.dirty.is_some(), b.commit_known(), "{b:?}");
        assert_eq!(b.debug_assertions, cfg!(debug_assertions));
        assert!(b.rustc.starts_with("rustc "), "{}", b.rustc);
        assert!(["debug", "release"].contains(&b.profile.as_str()), "{}", b.profile);
        assert!(b.target.contains("linux"), "{}", b.target);
        assert!(long_version().contains(&b.commit) && version().contains(&b.short_commit()));
    }
}
