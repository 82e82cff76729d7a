//! `vmspace shadow`: real programs mirrored call by call into the engine, with zero differences; the
//! program's own failure reported; bad input refused with status 2; the traced program killed with its
//! tracer; a refused ptrace a run failure (status 3).

use std::path::PathBuf;
use std::process::{Command, Output};

fn shadow(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vmspace"))
        .arg("shadow")
        .args(args)
        .env("VMSPACE_ALLOW_DEBUG_BUILD", "1")
        .output()
        .expect("vmspace runs")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The mirrored count of `call` in the table.
fn count(out: &str, call: &str) -> u64 {
    out.lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(call)).then(|| w.next().and_then(|n| n.parse().ok())).flatten()
        })
        .unwrap_or(0)
}

fn agrees(o: &Output) -> String {
    let t = text(o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("differences: 0"), "{t}");
    assert!(t.contains("program: exit status 0"), "{t}");
    t
}

#[test]
fn bin_true_agrees() {
    let t = agrees(&shadow(&["--", "/bin/true"]));
    assert!(count(&t, "mmap") > 0 && count(&t, "exit_group") == 1, "{t}");
}

#[test]
fn a_pipeline_forks_and_execs_and_agrees() {
    let t = agrees(&shadow(&["--", "/bin/sh", "-c", "ls / | wc -l"]));
    // Two children of the shell, each an execve with its own imported space.
    assert!(count(&t, "execve") >= 2, "{t}");
    assert!(count(&t, "clone") + count(&t, "fork") + count(&t, "vfork") + count(&t, "clone3") >= 2, "{t}");
}

/// The test program of `tests/shadow/memcalls.c`, compiled with the system's `cc` into `dir`.
fn memcalls(dir: &std::path::Path) -> PathBuf {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/shadow/memcalls.c");
    let exe = dir.join("memcalls");
    let st =
        Command::new("cc").args(["-O1", "-pthread", "-o"]).arg(&exe).arg(&src).status().expect("cc runs");
    assert!(st.success(), "cc failed");
    exe
}

#[test]
fn every_kind_of_memory_call_agrees_and_records_a_replayable_script() {
    let dir = tempfile::tempdir().unwrap();
    let exe = memcalls(dir.path());
    let rec = dir.path().join("calls.script");
    let json = dir.path().join("shadow.json");
    let o = shadow(&[
        "--record",
        rec.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
    ]);
    let t = agrees(&o);
    for call in ["mmap", "munmap", "mprotect", "mremap", "madvise", "mlock", "munlock", "prctl", "clone3"] {
        assert!(count(&t, call) > 0, "no {call} mirrored:\n{t}");
    }
    let set: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(set["verdict"]["passed"], true);
    let r = &set["reports"][0];
    assert_eq!(r["benchmark"], "shadow");
    assert!(r["summary"]["calls.mremap"]["median"].as_f64().unwrap() >= 2.0, "{r}");
    assert_eq!(r["summary"]["differences"]["median"].as_f64(), Some(0.0));
    // The recorded stream is a script `vmspace replay` runs.
    let script = std::fs::read_to_string(&rec).unwrap();
    assert!(script.lines().any(|l| l.starts_with("mremap ")), "{script}");
    assert!(script.lines().any(|l| l.starts_with("file fd")), "{script}");
    let o = Command::new(env!("CARGO_BIN_EXE_vmspace")).arg("replay").arg(&rec).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn python_allocating_is_mirrored_without_differences() {
    if Command::new("python3").arg("-c").arg("pass").status().map(|s| !s.success()).unwrap_or(true) {
        panic!("python3 is needed by this test");
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("py.json");
    let o = shadow(&[
        "--keep-going",
        "--json",
        json.to_str().unwrap(),
        "--",
        "python3",
        "-c",
        "x = bytearray(1 << 24); y = [bytes(1000) for _ in range(10000)]",
    ]);
    let t = text(&o);
    assert!(t.contains("program: exit status 0"), "{t}");
    let set: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let diffs = set["reports"][0]["output"].as_array().cloned().unwrap_or_default();
    // Python's loader maps its shared library (several MiB, offset 0) where ext4's thp_get_unmapped_area puts
    // it: 2 MiB-aligned. The engine places it so too; no difference is left.
    assert!(diffs.is_empty(), "differences:\n{diffs:#?}\n{t}");
    assert!(t.contains("differences: 0"), "{t}");
    assert_eq!(o.status.code(), Some(0), "{t}");
}

/// The placement methods of file systems (`thp_get_unmapped_area` on the temporary directory's ext4,
/// `shmem_get_unmapped_area` on `/dev/shm`'s tmpfs): mappings at file offsets 0, 4 KiB and 2 MiB, just under
/// and over 2 MiB long, shared and private, all without a hint; the engine must place each where Linux does.
#[test]
fn file_mappings_are_placed_by_their_file_systems_method() {
    let script = r#"
import mmap, os, tempfile
d = tempfile.mkdtemp()
M = 2 << 20
for base in (d, '/dev/shm'):
    p = os.path.join(base, 'vmspace-shadow-%d' % os.getpid())
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o600)
    os.unlink(p)
    os.ftruncate(fd, 8 << 20)
    ms = [mmap.mmap(fd, n, flags=mmap.MAP_SHARED if s else mmap.MAP_PRIVATE, prot=mmap.PROT_READ, offset=o)
          for o, n, s in ((0, M, 0), (0, M - 4096, 0), (0, M + 4096, 1), (4096, M + 4096, 0),
                          (4096, 2 * M - 4096, 0), (M, M, 1), (M, M - 4096, 0), (4096, 3 * M, 0))]
    for m in ms:
        m.close()
    os.close(fd)
os.rmdir(d)
"#;
    let o = shadow(&["--keep-going", "--", "python3", "-c", script]);
    let t = text(&o);
    assert!(t.contains("program: exit status 0"), "{t}");
    assert!(t.contains("differences: 0"), "{t}");
    assert_eq!(o.status.code(), Some(0), "{t}");
}

#[test]
fn the_programs_own_failure_is_reported_not_hidden() {
    let o = shadow(&["--", "/bin/sh", "-c", "exit 3"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("program: exit status 3"), "{t}");
    let o = shadow(&["--", "/bin/sh", "-c", "kill -SEGV $$"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("program: killed by signal 11"), "{t}");
}

#[test]
fn bad_input_is_a_usage_error() {
    let o = shadow(&["--", "/nonexistent/program"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("/nonexistent/program"), "{}", text(&o));
    let o = shadow(&["--", "no-such-command-vmspace"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("not found in PATH"), "{}", text(&o));
    let o = shadow(&[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = shadow(&["--pid", "999999999"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn an_attached_process_is_left_running_after_ctrl_c() {
    let mut child = Command::new("/bin/sh").args(["-c", "while :; do sleep 0.05; done"]).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let v = Command::new(env!("CARGO_BIN_EXE_vmspace"))
        .args(["shadow", "--pid", &child.id().to_string()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // SAFETY: kill with the pid of our own child.
    unsafe { libc::kill(v.id() as i32, libc::SIGINT) };
    let o = v.wait_with_output().unwrap();
    let t = String::from_utf8_lossy(&o.stdout).to_string();
    let alive = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("detached") && t.contains("differences: 0"), "{t}");
    assert!(alive, "the attached process died");
}

/// Whether process `pid` is gone or dead (a zombie waiting for its new parent to reap it).
fn dead(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the command name's closing parenthesis.
        Ok(s) => s.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

#[test]
fn killing_vmspace_kills_the_traced_program() {
    // The program may not run on untraced: PTRACE_O_EXITKILL kills it with its tracer.
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let mut v = Command::new(env!("CARGO_BIN_EXE_vmspace"))
        .args(["shadow", "--", "/bin/sh", "-c"])
        .arg(format!("echo $$ > {}; exec sleep 60", pidfile.display()))
        .env("VMSPACE_ALLOW_DEBUG_BUILD", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    let pid: i32 = loop {
        if let Some(p) = std::fs::read_to_string(&pidfile).ok().and_then(|s| s.trim().parse().ok()) {
            break p;
        }
        assert!(t0.elapsed() < std::time::Duration::from_secs(30), "the traced program never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // Let the exec of `sleep` happen under the tracer.
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!dead(pid), "the traced program died before its tracer");
    v.kill().unwrap();
    v.wait().unwrap();
    let t1 = std::time::Instant::now();
    while !dead(pid) {
        if t1.elapsed() > std::time::Duration::from_secs(5) {
            // SAFETY: a plain kill of the stray program this test started, before failing.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            panic!("the traced program {pid} outlived its killed tracer");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn ptrace_refused_is_a_clear_run_failure() {
    // An unprivileged user may not attach to a root process: PTRACE_SEIZE fails with EPERM.
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root (it drops to user nobody to be refused)");
    // A copy of the binary that user nobody can reach whatever the checkout's directories allow.
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("vmspace");
    std::fs::copy(env!("CARGO_BIN_EXE_vmspace"), &bin).unwrap();
    let mut target = Command::new("sleep").arg("30").spawn().unwrap();
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args(["shadow", "--pid", &target.id().to_string()])
        .env("VMSPACE_ALLOW_DEBUG_BUILD", "1")
        .output()
        .expect("setpriv runs");
    let alive = target.try_wait().unwrap().is_none();
    let _ = target.kill();
    let _ = target.wait();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(3), "{t}");
    assert!(t.contains("Operation not permitted") && t.contains("PTRACE_SEIZE"), "{t}");
    // User nobody against a root process: the credentials differ and nobody lacks the capability, which the
    // kernel checks before asking Yama (`__ptrace_may_access`), so that is the reason whatever Yama's scope.
    assert!(t.contains("refused for a missing capability") && t.contains("runs as uid 65534"), "{t}");
    assert!(alive, "the refused attach harmed the target");
}

/// Runs `vmspace shadow --pid PID` with `setpriv PRIV...` first (a copy of the binary that any user can run).
fn attach_with(privs: &[&str], pid: u32) -> Output {
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("vmspace");
    std::fs::copy(env!("CARGO_BIN_EXE_vmspace"), &bin).unwrap();
    Command::new("setpriv")
        .args(privs)
        .arg(&bin)
        .args(["shadow", "--pid", &pid.to_string()])
        .env("VMSPACE_ALLOW_DEBUG_BUILD", "1")
        .output()
        .expect("setpriv runs")
}

#[test]
fn ptrace_refused_without_cap_sys_ptrace_names_what_refused_it() {
    // vmspace keeps root's uid but loses CAP_SYS_PTRACE (from its inheritable and bounding sets, so that the
    // exec does not give it back) and attaches to a process that is not its descendant. What refuses it
    // depends on Yama, which is detected as vmspace detects it: /proc/sys/kernel/yama/ptrace_scope exists only
    // where the Yama LSM is active (this test never writes it).
    // SAFETY: geteuid has no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "this test needs root (it drops CAP_SYS_PTRACE)");
    let drop_cap = ["--inh-caps=-sys_ptrace", "--bounding-set=-sys_ptrace"];
    let yama: Option<u32> = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .map(|s| s.trim().parse().expect("ptrace_scope is a number"));
    // Under Yama's restricted (1) or admin-only (2) scope, a root target of the same credentials is refused by
    // Yama alone. Without Yama (or at scope 0) that attach would be allowed, so the target then runs as user
    // nobody and the missing capability is what refuses it (ptrace_may_access checks credentials first).
    let yama_refuses = matches!(yama, Some(1..));
    let mut target = if yama_refuses {
        Command::new("sleep").arg("30").spawn().unwrap()
    } else {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "30"])
            .spawn()
            .unwrap()
    };
    // setpriv execs sleep in place: wait until the target runs as nobody before attaching.
    if !yama_refuses {
        let status = format!("/proc/{}/status", target.id());
        for _ in 0..500 {
            let s = std::fs::read_to_string(&status).unwrap_or_default();
            if s.lines().any(|l| l.starts_with("Uid:") && l.contains("65534")) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
    let o = attach_with(&drop_cap, target.id());
    let alive = target.try_wait().unwrap().is_none();
    let _ = target.kill();
    let _ = target.wait();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(3), "a refused ptrace is a run failure (status 3):\n{t}");
    assert!(t.contains("ptrace not permitted") && t.contains("PTRACE_SEIZE"), "{t}");
    assert!(t.contains("lacks CAP_SYS_PTRACE"), "the message names the missing capability:\n{t}");
    match yama {
        Some(s @ 1..) => {
            assert!(t.contains(&format!("refused by Yama: kernel.yama.ptrace_scope is {s}")), "{t}");
            if s == 1 {
                assert!(t.contains("not a descendant of vmspace"), "{t}");
            }
        }
        _ => {
            assert!(
                t.contains("refused for a missing capability") && t.contains("uids 65534/65534/65534"),
                "{t}"
            );
            assert!(!t.contains("refused by Yama"), "{t}");
        }
    }
    assert!(alive, "the refused attach harmed the target");
    assert!(!t.contains("panicked"), "{t}");
}

#[test]
fn every_kind_of_memory_call_agrees_in_the_smaps_fields_too() {
    let dir = tempfile::tempdir().unwrap();
    let exe = memcalls(dir.path());
    let o = shadow(&["--smaps", "--", exe.to_str().unwrap()]);
    let t = agrees(&o);
    assert!(
        t.contains("compared after each call: results, maps and the page-independent smaps fields"),
        "{t}"
    );
    assert!(t.contains("resynchronisations: 0"), "{t}");
    for call in ["mmap", "mprotect", "mremap", "madvise", "mlock"] {
        assert!(count(&t, call) > 0, "no {call} mirrored:\n{t}");
    }
}

/// `prctl(PR_SET_THP_DISABLE)` is not a memory call (the filter lets it run) but turns `THPeligible` off for
/// every VMA (`vma_thp_disabled`: the mm's `MMF_DISABLE_THP_COMPLETELY`). `--smaps` finds that at the next
/// call's stop, before the call: a resynchronisation, not a difference; the engine does not model the mm flag,
/// so the field stays different after the import, and is not counted again while it stays as found. A
/// difference the next calls make is still found (the maps and every other field are compared).
#[test]
fn a_thp_eligibility_changed_by_prctl_is_a_resync_not_a_difference() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("thpoff.c");
    std::fs::write(
        &src,
        r#"#include <sys/mman.h>
#include <sys/prctl.h>
#include <stdio.h>
int main(void) {
	char *p = mmap(0, 4 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED || madvise(p, 4 << 20, MADV_HUGEPAGE)) return 1;
	if (prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0)) return 2;
	char *q = mmap(0, 8192, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (q == MAP_FAILED || mprotect(q, 4096, PROT_NONE) || munmap(q, 8192)) return 3;
	if (mprotect(p, 4096, PROT_READ)) return 4;
	return munmap(p, 4 << 20) ? 5 : 0;
}
"#,
    )
    .unwrap();
    let exe = dir.path().join("thpoff");
    let st = Command::new("cc").args(["-O1", "-o"]).arg(&exe).arg(&src).status().expect("cc runs");
    assert!(st.success(), "cc failed");
    let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let o = shadow(&["--smaps", "-v", "--", exe.to_str().unwrap()]);
    let t = agrees(&o);
    assert!(count(&t, "mprotect") >= 2 && count(&t, "munmap") >= 2, "{t}");
    if thp.contains("[always]") || thp.contains("[madvise]") {
        // The MADV_HUGEPAGE VMA was eligible before the prctl and is not after it: found before the next call.
        assert!(t.contains("smaps fields changed without a traced call"), "{t}");
        assert!(t.contains("THPeligible: kernel 0, engine 1"), "{t}");
        assert!(
            t.contains("resynchronisations: 1"),
            "one import takes it in, and it is not found again:\n{t}"
        );
    } else {
        // THP off on this host: nothing was eligible, nothing changed.
        assert!(t.contains("resynchronisations: 0"), "{t}");
    }
}

/// A resynchronisation (here after `process_madvise`, which the engine does not model) imports the process
/// again but keeps its `mmap_base`, fixed at `execve`: the program raised `RLIMIT_STACK` since (as stress-ng
/// does), and an import inferring `mmap_base` from today's limit would place the next mappings gigabytes lower.
#[test]
fn a_resync_after_a_raised_stack_limit_keeps_the_mmap_base() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("rlimit.c");
    std::fs::write(
        &src,
        r#"#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
	struct rlimit r;
	if (getrlimit(RLIMIT_STACK, &r)) return 1;
	r.rlim_cur = r.rlim_max == RLIM_INFINITY ? (rlim_t)64 << 30 : r.rlim_max;
	if (setrlimit(RLIMIT_STACK, &r)) return 2;
	syscall(SYS_process_madvise, -1, 0, 0, 0, 0);
	for (int i = 0; i < 4; i++)
		if (mmap(0, 8 << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0) == MAP_FAILED) return 3;
	return 0;
}
"#,
    )
    .unwrap();
    let exe = dir.path().join("rlimit");
    let st = Command::new("cc").args(["-O1", "-o"]).arg(&exe).arg(&src).status().expect("cc runs");
    assert!(st.success(), "cc failed");
    let t = agrees(&shadow(&["--smaps", "--", exe.to_str().unwrap()]));
    assert!(t.contains("process_madvise") && t.contains("is not modelled by the engine"), "{t}");
    assert!(count(&t, "mmap") >= 4, "{t}");
}
