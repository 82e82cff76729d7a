//! The merge and split scenarios of `mm/vma.c` (`vma_merge_new_range`, `vma_merge_existing_range`,
//! `vma_modify`, `__split_vma`), each as a named test on the engine, plus the merge rules that decide them:
//! flags, files and page-offset continuity, anon_vma compatibility (including the fork-child rule), anonymous
//! names and accounting.
//!
//! As the kernel's own VMA tests (`tools/testing/vma/vma.c`) do, each scenario specifies more than the
//! resulting layout: *which* VMA object covers each range afterwards (the one that was expanded, the original
//! one a split keeps, or a new one), its range and page offset, that every VMA the call changed or created was
//! write-locked in the call's mmap write epoch (`vma_start_write` leaves `vm_lock_seq` equal to the epoch's
//! `mm_lock_seq`), and that every VMA the call removed is detached. Each address space has a private VMA pool,
//! so a removed VMA cannot be handed to another test's address space before it is checked.
//!
//! Pages are numbered from the arena base `B` = 0x200000000000; `[a, b)` is pages a..b. In the pictures,
//! `rw`/`r-` are the protections, `*` marks the range the call changes. An anonymous private VMA's page offset
//! is its start address in pages (`pgoff(a)`).
#![cfg(not(loom))]

use vmspace_mm::Access;
use vmspace_mm::space::{Advice, MapFlags, Prot};
use vmspace_mm::space::{Mm, MmConfig};
use vmspace_mm::vma::{Vma, VmaPool, vm_lock_seq_of};

const B: u64 = 0x2000_0000_0000;
const P: u64 = 4096;

fn pg(n: u64) -> u64 {
    B + n * P
}

/// The page offset of an anonymous private VMA starting at page `n` (`addr >> PAGE_SHIFT`).
fn pgoff(n: u64) -> u64 {
    pg(n) / P
}

fn mm() -> Mm {
    Mm::with_pool(MmConfig { anon_vma_name: true, ..MmConfig::default() }, VmaPool::leak_new())
}

const RW: Prot = Prot::RW;
const R: Prot = Prot::READ;
const ANON_FIXED: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS).union(MapFlags::FIXED);

fn map(m: &mut Mm, a: u64, b: u64, prot: Prot) {
    assert_eq!(m.mmap(pg(a), (b - a) * P, prot, ANON_FIXED, None, 0), Ok(pg(a)));
}

/// The layout as (first page, end page, "rwxp").
fn layout(m: &Mm) -> Vec<(u64, u64, String)> {
    m.validate().expect("valid");
    m.areas()
        .map(|a| {
            let l = m.maps_line(a);
            ((a.start() - B) / P, (a.end() - B) / P, l.perms.to_string())
        })
        .collect()
}

fn l(v: &[(u64, u64, &str)]) -> Vec<(u64, u64, String)> {
    v.iter().map(|(a, b, p)| (*a, *b, p.to_string())).collect()
}

/// The VMA object covering page `n`.
fn at(m: &Mm, n: u64) -> &'static Vma {
    m.lookup(pg(n)).unwrap_or_else(|| panic!("page {n} unmapped: {m:?}"))
}

/// The mmap write epoch the next call runs in: `mm_lock_seq` is even between calls, and the call's
/// `mmap_write_lock` advances it to the next (odd) value.
fn next_epoch(m: &Mm) -> u64 {
    let seq = m.locking().lock_seq();
    assert_eq!(seq % 2, 0, "mmap_lock held between calls");
    seq + 1
}

/// Runs `call` on `m` and returns the epoch it ran in (checked: the call took the mmap write lock once).
fn call(m: &mut Mm, call: impl FnOnce(&mut Mm)) -> u64 {
    let epoch = next_epoch(m);
    call(m);
    assert_eq!(m.locking().lock_seq(), epoch + 1, "one write epoch per call");
    epoch
}

/// Asserts that `v` is the VMA at pages `[a, b)` with page offset `pgoff`, and was write-locked in `epoch`.
#[track_caller]
fn check(m: &Mm, v: &'static Vma, (a, b): (u64, u64), off: u64, epoch: u64) {
    assert!(std::ptr::eq(at(m, a), v), "page {a} is not covered by the expected VMA object: {m:?}");
    assert_eq!((v.start(), v.end()), (pg(a), pg(b)), "range of {v:?}");
    assert_eq!(v.pgoff(), off, "pgoff of {v:?}");
    assert!(!v.is_detached(), "{v:?} detached");
    assert_eq!(v.lock_seq(), vm_lock_seq_of(epoch), "{v:?} not write-locked in the call's epoch {epoch}");
}

/// Asserts that `v` left the address space (detached: no tree maps it).
#[track_caller]
fn gone(v: &'static Vma) {
    assert!(v.is_detached(), "{v:?} should have been removed");
}

/// Asserts that `v` is none of `old`: a VMA the call created.
#[track_caller]
fn fresh(v: &'static Vma, old: &[&'static Vma]) {
    assert!(old.iter().all(|o| !std::ptr::eq(*o, v)), "{v:?} is not a new VMA");
}

/// Scenario 1: Merge both, over an existing VMA (`__mmap_region`: the old middle is unmapped, then
/// `vma_merge_new_range` expands prev over the range and next, which is removed).
/// ```text
/// |prev rw|middle r-|next rw|      mmap rw over middle
/// |prev rw|*********|next rw|  ->  |prev rw---------------|
/// ```
#[test]
fn scenario_01_merge_both_over_existing() {
    let mut m = mm();
    map(&mut m, 0, 2, RW);
    map(&mut m, 2, 4, R);
    map(&mut m, 4, 6, RW);
    assert_eq!(m.map_count(), 3);
    let (prev, middle, next) = (at(&m, 0), at(&m, 2), at(&m, 4));
    let e = call(&mut m, |m| map(m, 2, 4, RW));
    assert_eq!(layout(&m), l(&[(0, 6, "rw-p")]));
    check(&m, prev, (0, 6), pgoff(0), e);
    gone(middle);
    gone(next);
}

/// Scenario 2: Merge left, full: mapping at the end of prev completely over its right neighbour (next is
/// unmapped, prev expands).
/// ```text
/// |prev rw|next r-|      mmap rw over next
/// |prev rw|*******|  ->  |prev rw-------|
/// ```
#[test]
fn scenario_02_merge_left_full() {
    let mut m = mm();
    map(&mut m, 0, 2, RW);
    map(&mut m, 2, 4, R);
    let (prev, next) = (at(&m, 0), at(&m, 2));
    let e = call(&mut m, |m| map(m, 2, 4, RW));
    assert_eq!(layout(&m), l(&[(0, 4, "rw-p")]));
    check(&m, prev, (0, 4), pgoff(0), e);
    gone(next);
}

/// Scenario 3: Merge left, partial: mapping at the end of prev partially over its right neighbour. The unmap
/// splits next at the range's end with the new VMA above (`__split_vma(next, end, new_below = 0)`): next
/// keeps the part that is unmapped and leaves; the remainder is a new VMA with the page offset advanced.
/// ```text
/// |prev rw|next r------|      mmap rw over the head of next
/// |prev rw|****|       |  ->  |prev rw------|new r-|
/// ```
#[test]
fn scenario_03_merge_left_partial() {
    let mut m = mm();
    map(&mut m, 0, 2, RW);
    map(&mut m, 2, 6, R);
    let (prev, next) = (at(&m, 0), at(&m, 2));
    let e = call(&mut m, |m| map(m, 2, 4, RW));
    assert_eq!(layout(&m), l(&[(0, 4, "rw-p"), (4, 6, "r--p")]));
    check(&m, prev, (0, 4), pgoff(0), e);
    let rest = at(&m, 4);
    fresh(rest, &[prev, next]);
    check(&m, rest, (4, 6), pgoff(4), e);
    gone(next);
}

/// Scenario 4: Merge right, full: mapping before next completely over its left neighbour (prev is unmapped,
/// next expands downward and takes the range's page offset).
/// ```text
/// |prev r-|next rw|      mmap rw over prev
/// |*******|next rw|  ->  |next rw-------|
/// ```
#[test]
fn scenario_04_merge_right_full() {
    let mut m = mm();
    map(&mut m, 0, 2, R);
    map(&mut m, 2, 4, RW);
    let (prev, next) = (at(&m, 0), at(&m, 2));
    let e = call(&mut m, |m| map(m, 0, 2, RW));
    assert_eq!(layout(&m), l(&[(0, 4, "rw-p")]));
    check(&m, next, (0, 4), pgoff(0), e);
    gone(prev);
}

/// Scenario 5: Merge right, partial: mapping before next partially over its left neighbour. The unmap splits
/// prev at the range's start with the new VMA below (`__split_vma(prev, start, new_below = 1)`): prev keeps
/// the part that is unmapped and leaves; the remainder is a new VMA. next expands downward.
/// ```text
/// |prev r------|next rw|      mmap rw over the tail of prev
/// |       |****|next rw|  ->  |new r-|next rw------|
/// ```
#[test]
fn scenario_05_merge_right_partial() {
    let mut m = mm();
    map(&mut m, 0, 4, R);
    map(&mut m, 4, 6, RW);
    let (prev, next) = (at(&m, 0), at(&m, 4));
    let e = call(&mut m, |m| map(m, 2, 4, RW));
    assert_eq!(layout(&m), l(&[(0, 2, "r--p"), (2, 6, "rw-p")]));
    check(&m, next, (2, 6), pgoff(2), e);
    let rest = at(&m, 0);
    fresh(rest, &[prev, next]);
    check(&m, rest, (0, 2), pgoff(0), e);
    gone(prev);
}

/// Scenario 6: Merge both without changing existing VMAs: a mapping into the gap between two compatible VMAs
/// (prev expands over the range and next; next is removed).
/// ```text
/// |prev rw|   gap   |next rw|  ->  |prev rw---------------|
/// ```
#[test]
fn scenario_06_merge_both_into_gap() {
    let mut m = mm();
    map(&mut m, 0, 2, RW);
    map(&mut m, 4, 6, RW);
    let (prev, next) = (at(&m, 0), at(&m, 4));
    let e = call(&mut m, |m| map(m, 2, 4, RW));
    assert_eq!(layout(&m), l(&[(0, 6, "rw-p")]));
    check(&m, prev, (0, 6), pgoff(0), e);
    gone(next);
}

/// Scenario 7: Merge left: a mapping right after an existing one (prev expands).
/// ```text
/// |prev rw|*****|  ->  |prev rw-----|
/// ```
#[test]
fn scenario_07_merge_left() {
    let mut m = mm();
    map(&mut m, 0, 2, RW);
    let prev = at(&m, 0);
    let e = call(&mut m, |m| map(m, 2, 4, RW));
    assert_eq!(layout(&m), l(&[(0, 4, "rw-p")]));
    check(&m, prev, (0, 4), pgoff(0), e);
}

/// Scenario 8: Merge right: a mapping right before an existing one (next expands downward, taking the range's
/// page offset).
/// ```text
/// |*****|next rw|  ->  |next rw-----|
/// ```
#[test]
fn scenario_08_merge_right() {
    let mut m = mm();
    map(&mut m, 2, 4, RW);
    let next = at(&m, 2);
    let e = call(&mut m, |m| map(m, 0, 2, RW));
    assert_eq!(layout(&m), l(&[(0, 4, "rw-p")]));
    check(&m, next, (0, 4), pgoff(0), e);
}

/// Scenario 9: Split at the end of the changed range: mprotect of a VMA's head. `vma_modify` splits with the
/// new VMA above (`new_below = 0`), so the original VMA is the one that changes.
/// ```text
/// |v rw---------------|      mprotect r- of the head
/// |****|              |  ->  |v r-|new rw---------|
/// ```
#[test]
fn scenario_09_split_new_vma_below() {
    let mut m = mm();
    map(&mut m, 0, 6, RW);
    let v = at(&m, 0);
    let e = call(&mut m, |m| assert_eq!(m.mprotect(pg(0), 2 * P, R), Ok(())));
    assert_eq!(layout(&m), l(&[(0, 2, "r--p"), (2, 6, "rw-p")]));
    check(&m, v, (0, 2), pgoff(0), e);
    let rest = at(&m, 2);
    fresh(rest, &[v]);
    check(&m, rest, (2, 6), pgoff(2), e);
}

/// Scenario 10: Split at the start of the changed range: mprotect of a VMA's tail. `vma_modify` splits with
/// the new VMA below (`new_below = 1`), so again the original VMA is the one that changes (its page offset
/// advanced).
/// ```text
/// |v rw---------------|      mprotect r- of the tail
/// |              |****|  ->  |new rw-------|v r-|
/// ```
#[test]
fn scenario_10_split_new_vma_above() {
    let mut m = mm();
    map(&mut m, 0, 6, RW);
    let v = at(&m, 0);
    let e = call(&mut m, |m| assert_eq!(m.mprotect(pg(4), 2 * P, R), Ok(())));
    assert_eq!(layout(&m), l(&[(0, 4, "rw-p"), (4, 6, "r--p")]));
    check(&m, v, (4, 6), pgoff(4), e);
    let rest = at(&m, 0);
    fresh(rest, &[v]);
    check(&m, rest, (0, 4), pgoff(0), e);
}

/// mprotect of a middle splits in three around the original VMA (which keeps the middle); restoring it merges
/// all three back (`vma_merge_existing_range`, merge both: prev expands over middle and next, both removed).
#[test]
fn mprotect_middle_splits_and_remerges() {
    let mut m = mm();
    map(&mut m, 0, 6, RW);
    let v = at(&m, 0);
    let e = call(&mut m, |m| m.mprotect(pg(2), 2 * P, R).unwrap());
    assert_eq!(layout(&m), l(&[(0, 2, "rw-p"), (2, 4, "r--p"), (4, 6, "rw-p")]));
    check(&m, v, (2, 4), pgoff(2), e);
    let (lo, hi) = (at(&m, 0), at(&m, 4));
    fresh(lo, &[v]);
    fresh(hi, &[v, lo]);
    check(&m, lo, (0, 2), pgoff(0), e);
    check(&m, hi, (4, 6), pgoff(4), e);
    let e = call(&mut m, |m| m.mprotect(pg(2), 2 * P, RW).unwrap());
    assert_eq!(layout(&m), l(&[(0, 6, "rw-p")]));
    check(&m, lo, (0, 6), pgoff(0), e);
    gone(v);
    gone(hi);
}

/// `vma_merge_existing_range`, merge left: prev expands over the changed range; a partially changed middle
/// shrinks from below (same object, page offset advanced), a fully changed one is removed.
/// ```text
/// |prev r-|middle rw----|      mprotect r- of middle's head     |prev r-|middle rw|      mprotect r- of middle
/// |prev r-|****|        |  ->  |prev r------|middle rw|         |prev r-|********|  ->  |prev r---------|
/// ```
#[test]
fn existing_merge_left_partial_and_full() {
    let mut m = mm();
    map(&mut m, 0, 2, R);
    map(&mut m, 2, 6, RW);
    let (prev, middle) = (at(&m, 0), at(&m, 2));
    let e = call(&mut m, |m| m.mprotect(pg(2), 2 * P, R).unwrap());
    assert_eq!(layout(&m), l(&[(0, 4, "r--p"), (4, 6, "rw-p")]));
    check(&m, prev, (0, 4), pgoff(0), e);
    check(&m, middle, (4, 6), pgoff(4), e);

    let e = call(&mut m, |m| m.mprotect(pg(4), 2 * P, R).unwrap());
    assert_eq!(layout(&m), l(&[(0, 6, "r--p")]));
    check(&m, prev, (0, 6), pgoff(0), e);
    gone(middle);
}

/// `vma_merge_existing_range`, merge right: next expands downward over the changed range (taking its page
/// offset); a partially changed middle shrinks from above (same object), a fully changed one is removed.
/// ```text
/// |middle rw----|next r-|      mprotect r- of middle's tail     |middle rw|next r-|      mprotect r- of middle
/// |        |****|next r-|  ->  |middle rw|next r------|         |*********|next r-|  ->  |next r---------|
/// ```
#[test]
fn existing_merge_right_partial_and_full() {
    let mut m = mm();
    map(&mut m, 0, 4, RW);
    map(&mut m, 4, 6, R);
    let (middle, next) = (at(&m, 0), at(&m, 4));
    let e = call(&mut m, |m| m.mprotect(pg(2), 2 * P, R).unwrap());
    assert_eq!(layout(&m), l(&[(0, 2, "rw-p"), (2, 6, "r--p")]));
    check(&m, next, (2, 6), pgoff(2), e);
    check(&m, middle, (0, 2), pgoff(0), e);

    let e = call(&mut m, |m| m.mprotect(pg(0), 2 * P, R).unwrap());
    assert_eq!(layout(&m), l(&[(0, 6, "r--p")]));
    check(&m, next, (0, 6), pgoff(0), e);
    gone(middle);
}

/// `vma_merge_existing_range`, merge both: prev expands over middle and next, which are both removed.
/// ```text
/// |prev r-|middle rw|next r-|      mprotect r- of middle
/// |prev r-|*********|next r-|  ->  |prev r-----------------|
/// ```
#[test]
fn existing_merge_both() {
    let mut m = mm();
    map(&mut m, 0, 2, R);
    map(&mut m, 2, 4, RW);
    map(&mut m, 4, 6, R);
    let (prev, middle, next) = (at(&m, 0), at(&m, 2), at(&m, 4));
    let e = call(&mut m, |m| m.mprotect(pg(2), 2 * P, R).unwrap());
    assert_eq!(layout(&m), l(&[(0, 6, "r--p")]));
    check(&m, prev, (0, 6), pgoff(0), e);
    gone(middle);
    gone(next);
}

/// munmap of a middle (`vms_gather_munmap_vmas`): the split at the start keeps the unmapped part in the
/// original VMA (`new_below = 1`), the split at the end puts the part above in a new VMA, and munmap never
/// merges: two new VMAs remain around the hole and the original leaves.
#[test]
fn munmap_middle_keeps_new_vmas_around_the_hole() {
    let mut m = mm();
    map(&mut m, 0, 6, RW);
    let v = at(&m, 0);
    let e = call(&mut m, |m| m.munmap(pg(2), 2 * P).unwrap());
    assert_eq!(layout(&m), l(&[(0, 2, "rw-p"), (4, 6, "rw-p")]));
    let (lo, hi) = (at(&m, 0), at(&m, 4));
    fresh(lo, &[v]);
    fresh(hi, &[v, lo]);
    check(&m, lo, (0, 2), pgoff(0), e);
    check(&m, hi, (4, 6), pgoff(4), e);
    gone(v);
}

/// A VMA no call touches is never write-locked by it: the protocol locks exactly what changes.
#[test]
fn untouched_neighbours_are_not_write_locked() {
    let mut m = mm();
    map(&mut m, 0, 2, RW);
    map(&mut m, 3, 5, R);
    map(&mut m, 6, 8, RW);
    let (a, b) = (at(&m, 0), at(&m, 6));
    let e = call(&mut m, |m| m.mprotect(pg(3), 2 * P, RW).unwrap());
    let e = vm_lock_seq_of(e);
    assert_eq!(at(&m, 3).lock_seq(), e);
    assert_ne!(a.lock_seq(), e, "{a:?} was write-locked by a call that does not change it");
    assert_ne!(b.lock_seq(), e, "{b:?} was write-locked by a call that does not change it");
}

/// A read-only mapping never accounted and a writable one made read-only differ in VM_ACCOUNT once the
/// latter was faulted (so they do not merge); an unfaulted one is unaccounted by mprotect and merges.
#[test]
fn account_flag_decides_merges() {
    let mut m = mm();
    map(&mut m, 0, 2, RW);
    m.mprotect(pg(0), 2 * P, R).unwrap();
    map(&mut m, 2, 3, R);
    assert_eq!(layout(&m), l(&[(0, 3, "r--p")]));

    let mut m = mm();
    map(&mut m, 0, 2, RW);
    m.fault(pg(0), Access::Write).unwrap();
    m.mprotect(pg(0), 2 * P, R).unwrap();
    map(&mut m, 2, 3, R);
    assert_eq!(layout(&m), l(&[(0, 2, "r--p"), (2, 3, "r--p")]));
}

/// Two faulted VMAs with different anon_vmas never merge; a split-off part shares its anon_vma and merges
/// back.
#[test]
fn anon_vma_identity_decides_merges() {
    let mut m = mm();
    map(&mut m, 0, 2, RW);
    m.fault(pg(0), Access::Write).unwrap();
    map(&mut m, 3, 5, RW);
    m.fault(pg(3), Access::Write).unwrap();
    map(&mut m, 2, 3, R);
    // Filling the hole with rw: prev and next have different anon_vmas, so only a left merge happens.
    map(&mut m, 2, 3, RW);
    assert_eq!(layout(&m), l(&[(0, 3, "rw-p"), (3, 5, "rw-p")]));

    let mut m = mm();
    map(&mut m, 0, 4, RW);
    m.fault(pg(0), Access::Write).unwrap();
    m.mprotect(pg(2), 2 * P, R).unwrap();
    m.mprotect(pg(2), 2 * P, RW).unwrap();
    assert_eq!(layout(&m), l(&[(0, 4, "rw-p")]));
}

/// A first write fault reuses the anon_vma of an adjacent compatible neighbour (find_mergeable_anon_vma),
/// so the two can merge later.
#[test]
fn fault_reuses_neighbours_anon_vma() {
    let mut m = mm();
    map(&mut m, 0, 4, RW);
    m.mprotect(pg(2), 2 * P, R).unwrap();
    m.fault(pg(0), Access::Write).unwrap();
    m.mprotect(pg(2), 2 * P, RW).unwrap();
    m.fault(pg(2), Access::Write).unwrap();
    let ids: Vec<_> = m.areas().map(|a| a.anon().anon_vma().map(|x| x.id())).collect();
    assert_eq!(ids.len(), 1, "merged back: {m:?}");
    assert!(ids[0].is_some());
}

/// In a fork child, a VMA with an anon_vma has a non-singular chain and refuses to merge with a new
/// neighbour; in the parent the same mapping merges.
#[test]
fn fork_child_does_not_merge_with_new_neighbour() {
    let mut parent = mm();
    map(&mut parent, 0, 2, RW);
    parent.fault(pg(0), Access::Write).unwrap();
    let mut child = parent.fork().unwrap();
    map(&mut child, 2, 4, RW);
    assert_eq!(layout(&child), l(&[(0, 2, "rw-p"), (2, 4, "rw-p")]));
    map(&mut parent, 2, 4, RW);
    assert_eq!(layout(&parent), l(&[(0, 4, "rw-p")]));
}

/// Fork drops DONTCOPY VMAs and gives WIPEONFORK ones no anon_vma.
#[test]
fn fork_flags() {
    let mut parent = mm();
    map(&mut parent, 0, 2, RW);
    map(&mut parent, 3, 5, RW);
    parent.fault(pg(3), Access::Write).unwrap();
    parent.madvise(pg(0), 2 * P, Advice::DONTFORK).unwrap();
    parent.madvise(pg(3), 2 * P, Advice::WIPEONFORK).unwrap();
    let child = parent.fork().unwrap();
    assert_eq!(layout(&child), l(&[(3, 5, "rw-p")]));
    assert!(child.areas().all(|a| !a.anon().is_some()));
    assert!(parent.areas().any(|a| a.anon().is_some()));
}

/// File mappings merge only with the same file and contiguous offsets.
#[test]
fn file_offsets_must_continue() {
    use vmspace_mm::space::VmFile;
    let f = VmFile::regular("/f", 7, 16 * P);
    let g = VmFile::regular("/g", 8, 16 * P);
    let fl = MapFlags::PRIVATE | MapFlags::FIXED;
    let m = mm();
    m.mmap(pg(0), 2 * P, R, fl, Some(&f), 0).unwrap();
    m.mmap(pg(2), 2 * P, R, fl, Some(&f), 2 * P).unwrap();
    m.mmap(pg(4), 2 * P, R, fl, Some(&f), 8 * P).unwrap();
    m.mmap(pg(6), 2 * P, R, fl, Some(&g), 10 * P).unwrap();
    assert_eq!(layout(&m), l(&[(0, 4, "r--p"), (4, 6, "r--p"), (6, 8, "r--p")]));
}

/// Anonymous names take part in merging: differently named neighbours stay apart, same names merge.
#[test]
fn names_decide_merges() {
    let mut m = mm();
    map(&mut m, 0, 4, RW);
    m.set_anon_name(pg(0), 2 * P, Some("a")).unwrap();
    assert_eq!(m.map_count(), 2);
    m.set_anon_name(pg(2), 2 * P, Some("a")).unwrap();
    assert_eq!(m.map_count(), 1);
    let text = m.maps_text();
    assert!(text.ends_with(" [anon:a]\n"), "{text}");
    m.set_anon_name(pg(0), 4 * P, None).unwrap();
    assert!(m.maps_text().ends_with(" 0 \n"));
}
