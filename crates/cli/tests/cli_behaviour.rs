//! The command line's contract, checked on the built binary: exit statuses (0, 1, 2, 3, 4, 130, documented in
//! `--help`), the `--json FILE` / `--json -` convention and its schema, output paths checked before the run, no
//! panic on a closed pipe, no backtrace after an ordinary error even with `RUST_BACKTRACE=1`, inputs too large
//! for the machine refused up front, options that do nothing in a mode rejected, progress on long runs even
//! when piped, nothing left behind (process or temporary directory) when `replay --kernel` or `diff` is
//! interrupted or killed, and shell completions and man pages. Every run here is small (well under 10 s).

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{alive, bin, children_of, vmspace as run, wait_exit};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn regress(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/regress").join(name)
}

/// Writes `text` as a script in `dir`.
fn script(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Checks the shared schema of a report set; returns its reports.
fn check_schema(set: &Value, benchmark: &str) -> Vec<Value> {
    assert_eq!(set["schema"], "vmspace.report.v1", "{set}");
    assert!(set["command"].as_str().unwrap().starts_with("vmspace "));
    let reports = set["reports"].as_array().expect("reports").clone();
    assert!(!reports.is_empty());
    for r in &reports {
        assert_eq!(r["benchmark"], benchmark);
        assert!(r["label"].is_string() && r["started_utc"].as_str().unwrap().ends_with('Z'));
        assert!(r["parameters"].is_object() && r["placement"].is_array() && r["notes"].is_array());
        assert!(r["host"]["kernel_release"].as_str().is_some_and(|s| !s.is_empty()));
        assert!(r["runs"].is_array() && r["summary"].is_object());
    }
    // It also reads back into the Rust types.
    let typed: vmspace_results::report::ReportSet = serde_json::from_value(set.clone()).unwrap();
    assert_eq!(typed.reports.len(), reports.len());
    reports
}

#[test]
fn help_documents_the_exit_statuses_and_usage_errors_exit_2() {
    let help = run(&["--help"]);
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8_lossy(&help.stdout);
    for needle in ["Exit status:", "130", "--json FILE", "vmspace.report.v1"] {
        assert!(text.contains(needle), "--help lacks {needle:?}:\n{text}");
    }
    // Status 4, which a script tests for "nothing missed, not everything shown met", in --help, report's help
    // and the man page alike.
    assert!(text.contains("4    no target was missed, but at least one was undecided"), "{text}");
    let report = run(&["report", "--help"]);
    assert!(String::from_utf8_lossy(&report.stdout).contains("4    no target was missed"));
    let man = String::from_utf8_lossy(&run(&["man"]).stdout).to_string();
    assert!(man.contains("no target was missed, but at least one was undecided"), "{man}");
    let sub = run(&["diff", "--help"]);
    assert!(String::from_utf8_lossy(&sub.stdout).contains("Exit status:"));
    assert_eq!(run(&["--no-such-option"]).status.code(), Some(2));
    assert_eq!(run(&["replay"]).status.code(), Some(2));
    assert_eq!(run(&["bench", "tree", "--sizes", "0"]).status.code(), Some(2));
}

#[test]
fn help_has_no_internal_jargon() {
    for args in [
        &["--help"][..],
        &["bench", "--help"],
        &["bench", "tree", "--help"],
        &["bench", "mm", "--help"],
        &["bench", "faults", "--help"],
        &["bench", "fork", "--help"],
        &["kernel", "--help"],
        &["kernel", "contention", "--help"],
        &["kernel", "fork", "--help"],
        &["replay", "--help"],
        &["diff", "--help"],
    ] {
        let out = run(args);
        let text = String::from_utf8_lossy(&out.stdout).to_lowercase();
        for jargon in ["issue ", "seed 0", "seeds'", "the seeds"] {
            assert!(!text.contains(jargon), "{args:?} says {jargon:?}:\n{text}");
        }
    }
    // The B=N labels of the contention tables are explained where they appear.
    let help = String::from_utf8_lossy(&run(&["kernel", "contention", "--help"]).stdout).into_owned();
    assert!(help.contains("B=2: spin 2 ms, sleep 1 ms") && help.contains("B=0"), "{help}");
}

#[test]
fn bad_input_exits_2_with_one_line_and_no_backtrace() {
    let dir = tempfile::tempdir().unwrap();
    let bad = script(
        dir.path(),
        "bad.script",
        "mmap 0x200000000000 0x1000 rw- private|anon\nmunmap 0x200000000000\n",
    );
    for args in [
        vec!["replay".to_string(), bad.display().to_string()],
        vec!["replay".into(), "--kernel".into(), bad.display().to_string()],
        vec!["diff".into(), bad.display().to_string()],
        vec!["replay".into(), "/nonexistent/x.script".into()],
    ] {
        let out = bin().args(&args).env("RUST_BACKTRACE", "1").output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: one line expected:\n{err}");
        for leak in ["backtrace", "panicked", "Caused by", "Stack"] {
            assert!(!err.contains(leak), "{args:?}: {err}");
        }
    }
    let out = bin().arg("replay").arg(&bad).env("RUST_BACKTRACE", "1").output().unwrap();
    assert!(stderr(&out).contains("line 2"), "{}", stderr(&out));
    // A script the kernel runner refuses (it would unmap the runner's own memory) is bad input too.
    let own = script(dir.path(), "own.script", "munmap 0x1000 0x7ffffff00000\n");
    let out = bin().args(["replay", "--kernel"]).arg(&own).env("RUST_BACKTRACE", "1").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("refused"), "{}", stderr(&out));
}

#[test]
fn options_that_do_nothing_in_a_mode_are_rejected() {
    let file = regress("merge-split.script");
    let file = file.to_str().unwrap();
    for args in [
        &["replay", "--calls", "5", file][..],
        &["replay", "--fork", file],
        &["replay", "--grid-pages", "8", file],
        &["replay", "--generate", "1", "--kernel"],
        &["replay", "--generate", "1", "--json", "-"],
        &["diff", "--calls", "5", file],
        &["diff", "--keep-going", file],
        &["diff", "--out-dir", "/tmp", file],
        &["kernel", "contention", "--sweep", "--procfile", "smaps"],
        &["kernel", "contention", "--sweep", "--busy-ms", "2"],
        &["kernel", "contention", "--busy-ms", "3"],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?} was accepted: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"));
    }
}

#[test]
fn json_dash_is_the_shared_schema_on_stdout_with_the_text_on_stderr() {
    let file = regress("merge-split.script");
    // replay (engine): the canonical output in `output`, and the same text on stderr.
    let out = bin().args(["replay", "--json", "-"]).arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let set: Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON only");
    let r = &check_schema(&set, "replay.engine")[0];
    let lines: Vec<&str> = r["output"].as_array().unwrap().iter().map(|l| l.as_str().unwrap()).collect();
    assert_eq!(lines.join("\n") + "\n", stderr(&out));
    assert!(lines.contains(&"MAPS"));
    assert!(set.get("verdict").is_none(), "replay judges nothing");
    // replay --kernel.
    let out = bin().args(["replay", "--kernel", "--json", "-"]).arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    check_schema(&serde_json::from_slice(&out.stdout).unwrap(), "replay.kernel");
    // diff FILE: a verdict that agrees with the exit status.
    let out = bin().args(["diff", "--json", "-"]).arg(&file).output().unwrap();
    let set: Value = serde_json::from_slice(&out.stdout).unwrap();
    check_schema(&set, "diff");
    assert_eq!(set["verdict"]["passed"].as_bool(), Some(out.status.code() == Some(0)));
    assert!(stderr(&out).contains("engine and kernel agree"), "{}", stderr(&out));
    // diff --seeds: one report per seed, the verdict line also closes the text.
    let out = run(&["diff", "--seeds", "0..3", "--calls", "20", "--json", "-"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let set: Value = serde_json::from_slice(&out.stdout).unwrap();
    let reports = check_schema(&set, "diff");
    assert_eq!(reports.len(), 3);
    assert_eq!(set["verdict"]["met"], 3);
    assert_eq!(set["verdict"]["missed"], 0);
    assert!(stderr(&out).contains(&format!("verdict: {}", set["verdict"]["line"].as_str().unwrap())));
    // kernel info.
    let out = run(&["kernel", "info", "--json", "-"]);
    let set: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        check_schema(&set, "kernel.info")[0]["host"]["page_size"].as_u64().map(|p| p >= 4096),
        Some(true)
    );
    assert!(stderr(&out).contains("max_map_count"));
}

#[test]
fn json_file_is_written_and_the_table_still_printed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("diff.json");
    let out = bin().arg("diff").arg(regress("merge-split.script")).arg("--json").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("engine and kernel agree"));
    let set: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    check_schema(&set, "diff");
    // Only the file itself is left in the directory: no temporary file of the atomic write.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn output_paths_are_checked_before_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no/such/dir/out.json");
    // A 30 s measurement must fail at once, not after 30 s.
    for args in [
        vec!["kernel", "contention", "--duration", "30s", "--samples", "1", "--region-mib", "4"],
        vec!["kernel", "faults", "--threads", "1", "--duration", "30s", "--samples", "1"],
        vec!["bench", "tree", "--quick"],
        vec!["bench", "faults", "--threads", "1", "--duration", "30s", "--samples", "1"],
        vec!["bench", "fork", "--vmas", "0", "--duration", "30s", "--samples", "1"],
        vec!["diff", "--seeds", "0..100000"],
    ] {
        let t = Instant::now();
        let out = bin().args(&args).arg("--json").arg(&missing).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(t.elapsed() < Duration::from_secs(5), "{args:?} ran before failing");
        assert!(stderr(&out).contains("does not exist"), "{}", stderr(&out));
    }
    // A directory is no output file; --svg and --out-dir are checked too.
    assert_eq!(
        bin().args(["kernel", "info", "--json"]).arg(dir.path()).output().unwrap().status.code(),
        Some(2)
    );
    let svg = bin().args(["bench", "tree", "--quick", "--svg"]).arg(&missing).output().unwrap();
    assert_eq!(svg.status.code(), Some(2));
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "a check left a file behind");
    // --out-dir is created when missing (crates/cli/tests/conventions.rs); one that cannot be is refused.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let t = Instant::now();
    let od =
        bin().args(["diff", "--seeds", "0..100000", "--out-dir"]).arg(file.join("sub")).output().unwrap();
    assert_eq!(od.status.code(), Some(2), "{}", stderr(&od));
    assert!(t.elapsed() < Duration::from_secs(5), "diff ran before failing");
}

#[test]
fn inputs_too_large_for_the_machine_are_refused_up_front() {
    let dir = tempfile::tempdir().unwrap();
    // 16 TiB of touches, and MAP_POPULATE of 16 TiB.
    let touch = script(dir.path(), "touch.script", "touch 0x200000000000 0x100000000000 w\n");
    let populate = script(dir.path(), "populate.script", "mmap 0 0x100000000000 rw- private|anon|populate\n");
    let touch_s = touch.to_str().unwrap();
    let populate_s = populate.to_str().unwrap();
    for args in [
        &["bench", "tree", "--sizes", "100000000000"][..],
        &["replay", "--generate", "1", "--calls", "100000000000"],
        &["diff", "--seeds", "0..10", "--calls", "100000000000"],
        &["diff", "--seeds", "0..1000000000"],
        &["replay", touch_s],
        &["replay", "--kernel", touch_s],
        &["diff", touch_s],
        &["replay", "--kernel", populate_s],
        &["kernel", "contention", "--region-mib", "1048576", "--duration", "30s"],
        &["kernel", "faults", "--threads", "1024", "--region-mib", "65536", "--duration", "30s"],
    ] {
        let t = Instant::now();
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("would") && err.contains("refused") && err.contains("--force"),
            "{args:?}: {err}"
        );
        assert!(t.elapsed() < Duration::from_secs(5), "{args:?} ran before being refused");
    }
    // --force runs it: the touch faults at its first page on the engine (nothing is mapped there).
    let out = run(&["replay", "--force", touch_s]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("L1 touch = -EFAULT 0x200000000000"));
}

#[test]
fn a_closed_pipe_ends_the_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    // Enough output to fill the pipe after the reader has gone.
    let out = run(&["replay", "--generate", "7", "--calls", "20000"]);
    let file = script(dir.path(), "big.script", &String::from_utf8(out.stdout).unwrap());
    for args in [
        vec!["replay".to_string(), file.display().to_string()],
        vec!["replay".into(), "--kernel".into(), file.display().to_string()],
        vec!["replay".into(), "--generate".into(), "7".into(), "--calls".into(), "20000".into()],
    ] {
        let mut child =
            bin().args(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run vmspace");
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
        assert!(!first.is_empty());
        // The reader is gone (like `| head -1`).
        let out = child.wait_with_output().unwrap();
        let err = stderr(&out);
        assert!(!err.contains("panicked") && !err.contains("Broken pipe"), "{args:?}: {err}");
        use std::os::unix::process::ExitStatusExt;
        assert!(
            out.status.success() || out.status.signal() == Some(libc_sigpipe()),
            "{args:?}: {:?} {err}",
            out.status
        );
    }
}

fn libc_sigpipe() -> i32 {
    13
}

#[test]
fn long_runs_show_progress_with_an_estimate_even_when_piped() {
    // A run past the 2 s after which progress shows. How long a seed range takes depends on the machine, so the
    // range grows until one run lasts at least 3 s (a quiet machine does 100 seeds in under 2 s).
    let mut long_enough = false;
    for seeds in [100u64, 400, 1600] {
        let range = format!("0..{seeds}");
        let start = std::time::Instant::now();
        let out = run(&["diff", "--seeds", &range, "--calls", "100"]);
        let took = start.elapsed();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains(&format!("verdict: {seeds} agree, 0 differ")));
        if took < std::time::Duration::from_secs(3) {
            continue;
        }
        let err = stderr(&out);
        let line = err
            .lines()
            .find(|l| l.starts_with("progress: "))
            .unwrap_or_else(|| panic!("no progress after {took:?}:\n{err}"));
        assert!(line.contains(&format!("/{seeds} after")) && line.contains("left"), "{line}");
        long_enough = true;
        break;
    }
    assert!(long_enough, "no seed range ran for 3 s: progress was not exercised");
    // A short run shows none.
    let out = run(&["diff", "--seeds", "0..2", "--calls", "10"]);
    assert!(!stderr(&out).contains("progress"), "{}", stderr(&out));
    // A long replay on the kernel: the runner's calls are counted as they happen, looked at every 250 ms while
    // the runner has written no output yet. The script grows until the whole command lasts at least 6 s. What
    // is timed here also reads and parses the script and prints the output (this debug build: about 0.7 s per
    // million calls, as long as the runner's calls take), and the progress clock starts with the runner: a
    // command of 3.0 s with 2 million calls had run the runner for about 1.5 s and rightly showed nothing.
    let dir = tempfile::tempdir().unwrap();
    let mut long_enough = false;
    for calls in [500_000usize, 2_000_000, 5_000_000, 10_000_000] {
        let long = mprotect_script(dir.path(), calls);
        let start = std::time::Instant::now();
        let out = bin().args(["replay", "--kernel"]).arg(&long).output().unwrap();
        let took = start.elapsed();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        if took < std::time::Duration::from_secs(6) {
            continue;
        }
        let err = stderr(&out);
        let line = err
            .lines()
            .find(|l| l.starts_with("progress: "))
            .unwrap_or_else(|| panic!("no progress after {took:?}:\n{err}"));
        assert!(
            line.contains(&format!("/{} after", calls + 2)) && line.contains("calls on the kernel"),
            "{line}"
        );
        long_enough = true;
        break;
    }
    assert!(long_enough, "no kernel replay command ran for 6 s: progress was not exercised");
}

#[test]
fn an_interrupted_benchmark_exits_130() {
    let mut child = bin()
        .args(["bench", "tree", "--quick"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let status = wait_exit(&mut child, Duration::from_secs(20), "bench tree did not stop on Ctrl-C");
    assert_eq!(status.code(), Some(130));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("interrupted") && !err.contains("panicked"), "{err}");
}

#[test]
fn completions_and_man_pages() {
    for (shell, needle) in
        [("bash", "_vmspace"), ("zsh", "#compdef vmspace"), ("fish", "complete -c vmspace")]
    {
        let out = run(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(needle) && text.contains("replay"), "{shell}: {text}");
    }
    assert_eq!(run(&["completions", "tcsh"]).status.code(), Some(2));
    let man = run(&["man"]);
    let text = String::from_utf8_lossy(&man.stdout);
    assert!(text.starts_with(".ie") || text.contains(".TH vmspace"), "{text}");
    assert!(text.contains(".SH \"EXIT STATUS\""), "the man page documents the exit statuses");
    let dir = tempfile::tempdir().unwrap();
    let out = bin().args(["man", "--dir"]).arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    for page in ["vmspace.1", "vmspace-replay.1", "vmspace-bench-tree.1", "vmspace-kernel-race.1"] {
        assert!(dir.path().join(page).is_file(), "missing {page}");
    }
}

// ---- Nothing outlives an interrupted or killed `replay --kernel` / `diff`. ----

/// A script that keeps the kernel runner busy for several seconds, with a file in the runner's temporary
/// directory.
fn long_script(dir: &Path) -> PathBuf {
    mprotect_script(dir, 1_000_000)
}

/// A file, a mapping, and `n` mprotect calls that split and merge it again and again.
fn mprotect_script(dir: &Path, n: usize) -> PathBuf {
    let mut text = String::from("file f 0x100000\nmmap 0x200000000000 0x10000 rw- private|anon|fixed\n");
    for i in 0..n {
        text.push_str(if i % 2 == 0 {
            "mprotect 0x200000004000 0x1000 r--\n"
        } else {
            "mprotect 0x200000004000 0x1000 rw-\n"
        });
    }
    script(dir, "long.script", &text)
}

fn leftovers(tmp: &Path) -> Vec<String> {
    std::fs::read_dir(tmp).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()
}

fn nothing_outlives(args: &[&str], signal: &str) {
    let dir = tempfile::tempdir().unwrap();
    let script = long_script(dir.path());
    // The runner's temporary directory goes here, where the test can see it.
    let tmp = tempfile::tempdir().unwrap();
    let mut cmd = bin()
        .args(args)
        .arg(&script)
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = cmd.id();
    // Wait for the kernel phase: the janitor and the runner exist, the temporary directory too.
    let t = Instant::now();
    let mut kids = Vec::new();
    while t.elapsed() < Duration::from_secs(30) {
        kids = children_of(pid);
        if kids.len() >= 2 && !leftovers(tmp.path()).is_empty() {
            break;
        }
        assert!(cmd.try_wait().unwrap().is_none(), "{args:?} ended before the kernel phase");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(kids.len() >= 2, "{args:?}: the kernel runner never appeared: {kids:?}");
    // Its children's children too (none expected, but a script fork would make one).
    let st = Command::new("kill").args([signal, &pid.to_string()]).status().unwrap();
    assert!(st.success());
    let status = wait_exit(&mut cmd, Duration::from_secs(10), &format!("{args:?} did not stop on {signal}"));
    if signal == "-INT" {
        assert_eq!(status.code(), Some(130), "{args:?}");
        let mut err = String::new();
        std::io::Read::read_to_string(&mut cmd.stderr.take().unwrap(), &mut err).unwrap();
        assert!(err.contains("interrupted") && !err.contains("panicked"), "{err}");
    } else {
        assert!(!status.success());
    }
    let t = Instant::now();
    while kids.iter().any(|&k| alive(k)) || !leftovers(tmp.path()).is_empty() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{args:?} after {signal}: children {:?} alive, {:?} left in TMPDIR",
            kids.iter().filter(|&&k| alive(k)).collect::<Vec<_>>(),
            leftovers(tmp.path())
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn replay_kernel_leaves_nothing_after_ctrl_c() {
    nothing_outlives(&["replay", "--kernel"], "-INT");
}

#[test]
fn replay_kernel_leaves_nothing_after_sigkill() {
    nothing_outlives(&["replay", "--kernel"], "-KILL");
}

#[test]
fn diff_leaves_nothing_after_ctrl_c() {
    nothing_outlives(&["diff"], "-INT");
}

#[test]
fn an_interrupted_engine_replay_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    let long = long_script(dir.path());
    let mut child =
        bin().arg("replay").arg(&long).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(700));
    assert!(Command::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap().success());
    let status = wait_exit(&mut child, Duration::from_secs(10), "replay did not stop on Ctrl-C");
    assert_eq!(status.code(), Some(130));
}

#[test]
fn diff_leaves_nothing_after_sigkill() {
    nothing_outlives(&["diff"], "-KILL");
}
