//! Edge cases of the public API: argument errors (errno values), empty trees, the whole key space, entry
//! types, mode switches.

use std::num::{NonZeroU64, NonZeroUsize};

use vmspace_maple::{Entry, MapleError, MapleTree, NonRcuMapleTree, PausedCursor};

fn nz(x: usize) -> NonZeroUsize {
    NonZeroUsize::new(x).unwrap()
}

#[test]
fn errno_values() {
    assert_eq!(MapleError::NoMem.errno(), 12);
    assert_eq!(MapleError::Exists.errno(), 17);
    assert_eq!(MapleError::Invalid.errno(), 22);
    assert_eq!(MapleError::Busy.errno(), 16);
    assert_eq!(MapleError::Busy.to_string(), "EBUSY");
}

#[test]
fn bad_arguments_change_nothing() {
    let t = MapleTree::<NonZeroUsize>::new();
    t.store_range(10, 20, Some(nz(1))).unwrap();
    assert_eq!(t.store_range(5, 4, Some(nz(2))), Err(MapleError::Invalid));
    assert_eq!(t.insert_range(5, 4, nz(2)), Err(MapleError::Invalid));
    assert_eq!(t.erase_range(9, 8), Err(MapleError::Invalid));
    assert_eq!(t.insert_range(20, 30, nz(3)), Err(MapleError::Exists));
    assert_eq!(t.empty_area(0, 100, 0), Err(MapleError::Invalid));
    assert_eq!(t.empty_area(50, 40, 1), Err(MapleError::Invalid));
    assert_eq!(t.empty_area(0, 9, 11), Err(MapleError::Invalid));
    assert_eq!(t.empty_area_rev(0, 9, 11), Err(MapleError::Invalid));
    assert_eq!(t.empty_area(10, 20, 1), Err(MapleError::Busy));
    assert_eq!(t.empty_area(10, 21, 2), Err(MapleError::Busy));
    assert_eq!(t.empty_area(10, 22, 2), Ok(21));
    assert_eq!(t.empty_area_rev(0, 20, 10), Ok(0));
    assert_eq!(t.empty_area_rev(0, 20, 11), Err(MapleError::Busy));
    assert_eq!(t.len(), 1);
    t.validate().unwrap();
}

#[test]
fn from_sorted_rejects_bad_input() {
    let v = |x| nz(x);
    assert_eq!(MapleTree::from_sorted([(5, 4, v(1))]).err(), Some(MapleError::Invalid));
    assert_eq!(MapleTree::from_sorted([(5, 9, v(1)), (9, 12, v(2))]).err(), Some(MapleError::Invalid));
    assert_eq!(MapleTree::from_sorted([(10, 19, v(1)), (0, 5, v(2))]).err(), Some(MapleError::Invalid));
    assert_eq!(MapleTree::from_sorted([(0, u64::MAX, v(1)), (0, 0, v(2))]).err(), Some(MapleError::Invalid));
    let t = MapleTree::from_sorted([(0, u64::MAX, v(1))]).unwrap();
    t.validate().unwrap();
    assert_eq!(t.load(12345), Some(v(1)));
    let e = MapleTree::<NonZeroUsize>::from_sorted([]).unwrap();
    assert!(e.is_empty());
    e.validate().unwrap();
    let big = MapleTree::from_sorted((0..10_000u64).map(|k| (k * 3, k * 3 + 1, v(k as usize + 1)))).unwrap();
    big.validate().unwrap();
    assert_eq!(big.len(), 10_000);
    assert_eq!(big.load(3 * 777 + 1), Some(v(778)));
    assert_eq!(big.load(3 * 777 + 2), None);
}

#[test]
fn empty_tree_reads() {
    let t = MapleTree::<NonZeroUsize>::new();
    assert_eq!(t.load(0), None);
    assert_eq!(t.load(u64::MAX), None);
    assert_eq!(t.find(0, u64::MAX), None);
    assert_eq!(t.find_rev(u64::MAX, 0), None);
    assert_eq!(t.empty_area(0, u64::MAX, u64::MAX), Ok(0));
    assert_eq!(t.empty_area_rev(100, 200, 10), Ok(191));
    assert_eq!(t.erase(5), None);
    let g = vmspace_rcu::pin();
    let mut c = t.cursor(&g);
    assert!(c.find(u64::MAX).is_none());
    assert!(c.find_rev(0).is_none());
    assert!(c.next(u64::MAX).is_none());
    let d = t.dup(|_, _, x| Ok::<_, ()>(x), |_| {}).unwrap();
    assert!(d.is_empty());
    assert_eq!(t.node_stats().live, 0);
}

#[test]
fn whole_key_space_and_back_to_empty() {
    let t = MapleTree::<NonZeroUsize>::new();
    t.store_range(0, u64::MAX, Some(nz(9))).unwrap();
    t.validate().unwrap();
    assert_eq!(t.find(u64::MAX, u64::MAX), Some((0, u64::MAX, nz(9))));
    assert_eq!(t.empty_area(0, u64::MAX, 1), Err(MapleError::Busy));
    for k in 0..500u64 {
        t.store_range(k * 100, k * 100 + 49, None).unwrap();
    }
    t.validate().unwrap();
    assert_eq!(t.len(), 500);
    assert_eq!(t.empty_area_rev(0, u64::MAX, 50), Ok(49_900));
    let r = t.erase_range(0, u64::MAX).unwrap();
    assert_eq!(r.len(), 500);
    assert_eq!(r[0], (50, 99, nz(9)));
    assert_eq!(*r.last().unwrap(), (49_950, u64::MAX, nz(9)));
    assert!(t.is_empty());
    t.validate().unwrap();
    assert_eq!(t.lock().height(), 0);
    assert_eq!(t.node_stats().live, 0);
}

#[test]
fn entry_types_round_trip() {
    static A: u32 = 7;
    static B: u32 = 8;
    let t = MapleTree::<&'static u32>::new();
    t.store_range(1, 2, Some(&A)).unwrap();
    t.store_range(3, 3, Some(&B)).unwrap();
    assert_eq!(*t.load(2).unwrap(), 7);
    assert!(std::ptr::eq(t.load(3).unwrap(), &B));
    let u = MapleTree::<NonZeroU64>::new();
    let x = NonZeroU64::new(u64::MAX).unwrap();
    u.store_range(5, 5, Some(x)).unwrap();
    assert_eq!(u.load(5), Some(x));
    // SAFETY: a raw word produced by `into_raw` of the same type.
    assert_eq!(unsafe { NonZeroU64::from_raw(x.into_raw()) }, x);
}

#[test]
fn mode_switch_and_paused_cursor() {
    // Filled in non-RCU mode (in place, exclusive), then switched to RCU mode and shared.
    let mut private = NonRcuMapleTree::<NonZeroUsize>::new();
    for k in 0..300u64 {
        private.store_range(k * 10, k * 10 + 4, Some(nz(k as usize + 1))).unwrap();
    }
    private.validate().unwrap();
    let stats = private.node_stats();
    let t = private.into_rcu();
    t.validate().unwrap();
    assert_eq!(t.node_stats(), stats, "the switch keeps the nodes");
    assert_eq!(t.len(), 300);
    for k in 0..300u64 {
        t.store_range(k * 10 + 5, k * 10 + 6, Some(nz(1000))).unwrap();
    }
    t.validate().unwrap();
    assert_eq!(t.len(), 600);
    // A paused cursor resumes after the last entry it returned, under a new guard.
    let mut p = PausedCursor::at(0, 14);
    let mut seen = 0;
    loop {
        let g = vmspace_rcu::pin();
        let mut c = p.resume(&t, &g);
        match c.find(u64::MAX) {
            Some((s, _, _)) => {
                assert!(s >= 15);
                seen += 1;
            }
            None => break,
        }
        p = c.into_paused();
    }
    assert_eq!(seen, 600 - 3);
}

#[test]
fn tree_is_send_and_sync() {
    fn check<X: Send + Sync>() {}
    check::<MapleTree<NonZeroUsize>>();
    check::<MapleTree<&'static u64>>();
    check::<NonRcuMapleTree<NonZeroUsize>>();
    check::<PausedCursor>();
}

/// `dup_ahead` shows every value to the look-ahead once, in order, each before `map` gets it, at most two
/// leaves' worth of values ahead of `map`, and (past the first leaf of a parent) more than the rest of the
/// current leaf ahead.
#[test]
fn dup_ahead_sees_each_leaf_before_it_is_mapped() {
    // Built in one go (no store retires nodes to RCU: under Miri, whose process ends before their grace period,
    // the allocation domain they hold would be reported as leaked).
    let t = MapleTree::from_sorted((0..400u64).map(|k| (k * 10, k * 10 + 4, nz(k as usize + 1)))).unwrap();
    let seen = std::cell::RefCell::new(Vec::new());
    let ahead_counts = std::cell::RefCell::new(Vec::new());
    let mut mapped = Vec::new();
    let d = t
        .dup_ahead(
            |x| seen.borrow_mut().push(x.get()),
            |_, _, x| {
                let seen = seen.borrow();
                assert!(seen.contains(&x.get()), "{x} mapped before the look-ahead saw it");
                assert!(seen.len() - mapped.len() <= 32, "more than two leaves ahead");
                ahead_counts.borrow_mut().push(seen.len() - mapped.len());
                mapped.push(x.get());
                Ok::<_, ()>(x)
            },
            |_| {},
        )
        .unwrap();
    d.validate().unwrap();
    let want: Vec<usize> = (1..=400).collect();
    assert_eq!(seen.into_inner(), want);
    assert_eq!(mapped, want);
    assert_eq!(d.len(), t.len());
    // Most values are mapped with a whole leaf (at least 8 values here) queued beyond the current one.
    let far = ahead_counts.borrow().iter().filter(|&&k| k > 8).count();
    assert!(far * 2 > want.len(), "the look-ahead runs a leaf ahead only {far} times of {}", want.len());
}

/// A few cursor reads, steps and stores on entries that are references (their provenance crosses the
/// slot words: `cargo miri test -p vmspace-maple --test api cursor` checks the values read back are usable).
#[test]
fn write_cursor_round_trip_with_references() {
    static V: [u64; 40] = {
        let mut a = [0u64; 40];
        let mut i = 0;
        while i < 40 {
            a[i] = i as u64 * 3;
            i += 1;
        }
        a
    };
    let t = MapleTree::<&'static u64>::new();
    let mut w = t.lock();
    let mut c = w.cursor(0);
    for (k, v) in V.iter().enumerate() {
        let k = k as u64;
        c.store_range(10 * k, 10 * k + 4, Some(v)).unwrap();
    }
    c.set(0);
    let mut seen = 0u64;
    while let Some((f, l, v)) = c.find(u64::MAX) {
        assert_eq!((l - f, *v), (4, f / 10 * 3));
        seen += 1;
        c.set(l + 1);
    }
    assert_eq!(seen, 40);
    c.set(205);
    assert_eq!(c.prev(0).map(|(f, _, v)| (f, *v)), Some((200, 60)));
    assert_eq!(c.next(u64::MAX).map(|(f, _, v)| (f, *v)), Some((210, 63)));
    assert_eq!(c.erase().unwrap().map(|(f, l, _)| (f, l)), Some((210, 214)));
    assert_eq!(c.load(), None);
    drop(w);
    t.validate().unwrap();
    assert_eq!(t.len(), 39);
}
