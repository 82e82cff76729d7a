//! Multi-threaded stress: readers keep checking that ranges that never change are always found (load,
//! load_range, find, find_rev) and that cursor iteration never goes backwards (each entry ends after the last) and never skips a stable range,
//! while a writer churns the neighbouring ranges (node stores, splits, spanning stores, erasures that shrink
//! the tree). Runs `MAPLE_STRESS_MS` milliseconds (default 1500).
//!
//! Two more windows are tiled by entries whose values encode their own range, moved by the in-place stores
//! (slot stores, appends) and by leaf copies: in the first every value encodes its entry's last index, and
//! the writer only stores over `[first of an entry, any later index]` (the entries after keep their last
//! index); in the second every value encodes its first index, and the writer stores over `[any index, last of
//! an entry]`. A reader that combined a range of one state of a leaf with a value of another would see a value
//! that does not encode its range: readers check every entry they see in the windows (load_range and cursor
//! passes both ways). The test also requires the in-place paths to have been taken. It runs twice: with the
//! writer storing through its [`Writer`] (every store walks from the root), and through one [`WriteCursor`]
//! taken up again in each of the writer's lock sessions (`Writer::resume_cursor`), whose stores start from the
//! cached path.

use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vmspace_maple::{MapleTree, WriteCursor, Writer};

type V = NonZeroUsize;

const STABLE: u64 = 300;
const STRIDE: u64 = 1000;
const WIDTH: u64 = 100;

fn stable_val(k: u64) -> usize {
    (k as usize + 1) << 20
}

/// The window whose values encode their entry's last index, and the one whose values encode its first.
const WIN_LAST: (u64, u64) = (1_000_000, 1_000_399);
const WIN_FIRST: (u64, u64) = (2_000_000, 2_000_399);

fn enc_last(e: u64) -> V {
    NonZeroUsize::new((e as usize) << 2 | 1).unwrap()
}

fn enc_first(s: u64) -> V {
    NonZeroUsize::new((s as usize) << 2 | 2).unwrap()
}

/// Checks one entry seen in a window: its value encodes its range.
fn check_window_entry(s: u64, e: u64, v: V) {
    if (WIN_LAST.0..=WIN_LAST.1).contains(&s) {
        assert_eq!(v, enc_last(e), "torn range [{s}, {e}] in the last-encoded window");
    } else if (WIN_FIRST.0..=WIN_FIRST.1).contains(&s) {
        assert_eq!(v, enc_first(s), "torn range [{s}, {e}] in the first-encoded window");
    }
}

/// A reader's checks of both windows: point views and cursor passes both ways.
fn check_windows(t: &MapleTree<V>, rng: &mut SmallRng) {
    let g = vmspace_rcu::pin();
    for (lo, hi) in [WIN_LAST, WIN_FIRST] {
        let i = rng.random_range(lo..=hi);
        let (s, e, v) = t.load_range_in(i, &g).expect("the windows are tiled");
        assert!(s <= i && i <= e && s >= lo && e <= hi, "[{s}, {e}] around {i}");
        check_window_entry(s, e, v);
        let mut c = t.cursor(&g);
        c.set(lo);
        while let Some((s, e, v)) = c.find(hi) {
            check_window_entry(s, e, v);
        }
        c.set(hi);
        while let Some((s, e, v)) = c.find_rev(lo) {
            check_window_entry(s, e, v);
        }
    }
}

/// The writer's side of the test, made through the [`Writer`] (each store walks from the root) or through a
/// [`WriteCursor`] (each store starts from the cursor's cached path; reads through the cursor too).
trait Stores {
    /// The range holding `i`.
    fn range_at(&mut self, i: u64) -> (u64, u64, Option<V>);
    fn store(&mut self, f: u64, l: u64, v: Option<V>);
    /// Erases the entry holding `i`, if any.
    fn erase_at(&mut self, i: u64);
}

impl Stores for Writer<'_, V> {
    fn range_at(&mut self, i: u64) -> (u64, u64, Option<V>) {
        let g = vmspace_rcu::pin();
        match self.tree().load_range_in(i, &g) {
            Some((s, e, v)) => (s, e, Some(v)),
            None => (i, i, None),
        }
    }
    fn store(&mut self, f: u64, l: u64, v: Option<V>) {
        self.store_range(f, l, v).unwrap();
    }
    fn erase_at(&mut self, i: u64) {
        let _ = self.erase(i);
    }
}

impl Stores for WriteCursor<'_, '_, V> {
    fn range_at(&mut self, i: u64) -> (u64, u64, Option<V>) {
        self.set(i);
        self.range()
    }
    fn store(&mut self, f: u64, l: u64, v: Option<V>) {
        self.store_range(f, l, v).unwrap();
    }
    fn erase_at(&mut self, i: u64) {
        self.set(i);
        self.erase().unwrap();
    }
}

/// One writer step in a window: a store that keeps the window tiled and every value encoding its range.
fn window_store(w: &mut impl Stores, rng: &mut SmallRng) {
    if rng.random_bool(0.5) {
        let (lo, hi) = WIN_LAST;
        let (s, _, _) = w.range_at(rng.random_range(lo..=hi));
        let e = (s + rng.random_range(0..24u64)).min(hi);
        w.store(s, e, Some(enc_last(e)));
    } else {
        let (lo, hi) = WIN_FIRST;
        let (_, e, _) = w.range_at(rng.random_range(lo..=hi));
        let s = e.saturating_sub(rng.random_range(0..24u64)).max(lo);
        w.store(s, e, Some(enc_first(s)));
    }
}

/// One round of the writer: a batch of stores around stable range `k`'s gap (or in the windows).
fn churn(w: &mut impl Stores, rng: &mut SmallRng, v: &mut usize) {
    let k = rng.random_range(0..STABLE);
    let lo = k * STRIDE + WIDTH;
    let span = if k + 1 < STABLE { STRIDE - WIDTH } else { 50_000 };
    let hi = lo + span - 1;
    match rng.random_range(0..10) {
        6..=9 => {
            for _ in 0..8 {
                window_store(w, rng);
            }
        }
        0 | 1 => {
            // Many small ranges in the gap: splits.
            for j in 0..rng.random_range(1..40u64) {
                let f = lo + j * 20;
                if f + 9 <= hi {
                    *v += 1;
                    w.store(f, f + 9, Some(NonZeroUsize::new(*v).unwrap()));
                }
            }
        }
        2 => {
            let f = rng.random_range(lo..=hi);
            let l = rng.random_range(f..=hi);
            *v += 1;
            w.store(f, l, Some(NonZeroUsize::new(*v).unwrap()));
        }
        3 => {
            let f = rng.random_range(lo..=hi);
            let l = rng.random_range(f..=hi);
            w.store(f, l, None);
        }
        4 => w.store(lo, hi, None),
        _ => w.erase_at(rng.random_range(lo..=hi)),
    }
}

/// `cursor`: the writer stores through one write cursor, its state kept across its lock sessions.
fn run(rcu_readers: usize, cursor: bool) {
    let ms: u64 = std::env::var("MAPLE_STRESS_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(1500);
    let t = Arc::new(MapleTree::<V>::new());
    for k in 0..STABLE {
        t.store_range(k * STRIDE, k * STRIDE + WIDTH - 1, Some(NonZeroUsize::new(stable_val(k)).unwrap()))
            .unwrap();
    }
    t.store_range(WIN_LAST.0, WIN_LAST.1, Some(enc_last(WIN_LAST.1))).unwrap();
    t.store_range(WIN_FIRST.0, WIN_FIRST.1, Some(enc_first(WIN_FIRST.0))).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let checks = Arc::new(AtomicU64::new(0));
    let mut hs = Vec::new();
    for r in 0..rcu_readers {
        let (t, stop, checks) = (Arc::clone(&t), Arc::clone(&stop), Arc::clone(&checks));
        hs.push(std::thread::spawn(move || {
            let mut rng = SmallRng::seed_from_u64(r as u64 + 1);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let k = rng.random_range(0..STABLE);
                let base = k * STRIDE;
                let i = base + rng.random_range(0..WIDTH);
                assert_eq!(t.load(i).map(|v| v.get()), Some(stable_val(k)), "load {i}");
                let g = vmspace_rcu::pin();
                assert_eq!(
                    t.load_range_in(i, &g).map(|(a, b, v)| (a, b, v.get())),
                    Some((base, base + WIDTH - 1, stable_val(k)))
                );
                assert_eq!(t.find_in(i, u64::MAX, &g).map(|x| x.0), Some(base));
                assert_eq!(t.find_rev_in(i, 0, &g).map(|x| x.0), Some(base));
                // Iterate a window: increasing, and every stable range in it is seen.
                let from = base + WIDTH;
                let to = from + STRIDE * 8;
                let mut c = t.cursor(&g);
                c.set(from);
                let mut prev_last: Option<u64> = None;
                let mut next_stable = k + 1;
                let mut steps = 0;
                while let Some((s, e, v)) = c.find(to) {
                    if let Some(p) = prev_last {
                        // mas_find semantics: the next entry intersects [previous last + 1, to]; it may start
                        // earlier if a writer stored it meanwhile, but the walk position only moves forward.
                        assert!(e > p, "iteration went backwards: [{s}, {e}] after {p}");
                    }
                    assert!(s <= e);
                    prev_last = Some(e);
                    if s % STRIDE == 0 && v.get() == stable_val(s / STRIDE) {
                        assert_eq!(s / STRIDE, next_stable, "skipped stable range {next_stable}");
                        next_stable += 1;
                    }
                    steps += 1;
                    if steps % 16 == 0 {
                        c.pause();
                    }
                }
                let expect_end = (to / STRIDE + 1).min(STABLE);
                assert_eq!(next_stable, expect_end, "stable ranges missed in [{from}, {to}]");
                // And backwards over the same window: each entry starts before the previous one started.
                c.set(to);
                let mut prev_first: Option<u64> = None;
                let mut want = expect_end;
                while let Some((s, e, v)) = c.find_rev(from) {
                    if let Some(p) = prev_first {
                        assert!(s < p, "reverse iteration went forwards: [{s}, {e}] after start {p}");
                    }
                    prev_first = Some(s);
                    if s % STRIDE == 0 && v.get() == stable_val(s / STRIDE) {
                        assert_eq!(s / STRIDE + 1, want, "reverse walk skipped a stable range");
                        want -= 1;
                    }
                }
                assert_eq!(want, k + 1, "reverse walk missed stable ranges");
                drop(g);
                check_windows(&t, &mut rng);
                n += 1;
            }
            checks.fetch_add(n, Ordering::Relaxed);
        }));
    }
    let deadline = Instant::now() + Duration::from_millis(ms);
    let mut rng = SmallRng::seed_from_u64(99);
    let mut writes = 0u64;
    let mut v = 1usize;
    let (descents0, stores0) = (t.descents(), t.store_stats().total());
    while Instant::now() < deadline {
        let mut w = t.lock();
        if cursor {
            churn(&mut w.resume_cursor(), &mut rng, &mut v);
        } else {
            churn(&mut w, &mut rng, &mut v);
        }
        writes += 1;
        drop(w);
    }
    stop.store(true, Ordering::Relaxed);
    for h in hs {
        h.join().unwrap();
    }
    t.validate().unwrap();
    assert!(writes > 100 && checks.load(Ordering::Relaxed) > 100, "writes {writes} checks {checks:?}");
    let st = t.store_stats();
    assert!(st.slot_store > 0 && st.append > 0 && st.exact_fit > 0, "in-place paths not taken: {st:?}");
    let (descents, stores) = (t.descents() - descents0, st.total() - stores0);
    if cursor {
        // The cursor descends only when a store replaced the root (or on its first walk).
        assert!(descents * 10 < stores, "{descents} descents for {stores} cursor stores");
    } else {
        assert!(descents >= stores, "{descents} descents for {stores} writer stores");
    }
}

#[test]
fn readers_never_miss_stable_ranges() {
    run(2, false);
}

/// The same with every store (and the writer's reads) made through one write cursor kept across the writer's
/// lock sessions: readers see no torn range, miss no stable range, and the stores skip their root walks.
#[test]
fn readers_never_miss_stable_ranges_cursor_stores() {
    run(2, true);
}

/// The node slab under threads: three writers churn their own trees (every store allocates from the writer's
/// magazine and retires through RCU), copy them with `dup` and send each copy to the next writer, which checks
/// and drops it there (so nodes allocated on one thread are freed into another's magazine and go back through
/// the shared depot), while a reader keeps finding every tree's stable ranges. At the end every domain's nodes
/// are accounted for: after a grace period nothing is pending and what was allocated and not freed is exactly
/// what the trees hold.
#[test]
fn slab_nodes_cross_threads_through_rcu() {
    const WRITERS: usize = 3;
    let ms: u64 = std::env::var("MAPLE_STRESS_MS").ok().and_then(|s| s.parse().ok()).unwrap_or(1500);
    let trees: Vec<Arc<MapleTree<V>>> = (0..WRITERS)
        .map(|_| {
            Arc::new(
                MapleTree::from_sorted((0..STABLE).map(|k| {
                    (k * STRIDE, k * STRIDE + WIDTH - 1, NonZeroUsize::new(stable_val(k)).unwrap())
                }))
                .unwrap(),
            )
        })
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (trees, stop) = (trees.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut rng = SmallRng::seed_from_u64(5);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let t = &trees[rng.random_range(0..WRITERS)];
                let k = rng.random_range(0..STABLE);
                let i = k * STRIDE + rng.random_range(0..WIDTH);
                let g = vmspace_rcu::pin();
                assert_eq!(
                    t.load_range_in(i, &g).map(|(a, b, v)| (a, b, v.get())),
                    Some((k * STRIDE, k * STRIDE + WIDTH - 1, stable_val(k)))
                );
                n += 1;
            }
            n
        })
    };
    let (txs, rxs): (Vec<_>, Vec<_>) =
        (0..WRITERS).map(|_| std::sync::mpsc::channel::<MapleTree<V>>()).unzip();
    let mut rxs: Vec<Option<_>> = rxs.into_iter().map(Some).collect();
    let deadline = Instant::now() + Duration::from_millis(ms);
    let mut hs = Vec::new();
    for w in 0..WRITERS {
        let t = Arc::clone(&trees[w]);
        let tx = txs[(w + 1) % WRITERS].clone();
        let rx = rxs[w].take().unwrap();
        hs.push(std::thread::spawn(move || {
            let mut rng = SmallRng::seed_from_u64(w as u64 + 100);
            let (mut stores, mut copies) = (0u64, 0u64);
            while Instant::now() < deadline {
                let k = rng.random_range(0..STABLE);
                let lo = k * STRIDE + WIDTH;
                let hi = lo + STRIDE - WIDTH - 1;
                let f = rng.random_range(lo..=hi);
                let l = rng.random_range(f..=hi.min(f + 200));
                if rng.random_range(0..3) == 0 {
                    t.erase_range(lo, hi).unwrap();
                } else {
                    t.store_range(f, l, Some(NonZeroUsize::new(f as usize + 1).unwrap())).unwrap();
                }
                stores += 1;
                if stores % 64 == 0 {
                    let copy = t.dup(|_, _, v| Ok::<_, ()>(v), |_| {}).unwrap();
                    let _ = tx.send(copy);
                    copies += 1;
                }
                // Copies from the previous writer: checked and dropped here, on another thread than the one
                // that allocated their nodes.
                while let Ok(c) = rx.try_recv() {
                    c.validate().unwrap();
                    assert!(c.len() as u64 >= STABLE);
                }
            }
            drop(tx);
            (rx, stores, copies)
        }));
    }
    drop(txs);
    let mut left = Vec::new();
    for h in hs {
        let (rx, stores, copies) = h.join().unwrap();
        assert!(stores > 100 && copies > 0, "stores {stores} copies {copies}");
        left.push(rx);
    }
    // Copies still in flight are dropped here.
    for rx in left {
        for c in rx.try_iter() {
            c.validate().unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    assert!(reader.join().unwrap() > 100);
    for t in &trees {
        t.validate().unwrap();
        t.lock().flush_retired();
    }
    vmspace_rcu::synchronize();
    for t in &trees {
        let s = t.node_stats();
        assert_eq!(s.pending_free, 0, "{s:?}");
        assert_eq!(s.unaccounted(), 0, "{s:?}");
    }
}
