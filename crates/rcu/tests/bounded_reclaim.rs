//! A reader preempted inside a section holds back every batch retired meanwhile; when it leaves, the writer's
//! next call frees only a bounded part of that backlog (its first due batch and `memb::FREE_PER_CALL`, 64,
//! objects beyond it) and the following calls free the rest, so no single writer call pays for the whole backlog. One test
//! in its own process: the queue of batches is global, and other tests' frees would blur the counts.
#![cfg(not(loom))]

mod common;

use common::{defer_count, hold_reader};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Retires `n` closures that count their runs.
fn retire(n: usize, runs: &Arc<AtomicUsize>) {
    for _ in 0..n {
        defer_count(runs);
    }
}

#[test]
fn a_backlog_is_freed_over_several_calls_and_synchronize_frees_it_all() {
    const BACKLOG: usize = 12 * 256;
    let runs = Arc::new(AtomicUsize::new(0));
    let (release, h) = hold_reader();
    // Twelve full bags: each starts a grace period that the reader holds back.
    retire(BACKLOG, &runs);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "freed while a reader that predates the retirement was inside"
    );
    drop(release);
    h.join().unwrap();

    // The first call after the reader left: at least one batch, at most the bound beyond it.
    vmspace_rcu::pin().flush();
    let first = runs.load(Ordering::SeqCst);
    assert_eq!(first, 256 + 64, "one call freed {first} of a backlog of {BACKLOG}");
    // Every later call frees more, until nothing is left.
    let mut calls = 1;
    let mut last = first;
    while last < BACKLOG {
        vmspace_rcu::pin().flush();
        let now = runs.load(Ordering::SeqCst);
        assert!(now > last, "a call freed nothing of a due backlog ({now} of {BACKLOG})");
        assert!(now - last <= 256 + 64, "a call freed {} objects", now - last);
        last = now;
        calls += 1;
        assert!(calls <= BACKLOG / 256, "the backlog does not shrink");
    }
    assert_eq!(last, BACKLOG);

    // A second backlog: `synchronize` frees all of it in one call.
    let runs2 = Arc::new(AtomicUsize::new(0));
    let (release, h) = hold_reader();
    retire(BACKLOG, &runs2);
    drop(release);
    h.join().unwrap();
    vmspace_rcu::synchronize();
    assert_eq!(runs2.load(Ordering::SeqCst), BACKLOG, "synchronize left part of the backlog queued");

    // `expedite` frees the batch it was called for even behind a due backlog, and the backlog only in part.
    let runs = Arc::new(AtomicUsize::new(0));
    let own = Arc::new(AtomicUsize::new(0));
    let (release, h) = hold_reader();
    retire(8 * 256, &runs);
    drop(release);
    h.join().unwrap();
    // A batch of this thread's own, behind the due backlog.
    retire(10, &own);
    vmspace_rcu::expedite(std::time::Duration::from_secs(30));
    assert_eq!(own.load(Ordering::SeqCst), 10, "expedite left its own batch behind the backlog");
    assert!(runs.load(Ordering::SeqCst) <= 256 + 64, "expedite freed the whole backlog at once");
    vmspace_rcu::synchronize();
    assert_eq!(runs.load(Ordering::SeqCst), 8 * 256);
}
