//! Tests of the live-kernel runner: scripts run through [`super::replay_kernel`] on the running kernel (merges,
//! splits, errnos, files, fork, the guard, generated scripts, progress), and the page arithmetic and range
//! sets of the guard.

use super::guard::Ranges;
use super::runner::remove_tree;
use super::*;
use vmspace_script::{Arena, Entry, Output, Script, Value};

/// CONFIG_ANON_VMA_NAME of the running kernel, if its config is readable.
fn anon_vma_name_config() -> Option<bool> {
    vmspace_host::KernelConfig::running().map(|c| c.enabled("CONFIG_ANON_VMA_NAME"))
}

fn run_text(text: &str) -> Output {
    replay_kernel(&Script::parse(text).unwrap()).unwrap()
}

fn last_maps(o: &Output) -> Vec<String> {
    match o.entries.last() {
        Some(Entry::Maps(m)) => m.clone(),
        other => panic!("no final maps: {other:?}"),
    }
}

#[test]
fn adjacent_anonymous_mappings_merge() {
    let o = run_text(
        "mmap 0x200000000000 0x2000 rw- private|anon|fixed_noreplace\n\
         mmap 0x200000002000 0x3000 rw- private|anon|fixed_noreplace\n",
    );
    assert_eq!(o.call_values(), vec![Value::Addr(0x2000_0000_0000), Value::Addr(0x2000_0000_2000)]);
    assert_eq!(last_maps(&o), vec!["200000000000-200000005000 rw-p 00000000 00:00 0 ".to_string()]);
}

#[test]
fn mprotect_of_the_middle_splits_in_three() {
    let o =
        run_text("mmap 0x200000000000 0x3000 rw- private|anon|fixed\nmprotect 0x200000001000 0x1000 r--\n");
    assert_eq!(o.call_values()[1], Value::Zero);
    assert_eq!(
        last_maps(&o),
        vec![
            "200000000000-200000001000 rw-p 00000000 00:00 0 ".to_string(),
            "200000001000-200000002000 r--p 00000000 00:00 0 ".to_string(),
            "200000002000-200000003000 rw-p 00000000 00:00 0 ".to_string(),
        ]
    );
}

#[test]
fn errors_come_back_as_errno_names() {
    let o = run_text(
        "mmap 0x200000000000 0x2000 rw- private|anon|fixed\n\
         mmap 0x200000001000 0x1000 rw- private|anon|fixed_noreplace\n\
         name 0x200000000000 0x1000 x\n\
         munmap 0x200000000001 0x1000\n\
         mprotect 0x200000000000 0x4000 r--\n\
         touch 0x200000000000 0x3000 w\n\
         mremap 0x200000100000 0x1000 0x2000 0\n\
         mmap 0x200000010000 0x1000 rw- anon|fixed\n",
    );
    let v = o.call_values();
    assert_eq!(v[1], Value::Err(Errno::EEXIST));
    // This project's hosts are built without CONFIG_ANON_VMA_NAME: the name call is EINVAL there.
    match anon_vma_name_config() {
        Some(false) => assert_eq!(v[2], Value::Err(Errno::EINVAL)),
        Some(true) => assert_eq!(v[2], Value::Zero),
        None => assert!(matches!(v[2], Value::Err(Errno::EINVAL) | Value::Zero)),
    }
    assert_eq!(v[3], Value::Err(Errno::EINVAL));
    // mprotect over a hole fails with ENOMEM, but only after changing the VMAs before the hole (Linux
    // applies it VMA by VMA): the pages [0, 2) are now read-only, so the write faults on the first page.
    assert_eq!(v[4], Value::Err(Errno::ENOMEM));
    assert_eq!(v[5], Value::Fault(0x2000_0000_0000));
    assert_eq!(v[6], Value::Err(Errno::EFAULT));
    assert_eq!(v[7], Value::Err(Errno::EINVAL));
}

#[test]
fn file_mappings_are_canonicalised_and_merge_on_contiguous_offsets() {
    let o = run_text(
        "file a 0x10000\n\
         mmap 0x200000000000 0x2000 r-- private|fixed fd=a off=0\n\
         mmap 0x200000002000 0x2000 r-- private|fixed fd=a off=0x2000\n\
         mmap 0x200000004000 0x1000 r-- private|fixed fd=a off=0x8000\n\
         touch 0x200000000000 0x5000 r\n\
         touch 0x200000000000 0x1000 w\n",
    );
    let v = o.call_values();
    assert_eq!(v[0], Value::Zero);
    assert_eq!(v[4], Value::Zero);
    assert_eq!(v[5], Value::Fault(0x2000_0000_0000));
    let pad = |s: &str| format!("{s:<72} fd=a");
    assert_eq!(
        last_maps(&o),
        vec![
            pad("200000000000-200000004000 r--p 00000000 00:00 1 "),
            pad("200000004000-200000005000 r--p 00008000 00:00 1 "),
        ]
    );
}

#[test]
fn fork_continues_in_the_child() {
    let o = run_text(
        "mmap 0x200000000000 0x1000 rw- private|anon|fixed\n\
         mmap 0x200000001000 0x1000 r-- private|anon|fixed\n\
         madvise 0x200000001000 0x1000 dontfork\n\
         maps\nfork\nmaps\n",
    );
    let maps: Vec<&Vec<String>> =
        o.entries.iter().filter_map(|e| if let Entry::Maps(m) = e { Some(m) } else { None }).collect();
    assert_eq!(maps[0].len(), 2);
    // The DONTCOPY VMA is not in the child.
    assert_eq!(maps[1], &vec!["200000000000-200000001000 rw-p 00000000 00:00 0 ".to_string()]);
    assert!(o.render().contains("L5 fork = 0\n"));
}

#[test]
fn page_ranges_add_remove_and_cover() {
    let mut r = Ranges::default();
    r.add(0x3000, 0x5000);
    r.add(0x1000, 0x2000);
    r.add(0x2000, 0x3000); // touches both: one range
    assert_eq!(r.0, vec![(0x1000, 0x5000)]);
    assert!(r.covers(0x1000, 0x5000) && r.covers(0x4000, 0x4000) && !r.covers(0x0, 0x2000));
    r.remove(0x2000, 0x3000);
    assert_eq!(r.0, vec![(0x1000, 0x2000), (0x3000, 0x5000)]);
    assert!(!r.covers(0x1000, 0x4000));
    r.add(0x8000, 0x9000);
    r.add(0x0, 0x10000); // swallows everything
    assert_eq!(r.0, vec![(0, 0x10000)]);
    r.remove(0, u64::MAX);
    assert_eq!(r.0, vec![]);
    r.add(5, 5); // empty: nothing
    assert_eq!(r, Ranges::default());
}

#[test]
fn kernel_page_ranges_follow_the_kernels_arithmetic() {
    // mlock rounds the start down and the length (plus the start's offset) up.
    assert_eq!(KernelTarget::lock_range(0x1800, 0x10), Some((0x1000, 0x2000)));
    assert_eq!(KernelTarget::lock_range(0x1fff, 2), Some((0x1000, 0x3000)));
    assert_eq!(KernelTarget::lock_range(0x1000, 0), None);
    // len + offset wraps to 0: nothing to do; a range past 2^64: EINVAL.
    assert_eq!(KernelTarget::lock_range(0x1001, u64::MAX), None);
    assert_eq!(KernelTarget::lock_range(0x2000, 0u64.wrapping_sub(0x1000)), None);
    // mseal / pkey_mprotect need an aligned start.
    assert_eq!(KernelTarget::aligned_range(0x1001, 0x1000), None);
    assert_eq!(KernelTarget::aligned_range(0x1000, 1), Some((0x1000, 0x2000)));
    assert_eq!(KernelTarget::aligned_range(0x1000, u64::MAX), None);
    assert_eq!(page_align(1), 0x1000);
    assert_eq!(page_align(u64::MAX), 0);
}

/// The raw syscall numbers the runner uses are x86-64's (`arch/x86/entry/syscalls/syscall_64.tbl`).
#[test]
fn syscall_numbers_are_x86_64s() {
    assert_eq!(
        [
            libc::SYS_mmap,
            libc::SYS_mprotect,
            libc::SYS_munmap,
            libc::SYS_mremap,
            libc::SYS_msync,
            libc::SYS_madvise,
            libc::SYS_ftruncate,
            libc::SYS_mlock,
            libc::SYS_munlock,
            libc::SYS_mlockall,
            libc::SYS_munlockall,
            libc::SYS_mlock2,
            libc::SYS_pkey_mprotect,
            libc::SYS_pkey_alloc,
            libc::SYS_pkey_free,
            libc::SYS_mseal,
        ],
        [9, 10, 11, 25, 26, 28, 77, 149, 150, 151, 152, 325, 329, 330, 331, 462]
    );
}

#[test]
fn the_guard_refuses_the_runners_own_memory() {
    // The runner's stack is certainly mapped; munmap of it must be refused, not executed.
    let probe = 0u8;
    let page = (&raw const probe as u64) & !(PAGE - 1);
    let s = Script::parse(&format!("munmap {page:#x} 0x1000\n")).unwrap();
    assert!(matches!(replay_kernel(&s), Err(ReplayError::Refused(_))));
}

#[test]
fn generated_scripts_run_to_completion() {
    let cfg = vmspace_script::GenConfig { calls: 60, fork: true, ..Default::default() };
    for seed in 0..12 {
        let s = vmspace_script::generate(seed, &cfg);
        let o = replay_kernel(&s).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        // One result line per op but `maps` and `smaps` (blocks): a call's value or a query's answer.
        let calls = o.entries.iter().filter(|e| matches!(e, Entry::Call { .. } | Entry::Text { .. })).count();
        let expected = s
            .lines
            .iter()
            .filter(|l| !matches!(l.op, vmspace_script::Op::Maps | vmspace_script::Op::Smaps { .. }))
            .count();
        assert_eq!(calls, expected, "seed {seed}");
        // Every maps line in the output lies in the arena and parses.
        for l in last_maps(&o) {
            let m: vmspace_proc::MapsLine = l.parse().unwrap();
            assert!(Arena::default().overlaps(m.start, m.end), "{l}");
        }
    }
}

#[test]
fn remove_tree_removes_the_directory_and_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("runner");
    std::fs::create_dir(&d).unwrap();
    for i in 0..300 {
        std::fs::write(d.join(format!("f{i}")), b"x").unwrap();
    }
    let c = std::ffi::CString::new(d.as_os_str().as_encoded_bytes()).unwrap();
    remove_tree(&c);
    assert!(!d.exists());
    remove_tree(&c); // already gone: nothing to do, no panic
}

#[test]
fn progress_counts_the_runners_calls() {
    // Progress is looked at every 250 ms while the runner has written nothing, so a run must outlast that: the
    // script grows until one does (a 2-CPU Xeon VM's runner makes about 1.3 million of these calls a second,
    // so 200,000 can end before the first look).
    for calls in [200_000, 1_000_000, 4_000_000] {
        let mut text = String::from("file f 0x1000\nmmap 0x200000000000 0x10000 rw- private|anon|fixed\n");
        for i in 0..calls {
            text.push_str(if i % 2 == 0 {
                "mprotect 0x200000004000 0x1000 r--\n"
            } else {
                "mprotect 0x200000004000 0x1000 rw-\n"
            });
        }
        let script = Script::parse(&text).unwrap();
        let mut seen = Vec::new();
        let out = replay_kernel_observed(&script, ReplayOptions::default(), &mut |n| seen.push(n)).unwrap();
        assert_eq!(out.call_values().len(), script.lines.len());
        // Never going back, never beyond the calls made (the lines and the final maps read).
        assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
        assert!(seen.iter().all(|&n| n <= script.lines.len() as u64 + 1), "{seen:?}");
        if !seen.is_empty() {
            return;
        }
    }
    panic!("no progress reported, even for a run of 4 million calls");
}
