//! End-to-end checks of `vmspace kernel reader-cost`: against a child process the test starts, against a
//! mapper of ours, with an agent command; bad inputs fail with the documented exit status and leave nothing
//! running.

use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;
use common::{alive, bin, children_of, signal_when_ready, vmspace, wait_exit};

fn json(args: &[&str]) -> Value {
    let out = vmspace(args);
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: bad JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn reports<'a>(v: &'a Value, benchmark: &str) -> Vec<&'a Value> {
    assert_eq!(v["schema"], "vmspace.report.v1");
    v["reports"].as_array().unwrap().iter().filter(|r| r["benchmark"] == benchmark).collect()
}

fn runs(r: &Value) -> &Vec<Value> {
    r["runs"].as_array().unwrap()
}

fn m(run: &Value, k: &str) -> f64 {
    run["metrics"][k].as_f64().unwrap_or_else(|| panic!("no {k} in {run}"))
}

/// A child that sleeps, and the line count of its maps.
fn sleeper() -> (std::process::Child, usize) {
    let c = Command::new("sleep").arg("60").stdin(Stdio::null()).spawn().unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let lines = std::fs::read_to_string(format!("/proc/{}/maps", c.id())).unwrap().lines().count();
    (c, lines)
}

#[test]
fn a_child_process_read_in_each_file() {
    let (mut c, lines) = sleeper();
    let pid = c.id().to_string();
    for file in ["maps", "smaps", "smaps_rollup", "query"] {
        let v = json(&[
            "kernel",
            "reader-cost",
            "--pid",
            &pid,
            "--file",
            file,
            "--passes",
            "2",
            "--every",
            "0",
            "--json",
            "-",
        ]);
        let k = reports(&v, "kernel.reader_cost");
        assert_eq!(k.len(), 1, "{file}");
        assert_eq!(runs(k[0]).len(), 2);
        for run in runs(k[0]) {
            let vmas = m(run, "vmas_count") as usize;
            // PROCMAP_QUERY does not answer for [vsyscall], which the text shows.
            let want = if file == "query" { lines - 1 } else { lines };
            assert_eq!(vmas, want, "{file}: {run}");
            let (total, longest) = (m(run, "hold_total_ms"), m(run, "hold_max_ms"));
            assert!(total > 0.0 && longest > 0.0 && longest <= total, "{file}: {run}");
            assert!(m(run, "reader_cpu_ms") > 0.0 && m(run, "chunks_count") >= 1.0, "{file}: {run}");
        }
        let engine = reports(&v, "bench.reader_cost");
        assert_eq!(engine.len(), 3, "{file}: one engine report per reader mode");
        for e in engine {
            let mode = e["parameters"]["mode"].as_str().unwrap();
            // Holds by the mode's rule: the mmap lock per read() chunk, a VMA lock per record, none.
            let lock = e["parameters"]["lock"].as_str().unwrap();
            let want = match mode {
                "mmap-lock" => "mmap_lock",
                "per-vma" => "vma_lock",
                _ => "none",
            };
            assert_eq!(lock, want, "{mode}");
            for run in runs(e) {
                assert!(m(run, "chunk_total_ms") > 0.0, "{run}");
                assert_eq!(m(run, "hold_total_ms") > 0.0, mode != "lockless", "{mode}: {run}");
                assert_eq!(m(run, "mmap_lock_hold_max_ms") > 0.0, mode == "mmap-lock", "{mode}: {run}");
                assert_eq!(m(run, "vma_lock_hold_max_ms") > 0.0, mode == "per-vma", "{mode}: {run}");
                assert!(m(run, "hold_max_ms") <= m(run, "hold_total_ms"), "{mode}: {run}");
            }
        }
    }
    c.kill().unwrap();
    c.wait().unwrap();
}

#[test]
fn a_mapper_of_ours_with_and_without_busy_tasks() {
    let v = json(&[
        "kernel",
        "reader-cost",
        "--vmas",
        "2000",
        "--file",
        "smaps",
        "--passes",
        "2",
        "--every",
        "0",
        "--no-engine",
        "--json",
        "-",
    ]);
    let k = reports(&v, "kernel.reader_cost");
    assert_eq!(k.len(), 2, "a set without and a set with busy tasks");
    assert_eq!(k[1]["parameters"]["busy"], 1);
    for r in &k {
        for run in runs(r) {
            let vmas = m(run, "vmas_count");
            assert!((1950.0..=2100.0).contains(&vmas), "{run}");
            assert!(m(run, "hold_max_ms") <= m(run, "hold_total_ms"));
        }
    }
    let mapper = reports(&v, "kernel.reader_cost.mapper");
    assert_eq!(mapper.len(), 1);
    let run = &runs(mapper[0])[0];
    assert!(m(run, "baseline_call_count") > 0.0, "{run}");
    assert!(m(run, "beside_call_count") + m(run, "starved_call_count") > 0.0, "{run}");
    assert!(reports(&v, "bench.reader_cost").is_empty(), "--no-engine");
}

#[test]
fn an_agent_command() {
    let (mut c, lines) = sleeper();
    let pid = c.id().to_string();
    let v = json(&[
        "kernel",
        "reader-cost",
        "--pid",
        &pid,
        "--agent",
        "cat /proc/{pid}/maps",
        "--passes",
        "2",
        "--every",
        "0",
        "--no-engine",
        "--json",
        "-",
    ]);
    let k = reports(&v, "kernel.reader_cost");
    for run in runs(k[0]) {
        assert_eq!(m(run, "vmas_count") as usize, lines);
        assert!(m(run, "agent_wall_ms") > 0.0);
        assert!(m(run, "agent_cpu_ms") >= 0.0);
        assert!(
            m(run, "est_hold_total_ms") > 0.0 && m(run, "est_hold_max_ms") <= m(run, "est_hold_total_ms")
        );
    }
    assert_eq!(k[0]["parameters"]["file"], "maps");
    c.kill().unwrap();
    c.wait().unwrap();
}

#[test]
fn bad_inputs() {
    // A process that does not exist: usage error.
    let out = vmspace(&["kernel", "reader-cost", "--pid", "2147483000", "--passes", "1", "--every", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no process 2147483000"));
    // Neither --pid nor --vmas.
    assert_eq!(vmspace(&["kernel", "reader-cost", "--passes", "1"]).status.code(), Some(2));
    // A failing agent: the run failed.
    let (mut c, _) = sleeper();
    let pid = c.id().to_string();
    let out = vmspace(&[
        "kernel",
        "reader-cost",
        "--pid",
        &pid,
        "--agent",
        "false",
        "--passes",
        "2",
        "--every",
        "0",
        "--no-engine",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the agent command failed (exit status 1)"));
    c.kill().unwrap();
    c.wait().unwrap();
}

#[test]
fn a_process_that_exits_during_the_run() {
    let mut c = Command::new("sleep").arg("1.5").stdin(Stdio::null()).spawn().unwrap();
    let pid = c.id().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out_json = dir.path().join("out.json");
    let mut run = bin()
        .args([
            "kernel",
            "reader-cost",
            "--pid",
            &pid,
            "--file",
            "maps",
            "--passes",
            "100",
            "--every",
            "0.5s",
        ])
        .args(["--no-engine", "--json"])
        .arg(&out_json)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Reap the sleeper as it exits so that its /proc entry goes away.
    c.wait().unwrap();
    let status =
        wait_exit(&mut run, Duration::from_secs(30), "reader-cost did not stop after its target exited");
    let mut err = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(3), "{err}");
    assert!(err.contains("exited during the run"), "{err}");
    // What was measured was written.
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&out_json).unwrap()).unwrap();
    assert!(!runs(reports(&v, "kernel.reader_cost")[0]).is_empty());
    assert!(children_of(run.id()).iter().all(|&p| !alive(p)));
}

#[test]
fn ctrl_c_keeps_what_was_measured() {
    let args = [
        "kernel",
        "reader-cost",
        "--vmas",
        "500",
        "--file",
        "maps",
        "--passes",
        "1000",
        "--every",
        "0.1s",
        "--json",
        "-",
    ];
    // Ready 2 s after the mapper appeared: its 1 s baseline, then passes (a child process each).
    let seen = std::cell::Cell::new(None::<std::time::Instant>);
    let s = signal_when_ready(&args, "-INT", &|pid| {
        if children_of(pid).is_empty() {
            return false;
        }
        let t = seen.get().unwrap_or_else(std::time::Instant::now);
        seen.set(Some(t));
        t.elapsed() > Duration::from_secs(2)
    });
    assert_eq!(s.status.code(), Some(130), "{}", s.stderr);
    // The passes measured so far: printed, and written as one valid JSON report set.
    let v: Value = serde_json::from_str(&s.stdout)
        .unwrap_or_else(|e| panic!("bad JSON after Ctrl-C ({e}): {}\n{}", s.stdout, s.stderr));
    let k = reports(&v, "kernel.reader_cost");
    assert_eq!(k.len(), 1, "{}", s.stderr);
    let n = runs(k[0]).len();
    assert!((1..1000).contains(&n), "{n} passes measured: {}", s.stderr);
    assert!(s.stderr.contains("kernel: maps"), "{}", s.stderr);
    assert_eq!(reports(&v, "kernel.reader_cost.mapper").len(), 1, "{}", s.stderr);
}
