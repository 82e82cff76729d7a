//! The kernel runner on the 6.18 memory-syscall surface beyond the base calls: every new op runs with the real
//! syscall and gives the answer measured on the live kernel (Linux 6.18, x86-64, root). Answers that depend on
//! the host (protection keys, root's CAP_SYS_RAWIO and CAP_IPC_LOCK, the temporary directory's file system) are
//! checked against the host fact read through `vmspace_host`, not against this machine.
//!
//! Also: MADV_HWPOISON and MADV_SOFT_OFFLINE never reach the kernel; descriptors of undeclared files are
//! never open; the guard refuses lock, seal and protection-key calls on the runner's own memory but lets
//! walks that start in a hole, msync, mlockall and calls on pages the script itself mapped outside the arena
//! run.

use std::time::{Duration, Instant};

mod common;

use common::{BASE, rows, run};
use vmspace_linux::replay::{
    CLOSED_FD, ReplayError, refused_before_running, replay_kernel, replay_kernel_observed,
};
use vmspace_script::{Entry, Errno, Output, Script, Value};

/// The maps blocks, each as `(start - BASE, end - BASE, perms)` per line.
fn maps(o: &Output) -> Vec<Vec<(u64, u64, String)>> {
    o.entries
        .iter()
        .filter_map(|e| match e {
            Entry::Maps(lines) => Some(rows(lines)),
            Entry::Call { .. } | Entry::Smaps(_) | Entry::Text { .. } => None,
        })
        .collect()
}

fn err(e: Errno) -> Value {
    Value::Err(e)
}

const EPERM: Value = Value::Err(Errno::EPERM);
const EINVAL: Value = Value::Err(Errno::EINVAL);
const ENOMEM: Value = Value::Err(Errno::ENOMEM);
const EBADF: Value = Value::Err(Errno::EBADF);

fn host() -> vmspace_host::Host {
    vmspace_host::Host::probe()
}

#[test]
fn mlock_family_splits_and_merges_as_locked_vmas_do() {
    let o = run("mmap 0x200000000000 0x4000 rw- private|anon|fixed\n\
         mlock 0x200000001000 0x1000\n\
         maps\n\
         munlock 0x200000001000 0x1000\n\
         mlock2 0x200000002000 0x1000 onfault\n\
         mlock2 0x200000002000 0x1000 0x2\n\
         mlock 0x200000100000 0x1000\n\
         munlock 0x200000100000 0x1000\n\
         mlock 0x200000000000 0\n\
         mlock 0x200000003800 0x10\n");
    let v = o.call_values();
    assert_eq!(
        &v[1..],
        &[Value::Zero, Value::Zero, Value::Zero, EINVAL, ENOMEM, ENOMEM, Value::Zero, Value::Zero]
    );
    let m = maps(&o);
    // mlock of the middle page splits the VMA in three (VM_LOCKED differs).
    assert_eq!(
        m[0],
        vec![(0, 0x1000, "rw-p".into()), (0x1000, 0x2000, "rw-p".into()), (0x2000, 0x4000, "rw-p".into())]
    );
    // munlock merged the first two back; mlock2 onfault locked page 2; mlock of 0x3800 rounded down to page 3.
    assert_eq!(
        m[1],
        vec![(0, 0x2000, "rw-p".into()), (0x2000, 0x3000, "rw-p".into()), (0x3000, 0x4000, "rw-p".into())]
    );
}

#[test]
fn mlockall_runs_locks_the_arena_and_compares_only_the_arena() {
    let h = host();
    let ipc_lock = h.cap_eff.map(|c| c & (1 << vmspace_host::cap::IPC_LOCK) != 0).expect("CapEff");
    let o = run("mmap 0x200000000000 0x3000 rw- private|anon|fixed\n\
         mlockall 0\n\
         mlockall onfault\n\
         mlockall 0x8\n\
         mlockall current|future\n\
         munlock 0x200000001000 0x1000\n\
         mmap 0x200000010000 0x3000 rw- private|anon|fixed\n\
         munlock 0x200000011000 0x1000\n\
         maps\n\
         munlockall\n\
         touch 0x200000000000 0x3000 w\n");
    let v = o.call_values();
    assert_eq!(&v[1..4], &[EINVAL, EINVAL, EINVAL]);
    // Without CAP_IPC_LOCK, `mlockall(MCL_CURRENT)` counts the runner's whole total_vm against RLIMIT_MEMLOCK
    // (`mm/mlock.c: SYSCALL_DEFINE1(mlockall)`): EPERM if the limit is 0 (`can_do_mlock`), ENOMEM if total_vm
    // exceeds it, and then nothing is locked and MCL_FUTURE not set. With CAP_IPC_LOCK (root) it locks.
    let locked = v[4] == Value::Zero;
    match (ipc_lock, h.memlock_rlimit) {
        (true, _) | (false, Some(u64::MAX)) => {
            assert!(locked, "mlockall(MCL_CURRENT|MCL_FUTURE): {:?}", v[4])
        }
        (false, Some(0)) => assert_eq!(v[4], EPERM),
        (false, _) => assert!(locked || v[4] == ENOMEM, "mlockall(MCL_CURRENT|MCL_FUTURE): {:?}", v[4]),
    }
    assert_eq!(&v[5..], &[Value::Zero, Value::Addr(BASE + 0x10000), Value::Zero, Value::Zero, Value::Zero]);
    let m = maps(&o);
    let three = |b: u64| {
        vec![
            (b, b + 0x1000, "rw-p".to_string()),
            (b + 0x1000, b + 0x2000, "rw-p".into()),
            (b + 0x2000, b + 0x3000, "rw-p".into()),
        ]
    };
    let whole = vec![(0, 0x3000, "rw-p".to_string()), (0x10000, 0x13000, "rw-p".into())];
    if locked {
        // mlockall(MCL_CURRENT) locked the first mapping and MCL_FUTURE the second: munlock of a middle page
        // splits each in three. Only arena lines are shown, although the runner's own memory is locked too.
        assert_eq!(m[0], [three(0), three(0x10000)].concat());
    } else {
        // Nothing was locked: munlock of unlocked pages changes nothing, so nothing splits.
        assert_eq!(m[0], whole);
    }
    // munlockall unlocked everything: the pieces merged again, and the runner kept working to the end.
    assert_eq!(m[1], whole);
}

#[test]
fn mseal_blocks_later_changes() {
    let o = run("mmap 0x200000000000 0x4000 r-- private|anon|fixed\n\
         mseal 0x200000001000 0x1000 0\n\
         munmap 0x200000001000 0x1000\n\
         mprotect 0x200000001000 0x1000 rw-\n\
         madvise 0x200000001000 0x1000 dontneed\n\
         mremap 0x200000001000 0x1000 0x2000 maymove\n\
         mseal 0x200000001000 0x1000 1\n\
         mseal 0x200000100000 0x1000 0\n\
         mseal 0x200000000800 0x1000 0\n\
         mseal 0x200000000000 0 0\n\
         munmap 0x200000000000 0x1000\n");
    assert_eq!(
        &o.call_values()[1..],
        &[Value::Zero, EPERM, EPERM, EPERM, EPERM, EINVAL, ENOMEM, EINVAL, Value::Zero, Value::Zero]
    );
    // The sealed page stays, split off its neighbours.
    assert_eq!(maps(&o)[0], vec![(0x1000, 0x2000, "r--p".into()), (0x2000, 0x4000, "r--p".into())]);
}

#[test]
fn protection_keys_follow_the_hosts_cpu() {
    let pku = host().cpu.has_pku();
    let o = run("mmap 0x200000000000 0x2000 rw- private|anon|fixed\n\
         pkey_alloc 0 0\n\
         pkey_alloc 1 0\n\
         pkey_alloc 0 4\n\
         pkey_alloc 0 0x100000000\n\
         pkey_mprotect 0x200000000000 0x1000 r-- -1\n\
         pkey_mprotect 0x200000000000 0x1000 r-- 0\n\
         pkey_free -1\n\
         pkey_free 16\n");
    let v = o.call_values();
    // Flags and unknown rights are EINVAL everywhere; key -1 is mprotect everywhere; key 16 never exists.
    assert_eq!((v[2], v[3], v[4], v[5], v[7], v[8]), (EINVAL, EINVAL, EINVAL, Value::Zero, EINVAL, EINVAL));
    if pku {
        // A key from 1 up (0 is the default key), and key 0 is always allocated.
        assert!(matches!(v[1], Value::Num(k) if (1..16).contains(&k)), "{:?}", v[1]);
        assert_eq!(v[6], Value::Zero);
    } else {
        // Without PKU (or with the kernel's support off) nothing can be allocated and no key but -1 exists.
        assert_eq!((v[1], v[6]), (EINVAL, EINVAL));
    }
    assert_eq!(maps(&o)[0][0], (0, 0x1000, "r--p".into()));
}

#[test]
fn msync_answers_with_the_kernels_checks() {
    let o = run("file f 0x2000\n\
         mmap 0x200000000000 0x2000 rw- shared|fixed fd=f off=0\n\
         touch 0x200000000000 0x2000 w\n\
         msync 0x200000000000 0x2000 sync\n\
         msync 0x200000000000 0x2000 async\n\
         msync 0x200000000000 0x2000 async|sync\n\
         msync 0x200000000001 0x1000 sync\n\
         msync 0x200000000000 0x1000 0x8\n\
         msync 0x200000100000 0x1000 sync\n\
         mlock 0x200000000000 0x1000\n\
         msync 0x200000000000 0x1000 invalidate\n\
         msync 0x200000000000 0x1000 0\n");
    assert_eq!(
        &o.call_values()[3..],
        &[
            Value::Zero,
            Value::Zero,
            EINVAL,
            EINVAL,
            EINVAL,
            ENOMEM,
            Value::Zero,
            err(Errno::EBUSY),
            Value::Zero
        ]
    );
}

/// The temporary directory's file system: ext2/3/4 (`EXT4_SUPER_MAGIC`) limit a file to 16 TiB.
fn tmp_is_ext4() -> bool {
    let dir = std::env::temp_dir();
    rustix::fs::statfs(&dir).is_ok_and(|s| s.f_type as u64 == 0xEF53)
}

#[test]
fn ftruncate_changes_the_size_every_mapping_sees() {
    let o = run("file f 0x4000\n\
         mmap 0x200000000000 0x4000 rw- shared|fixed fd=f off=0\n\
         ftruncate f 0x1000\n\
         touch 0x200000000000 0x4000 w\n\
         ftruncate f 0x4000\n\
         touch 0x200000000000 0x4000 w\n\
         ftruncate f 0x8000000000000000\n\
         ftruncate f 0xffffffffffffffff\n\
         ftruncate nosuch 0\n\
         ftruncate f 0x100000000000000\n\
         ftruncate f 0x1001\n");
    let v = o.call_values();
    assert_eq!(
        &v[2..9],
        &[Value::Zero, Value::Fault(BASE + 0x1000), Value::Zero, Value::Zero, EINVAL, EINVAL, EBADF]
    );
    // 2^56 bytes: past ext4's limit (EFBIG); other file systems may take it.
    if tmp_is_ext4() {
        assert_eq!(v[9], err(Errno::from_raw(27)));
    } else {
        assert!(matches!(v[9], Value::Zero | Value::Err(_)), "{:?}", v[9]);
    }
    assert_eq!(v[10], Value::Zero);
}

#[test]
fn descriptors_of_undeclared_files_are_never_open() {
    // No descriptor table can reach CLOSED_FD (fs.nr_open is at most 2^31 - 64), and it is not open here.
    let nr_open = vmspace_host::sysctl("fs/nr_open").unwrap_or(1 << 20);
    assert!(nr_open < CLOSED_FD as u64, "fs.nr_open {nr_open}");
    // SAFETY: F_GETFD only queries a descriptor number.
    assert_eq!(unsafe { libc::fcntl(CLOSED_FD, libc::F_GETFD) }, -1);
    let o = run("mmap 0x200000000000 0x1000 r-- private|fixed fd=late off=0\n\
         file late 0x1000\n\
         mmap 0x200000000000 0x1000 r-- private|fixed fd=late off=0\n\
         mmap 0x200000001000 0x1000 r-- private|fixed fd=nosuch off=0\n\
         mmap 0x200000001000 0x1000 r-- private|fixed fd=nosuch off=1\n\
         mmap 0x200000001000 0x1000 r-- private|fixed fd=-1 off=0\n\
         mmap 0x200000001000 0x1000 r-- private|anon|fixed fd=nosuch off=0x1000\n\
         mmap 0x200000002000 0x1000 r-- private|anon|fixed fd=late off=0\n\
         mmap 0x200000003000 0x1000 r-- private|anon|fixed fd=-1 off=0x1001\n");
    assert_eq!(
        o.call_values(),
        vec![
            EBADF,
            Value::Zero,
            Value::Addr(BASE),
            EBADF,
            // The offset is checked before the descriptor is looked up.
            EINVAL,
            EBADF,
            // Anonymous: the descriptor is ignored, the offset still checked.
            Value::Addr(BASE + 0x1000),
            Value::Addr(BASE + 0x2000),
            EINVAL,
        ]
    );
}

#[test]
fn every_mmap_flag_and_prot_bit_reaches_the_kernel() {
    let o = run("mmap 0 4096 rw- shared_validate|anon\n\
         mmap 0 4096 rw- droppable|anon\n\
         mmap 0 4096 rw- private|anon|32bit\n\
         mmap 0 4096 rw- shared_validate|anon|0x200\n\
         mmap 0 4096 rw- shared_validate|fixed fd=-1 off=0\n\
         mmap 0x200000000000 4096 rw-|sem private|anon|fixed\n\
         mmap 0x200000001000 4096 rw-|growsdown private|anon|fixed\n\
         mmap 0x200000002000 4096 rw-|0x10 private|anon|fixed\n\
         mprotect 0x200000000000 4096 r--|0x10\n\
         mprotect 0x200000000000 4096 r--|sem\n\
         mmap 0x200000004000 4096 --x private|anon|fixed\n\
         mmap 0x200000005000 4096 -wx private|anon|fixed\n");
    let v = o.call_values();
    // MAP_SHARED_VALIDATE is not an anonymous mapping type (EINVAL); MAP_DROPPABLE is (6.11+).
    assert_eq!(v[0], EINVAL);
    assert!(matches!(v[1], Value::Addr(_)), "{:?}", v[1]);
    // MAP_32BIT: the first 2 GiB.
    assert!(matches!(v[2], Value::Addr(a) if a < 1 << 31), "{:?}", v[2]);
    assert_eq!((v[3], v[4]), (EINVAL, EBADF));
    // mmap ignores PROT bits it does not know; mprotect refuses them; PROT_SEM is accepted.
    assert_eq!(
        &v[5..],
        &[
            Value::Addr(BASE),
            Value::Addr(BASE + 0x1000),
            Value::Addr(BASE + 0x2000),
            EINVAL,
            Value::Zero,
            Value::Addr(BASE + 0x4000),
            Value::Addr(BASE + 0x5000)
        ]
    );
    assert_eq!(
        maps(&o)[0],
        vec![
            (0, 0x1000, "r--p".into()),
            (0x1000, 0x3000, "rw-p".into()),
            (0x4000, 0x5000, "--xp".into()),
            (0x5000, 0x6000, "-wxp".into())
        ]
    );
}

#[test]
fn mremap_newaddr_without_fixed_is_a_hint() {
    let o = run("mmap 0x200000000000 0x1000 rw- private|anon|fixed\n\
         mremap 0x200000000000 0x1000 0x1000 maymove|dontunmap 0x200000030000\n\
         mremap 0x200000000000 0x1000 0x2000 maymove 0x200000040000\n\
         mremap 0x200000000000 0x2000 0x2000 0 0x200000050000\n");
    // dontunmap takes the free hint; a plain grow in place ignores it.
    assert_eq!(&o.call_values()[1..], &[Value::Addr(BASE + 0x30000), Value::Addr(BASE), Value::Addr(BASE)]);
}

/// Linux returns a MAP_FIXED address unchecked from `get_unmapped_area`, and `__get_unmapped_area` reads an
/// address in the top 4 KiB as an error (`IS_ERR_VALUE`): the "address" itself is the errno. The output
/// shows it as that errno, the same on every side.
#[test]
fn fixed_addresses_at_the_top_of_the_space_are_errnos() {
    let o = run("mmap 0xffffffffffffffff 1 r-- private|anon|fixed\n\
         mmap 0xfffffffffffff001 1 r-- private|anon|fixed\n\
         mmap 0xfffffffffffff000 1 r-- private|anon|fixed\n\
         mmap 0xfffffffffffffff2 0x1000 rw- private|anon|fixed\n");
    assert_eq!(o.call_values(), vec![EPERM, err(Errno::from_raw(4095)), ENOMEM, err(Errno::EFAULT)]);
    let text = o.render();
    assert!(
        text.contains("L1 mmap = -EPERM\nL2 mmap = -E4095\nL3 mmap = -ENOMEM\nL4 mmap = -EFAULT\n"),
        "{text}"
    );
    assert_eq!(Output::parse(&text).unwrap(), o);
}

#[test]
fn hwpoison_and_soft_offline_never_reach_the_kernel() {
    for advice in ["hwpoison", "soft_offline", "100", "101", "0x64"] {
        let text = format!(
            "mmap 0x200000000000 0x1000 rw- private|anon|fixed\ntouch 0x200000000000 0x1000 w\n\
             madvise 0x200000000000 0x1000 {advice}\n"
        );
        let s = Script::parse(&text).unwrap();
        let msg = refused_before_running(&s).unwrap_or_else(|| panic!("{advice} not refused"));
        assert!(msg.contains("line 3") && msg.contains("never run on the live kernel"), "{msg}");
        // Refused before any process is forked: no progress is ever reported and it returns at once.
        let mut reports = 0;
        let t = Instant::now();
        let r = replay_kernel_observed(&s, Default::default(), &mut |_| reports += 1);
        match r {
            Err(ReplayError::Refused(m)) => assert_eq!(m, msg),
            other => panic!("{advice}: {other:?}"),
        }
        assert_eq!(reports, 0);
        assert!(t.elapsed() < Duration::from_millis(200));
    }
    // Every other advice, known or not, is run.
    let s = Script::parse("madvise 0x200000000000 0x1000 102\nmadvise 0 0 99\n").unwrap();
    assert_eq!(refused_before_running(&s), None);
}

#[test]
fn the_guard_covers_the_new_calls_on_the_runners_own_memory() {
    // The test thread's stack is certainly the runner's (the child is a fork of this process).
    let probe = 0u8;
    let page = (&raw const probe as u64) & !0xfff;
    for call in [
        format!("mlock {page:#x} 0x1000"),
        format!("mlock2 {:#x} 0x10 onfault", page + 0x10),
        format!("munlock {page:#x} 0x1000"),
        format!("mseal {page:#x} 0x1000 0"),
        format!("pkey_mprotect {page:#x} 0x1000 r-- -1"),
        format!("mprotect {page:#x} 0x1000 r--"),
        // Past TASK_SIZE: the kernel does not bound madvise, so neither does the guard.
        format!("madvise {page:#x} 0x100000000000000 dontneed"),
    ] {
        let s = Script::parse(&call).unwrap();
        match replay_kernel(&s) {
            Err(ReplayError::Refused(m)) => assert!(m.contains("runner's own mapping"), "{call}: {m}"),
            other => panic!("{call}: not refused: {other:?}"),
        }
    }
    // What changes no mapping runs, and so does a walk that starts in a hole (the kernel stops there).
    let o = run(&format!(
        "msync {page:#x} 0x1000 async\nmlock 0x10000 0x7fff00000000\nmseal 0x10000 0x7fff00000000 0\n\
         pkey_mprotect 0x10000 0x7fff00000000 r-- -1\n"
    ));
    assert_eq!(o.call_values(), vec![Value::Zero, ENOMEM, ENOMEM, ENOMEM]);
}

#[test]
fn pages_the_script_mapped_outside_the_arena_are_the_scripts() {
    // Just below the arena, and (as root, with CAP_SYS_RAWIO) at address 0.
    let root = host().root == Some(true);
    let low = if root { "0" } else { "0x1ffffffe0000" };
    let o = run(&format!(
        "mmap 0x1ffffffff000 0x1000 rw- private|anon|fixed\n\
         mlock 0x1ffffffff000 0x1000\n\
         mprotect 0x1ffffffff000 0x1000 r--\n\
         munmap 0x1ffffffff000 0x1000\n\
         mmap {low} 0x1000 rw- private|anon|fixed\n\
         madvise {low} 0x1000 dontneed\n\
         mseal {low} 0x1000 0\n"
    ));
    let v = o.call_values();
    assert_eq!(&v[1..4], &[Value::Zero, Value::Zero, Value::Zero]);
    assert!(matches!(v[4], Value::Addr(_)), "{:?}", v[4]);
    assert_eq!(&v[5..], &[Value::Zero, Value::Zero]);
    // Moved out of the arena by mremap (two VMAs at once, with and without dontunmap): still the script's.
    let o = run("mmap 0x200000016000 0x1000 rw- private|anon|fixed\n\
                 mmap 0x200000017000 0x1000 r-- private|anon|fixed\n\
                 mremap 0x200000016000 0x2000 0x2000 maymove|fixed|dontunmap 0x1ffffff00000\n\
                 mprotect 0x1ffffff00000 0x1000 r--\n\
                 munmap 0x1ffffff00000 0x2000\n\
                 mremap 0x200000016000 0x2000 0x2000 maymove|fixed 0x1ffffff00000\n\
                 mlock 0x1ffffff00000 0x2000\n");
    let out = Value::Addr(0x1fff_fff0_0000);
    assert_eq!(&o.call_values()[2..], &[out, Value::Zero, Value::Zero, out, Value::Zero]);
    // Once unmapped, the page is no longer the script's: a later call there that could reach runner memory
    // is checked again (here nothing is mapped there, so it runs and fails).
    let o = run("mmap 0x1ffffffff000 0x1000 rw- private|anon|fixed\nmunmap 0x1ffffffff000 0x1000\n\
                 mlock 0x1ffffffff000 0x1000\n");
    assert_eq!(o.call_values()[2], ENOMEM);
}
