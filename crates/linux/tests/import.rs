//! Importing live processes into the engine: `procfs::read_snapshot` reads a process, `Mm::import` builds the
//! engine's address space from it, and the engine's `/proc/PID/maps` (in every reader mode) must be the
//! process's byte for byte, each VMA's smaps `VmFlags` the same, and a later `mmap(NULL, ...)` must land where
//! the kernel puts the same call in the process (the check that `mmap_base` was inferred right).
//!
//! The processes: this test process itself, `sleep`, `sh`, and a helper (this test binary run again, so a
//! fresh `execve` with its own `mmap_base`) that maps a memfd, a deleted file, shared anonymous memory, SysV
//! shared memory, a run of 64 VMAs split by mprotect, and VMAs with madvise, mlock, `MAP_NORESERVE`,
//! `MAP_GROWSDOWN` and mseal flags, then maps on command. The host has no `CONFIG_ANON_VMA_NAME`
//! (`PR_SET_VMA_ANON_NAME` is EINVAL, which the helper checks against the host's configuration), so named
//! anonymous memory is covered by `crates/mm/tests/import.rs` only when the host lacks it.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use vmspace_linux::procfs::{self, Snapshot};
use vmspace_mm::{MapFlags, Mm, MmConfig, PAGE_SIZE, Prot, ReaderMode};

const P: u64 = PAGE_SIZE;
/// The environment variable that makes this binary's `helper_process` test the helper.
const HELPER: &str = "VMSPACE_IMPORT_HELPER";

/// The host's configuration (sysctls, THP, pools): the one a live process obeys.
fn host() -> MmConfig {
    MmConfig::host()
}

/// Imports `snap` and checks the engine's maps (every mode) and VmFlags against it; returns the engine.
fn import_and_compare(snap: &Snapshot, what: &str) -> Mm {
    let mm = Mm::import(&host(), &snap.layout).unwrap_or_else(|e| panic!("{what}: import refused: {e:?}"));
    mm.validate().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(mm.map_count() as usize, snap.layout.vmas.len(), "{what}");
    assert!(snap.layout.gate_area.is_some() == snap.maps.ends_with("[vsyscall]\n"), "{what}");
    assert_eq!(mm.maps_text(), snap.maps, "{what}");
    for mode in ReaderMode::ALL {
        let engine = mm.reader_with(mode).maps();
        if engine != snap.maps {
            let diff: Vec<String> = engine
                .lines()
                .zip(snap.maps.lines())
                .filter(|(a, b)| a != b)
                .take(5)
                .map(|(a, b)| format!("engine {a}\nkernel {b}"))
                .collect();
            panic!(
                "{what} ({mode}): maps differ:\n{}\n(lines {} vs {})",
                diff.join("\n"),
                engine.lines().count(),
                snap.maps.lines().count()
            );
        }
    }
    // Every VMA's smaps VmFlags (and header) as the kernel's, the gate area's record included.
    let engine = vmspace_proc::parse_smaps(&mm.reader().smaps()).expect("engine smaps parse");
    let kernel = &snap.smaps;
    assert_eq!(engine.len(), kernel.len(), "{what}");
    for (e, k) in engine.iter().zip(kernel) {
        assert_eq!(e.header, k.header, "{what}");
        assert_eq!(e.vm_flags, k.vm_flags, "{what}: VmFlags of {}", k.header);
        assert_eq!(e.protection_key, k.protection_key, "{what}: {}", k.header);
    }
    // The break and the stack as the kernel's.
    assert_eq!(mm.brk_value(), snap.layout.brk, "{what}");
    let (lo, hi) = snap.mmap_base_window;
    assert!(
        lo <= snap.layout.mmap_base && snap.layout.mmap_base <= hi,
        "{what}: {:#x} outside {lo:#x}..{hi:#x}",
        snap.layout.mmap_base
    );
    mm
}

/// Waits until process `pid` runs `comm` and sleeps (it has finished `execve` and its loader).
fn wait_exec(pid: u32, comm: &str) {
    let t = Instant::now();
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ok = stat.contains(&format!("({comm}) S "));
        if ok {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "{comm} did not start: {stat}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn this_process_imports_byte_for_byte() {
    let snap = procfs::read_snapshot(std::process::id() as i32).expect("read ourselves");
    assert!(snap.layout.vmas.len() > 10);
    let mm = import_and_compare(&snap, "self");
    // The heap and stack are where stat says.
    assert!(mm.maps_text().contains("[stack]"));
}

#[test]
fn sleep_and_sh_import_byte_for_byte() {
    for (cmd, args, comm) in [("sleep", &["30"][..], "sleep"), ("sh", &["-c", "read x"][..], "sh")] {
        let child = Command::new(cmd).args(args).stdin(Stdio::piped()).spawn().expect("spawn");
        let child = Killed(child);
        wait_exec(child.0.id(), comm);
        let snap = procfs::read_snapshot(child.0.id() as i32).expect("read the child");
        import_and_compare(&snap, cmd);
        // A freshly exec'd dynamic program: mmap_base is the end of ld.so's last VMA.
        let ld = snap.layout.vmas.iter().filter(|v| matches!(v.backing, vmspace_mm::import::ImportedBacking::File(i) if snap.layout.files[i].path.contains("ld-linux"))).map(|v| v.end).max();
        assert_eq!(Some(snap.layout.mmap_base), ld, "{cmd}");
    }
}

/// The helper process and its pipes.
struct Helper {
    child: Killed,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Helper {
    fn start() -> Helper {
        let exe = std::env::current_exe().expect("this test binary");
        let mut child = Command::new(exe)
            .args(["--ignored", "--exact", "helper_process", "--nocapture", "--test-threads=1"])
            .env(HELPER, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the helper");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut h = Helper { child: Killed(child), stdin, stdout };
        h.expect("ready");
        h
    }

    /// Reads lines until one starts with `word`; returns the rest of it.
    fn expect(&mut self, word: &str) -> String {
        let mut line = String::new();
        loop {
            line.clear();
            let n = self.stdout.read_line(&mut line).expect("helper output");
            assert!(n > 0, "the helper ended before {word:?}");
            // libtest's own `test helper_process ... ` may precede the helper's words on a line.
            if let Some(at) = line.find(word) {
                return line[at + word.len()..].trim().to_string();
            }
        }
    }

    /// The helper's `mmap(NULL, pages * 4096, RW, PRIVATE | ANONYMOUS)`.
    fn mmap(&mut self, pages: u64) -> u64 {
        self.stdin.write_all(format!("m{pages:x}\n").as_bytes()).unwrap();
        self.stdin.flush().unwrap();
        u64::from_str_radix(&self.expect("at "), 16).expect("an address")
    }

    fn pid(&self) -> i32 {
        self.child.0.id() as i32
    }
}

#[test]
fn a_helper_with_every_kind_of_vma_imports_and_places_like_the_kernel() {
    let mut h = Helper::start();
    let snap = procfs::read_snapshot(h.pid()).expect("read the helper");
    let maps = &snap.maps;
    for want in [
        "/memfd:import (deleted)",
        "/dev/zero (deleted)",
        "/SYSV",
        "import-gone-",
        "[vdso]",
        "[vvar]",
        "[heap]",
        "[stack]",
    ] {
        assert!(maps.contains(want), "no {want} in\n{maps}");
    }
    assert!(snap.layout.vmas.len() > 80, "{}", snap.layout.vmas.len());
    for flag in ["lo", "dc", "hg", "nh", "dd", "sr", "rr", "wf", "nr", "gd", "sl", "lf", "mg"] {
        assert!(snap.smaps.iter().any(|r| r.vm_flags.mnemonics.iter().any(|m| m == flag)), "no {flag} VMA");
    }
    // The anon_vma of touched anonymous memory, none for untouched.
    assert!(snap.layout.vmas.iter().any(|v| v.anon_vma));
    let mm = import_and_compare(&snap, "helper");
    // The same calls in both: top-down below mmap_base, small and THP-sized (2 MiB aligned), then the maps again.
    let fl = MapFlags::PRIVATE | MapFlags::ANONYMOUS;
    for pages in [3, 512, 1, 17] {
        let kernel = h.mmap(pages);
        let engine = mm.mmap(0, pages * P, Prot::RW, fl, None, 0).expect("engine mmap");
        assert_eq!(engine, kernel, "mmap of {pages} pages: engine {engine:#x}, kernel {kernel:#x}");
    }
    let after = procfs::read_snapshot(h.pid()).expect("read the helper again");
    assert_eq!(mm.reader().maps(), after.maps, "maps after the calls");
}

/// Not a test: the helper process the test above runs (this binary again, with `HELPER` set). It builds its
/// mappings, prints `ready`, then maps on command (`m<pages in hex>` on stdin: `at <address>` on stdout)
/// without allocating between the command and the call.
#[test]
#[ignore = "the helper process of a_helper_with_every_kind_of_vma_imports_and_places_like_the_kernel"]
fn helper_process() {
    if std::env::var_os(HELPER).is_none() {
        return;
    }
    helper::run();
}

mod helper {
    use std::ffi::CString;

    const P: usize = 4096;

    fn check(ok: bool, what: &str) {
        if !ok {
            eprintln!("helper: {what} failed: {}", std::io::Error::last_os_error());
            // SAFETY: ends the helper process at once.
            unsafe { libc::_exit(2) };
        }
    }

    fn map(len: usize, prot: i32, flags: i32, fd: i32) -> usize {
        // SAFETY: a new mapping placed by the kernel; it overlaps nothing of ours.
        let a = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, 0) };
        check(a != libc::MAP_FAILED, "mmap");
        a as usize
    }

    fn touch(a: usize, len: usize) {
        for off in (0..len).step_by(P) {
            // SAFETY: `a..a + len` is a writable mapping of ours.
            unsafe { ((a + off) as *mut u8).write_volatile(1) };
        }
    }

    fn advise(a: usize, len: usize, advice: i32) {
        // SAFETY: advice on a mapping of ours.
        check(unsafe { libc::madvise(a as *mut _, len, advice) } == 0, "madvise");
    }

    pub fn run() {
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        // A memfd, shared and touched.
        // SAFETY: plain syscalls on our own descriptors and mappings below.
        unsafe {
            let fd = libc::memfd_create(c"import".as_ptr(), 0);
            check(fd >= 0 && libc::ftruncate(fd, 8 * P as i64) == 0, "memfd");
            touch(map(8 * P, rw, libc::MAP_SHARED, fd), 8 * P);
            // A deleted file, mapped privately and read-only.
            let path = std::env::temp_dir().join(format!("import-gone-{}", std::process::id()));
            let c = CString::new(path.to_str().unwrap()).unwrap();
            let fd = libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC, 0o600);
            check(fd >= 0 && libc::ftruncate(fd, 3 * P as i64 + 100) == 0, "file");
            map(4 * P, libc::PROT_READ, libc::MAP_PRIVATE, fd);
            // The same file shared and writable, then unlinked.
            touch(map(2 * P, rw, libc::MAP_SHARED, fd), 2 * P);
            check(libc::unlink(c.as_ptr()) == 0, "unlink");
            // Shared anonymous memory.
            touch(map(4 * P, rw, libc::MAP_SHARED | libc::MAP_ANONYMOUS, -1), P);
            // SysV shared memory.
            let id = libc::shmget(libc::IPC_PRIVATE, 4 * P, libc::IPC_CREAT | 0o600);
            check(id >= 0, "shmget");
            check(libc::shmat(id, std::ptr::null(), 0) as isize != -1, "shmat");
            check(libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()) == 0, "shmctl");
            // 64 VMAs: every other page read-only, every fourth touched.
            let run = map(128 * P, rw, anon, -1);
            for i in 0..128 {
                if i % 4 == 0 {
                    touch(run + i * P, P);
                }
                if i % 2 == 1 {
                    check(libc::mprotect((run + i * P) as *mut _, P, libc::PROT_READ) == 0, "mprotect");
                }
            }
            // Flags from madvise, one VMA each.
            for advice in [
                libc::MADV_DONTFORK,
                libc::MADV_HUGEPAGE,
                libc::MADV_NOHUGEPAGE,
                libc::MADV_DONTDUMP,
                libc::MADV_SEQUENTIAL,
                libc::MADV_RANDOM,
                libc::MADV_WIPEONFORK,
                libc::MADV_MERGEABLE,
            ] {
                let a = map(2 * P, rw, anon, -1);
                advise(a, 2 * P, advice);
                touch(a, P);
            }
            // Locked, lock-on-fault, no-reserve, grows-down, sealed.
            let a = map(2 * P, rw, anon, -1);
            check(libc::mlock(a as *const _, 2 * P) == 0, "mlock");
            let a = map(2 * P, rw, anon, -1);
            check(libc::syscall(libc::SYS_mlock2, a, 2 * P, 1) == 0, "mlock2(MLOCK_ONFAULT)");
            map(2 * P, rw, anon | libc::MAP_NORESERVE, -1);
            map(2 * P, rw, anon | libc::MAP_GROWSDOWN, -1);
            let a = map(2 * P, libc::PROT_READ, anon, -1);
            check(libc::syscall(462, a, 2 * P, 0) == 0, "mseal");
            // Named anonymous memory exists only with CONFIG_ANON_VMA_NAME.
            let a = map(2 * P, rw, anon, -1);
            let named =
                libc::prctl(libc::PR_SET_VMA, libc::PR_SET_VMA_ANON_NAME, a, 2 * P, c"named".as_ptr());
            let want =
                vmspace_host::KernelConfig::running().is_some_and(|k| k.enabled("CONFIG_ANON_VMA_NAME"));
            check((named == 0) == want, "PR_SET_VMA_ANON_NAME as the kernel config says");
            // The heap.
            let brk = libc::sbrk(0) as usize;
            check(libc::brk((brk + 5 * P) as *mut _) == 0, "brk");
            touch(brk, P);
        }
        say(b"ready\n");
        // Commands: `m<hex pages>\n`, answered `at <hex address>\n`; end of input ends the helper.
        let mut pages = 0usize;
        loop {
            // One byte at a time up to the newline (a command may come in pieces).
            let mut b = 0u8;
            // SAFETY: reads into our stack byte.
            let n = unsafe { libc::read(0, (&mut b as *mut u8).cast(), 1) };
            if n <= 0 {
                // SAFETY: ends the helper.
                unsafe { libc::_exit(0) };
            }
            if let Some(d) = (b as char).to_digit(16) {
                pages = pages * 16 + d as usize;
            }
            if b != b'\n' {
                continue;
            }
            let a = map(
                pages * P,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
            );
            let mut out = *b"at 0000000000000000\n";
            for i in 0..16 {
                out[3 + i] = b"0123456789abcdef"[(a >> (60 - 4 * i)) & 0xf];
            }
            say(&out);
            pages = 0;
        }
    }

    fn say(b: &[u8]) {
        // SAFETY: writes our buffer to stdout.
        let n = unsafe { libc::write(1, b.as_ptr().cast(), b.len()) };
        check(n == b.len() as isize, "write");
    }
}
