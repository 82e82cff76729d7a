//! A thread's reader record lives as long as its last guard, and a thread that exits never holds up grace
//! periods: a guard dropped by a thread-local destructor after the crate's own, and a guard leaked with
//! `mem::forget` on a thread that then exits.
//!
//! Every wait on `synchronize` runs on a helper thread with a deadline, so a regression fails instead of hanging.
#![cfg(not(loom))]

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use vmspace_rcu::Guard;

/// Generous: `synchronize` needs microseconds when nothing holds it back.
const DEADLINE: Duration = Duration::from_secs(20);

/// Runs `synchronize` on a helper thread and reports whether it returned within `limit`.
fn synchronize_within(limit: Duration) -> bool {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        vmspace_rcu::synchronize();
        let _ = tx.send(());
    });
    rx.recv_timeout(limit).is_ok()
}

/// Retires a counted object from the calling thread and returns its free counter.
fn retire_counted() -> Arc<AtomicUsize> {
    struct Counted(Arc<AtomicUsize>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let freed = Arc::new(AtomicUsize::new(0));
    let guard = vmspace_rcu::pin();
    let p = Box::into_raw(Box::new(Counted(freed.clone())));
    // SAFETY: `p` was never published and is retired once.
    unsafe { guard.defer_destroy(p) };
    guard.flush();
    freed
}

thread_local! {
    /// Touched before the thread's first `pin`, so its destructor is registered first and runs after the
    /// crate's thread-local handle has been destroyed.
    static HELD: RefCell<Vec<Guard>> = const { RefCell::new(Vec::new()) };
}

/// A guard kept in a thread-local registered before the thread's first pin is dropped after the crate's own
/// thread-local state: the record must survive until then (a released record would be shared with the next
/// thread that claims it, and in a debug build the release asserts and aborts the process), and afterwards
/// nothing holds up a grace period.
#[test]
fn guard_in_earlier_thread_local_outlives_handle() {
    for _ in 0..8 {
        std::thread::spawn(|| {
            HELD.with(|h| assert!(h.borrow().is_empty()));
            // Nested, so the record's nesting count is 2 when the handle goes.
            HELD.with(|h| h.borrow_mut().extend([vmspace_rcu::pin(), vmspace_rcu::pin()]));
        })
        .join()
        .unwrap();
        // Other threads keep claiming records meanwhile.
        std::thread::spawn(|| {
            let g = vmspace_rcu::pin();
            drop(vmspace_rcu::pin());
            drop(g);
        })
        .join()
        .unwrap();
    }
    assert!(synchronize_within(DEADLINE), "synchronize held up after threads with late guards exited");
    let freed = retire_counted();
    assert!(synchronize_within(DEADLINE));
    drop(vmspace_rcu::pin());
    assert!(synchronize_within(DEADLINE));
    let deadline = std::time::Instant::now() + DEADLINE;
    while freed.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
        vmspace_rcu::pin().flush();
        std::thread::yield_now();
    }
    assert_eq!(freed.load(Ordering::SeqCst), 1, "object retired after the threads exited never freed");
}

/// Only the guard in the thread-local: the handle and the guard each outlive the other in turn.
#[test]
fn only_guard_in_earlier_thread_local() {
    for _ in 0..16 {
        std::thread::spawn(|| {
            HELD.with(|h| assert!(h.borrow().is_empty()));
            HELD.with(|h| h.borrow_mut().push(vmspace_rcu::pin()));
        })
        .join()
        .unwrap();
    }
    assert!(synchronize_within(DEADLINE), "synchronize held up by a guard dropped at thread exit");
}

/// A leaked guard keeps its thread's section open while the thread lives (synchronize waits), and stops
/// counting once the thread has exited (synchronize completes, retired objects are freed).
#[test]
#[cfg_attr(miri, ignore = "needs tgkill to see the thread exit; Miri cannot run it")]
fn forgotten_guard_holds_until_thread_exits() {
    let (pinned_tx, pinned_rx) = mpsc::channel();
    let (exit_tx, exit_rx) = mpsc::channel::<()>();
    let t = std::thread::spawn(move || {
        std::mem::forget(vmspace_rcu::pin());
        pinned_tx.send(()).unwrap();
        let _ = exit_rx.recv();
    });
    pinned_rx.recv().unwrap();
    let freed = retire_counted();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        vmspace_rcu::synchronize();
        let _ = done_tx.send(());
    });
    assert!(
        done_rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "synchronize returned while a thread with a leaked guard was still alive"
    );
    assert_eq!(freed.load(Ordering::SeqCst), 0, "freed under a live thread's leaked guard");
    exit_tx.send(()).unwrap();
    t.join().unwrap();
    assert!(done_rx.recv_timeout(DEADLINE).is_ok(), "synchronize never completed after the thread exited");
    let deadline = std::time::Instant::now() + DEADLINE;
    while freed.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < deadline {
        vmspace_rcu::pin().flush();
        std::thread::yield_now();
    }
    assert_eq!(freed.load(Ordering::SeqCst), 1, "retired object never freed after the thread exited");
}

/// Many threads exit with leaked (possibly nested) guards; each later thread may reuse their records, and
/// grace periods keep completing.
#[test]
#[cfg_attr(miri, ignore = "needs tgkill to see the thread exit; Miri cannot run it")]
fn forgotten_guards_on_exited_threads_do_not_hang() {
    for i in 0..16 {
        std::thread::spawn(move || {
            for _ in 0..=i % 3 {
                std::mem::forget(vmspace_rcu::pin());
            }
        })
        .join()
        .unwrap();
        std::thread::spawn(|| {
            let mut g = vmspace_rcu::pin();
            g.repin();
            drop(g);
        })
        .join()
        .unwrap();
        assert!(synchronize_within(DEADLINE), "synchronize held up by a dead thread's leaked guard ({i})");
    }
}
