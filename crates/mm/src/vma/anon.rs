//! anon_vma: the identity that ties a private VMA's anonymous pages to the VMAs that may map them, the
//! chain each VMA keeps, and the rules that make them decide merges and fork reuse.
//!
//! # Model
//!
//! Linux gives a private VMA an anon_vma on its first write fault (`__anon_vma_prepare`), reusing a
//! neighbour's when the neighbour could later merge with it (`find_mergeable_anon_vma`). Each VMA also has an
//! *anon_vma chain*: the list of anon_vmas whose pages it may map. A VMA that never went through fork has a
//! chain of exactly its own anon_vma (a *singular* chain). Fork gives the child VMA the parent's chain plus a
//! new anon_vma of its own (`anon_vma_fork`), so a child VMA's chain has two or more entries: it "had uncowed
//! parents", and Linux refuses merges that would make such a VMA share or adopt an anon_vma.
//!
//! Split copies the anon_vma and the chain (`anon_vma_clone`); a merge that removes a VMA with an anon_vma
//! into one without gives the survivor the removed one's (`dup_anon_vma`).
//!
//! Linux keeps two counters per anon_vma that steer reuse at fork (`anon_vma_clone`: an anon_vma with no VMA
//! of its own and fewer than two children is recycled instead of allocating a new one): `num_active_vmas`
//! (VMAs whose `anon_vma` is this one) and `num_children` (child anon_vmas plus, for a root, itself, dropped
//! when the anon_vma is no longer linked from any chain). Here both are maintained by ownership: an
//! [`AnonRef`] (a VMA's `anon_vma` pointer) counts in `num_active_vmas` while it lives, a [`ChainLink`] (one
//! chain entry) counts in `links`, and the last link going away releases the parent's child count. Cloning a
//! VMA's attributes therefore keeps every counter exact without bookkeeping at each call site.
//!
//! Counters are atomics only so that address spaces may be shared with reader threads; they are changed by
//! the thread that holds the mmap write lock of a mm using the anon_vma (relaxed: they steer heuristics and
//! carry no data).
//!
//! Where it lives: a [`Vma`](super::Vma) keeps its [`AnonState`] (writer-only: the chain) and publishes the
//! `anon_vma` pointer alone to readers (an RCU cell), so a lockless reader can tell which anon_vma a VMA has
//! without ever touching the chain.

use std::fmt;
use std::sync::Arc;

use vmspace_rcu::sync::{AtomicU64, Ordering};

vmspace_rcu::statics! {
    /// Source of anon_vma identities (never 0).
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
}

/// One anon_vma. Equality is identity (the id).
pub struct AnonVma {
    id: u64,
    root_id: u64,
    parent: Option<Arc<AnonVma>>,
    num_children: AtomicU64,
    num_active_vmas: AtomicU64,
    links: AtomicU64,
}

impl AnonVma {
    /// A new root anon_vma (`anon_vma_alloc` + the self-parent child count of `__anon_vma_prepare`).
    fn new_root() -> Arc<Self> {
        // Relaxed: only uniqueness matters (a counter, no data published through it).
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        Arc::new(AnonVma {
            id,
            root_id: id,
            parent: None,
            num_children: AtomicU64::new(1),
            num_active_vmas: AtomicU64::new(0),
            links: AtomicU64::new(0),
        })
    }

    /// A new anon_vma forked from `parent` (`anon_vma_fork`): counts as one of the parent's children.
    fn new_child(parent: &Arc<AnonVma>) -> Arc<Self> {
        // Relaxed: see new_root.
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        // Relaxed: counters are changed under the mmap write lock (module docs).
        parent.num_children.fetch_add(1, Ordering::Relaxed);
        Arc::new(AnonVma {
            id,
            root_id: parent.root_id,
            parent: Some(parent.clone()),
            num_children: AtomicU64::new(0),
            num_active_vmas: AtomicU64::new(0),
            links: AtomicU64::new(0),
        })
    }

    /// The identity (unique in the process, never 0).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The identity of the root of this anon_vma's fork hierarchy (its own id if it has no parent).
    pub fn root_id(&self) -> u64 {
        self.root_id
    }

    /// The anon_vma this one was forked from.
    pub fn parent(&self) -> Option<&Arc<AnonVma>> {
        self.parent.as_ref()
    }

    /// `num_active_vmas`.
    pub fn num_active_vmas(&self) -> u64 {
        // Relaxed: module docs.
        self.num_active_vmas.load(Ordering::Relaxed)
    }

    /// `num_children`.
    pub fn num_children(&self) -> u64 {
        // Relaxed: module docs.
        self.num_children.load(Ordering::Relaxed)
    }

    fn release_child(&self) {
        // Relaxed: module docs.
        self.num_children.fetch_sub(1, Ordering::Relaxed);
    }
}

impl PartialEq for AnonVma {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for AnonVma {}

impl fmt::Debug for AnonVma {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "anon_vma#{}", self.id)
    }
}

/// A VMA's `anon_vma` pointer: counts in the target's `num_active_vmas` while it exists.
pub struct AnonRef(Arc<AnonVma>);

impl AnonRef {
    fn new(a: &Arc<AnonVma>) -> Self {
        // Relaxed: module docs.
        a.num_active_vmas.fetch_add(1, Ordering::Relaxed);
        AnonRef(a.clone())
    }

    /// The anon_vma.
    pub fn get(&self) -> &Arc<AnonVma> {
        &self.0
    }
}

impl Clone for AnonRef {
    fn clone(&self) -> Self {
        AnonRef::new(&self.0)
    }
}

impl Drop for AnonRef {
    fn drop(&mut self) {
        // Relaxed: module docs.
        self.0.num_active_vmas.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One entry of an anon_vma chain: counts as a link of its anon_vma while it exists; the last link going
/// away releases the anon_vma's place among its parent's children (a root is its own parent).
pub struct ChainLink(Arc<AnonVma>);

impl ChainLink {
    fn new(a: &Arc<AnonVma>) -> Self {
        // Relaxed: module docs.
        a.links.fetch_add(1, Ordering::Relaxed);
        ChainLink(a.clone())
    }
}

impl Clone for ChainLink {
    fn clone(&self) -> Self {
        ChainLink::new(&self.0)
    }
}

impl Drop for ChainLink {
    fn drop(&mut self) {
        // Relaxed: module docs.
        if self.0.links.fetch_sub(1, Ordering::Relaxed) == 1 {
            match &self.0.parent {
                Some(p) => p.release_child(),
                None => self.0.release_child(),
            }
        }
    }
}

/// The anon_vma state of one VMA: its `anon_vma` and its chain (oldest ancestor first, its own last).
#[derive(Clone, Default)]
pub struct AnonState {
    anon: Option<AnonRef>,
    chain: Vec<ChainLink>,
}

impl AnonState {
    /// No anon_vma, empty chain.
    pub const EMPTY: AnonState = AnonState { anon: None, chain: Vec::new() };

    /// The VMA's anon_vma, if it has one.
    pub fn anon_vma(&self) -> Option<&Arc<AnonVma>> {
        self.anon.as_ref().map(AnonRef::get)
    }

    /// Whether the VMA has an anon_vma.
    pub fn is_some(&self) -> bool {
        self.anon.is_some()
    }

    /// Number of chain entries.
    pub fn chain_len(&self) -> usize {
        self.chain.len()
    }

    /// `vma_had_uncowed_parents`: the VMA has an anon_vma and its chain is not singular (a fork child's).
    pub fn had_uncowed_parents(&self) -> bool {
        self.anon.is_some() && self.chain.len() != 1
    }

    /// Whether two VMAs have the same anon_vma (both none counts as the same).
    pub fn same_anon(&self, other: &AnonState) -> bool {
        match (self.anon_vma(), other.anon_vma()) {
            (None, None) => true,
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// `__anon_vma_prepare` once the anon_vma to use is chosen: `reuse` (a neighbour's, from
    /// `find_mergeable_anon_vma`) or a new root. The chain becomes the single entry.
    pub fn prepare(reuse: Option<&Arc<AnonVma>>) -> AnonState {
        let a = match reuse {
            Some(a) => a.clone(),
            None => AnonVma::new_root(),
        };
        AnonState { anon: Some(AnonRef::new(&a)), chain: vec![ChainLink::new(&a)] }
    }

    /// `anon_vma_fork(child, parent)`: the child links to every anon_vma of the parent's chain and gets an
    /// anon_vma of its own: a recycled one from the chain (no active VMA and fewer than two children,
    /// `anon_vma_clone`'s rule, checked oldest first as Linux walks the chain in reverse) or a new child of
    /// the parent's anon_vma. A parent without anon_vma gives an empty state.
    pub fn fork(parent: &AnonState) -> AnonState {
        let Some(pav) = parent.anon_vma() else {
            return AnonState::default();
        };
        let chain: Vec<ChainLink> = parent.chain.to_vec();
        let reuse =
            chain.iter().map(|l| &l.0).find(|a| a.num_children() < 2 && a.num_active_vmas() == 0).cloned();
        match reuse {
            Some(a) => AnonState { anon: Some(AnonRef::new(&a)), chain },
            None => {
                let own = AnonVma::new_child(pav);
                let mut chain = chain;
                chain.push(ChainLink::new(&own));
                AnonState { anon: Some(AnonRef::new(&own)), chain }
            }
        }
    }
}

impl fmt::Debug for AnonState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.anon_vma() {
            None => f.write_str("-"),
            Some(a) => write!(f, "{a:?}/chain{}", self.chain.len()),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn identity_root_and_counters() {
        let root = AnonState::prepare(None);
        let a = root.anon_vma().unwrap().clone();
        assert_ne!(a.id(), 0);
        assert_eq!(a.root_id(), a.id());
        assert_eq!((a.num_active_vmas(), a.num_children()), (1, 1));
        // A split copy shares the anon_vma and clones the chain.
        let split = root.clone();
        assert!(split.same_anon(&root));
        assert_eq!(a.num_active_vmas(), 2);
        // Fork: a child anon_vma under the parent's, chain of two.
        let child = AnonState::fork(&root);
        let c = child.anon_vma().unwrap().clone();
        assert_eq!(c.parent().map(|p| p.id()), Some(a.id()));
        assert_eq!(c.root_id(), a.id());
        assert_eq!(child.chain_len(), 2);
        assert!(child.had_uncowed_parents());
        assert_eq!(a.num_children(), 2);
        drop(child);
        assert_eq!(a.num_children(), 1);
        drop((root, split));
        assert_eq!(a.num_active_vmas(), 0);
    }
}
