//! The kernel runner's memory accesses (`touch`, `fill`, `check`) on the live kernel: real CPU loads and
//! stores caught at their faults (`vmspace_linux::uaccess`).
//!
//! Each fault kind gives `-EFAULT <first page>` and leaves the pages before it accessed: unmapped, PROT_NONE,
//! a write to a read-only page, a page beyond the end of its file (SIGBUS), a guard region; a read of a `-w-`
//! or `--x` page succeeds (x86 without protection keys); a fault just below a growsdown VMA grows it. The
//! contents tests hold `fill` and `check` against what Linux does to pages: copy-on-write after fork, a
//! shared file mapping seen through a private one until the private one writes, DONTNEED of anonymous memory
//! (zeros) and of a private file mapping (the file again), WIPEONFORK, ftruncate's zeros, MADV_FREE (the
//! bytes stay until reclaim), mremap growth, moves and DONTUNMAP. Expected hashes are computed with the script
//! crate's content hash (whose known values its own tests pin). The generator's `contents` family runs on the
//! kernel to the end of every script, twice with the same answers.

mod common;

use common::{BASE, rows, run};
use vmspace_linux::replay::{ReplayError, replay_kernel};
use vmspace_script::{
    Arena, ContentHash, Entry, Errno, GenConfig, Op, Output, Script, Value, compare, generate,
};

const P: u64 = 4096;

/// The final maps block as `(start - BASE, end - BASE, perms)`.
fn last_maps(o: &Output) -> Vec<(u64, u64, String)> {
    match o.entries.last() {
        Some(Entry::Maps(lines)) => rows(lines),
        other => panic!("no final maps: {other:?}"),
    }
}

fn fault(page: u64) -> Value {
    Value::Fault(BASE + page * P)
}

/// The hash of runs of bytes: `(byte, count)` in address order.
fn hash(runs: &[(u8, u64)]) -> Value {
    let mut h = ContentHash::new();
    for &(b, n) in runs {
        h.update_repeated(b, n);
    }
    Value::Hash(h.value())
}

const OK: Value = Value::Zero;

#[test]
fn every_fault_kind_is_efault_at_the_first_page() {
    let o = run("file f 0x1800\n\
         mmap 0x200000000000 0x1000 --- private|anon|fixed\n\
         mmap 0x200000001000 0x1000 r-- private|anon|fixed\n\
         mmap 0x200000002000 0x1000 -w- private|anon|fixed\n\
         mmap 0x200000003000 0x1000 --x private|anon|fixed\n\
         mmap 0x200000004000 0x3000 rw- shared|fixed fd=f off=0\n\
         mmap 0x200000008000 0x3000 rw- private|anon|fixed\n\
         madvise 0x200000009000 0x1000 guard_install\n\
         touch 0x200000000000 1 r\n\
         touch 0x200000000000 1 w\n\
         touch 0x200000001000 0x1000 r\n\
         touch 0x200000001000 0x1000 w\n\
         touch 0x200000002000 0x1000 r\n\
         touch 0x200000003000 0x1000 r\n\
         touch 0x200000003000 0x1000 w\n\
         touch 0x200000004000 0x3000 r\n\
         touch 0x200000004000 0x3000 w\n\
         fill 0x200000004ff0 0x1010 1\n\
         check 0x200000004000 0x3000\n\
         touch 0x200000007000 0x1000 r\n\
         touch 0x200000007000 0x1000 w\n\
         touch 0x200000008000 0x3000 w\n\
         check 0x200000008000 0x3000\n\
         fill 0x20000000a000 0x1000 3\n\
         touch 0x200000100000 0x1000 r\n\
         check 0x200000001000 0x3000\n\
         check 0x200000004000 0x2000\n");
    let v = o.call_values();
    assert_eq!(v[0], OK, "the file");
    assert!(v[1..7].iter().all(|x| matches!(x, Value::Addr(_))), "{v:?}");
    assert_eq!(v[7], OK, "guard_install");
    assert_eq!(v[8], fault(0), "read of PROT_NONE");
    assert_eq!(v[9], fault(0), "write of PROT_NONE");
    assert_eq!(v[10], OK, "read of r--");
    assert_eq!(v[11], fault(1), "write of r--");
    assert_eq!(v[12], OK, "read of -w-: x86 pages cannot be write-only");
    assert_eq!(v[13], OK, "read of --x: without protection keys x86 pages cannot be exec-only");
    assert_eq!(v[14], fault(3), "write of --x");
    // The file is 0x1800 bytes: its pages 0 and 1 exist, page 2 is beyond the end (SIGBUS).
    assert_eq!(v[15], fault(6), "read beyond the end of the file");
    assert_eq!(v[16], fault(6), "write beyond the end of the file");
    // The fill wrote page 4's last 16 bytes and all of page 5, inside the file's pages.
    assert_eq!(v[17], OK);
    assert_eq!(v[18], fault(6), "check faults at the page beyond the end of the file");
    assert_eq!(v[19], Value::Fault(BASE + 7 * P), "read of an unmapped page");
    assert_eq!(v[20], fault(7), "write of an unmapped page");
    assert_eq!(v[21], fault(9), "write of a guard region, after page 8");
    assert_eq!(v[22], fault(9), "check of a guard region");
    assert_eq!(v[23], OK, "the page after the guard region");
    assert_eq!(v[24], Value::Fault(BASE + 0x100000), "far away, unmapped");
    // A check from r-- through -w- to --x reads all three (zero pages).
    assert_eq!(v[25], hash(&[(0, 3 * P)]));
    // The file's two pages as the fill left them, seen through the shared mapping.
    assert_eq!(v[26], hash(&[(0, 0xff0), (1, 0x1010)]));
}

#[test]
fn fill_and_check_see_the_bytes_written() {
    let o = run("mmap 0x200000000000 0x3000 rw- private|anon|fixed\n\
         check 0x200000000000 0\n\
         check 0x200000000000 0x1000\n\
         fill 0x200000000000 0x1000 0x5a\n\
         check 0x200000000000 0x1000\n\
         fill 0x200000001800 0x1000 7\n\
         check 0x200000000000 0x3000\n\
         check 0x200000001801 3\n\
         touch 0x200000000000 0x3000 w\n\
         check 0x200000000000 0x3000\n\
         fill 0x200000000000 0 9\n\
         mprotect 0x200000002000 0x1000 r--\n\
         fill 0x200000000000 0x3000 1\n\
         check 0x200000000000 0x3000\n");
    let v = o.call_values();
    // The hash's known values: the empty range, a page of zeros, a page of 0x5a.
    assert_eq!(v[1], Value::Hash(0xcbf2_9ce4_8422_2325));
    assert_eq!(v[2], Value::Hash(0xb93a_0c83_ce3b_6325));
    assert_eq!(v[3], OK);
    assert_eq!(v[4], Value::Hash(0x8ab9_e262_b32d_a325));
    assert_eq!(v[5], OK);
    let filled = hash(&[(0x5a, P), (0, 0x800), (7, P), (0, 0x800)]);
    assert_eq!(v[6], filled);
    assert_eq!(v[7], hash(&[(7, 3)]));
    // touch w is a write access that keeps every byte.
    assert_eq!((v[8], v[9]), (OK, filled));
    assert_eq!(v[10], OK, "fill of nothing");
    // A fill that meets a read-only page wrote the pages before it, and nothing of it.
    assert_eq!((v[11], v[12]), (OK, fault(2)));
    assert_eq!(v[13], hash(&[(1, 2 * P), (7, 0x800), (0, 0x800)]));
    let text = o.render();
    assert!(text.contains("L2 check = 0xcbf29ce484222325\n"), "{text}");
    assert!(text.contains("L3 check = 0xb93a0c83ce3b6325\n"), "{text}");
}

#[test]
fn growsdown_vmas_grow_on_a_fault_just_below() {
    let o = run("mmap 0x200000010000 0x2000 rw- private|anon|fixed|growsdown\n\
         touch 0x20000000f000 1 r\n\
         fill 0x20000000d000 0x1000 4\n\
         check 0x20000000d000 0x3000\n\
         mmap 0x200000030000 0x1000 --- private|anon|fixed|growsdown\n\
         touch 0x20000002f000 1 r\n");
    let v = o.call_values();
    assert_eq!(v[1], OK, "a read just below grows the stack by one page");
    assert_eq!(v[2], OK, "a write two pages below grows it again");
    assert_eq!(v[3], hash(&[(4, P), (0, 2 * P)]));
    // A PROT_NONE growsdown VMA grows, then the access fails.
    assert_eq!(v[5], fault(0x2f));
    assert_eq!(
        last_maps(&o),
        vec![(0xd000, 0x12000, "rw-p".to_string()), (0x2f000, 0x31000, "---p".to_string())]
    );
}

#[test]
fn private_pages_are_copied_on_write_across_fork() {
    let o = run("mmap 0x200000000000 0x2000 rw- private|anon|fixed\n\
         mmap 0x200000002000 0x1000 rw- shared|anon|fixed\n\
         mmap 0x200000003000 0x1000 rw- private|anon|fixed\n\
         mmap 0x200000005000 0x1000 rw- private|anon|fixed\n\
         fill 0x200000000000 0x4000 0x11\n\
         fill 0x200000005000 0x1000 0x12\n\
         madvise 0x200000003000 0x1000 wipeonfork\n\
         madvise 0x200000005000 0x1000 dontfork\n\
         fork\n\
         check 0x200000000000 0x3000\n\
         check 0x200000003000 0x1000\n\
         check 0x200000005000 0x1000\n\
         fill 0x200000001000 0x1000 0x22\n\
         check 0x200000000000 0x2000\n");
    let v = o.call_values();
    assert_eq!(v[8], OK, "fork");
    assert_eq!(v[9], hash(&[(0x11, 3 * P)]), "the child sees the parent's bytes, private and shared");
    assert_eq!(v[10], hash(&[(0, P)]), "WIPEONFORK: zeros in the child");
    assert_eq!(v[11], fault(5), "DONTFORK: not in the child");
    assert_eq!(v[13], hash(&[(0x11, P), (0x22, P)]), "the child's write copies only its page");
}

#[test]
fn a_shared_file_mapping_shows_through_a_private_one_until_it_writes() {
    let o = run("file f 0x3000\n\
         mmap 0x200000000000 0x3000 rw- shared|fixed fd=f off=0\n\
         mmap 0x200000010000 0x3000 rw- private|fixed fd=f off=0\n\
         fill 0x200000000000 0x3000 7\n\
         check 0x200000010000 0x3000\n\
         fill 0x200000010000 0x1000 9\n\
         fill 0x200000000000 0x3000 3\n\
         check 0x200000010000 0x3000\n\
         madvise 0x200000010000 0x3000 dontneed\n\
         check 0x200000010000 0x3000\n\
         mmap 0x200000020000 0x1000 rw- private|anon|fixed\n\
         fill 0x200000020000 0x1000 5\n\
         madvise 0x200000020000 0x1000 dontneed\n\
         check 0x200000020000 0x1000\n");
    let v = o.call_values();
    assert_eq!(v[4], hash(&[(7, 3 * P)]), "the private mapping reads the shared one's bytes");
    assert_eq!(v[7], hash(&[(9, P), (3, 2 * P)]), "until it writes a page: that page is its own");
    assert_eq!(v[9], hash(&[(3, 3 * P)]), "DONTNEED of a private file mapping: the file again");
    assert_eq!(v[13], hash(&[(0, P)]), "DONTNEED of anonymous memory: zeros");
}

#[test]
fn ftruncate_drops_the_bytes_beyond_the_new_end() {
    let o = run("file f 0x2000\n\
         mmap 0x200000000000 0x2000 rw- shared|fixed fd=f off=0\n\
         fill 0x200000000000 0x2000 0x33\n\
         ftruncate f 0x1800\n\
         check 0x200000000000 0x2000\n\
         ftruncate f 0x800\n\
         check 0x200000001000 0x1000\n\
         ftruncate f 0x2000\n\
         check 0x200000000000 0x2000\n");
    let v = o.call_values();
    // Shrinking inside a page zeroes the page's tail (`truncate_inode_partial_folio`); shrinking below a page
    // drops it (SIGBUS); growing brings back zeros.
    assert_eq!(v[4], hash(&[(0x33, P + 0x800), (0, 0x800)]));
    assert_eq!(v[6], fault(1));
    assert_eq!(v[8], hash(&[(0x33, 0x800), (0, 0x1800)]));
}

#[test]
fn huge_lengths_walk_page_by_page_to_the_first_fault() {
    // A length to 2^64 stops at the first unmapped page; nothing is allocated per byte. (A write of such a
    // length reaches the runner's memory range: refused, see below.)
    let o = run("mmap 0x200000000000 0x2000 rw- private|anon|fixed\n\
         fill 0x200000000000 0x2000 1\n\
         check 0x200000000000 0xffffffffffffffff\n\
         touch 0x200000000000 0xffffffffffffffff r\n\
         check 0x200000000000 0x2000\n\
         check 0xfffffffffffff000 0x1000\n\
         check 0x800000000000 1\n\
         fill 0x7ffffffff000 0x1000 1\n");
    let v = o.call_values();
    assert_eq!(v[1..4], [OK, fault(2), fault(2)]);
    assert_eq!(v[4], hash(&[(1, 2 * P)]));
    assert_eq!(v[5], Value::Fault(0xffff_ffff_ffff_f000), "the kernel's half");
    assert_eq!(v[6], Value::Fault(0x8000_0000_0000), "not canonical");
    assert_eq!(v[7], Value::Fault(0x7fff_ffff_f000), "the page at TASK_SIZE");
}

#[test]
fn writes_to_the_runners_own_memory_are_refused_reads_are_not() {
    let probe = 0u8;
    let page = (&raw const probe as u64) & !(P - 1);
    for op in [format!("fill {page:#x} 1 0"), format!("touch {page:#x} 1 w")] {
        let s = Script::parse(&op).unwrap();
        assert!(matches!(replay_kernel(&s), Err(ReplayError::Refused(_))), "{op}");
    }
    // A fill that starts in the arena and runs on towards the runner is refused too (it could reach it).
    let s = Script::parse("fill 0x200000000000 0x7fffffffffffffff 0\n").unwrap();
    assert!(matches!(replay_kernel(&s), Err(ReplayError::Refused(_))));
    let o = run(&format!("check {page:#x} 1\ntouch {page:#x} 1 r\n"));
    let v = o.call_values();
    assert!(matches!(v[0], Value::Hash(_)), "{v:?}");
    assert_eq!(v[1], OK);
    assert_ne!(v[0], Value::Err(Errno::EFAULT));
}

#[test]
fn madv_free_keeps_the_bytes_until_reclaim_and_a_write_keeps_the_page() {
    // The generator's `contents` family checks after MADV_FREE: nothing reclaims a short script's pages on a
    // machine with free memory, so the bytes read back; a page written after FREE is no longer lazily free.
    let o = run("mmap 0x200000000000 0x3000 rw- private|anon|fixed\n\
         fill 0x200000000000 0x3000 7\n\
         madvise 0x200000000000 0x3000 free\n\
         check 0x200000000000 0x3000\n\
         fill 0x200000001000 0x10 9\n\
         check 0x200000000000 0x3000\n\
         madvise 0x200000000000 0x3000 cold\n\
         check 0x200000000000 0x3000\n");
    let v = o.call_values();
    assert_eq!(v[3], hash(&[(7, 3 * P)]), "FREE: the bytes stay until reclaim");
    let written = hash(&[(7, P), (9, 0x10), (7, P - 0x10), (7, P)]);
    assert_eq!(v[5], written);
    assert_eq!((v[6], v[7]), (OK, written), "COLD changes no byte");
}

#[test]
fn mremap_carries_the_bytes_and_dontunmap_leaves_the_old_range_empty() {
    let o = run("mmap 0x200000000000 0x2000 rw- private|anon|fixed\n\
         fill 0x200000000000 0x2000 1\n\
         mremap 0x200000000000 0x2000 0x3000 0\n\
         check 0x200000000000 0x3000\n\
         mremap 0x200000000000 0x3000 0x4000 maymove|fixed 0x200000010000\n\
         check 0x200000010000 0x4000\n\
         check 0x200000000000 0x1000\n\
         mremap 0x200000010000 0x4000 0x4000 maymove|fixed|dontunmap 0x200000020000\n\
         check 0x200000010000 0x4000\n\
         check 0x200000020000 0x4000\n\
         mmap 0x200000030000 0x1000 rw- shared|anon|fixed\n\
         fill 0x200000030000 0x1000 2\n\
         mremap 0x200000030000 0x1000 0x1000 maymove|fixed|dontunmap 0x200000040000\n\
         check 0x200000030000 0x1000\n\
         check 0x200000040000 0x1000\n");
    let v = o.call_values();
    assert_eq!(v[2], Value::Addr(BASE), "grown in place");
    assert_eq!(v[3], hash(&[(1, 2 * P), (0, P)]), "the new page is a zero page");
    assert_eq!(v[5], hash(&[(1, 2 * P), (0, 2 * P)]), "moved and grown: the bytes came along");
    assert_eq!(v[6], fault(0), "the old place is unmapped");
    assert_eq!(v[8], hash(&[(0, 4 * P)]), "DONTUNMAP: the old private range is mapped and empty");
    assert_eq!(v[9], hash(&[(1, 2 * P), (0, 2 * P)]));
    assert_eq!((v[13], v[14]), (hash(&[(2, P)]), hash(&[(2, P)])), "DONTUNMAP of shared memory: one object");
}

/// The generator's `contents` family on the live kernel: every script runs to its end, twice with the same
/// output (addresses outside the arena aside: the kernel's answers do not depend on chance, module docs of
/// `vmspace_script::generate`, "Page contents"), and its fills and checks both succeed and fault.
#[test]
fn generated_contents_scripts_run_and_repeat_on_the_kernel() {
    let cfg = GenConfig { calls: 120, fork: true, ..GenConfig::default() };
    let (mut filled, mut hashed, mut faulted) = (0, 0, 0);
    for seed in 0..16 {
        let s = generate(seed, &cfg);
        let first = replay_kernel(&s).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        let again = replay_kernel(&s).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        if let Some(d) = compare(&first, &again, Arena::default(), ("first run", "second run")) {
            panic!("seed {seed}: the kernel answered differently:\n{d}");
        }
        // One result line per op but `maps` and `smaps` (blocks): a call's value or a query's answer.
        let calls =
            first.entries.iter().filter(|e| matches!(e, Entry::Call { .. } | Entry::Text { .. })).count();
        let ops = s.lines.iter().filter(|l| !matches!(l.op, Op::Maps | Op::Smaps { .. })).count();
        assert_eq!(calls, ops, "seed {seed}");
        for e in &first.entries {
            match e {
                Entry::Call { op, value: Value::Zero, .. } if op == "fill" => filled += 1,
                Entry::Call { op, value: Value::Hash(_), .. } if op == "check" => hashed += 1,
                Entry::Call { op, value: Value::Fault(_), .. } if op == "fill" || op == "check" => {
                    faulted += 1
                }
                _ => {}
            }
        }
    }
    assert!(filled > 20 && hashed > 20 && faulted > 10, "{filled} fills, {hashed} checks, {faulted} faults");
}

/// A growsdown VMA at the arena's base grows below it on an access there; the pages it grows by are the
/// script's, so later writes and calls on them run instead of being refused as the runner's own memory.
#[test]
fn pages_a_script_stack_grows_by_below_the_arena_are_the_scripts() {
    let o = run("mmap 0x200000000000 0x2000 rw- private|anon|fixed|growsdown\n\
         touch 0x1fffffffe000 1 r\n\
         fill 0x1fffffffe000 0x1000 5\n\
         check 0x1fffffffe000 0x4000\n\
         mremap 0x1ffffffff000 0x1000 0x1000 maymove|fixed 0x200000010000\n\
         munmap 0x1fffffffe000 0x1000\n\
         touch 0x1fffffffe000 0x1000 w\n");
    let v = o.call_values();
    assert_eq!(v[1..4], [OK, OK, hash(&[(5, P), (0, 3 * P)])]);
    assert_eq!((v[4], v[5], v[6]), (Value::Addr(BASE + 0x10000), OK, OK));
    let maps: Vec<(u64, u64)> = match o.entries.last() {
        Some(Entry::Maps(lines)) => lines
            .iter()
            .map(|l| l.parse::<vmspace_proc::MapsLine>().map(|m| (m.start, m.end)).unwrap())
            .collect(),
        other => panic!("no final maps: {other:?}"),
    };
    assert_eq!(maps, vec![(BASE - 2 * P, BASE + 2 * P), (BASE + 0x10000, BASE + 0x11000)]);
}
