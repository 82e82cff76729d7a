//! Helpers shared by the integration tests of the ordinary (membarrier) build.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Retires a closure that bumps `runs` when it runs (after its grace period).
pub fn defer_count(runs: &Arc<AtomicUsize>) {
    let runs = runs.clone();
    vmspace_rcu::pin().defer(move || {
        runs.fetch_add(1, Ordering::SeqCst);
    });
}

/// A thread inside a read-side section until the returned sender is dropped; returns once it is inside.
pub fn hold_reader() -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
    let (inside_tx, inside_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let h = std::thread::spawn(move || {
        let g = vmspace_rcu::pin();
        inside_tx.send(()).unwrap();
        let _ = release_rx.recv();
        drop(g);
    });
    inside_rx.recv().unwrap();
    (release_tx, h)
}
