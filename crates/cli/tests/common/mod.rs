//! Process helpers shared by the CLI tests that signal the command and check what it leaves behind.

#![allow(dead_code)] // each test file uses part of it

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// The pids whose parent is `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else { continue };
        // Fields after the parenthesised command: state ppid ...
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { continue };
        if rest.split_whitespace().nth(1).and_then(|s| s.parse::<u32>().ok()) == Some(pid) {
            out.push(p);
        }
    }
    out
}

/// Whether `pid` is a live process (a reaped process has no /proc entry; a zombie shows state Z).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

/// Waits for `child` to exit, failing the test with `what` if it takes longer than `limit`.
pub fn wait_exit(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(t.elapsed() < limit, "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The median of `metric` in report `r` of a JSON report set.
pub fn median(r: &serde_json::Value, metric: &str) -> f64 {
    r["summary"][metric]["median"].as_f64().unwrap_or_else(|| panic!("{}: no {metric}", r["label"]))
}

/// Runs `vmspace bench NAME --quick --json -` and checks what every judged benchmark promises: exit status 0
/// when every target is met, 1 when one is missed (a smoke run on a busy machine may miss) and 4 when none is
/// missed but some is undecided or not measurable here, one JSON report
/// set in the shared schema on stdout naming the command, and a verdict that agrees with the exit status and
/// with the table's verdict line on stderr. Returns the report set.
pub fn run_judged_bench(name: &str) -> serde_json::Value {
    let out = vmspace(&["bench", name, "--quick", "--json", "-"]);
    let code = out.status.code();
    assert!(matches!(code, Some(0 | 1 | 4)), "vmspace failed: {}", String::from_utf8_lossy(&out.stderr));
    let set: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    assert_eq!(set["schema"], "vmspace.report.v1");
    assert!(set["command"].as_str().unwrap().contains(&format!("bench {name} --quick --json -")));
    let verdict = &set["verdict"];
    assert_eq!(verdict["passed"].as_bool(), Some(code != Some(1)), "{verdict}");
    let open = verdict["undecided"].as_u64().unwrap_or(0) + verdict["not_measurable"].as_u64().unwrap_or(0);
    assert_eq!(code == Some(4), verdict["passed"] == true && open > 0, "{verdict}");
    let (met, missed) = (verdict["met"].as_u64().unwrap(), verdict["missed"].as_u64().unwrap());
    let table = String::from_utf8_lossy(&out.stderr);
    assert!(table.contains(&format!("verdict: {met} met, {missed} missed")), "{table}");
    set
}

/// The `vmspace` binary under test, let run from a debug build (`cargo test`'s): the timed commands refuse
/// one otherwise.
pub fn bin() -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_vmspace"));
    c.env("VMSPACE_ALLOW_DEBUG_BUILD", "1");
    c
}

/// Runs the `vmspace` binary under test with `args` (a debug build allowed) and collects its output.
pub fn vmspace(args: &[&str]) -> std::process::Output {
    bin().args(args).output().expect("run vmspace")
}

/// `args` followed by the options of a short contention run: one sample of `duration` over an 8 MiB region.
pub fn one_short_sample<'a>(args: &[&'a str], duration: &'a str) -> Vec<&'a str> {
    [args, &["--samples", "1", "--duration", duration, "--region-mib", "8"]].concat()
}

/// The processes below `pid`: its children and theirs, to any depth.
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for c in children_of(p) {
            out.push(c);
            todo.push(c);
        }
    }
    out
}

/// What [`signal_when_ready`] saw: the command's exit status and its standard output and error.
pub struct Signalled {
    /// The exit status.
    pub status: ExitStatus,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Starts `vmspace ARGS`, waits (up to 15 s) until `ready(pid)` says its processes are in place, sends it
/// `signal` (`-INT`, `-KILL` ...), and checks what every command that starts processes promises: it stops
/// within 10 s, with status 130 after `-INT`, and none of the processes below it (seen before the signal or
/// after) outlives it by more than 5 s.
pub fn signal_when_ready(args: &[&str], signal: &str, ready: &dyn Fn(u32) -> bool) -> Signalled {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let mut cmd = bin().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = cmd.id();
    // Drained while the command runs, so that a full pipe never blocks it.
    let mut out = cmd.stdout.take().unwrap();
    let mut err = cmd.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).map(|_| s).unwrap_or_default()
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).map(|_| s).unwrap_or_default()
    });
    let t = Instant::now();
    while !ready(pid) {
        assert!(t.elapsed() < Duration::from_secs(15), "{args:?}: never ready: {:?}", descendants(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = descendants(pid);
    let st = Command::new("kill").args([signal, &pid.to_string()]).status().unwrap();
    assert!(st.success());
    let status = wait_exit(&mut cmd, Duration::from_secs(10), &format!("vmspace did not stop on {signal}"));
    assert!(!status.success(), "{args:?}: {status:?} after {signal}");
    if signal == "-INT" {
        assert_eq!(status.code(), Some(130), "an interrupted command exits with 130");
    }
    let all: Vec<u32> = before.into_iter().chain(descendants(pid)).collect();
    let t = Instant::now();
    while all.iter().any(|&k| alive(k)) {
        assert!(t.elapsed() < Duration::from_secs(5), "processes outlived vmspace after {signal}: {all:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Signalled { status, stdout: out.join().unwrap(), stderr: err.join().unwrap() }
}
