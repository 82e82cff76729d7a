//! The ten merge/split scenarios of seed 001 (§3.5 of the reference), each as a named test on the engine,
//! plus the merge rules that decide them (§6.1): flags, files and page-offset continuity, anon_vma
//! compatibility (including the fork-child rule), anonymous names and accounting.
//!
//! Pages are numbered from the arena base `B` = 0x200000000000; `[a, b)` is pages a..b. In the pictures,
//! `rw`/`r-` are the protections, `*` marks the range the call changes.
#![cfg(not(loom))]

use vmspace_mm::space::{Advice, MapFlags, Prot};
use vmspace_mm::space::{Mm, MmConfig};

const B: u64 = 0x2000_0000_0000;
const P: u64 = 4096;

fn pg(n: u64) -> u64 {
    B + n * P
}

fn mm() -> Mm {
    Mm::new(MmConfig { anon_vma_name: true, ..MmConfig::default() })
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

/// 1. Merge both, over an existing VMA: the new mapping replaces `middle` and joins prev and next.
/// ```text
/// |prev rw|middle r-|next rw|      mmap rw over middle
/// |prev rw|*********|next rw|  ->  |rw---------------------|
/// ```
#[test]
fn scenario_01_merge_both_over_existing() {
    let mut m = mm();
    map(&mut m, 0, 2, RW);
    map(&mut m, 2, 4, R);
    map(&mut m, 4, 6, RW);
    assert_eq!(m.map_count(), 3);
    map(&mut m, 2, 4, RW);
    assert_eq!(layout(&m), l(&[(0, 6, "rw-p")]));
}

/// 2. Merge left, full: mapping at the end of prev completely over its right neighbour.
/// ```text
/// |prev rw|next r-|      mmap rw over next
/// |prev rw|*******|  ->  |rw-------------|
/// ```
#[test]
fn scenario_02_merge_left_full() {
    let mut m = mm();
    map(&mut m, 0, 2, RW);
    map(&mut m, 2, 4, R);
    map(&mut m, 2, 4, RW);
    assert_eq!(layout(&m), l(&[(0, 4, "rw-p")]));
}

/// 3. Merge left, partial: mapping at the end of prev partially over its right neighbour (which shrinks).
/// ```text
/// |prev rw|next r------|      mmap rw over the head of next
/// |prev rw|****|       |  ->  |rw-----------|r-----|
/// ```
#[test]
fn scenario_03_merge_left_partial() {
    let mut m = mm();
    map(&mut m, 0, 2, RW);
    map(&mut m, 2, 6, R);
    map(&mut m, 2, 4, RW);
    assert_eq!(layout(&m), l(&[(0, 4, "rw-p"), (4, 6, "r--p")]));
}

/// 4. Merge right, full: mapping before next completely over its left neighbour.
/// ```text
/// |prev r-|next rw|      mmap rw over prev
/// |*******|next rw|  ->  |rw-------------|
/// ```
#[test]
fn scenario_04_merge_right_full() {
    let mut m = mm();
    map(&mut m, 0, 2, R);
    map(&mut m, 2, 4, RW);
    map(&mut m, 0, 2, RW);
    assert_eq!(layout(&m), l(&[(0, 4, "rw-p")]));
}

/// 5. Merge right, partial: mapping before next partially over its left neighbour (which shrinks).
/// ```text
/// |prev r------|next rw|      mmap rw over the tail of prev
/// |       |****|next rw|  ->  |r-----|rw-----------|
/// ```
#[test]
fn scenario_05_merge_right_partial() {
    let mut m = mm();
    map(&mut m, 0, 4, R);
    map(&mut m, 4, 6, RW);
    map(&mut m, 2, 4, RW);
    assert_eq!(layout(&m), l(&[(0, 2, "r--p"), (2, 6, "rw-p")]));
}

/// 6. Merge both without changing existing VMAs: a mapping into the gap between two compatible VMAs.
/// ```text
/// |prev rw|   gap   |next rw|  ->  |rw---------------------|
/// ```
#[test]
fn scenario_06_merge_both_into_gap() {
    let mut m = mm();
    map(&mut m, 0, 2, RW);
    map(&mut m, 4, 6, RW);
    map(&mut m, 2, 4, RW);
    assert_eq!(layout(&m), l(&[(0, 6, "rw-p")]));
}

/// 7. Merge left: a mapping right after an existing one.
/// ```text
/// |prev rw|*****|  ->  |rw-----------|
/// ```
#[test]
fn scenario_07_merge_left() {
    let mut m = mm();
    map(&mut m, 0, 2, RW);
    map(&mut m, 2, 4, RW);
    assert_eq!(layout(&m), l(&[(0, 4, "rw-p")]));
}

/// 8. Merge right: a mapping right before an existing one.
/// ```text
/// |*****|next rw|  ->  |rw-----------|
/// ```
#[test]
fn scenario_08_merge_right() {
    let mut m = mm();
    map(&mut m, 2, 4, RW);
    map(&mut m, 0, 2, RW);
    assert_eq!(layout(&m), l(&[(0, 4, "rw-p")]));
}

/// 9. Split with the new VMA at the lower address: mprotect of a VMA's head.
/// ```text
/// |rw-----------------|      mprotect r- of the head
/// |****|              |  ->  |r-|rw-------------|
/// ```
#[test]
fn scenario_09_split_new_vma_below() {
    let mut m = mm();
    map(&mut m, 0, 6, RW);
    assert_eq!(m.mprotect(pg(0), 2 * P, R), Ok(()));
    assert_eq!(layout(&m), l(&[(0, 2, "r--p"), (2, 6, "rw-p")]));
}

/// 10. Split with the new VMA at the higher address: mprotect of a VMA's tail.
/// ```text
/// |rw-----------------|      mprotect r- of the tail
/// |              |****|  ->  |rw-------------|r-|
/// ```
#[test]
fn scenario_10_split_new_vma_above() {
    let mut m = mm();
    map(&mut m, 0, 6, RW);
    assert_eq!(m.mprotect(pg(4), 2 * P, R), Ok(()));
    assert_eq!(layout(&m), l(&[(0, 4, "rw-p"), (4, 6, "r--p")]));
}

/// mprotect of a middle splits in three; restoring it merges all three back (merge both of an existing
/// range).
#[test]
fn mprotect_middle_splits_and_remerges() {
    let mut m = mm();
    map(&mut m, 0, 6, RW);
    m.mprotect(pg(2), 2 * P, R).unwrap();
    assert_eq!(layout(&m), l(&[(0, 2, "rw-p"), (2, 4, "r--p"), (4, 6, "rw-p")]));
    m.mprotect(pg(2), 2 * P, RW).unwrap();
    assert_eq!(layout(&m), l(&[(0, 6, "rw-p")]));
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
    m.fault(pg(0), true).unwrap();
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
    m.fault(pg(0), true).unwrap();
    map(&mut m, 3, 5, RW);
    m.fault(pg(3), true).unwrap();
    map(&mut m, 2, 3, R);
    // Filling the hole with rw: prev and next have different anon_vmas, so only a left merge happens.
    map(&mut m, 2, 3, RW);
    assert_eq!(layout(&m), l(&[(0, 3, "rw-p"), (3, 5, "rw-p")]));

    let mut m = mm();
    map(&mut m, 0, 4, RW);
    m.fault(pg(0), true).unwrap();
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
    m.fault(pg(0), true).unwrap();
    m.mprotect(pg(2), 2 * P, RW).unwrap();
    m.fault(pg(2), true).unwrap();
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
    parent.fault(pg(0), true).unwrap();
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
    parent.fault(pg(3), true).unwrap();
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
    let mut m = mm();
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

/// munmap never merges: unmapping the middle of three leaves two separate VMAs even though re-mapping
/// would merge them.
#[test]
fn munmap_splits_without_merging() {
    let mut m = mm();
    map(&mut m, 0, 6, RW);
    m.munmap(pg(2), 2 * P).unwrap();
    assert_eq!(layout(&m), l(&[(0, 2, "rw-p"), (4, 6, "rw-p")]));
}
