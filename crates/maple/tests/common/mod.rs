//! Shared by the tests that run every operation in both modes: [`Tree`] is a [`MapleTree`] (RCU mode) or a
//! [`NonRcuMapleTree`] (non-RCU mode) behind one interface, with the non-RCU tree's `&mut` writes.

#![allow(dead_code)] // each test file uses part of it

use std::collections::BTreeMap;
use std::num::NonZeroUsize;

use vmspace_maple::{
    Cursor, DupError, MapleError, MapleTree, NodeStats, NonRcuMapleTree, PausedCursor, StoreStats,
};
use vmspace_rcu::Guard;

pub type V = NonZeroUsize;

/// The tree under test, in either mode.
pub enum Tree {
    Rcu(MapleTree<V>),
    NonRcu(NonRcuMapleTree<V>),
}

/// Forwards a call to whichever tree it is.
macro_rules! both {
    ($t:expr, $x:ident => $e:expr) => {
        match $t {
            Tree::Rcu($x) => $e,
            Tree::NonRcu($x) => $e,
        }
    };
}

impl Tree {
    pub fn new(rcu: bool) -> Self {
        if rcu { Tree::Rcu(MapleTree::new()) } else { Tree::NonRcu(NonRcuMapleTree::new()) }
    }

    pub fn store_range(&mut self, f: u64, l: u64, v: Option<V>) -> Result<Vec<(u64, u64, V)>, MapleError> {
        both!(self, t => t.store_range(f, l, v))
    }

    pub fn insert_range(&mut self, f: u64, l: u64, v: V) -> Result<(), MapleError> {
        both!(self, t => t.insert_range(f, l, v))
    }

    pub fn erase(&mut self, i: u64) -> Option<(u64, u64, V)> {
        both!(self, t => t.erase(i))
    }

    pub fn erase_range(&mut self, f: u64, l: u64) -> Result<Vec<(u64, u64, V)>, MapleError> {
        both!(self, t => t.erase_range(f, l))
    }

    /// Several stores; the RCU tree makes them under one writer lock.
    pub fn store_many(&mut self, stores: &[(u64, u64, Option<V>)]) -> Result<(), MapleError> {
        match self {
            Tree::Rcu(t) => {
                let mut w = t.lock();
                for &(f, l, v) in stores {
                    w.store_range(f, l, v)?;
                }
            }
            Tree::NonRcu(t) => {
                for &(f, l, v) in stores {
                    t.store_range(f, l, v)?;
                }
            }
        }
        Ok(())
    }

    /// Reserves `worst_case(1)` nodes (after releasing any reserve), then stores with the allocator failing.
    pub fn reserved_store(&mut self, f: u64, l: u64, v: Option<V>) -> (usize, Result<(), MapleError>) {
        match self {
            Tree::Rcu(t) => {
                let mut w = t.lock();
                let need = w.worst_case(1);
                w.release_reserve();
                w.reserve(need).unwrap();
                w.tree().inject_alloc_failure(Some(0));
                let r = w.store_range(f, l, v).map(|_| ());
                w.tree().inject_alloc_failure(None);
                (need, r)
            }
            Tree::NonRcu(t) => {
                let need = t.worst_case(1);
                t.release_reserve();
                t.reserve(need).unwrap();
                t.inject_alloc_failure(Some(0));
                let r = t.store_range(f, l, v).map(|_| ());
                t.inject_alloc_failure(None);
                (need, r)
            }
        }
    }

    /// Gives back the writer's leftover node reserve, so that the next allocation reaches the allocator.
    pub fn release_reserve(&mut self) {
        match self {
            Tree::Rcu(t) => t.lock().release_reserve(),
            Tree::NonRcu(t) => t.release_reserve(),
        }
    }

    pub fn load(&self, i: u64) -> Option<V> {
        both!(self, t => t.load(i))
    }

    pub fn load_range(&self, i: u64) -> Option<(u64, u64, V)> {
        match self {
            Tree::Rcu(t) => t.load_range_in(i, &vmspace_rcu::pin()),
            Tree::NonRcu(t) => t.load_range(i),
        }
    }

    pub fn find(&self, from: u64, max: u64) -> Option<(u64, u64, V)> {
        both!(self, t => t.find(from, max))
    }

    pub fn find_rev(&self, from: u64, min: u64) -> Option<(u64, u64, V)> {
        both!(self, t => t.find_rev(from, min))
    }

    pub fn cursor<'g>(&'g self, g: &'g Guard) -> Cursor<'g, V> {
        both!(self, t => t.cursor(g))
    }

    pub fn resume<'g>(&'g self, p: PausedCursor, g: &'g Guard) -> Cursor<'g, V> {
        match self {
            Tree::Rcu(t) => p.resume(t, g),
            Tree::NonRcu(t) => t.resume(p, g),
        }
    }

    pub fn empty_area(&self, min: u64, max: u64, size: u64, rev: bool) -> Result<u64, MapleError> {
        match (self, rev) {
            (Tree::Rcu(t), false) => t.empty_area(min, max, size),
            (Tree::Rcu(t), true) => t.empty_area_rev(min, max, size),
            (Tree::NonRcu(t), false) => t.empty_area(min, max, size),
            (Tree::NonRcu(t), true) => t.empty_area_rev(min, max, size),
        }
    }

    pub fn dup<E>(
        &self,
        map: impl FnMut(u64, u64, V) -> Result<V, E>,
        undo: impl FnMut(V),
    ) -> Result<Tree, DupError<E>> {
        match self {
            Tree::Rcu(t) => t.dup(map, undo).map(Tree::Rcu),
            Tree::NonRcu(t) => t.dup(map, undo).map(Tree::NonRcu),
        }
    }

    pub fn len(&self) -> usize {
        both!(self, t => t.len())
    }

    pub fn height(&self) -> usize {
        match self {
            Tree::Rcu(t) => t.lock().height(),
            Tree::NonRcu(t) => t.height(),
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        both!(self, t => t.validate())
    }

    pub fn dump(&self) -> String {
        both!(self, t => t.dump())
    }

    /// The store statistics of an RCU tree (None for the non-RCU tree, whose stores are not counted by path).
    pub fn store_stats(&self) -> Option<StoreStats> {
        match self {
            Tree::Rcu(t) => Some(t.store_stats()),
            Tree::NonRcu(_) => None,
        }
    }

    pub fn node_stats(&self) -> NodeStats {
        both!(self, t => t.node_stats())
    }

    pub fn inject_alloc_failure(&self, after: Option<u64>) {
        both!(self, t => t.inject_alloc_failure(after))
    }

    /// Every entry, in order.
    pub fn contents(&self) -> Vec<(u64, u64, usize)> {
        let g = vmspace_rcu::pin();
        let mut c = self.cursor(&g);
        let mut out = Vec::new();
        while let Some((s, e, x)) = c.find(u64::MAX) {
            out.push((s, e, x.get()));
        }
        out
    }
}

/// The brute-force oracle the model tests hold the tree against: `start -> (last, value)`, non-overlapping
/// inclusive ranges. Each test file adds the reads it checks.
#[derive(Default, Clone, Debug)]
pub struct Oracle(pub BTreeMap<u64, (u64, usize)>);

impl Oracle {
    /// The entries that overlap `[f, l]`, in order, whole.
    pub fn overlapping(&self, f: u64, l: u64) -> Vec<(u64, u64, usize)> {
        let mut v: Vec<(u64, u64, usize)> = self
            .0
            .range(..=l)
            .rev()
            .take_while(|(_, (e, _))| *e >= f)
            .map(|(s, (e, x))| (*s, *e, *x))
            .collect();
        v.reverse();
        v
    }

    /// Stores `val` over `[f, l]` (`None` erases), cutting the entries it overlaps down to their parts outside
    /// the range. Returns what it overwrote, in order, clipped to `[f, l]`.
    pub fn store(&mut self, f: u64, l: u64, val: Option<usize>) -> Vec<(u64, u64, usize)> {
        let over = self.overlapping(f, l);
        for &(s, e, x) in &over {
            self.0.remove(&s);
            if s < f {
                self.0.insert(s, (f - 1, x));
            }
            if e > l {
                self.0.insert(l + 1, (e, x));
            }
        }
        if let Some(x) = val {
            self.0.insert(f, (l, x));
        }
        over.into_iter().map(|(s, e, x)| (s.max(f), e.min(l), x)).collect()
    }

    /// The entry holding `i`, if any.
    pub fn entry_at(&self, i: u64) -> Option<(u64, u64, usize)> {
        self.0.range(..=i).next_back().filter(|(_, (e, _))| *e >= i).map(|(s, (e, x))| (*s, *e, *x))
    }
}
