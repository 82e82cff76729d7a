//! The node slab gives memory back: after big trees (and their copies) are dropped, the process keeps at most
//! the slab's bound of entirely free chunks ([`vmspace_maple::NODE_KEEP_EMPTY_BYTES`]), and building them again
//! reuses that memory. One test in its own process, so that no other test's trees hold chunks.
#![cfg(not(loom))]

use std::num::NonZeroUsize;

use vmspace_maple::{MapleTree, NODE_KEEP_EMPTY_BYTES, flush_thread_nodes, slab_stats};

fn nz(x: u64) -> NonZeroUsize {
    NonZeroUsize::new(x as usize).unwrap()
}

#[test]
fn memory_goes_back_after_big_trees_are_dropped() {
    let n = 1_000_000u64;
    let before = slab_stats();
    let t = MapleTree::from_sorted((0..n).map(|i| (i * 10, i * 10 + 5, nz(i + 1)))).unwrap();
    let d = t.dup(|_, _, v| Ok::<_, ()>(v), |_| {}).unwrap();
    for k in 0..5_000 {
        t.store_range(k * 10 + 6, k * 10 + 8, Some(nz(1))).unwrap();
    }
    let live = (t.node_stats().live + d.node_stats().live) as usize;
    let peak = slab_stats();
    assert!(live * 256 > 2 * NODE_KEEP_EMPTY_BYTES, "a big enough tree: {live} nodes");
    assert!(peak.bytes >= live * 256, "{peak:?} for {live} nodes");
    // Mapped memory stays close to what the nodes need (the chunks are full but for the last ones).
    assert!(peak.bytes <= live * 256 * 11 / 10 + 2 * NODE_KEEP_EMPTY_BYTES, "{peak:?} for {live} nodes");
    t.lock().flush_retired();
    vmspace_rcu::synchronize();
    assert_eq!(t.node_stats().pending_free, 0);
    drop(d);
    drop(t);
    flush_thread_nodes();
    let after = slab_stats();
    assert!(after.bytes <= NODE_KEEP_EMPTY_BYTES.max(before.bytes), "{after:?}");
    assert_eq!(after.empty_chunks, after.chunks, "a node is still out: {after:?}");
    // Building again reuses the kept chunks first, then maps what it needs.
    let t = MapleTree::from_sorted((0..n).map(|i| (i * 10, i * 10 + 5, nz(i + 1)))).unwrap();
    let again = slab_stats();
    assert!(again.bytes <= peak.bytes, "{again:?} after {peak:?}");
    drop(t);
    flush_thread_nodes();
    assert!(slab_stats().bytes <= NODE_KEEP_EMPTY_BYTES.max(before.bytes));
}
