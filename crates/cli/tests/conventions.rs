//! What a newcomer meets first, checked on the built binary: one-line command summaries that fit a line, help
//! wrapped to the terminal's width (`COLUMNS` when standard output is no terminal) with its indents kept, man
//! pages with an EXIT STATUS section, `-` as standard input for `replay` and `diff`, parse errors that name
//! their line whatever the input, `diff --out-dir` that creates its directory, `--quiet`, and `race` and
//! `bench` that print what they measured when interrupted.

use std::io::Write;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::bin;

fn with_stdin(args: &[&str], input: &[u8]) -> Output {
    let mut child =
        bin().args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn every_command_summary_fits_one_line() {
    for args in [&["--help"][..], &["bench", "--help"], &["kernel", "--help"]] {
        let o = bin().args(args).env("COLUMNS", "100").output().unwrap();
        assert_eq!(o.status.code(), Some(0));
        let text = stdout(&o);
        let commands: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .take_while(|l| !l.is_empty())
            .collect();
        assert!(commands.len() >= 5, "{args:?}: {text}");
        for l in commands {
            // Help wraps at 100 columns: a longer summary would go on in a line of its own.
            assert!(
                l.starts_with("  ") && !l.starts_with("   "),
                "{args:?}: a summary over 100 columns: {l}"
            );
        }
    }
}

/// `--help` wraps to the terminal (`COLUMNS` here, standard output being a pipe), at most 100 columns; the
/// exit-status section keeps its hanging indents at 80 columns.
#[test]
fn help_wraps_to_the_terminal_width() {
    for args in [&["--help"][..], &["report", "--help"], &["bench", "faults", "--help"], &["race", "--help"]]
    {
        for (columns, width) in [("60", 60), ("80", 80), ("100", 100), ("200", 100)] {
            let o = bin().args(args).env("COLUMNS", columns).output().unwrap();
            assert_eq!(o.status.code(), Some(0));
            let text = stdout(&o);
            let widest = text.lines().map(|l| l.chars().count()).max().unwrap();
            assert!(widest <= width, "{args:?} at COLUMNS={columns}: a line of {widest} columns:\n{text}");
            // Wrapping happened where it had to: some line is within a few columns of the width.
            assert!(widest + 12 >= width, "{args:?} at COLUMNS={columns}: widest line {widest}:\n{text}");
            if width < 80 {
                continue;
            }
            let status: Vec<&str> = text
                .lines()
                .skip_while(|l| *l != "Exit status:")
                .skip(1)
                .take_while(|l| !l.is_empty())
                .collect();
            assert!(status.len() >= 6, "{args:?}: {text}");
            for l in status {
                let first = l.trim_start().split(' ').next().unwrap();
                let ok = if first.chars().all(|c| c.is_ascii_digit()) {
                    l.starts_with("  ") && !l.starts_with("   ")
                } else {
                    l.starts_with("       ") && !l.starts_with("        ")
                };
                assert!(ok, "{args:?} at COLUMNS={columns}: an exit-status line out of its indent: {l:?}");
            }
        }
    }
}

#[test]
fn every_man_page_has_an_exit_status_section() {
    let dir = tempfile::tempdir().unwrap();
    let o = bin().args(["man", "--dir"]).arg(dir.path()).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut pages = 0;
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let page = std::fs::read_to_string(e.unwrap().path()).unwrap();
        assert!(page.contains(".SH \"EXIT STATUS\"") && page.contains("\\fB130\\fR"), "{page}");
        assert!(!page.contains(".SH EXTRA"), "the exit statuses appear once: {page}");
        pages += 1;
    }
    assert!(pages > 10, "{pages} pages");
    let top = stdout(&bin().arg("man").output().unwrap());
    assert!(top.contains(".SH \"EXIT STATUS\""), "{top}");
}

const SCRIPT: &str = "mmap 0x200000000000 0x2000 rw- private|anon|fixed\nmunmap 0x200000000000 0x1000\n";

#[test]
fn replay_and_diff_read_a_script_from_standard_input() {
    let o = with_stdin(&["replay", "-"], SCRIPT.as_bytes());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("L1 mmap") && stdout(&o).contains("L2 munmap"), "{}", stdout(&o));
    let o = with_stdin(&["diff", "-"], SCRIPT.as_bytes());
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(&o), stderr(&o));
    // A bad line read from standard input is named as such.
    let o = with_stdin(&["replay", "-"], b"munmap 0x200000000000\n");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("standard input: bad script: line 1"), "{}", stderr(&o));
}

#[test]
fn a_parse_error_names_its_line_for_any_input() {
    // Not UTF-8 on line 3.
    let mut bad =
        b"# a script\nmmap 0x200000000000 0x1000 rw- private|anon|fixed\nmunmap \xff\xfe 0x1000\n".to_vec();
    let o = with_stdin(&["replay", "-"], &bad);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("line 3: not UTF-8"), "{}", stderr(&o));
    // A huge token on line 2: named, and the message stays short.
    bad = format!("{SCRIPT}munmap 0x{} 0x1000\n", "f".repeat(1 << 20)).into_bytes();
    let o = with_stdin(&["replay", "-"], &bad);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("line 3: ") && err.len() < 400,
        "{} bytes: {}",
        err.len(),
        &err[..err.len().min(400)]
    );
}

#[test]
fn diff_out_dir_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("new/minimised");
    let o = bin().args(["diff", "--seeds", "0..2", "--calls", "10", "--out-dir"]).arg(&out).output().unwrap();
    assert!(matches!(o.status.code(), Some(0 | 1)), "{}", stderr(&o));
    assert!(out.is_dir(), "{}", stderr(&o));
    // A directory that cannot be made is a usage error, before anything runs.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let o = bin().args(["diff", "--seeds", "0..2", "--out-dir"]).arg(file.join("sub")).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// `vmspace race` on the engine for about `secs` seconds (two tests of `secs / 2` each).
fn race_args(secs: f64) -> Vec<String> {
    let each = format!("{}ms", (secs * 500.0) as u64);
    ["race", "--mode", "lockless", "--tests", "split,resize", "--duration", &each].map(String::from).to_vec()
}

#[test]
fn quiet_shows_no_progress_but_the_results() {
    // Progress shows once a run has gone on for 2 s (as a line every 10 s when standard error is not a
    // terminal): the second test ends after 3 s.
    let loud = bin().args(race_args(3.0)).output().unwrap();
    assert_eq!(loud.status.code(), Some(0), "{}", stderr(&loud));
    assert!(stderr(&loud).contains("progress: "), "{}", stderr(&loud));
    let quiet = bin().arg("--quiet").args(race_args(3.0)).output().unwrap();
    assert_eq!(quiet.status.code(), Some(0), "{}", stderr(&quiet));
    assert!(!stderr(&quiet).contains("progress"), "{}", stderr(&quiet));
    assert!(stdout(&quiet).contains("verdict: 2 passed"), "{}", stdout(&quiet));
}

/// Runs `args`, sends SIGINT after `after`, and returns the output.
fn interrupted(args: &[String], after: Duration) -> Output {
    let child = bin().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let t = Instant::now();
    std::thread::sleep(after);
    // SAFETY: kill(2) on the child's pid, which stays ours until we wait for it.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let o = child.wait_with_output().unwrap();
    assert!(t.elapsed() < after + Duration::from_secs(60), "the command did not stop");
    o
}

#[test]
fn interrupted_race_prints_what_it_measured() {
    // Three tests of 3 s; Ctrl-C in the second.
    let mut args = race_args(6.0);
    args[4] = "split,resize,remap".into();
    let o = interrupted(&args, Duration::from_secs(4));
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("observations") && out.contains("split"), "{out}");
    assert!(
        out.contains("(interrupted: 1 of 3 runs measured)") || out.contains("(interrupted: 2 of 3"),
        "{out}"
    );
    assert!(stderr(&o).contains("interrupted"), "{}", stderr(&o));
}

#[test]
fn interrupted_bench_prints_what_it_measured() {
    // One engine row per run, three runs of 2 s each; Ctrl-C during the second.
    let args: Vec<String> = [
        "bench",
        "faults",
        "--threads",
        "1",
        "--samples",
        "3",
        "--duration",
        "2s",
        "--region-mib",
        "8",
        "--no-kernel",
    ]
    .map(String::from)
    .to_vec();
    let o = interrupted(&args, Duration::from_secs(3));
    assert_eq!(o.status.code(), Some(130), "{}\n{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("vmspace bench faults:"), "{}", stdout(&o));
    assert!(stderr(&o).contains("what was measured before Ctrl-C"), "{}", stderr(&o));
}

#[test]
fn a_stored_run_is_presented_again_within_100_columns() {
    let stored = concat!(env!("CARGO_MANIFEST_DIR"), "/../../results/report-2026-11-28.json");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("page");
    let o = bin().args(["report", "--from", stored, "--out"]).arg(&out).output().unwrap();
    // That run missed targets: its verdict's status.
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let text = stdout(&o);
    let over: Vec<&str> = text.lines().filter(|l| l.chars().count() > 100).collect();
    assert!(over.is_empty(), "{over:#?}");
    assert!(out.join("index.html").is_file() && out.join("contention-smaps.svg").is_file());
    let wide =
        stdout(&bin().args(["report", "--wide", "--from", stored, "--out"]).arg(&out).output().unwrap());
    assert!(wide.lines().any(|l| l.chars().count() > 100), "--wide keeps the tables whole");
    // Not a report set: bad input.
    let o = bin().args(["report", "--from", "Cargo.toml", "--out"]).arg(&out).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
