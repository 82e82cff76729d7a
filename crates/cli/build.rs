//! Build script of the `vmspace` command: records what this build is made of, so that every figure the command
//! writes can be traced to it (`vmspace_results::provenance`; docs/REPORT.md "Provenance").
//!
//! It sets, for `env!` in `src/provenance.rs`:
//! - `VMSPACE_GIT_COMMIT`: `git rev-parse HEAD` of the checkout holding this workspace, or `unknown` when the
//!   workspace is not a git checkout (a source archive) or git is missing;
//! - `VMSPACE_GIT_DIRTY`: `true` when `git status --porcelain` prints anything (changes not committed,
//!   untracked files included), `false` when it prints nothing, `unknown` without a checkout;
//! - `VMSPACE_PROFILE`, `VMSPACE_OPT_LEVEL`, `VMSPACE_TARGET`: cargo's `PROFILE`, `OPT_LEVEL` and `TARGET`;
//! - `VMSPACE_RUSTC`: what `$RUSTC -V` prints.
//!
//! # When it runs again
//! Cargo reruns it when one of the files it names changes: the `HEAD` of the checkout's git directory (a branch
//! switch or a detached commit), the reflog of `HEAD` (every commit moves it), the file of the branch `HEAD`
//! points to and `packed-refs` (both in the common directory, which differs from the git directory in a
//! worktree, whose `.git` is a file naming its own directory: `git rev-parse --git-dir` and `--git-common-dir`
//! find both), the index (staging), and the workspace's sources (`crates/`, the manifests and the lock file),
//! whose edits make a tree dirty without touching git's files. The status is read with `GIT_OPTIONAL_LOCKS=0`
//! so that it never rewrites the index it watches (which would rerun this script on every build).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let manifest =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    // The workspace root: crates/cli/.. /..
    let root = manifest.parent().and_then(Path::parent).unwrap_or(&manifest).to_path_buf();
    for p in ["crates", "Cargo.toml", "Cargo.lock", "rust-toolchain.toml"] {
        let p = root.join(p);
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    }
    println!("cargo:rerun-if-changed=build.rs");

    let (commit, dirty) = match checkout(&root) {
        Some(git_dir) => {
            watch_git(&root, &git_dir);
            let commit = git(&root, &["rev-parse", "--verify", "HEAD"])
                .filter(|c| c.len() == 40 && c.bytes().all(|b| b.is_ascii_hexdigit()))
                .map(|c| c.to_ascii_lowercase());
            // Nothing printed (the output is trimmed): a clean tree.
            let dirty = commit
                .as_ref()
                .and_then(|_| git(&root, &["status", "--porcelain"]))
                .map(|s| if s.is_empty() { "false" } else { "true" });
            (commit, dirty)
        }
        None => (None, None),
    };
    println!("cargo:rustc-env=VMSPACE_GIT_COMMIT={}", commit.as_deref().unwrap_or("unknown"));
    println!("cargo:rustc-env=VMSPACE_GIT_DIRTY={}", dirty.unwrap_or("unknown"));

    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| "unknown".to_string());
    println!("cargo:rustc-env=VMSPACE_PROFILE={}", var("PROFILE"));
    println!("cargo:rustc-env=VMSPACE_OPT_LEVEL={}", var("OPT_LEVEL"));
    println!("cargo:rustc-env=VMSPACE_TARGET={}", var("TARGET"));
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let version = Command::new(rustc)
        .arg("-V")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    println!("cargo:rustc-env=VMSPACE_RUSTC={}", version.as_deref().unwrap_or("unknown"));
}

/// Runs `git ARGS` in `dir` without optional locks; its trimmed standard output if it succeeded.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).current_dir(dir).env("GIT_OPTIONAL_LOCKS", "0").output().ok()?;
    if !out.status.success() {
        return None;
    }
    String::from_utf8(out.stdout).ok().map(|s| s.trim().to_string())
}

/// The git directory of the checkout whose top level is `root`, or `None` when `root` is not the top of a
/// checkout (no git, no repository, or a source archive unpacked inside some other repository, whose commit
/// would say nothing about these sources).
fn checkout(root: &Path) -> Option<PathBuf> {
    let top = PathBuf::from(git(root, &["rev-parse", "--show-toplevel"])?);
    let same = match (top.canonicalize(), root.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same {
        return None;
    }
    Some(absolute(root, &git(root, &["rev-parse", "--git-dir"])?))
}

/// `p` as git printed it, relative to `root` unless absolute.
fn absolute(root: &Path, p: &str) -> PathBuf {
    let p = PathBuf::from(p);
    if p.is_absolute() { p } else { root.join(p) }
}

/// Names the git files whose change must rerun this script (those that exist: cargo reruns a script on every
/// build while a named file is missing).
fn watch_git(root: &Path, git_dir: &Path) {
    let common = git(root, &["rev-parse", "--git-common-dir"])
        .map_or_else(|| git_dir.to_path_buf(), |c| absolute(root, &c));
    let mut files = vec![git_dir.join("HEAD"), git_dir.join("index"), git_dir.join("logs").join("HEAD")];
    if let Some(branch) = git(root, &["symbolic-ref", "-q", "HEAD"]) {
        files.push(common.join(&branch));
        files.push(git_dir.join(&branch));
    }
    files.push(common.join("packed-refs"));
    // Outside a worktree the common directory is the git directory: name each file once.
    files.sort();
    files.dedup();
    for f in files {
        if f.is_file() {
            println!("cargo:rerun-if-changed={}", f.display());
        }
    }
}
