//! The shadow corpus (`scripts/corpus/run`): real programs (a shell pipeline, python3 on threads, perl, gcc,
//! make -j2, cargo, sqlite3, git, java, stress-ng's memory stressors, and the C scenarios of
//! `scripts/corpus/memcorpus.c`) run under `vmspace shadow --keep-going --baseline` (the lighter ones with
//! `--smaps`), each with every difference either explained by
//! `scripts/corpus/known-differences` (a docs/DIVERGENCES.md entry) or failing the run, and each program
//! exiting as it does untraced. The corpus's set-up (`scripts/corpus/setup`) runs first and installs the
//! programs from Debian packages when they are missing.

use std::path::PathBuf;
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn every_program_of_the_corpus_runs_under_the_shadow_with_every_difference_explained() {
    let setup =
        Command::new(repo().join("scripts/corpus/setup")).output().expect("scripts/corpus/setup runs");
    assert!(
        setup.status.success(),
        "scripts/corpus/setup could not install the corpus's programs (apt-get as root):\n{}{}",
        String::from_utf8_lossy(&setup.stdout),
        String::from_utf8_lossy(&setup.stderr)
    );
    // The lighter programs run with `--smaps` (the page-independent smaps fields compared after every call
    // too), the heavier ones (a JVM's and rustc's thousands of VMAs, and the 5,000 of stress-ng's mmap stressor
    // over its 7,000 calls, make each smaps reading cost milliseconds, twice per call) with the maps comparison
    // only, so that the corpus stays within a few minutes.
    let with_smaps =
        ["pipeline", "python3", "perl", "sqlite3", "c-stacks", "c-remap", "c-jit", "c-madvise", "c-fork"];
    let maps_only = ["gcc", "make-j2", "cargo", "git", "java", "stress-ng"];
    let dir = tempfile::tempdir().unwrap();
    let mut programs = Vec::new();
    let mut text = String::new();
    for (i, (set, smaps)) in [(&with_smaps[..], true), (&maps_only[..], false)].into_iter().enumerate() {
        let json = dir.path().join(format!("corpus{i}.json"));
        let mut cmd = Command::new(repo().join("scripts/corpus/run"));
        cmd.arg("--vmspace").arg(env!("CARGO_BIN_EXE_vmspace")).arg("--json").arg(&json);
        if smaps {
            cmd.arg("--smaps");
        }
        for p in set {
            cmd.args(["--only", p]);
        }
        let o = cmd.output().expect("scripts/corpus/run runs");
        let t = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert_eq!(o.status.code(), Some(0), "{t}");
        let doc: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        assert_eq!(doc["passed"], true, "{t}");
        assert_eq!(doc["smaps"], smaps, "{t}");
        programs.extend(doc["programs"].as_array().unwrap().iter().cloned());
        text.push_str(&t);
    }
    let text = text;
    let names: Vec<&str> = programs.iter().map(|p| p["program"].as_str().unwrap()).collect();
    for want in with_smaps.iter().chain(&maps_only) {
        assert!(names.contains(want), "{want} missing from the corpus: {names:?}");
    }
    for p in &programs {
        let name = p["program"].as_str().unwrap();
        if p.get("skipped").is_some() {
            // Only Java may be skipped, and only where no JDK package exists (the runner says so).
            assert_eq!(name, "java", "{text}");
            continue;
        }
        assert_eq!(p["exit_status"], "exit status 0", "{name}:\n{text}");
        assert!(p["calls"]["mmap"].as_u64().unwrap_or(0) > 0, "{name}: no mmap mirrored:\n{text}");
        assert_eq!(p["unexplained"], 0, "{name}:\n{text}");
        assert!(p["time_untraced_s"].as_f64().is_some(), "{name}: no untraced time:\n{text}");
    }
    // The C scenarios make the calls they exist for, and each is mirrored.
    let calls = |name: &str, call: &str| {
        programs.iter().find(|p| p["program"] == name).map_or(0, |p| p["calls"][call].as_u64().unwrap_or(0))
    };
    assert!(calls("c-remap", "mremap") >= 10, "{text}");
    assert!(calls("c-jit", "mprotect") >= 128 && calls("c-jit", "mseal") == 1, "{text}");
    assert!(calls("c-jit", "pkey_alloc") == 1 && calls("c-jit", "pkey_mprotect") >= 1, "{text}");
    assert!(calls("c-madvise", "madvise") >= 5 && calls("c-fork", "clone") >= 3, "{text}");
    // stress-ng's stressors make the calls they stress, and each is mirrored.
    for call in ["mmap", "munmap", "mremap", "brk", "madvise"] {
        assert!(calls("stress-ng", call) >= 5, "stress-ng made too few {call} calls:\n{text}");
    }
}
