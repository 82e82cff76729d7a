//! The VMA's reference-counted attributes: the model file, the anon_vma identity, the anon name, and the
//! RCU-safe cell that holds each of them inside a [`Vma`](super::Vma).
//!
//! # Why a cell and not a lock
//!
//! Readers copy a VMA's attributes while holding only the VMA read lock, or (lockless readers) nothing but an
//! RCU guard and a sequence count to validate against; a writer replaces an attribute while holding the VMA write
//! lock. A mutex around the attributes would let a preempted lockless reader delay the writer, which the
//! lockless mode exists to avoid. So each attribute lives in an [`RcuArc`]: an atomic pointer to an `Arc`'s
//! payload. A reader loads the pointer under an RCU guard and takes its own strong reference; a writer swaps the
//! pointer and gives the old reference back only after a grace period, so the reader's increment can never meet
//! a count that has already reached zero.

use std::fmt;
use std::marker::PhantomData;
use std::ptr;
use std::sync::Arc;

use vmspace_rcu::sync::{AtomicPtr, AtomicU64, Ordering};

/// A model file: what a file-backed VMA shows in `/proc/PID/maps` (path, device, inode) and its size (which
/// bounds faults on the mapping). Immutable once created; shared by every VMA that maps it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VmFile {
    /// The path printed in the maps name column.
    pub name: String,
    /// Device major number (`MAJOR(s_dev)`).
    pub dev_major: u32,
    /// Device minor number (`MINOR(s_dev)`).
    pub dev_minor: u32,
    /// Inode number.
    pub inode: u64,
    /// Size in bytes.
    pub size: u64,
}

/// Hands out anon_vma identities: unique for the life of the process, never 0.
// Not part of any protocol loom checks (an identity source only), so std's atomic is used directly: loom atomics
// cannot live in a `static` built at compile time.
static NEXT_ANON_VMA_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// An anon_vma: the identity that ties private anonymous pages to the VMAs that may map them (Linux's reverse-map
/// root). Two VMAs can merge only if their anon_vmas are compatible (§6.1); fork gives the child's VMAs new
/// anon_vmas whose `parent` is the parent's.
///
/// This struct carries the identity and the counters Linux keeps (`num_children`, `num_active_vmas`); the
/// address-space code (`space`) defines the semantics (creation on the first write fault, sharing on split,
/// reuse on fork) in its own methods.
///
/// Concurrency contract: `id`, `parent` and `root_id` are immutable. The counters are changed only by a thread
/// that holds the mmap write lock of an mm whose VMAs use this anon_vma, and are read by anyone (relaxed: they
/// are statistics and merge heuristics, not synchronisation).
pub struct AnonVma {
    id: u64,
    root_id: u64,
    parent: Option<Arc<AnonVma>>,
    /// Child anon_vmas (fork) plus VMAs whose `anon_vma` is this one, as Linux's `num_children`.
    pub num_children: AtomicU64,
    /// VMAs that point at this anon_vma (Linux's `num_active_vmas`).
    pub num_active_vmas: AtomicU64,
}

impl AnonVma {
    /// A new anon_vma with a fresh identity. With a `parent` (fork), the root is the parent's root.
    pub fn new(parent: Option<Arc<AnonVma>>) -> Arc<Self> {
        // Relaxed: only uniqueness matters.
        let id = NEXT_ANON_VMA_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let root_id = parent.as_ref().map_or(id, |p| p.root_id);
        Arc::new(Self {
            id,
            root_id,
            parent,
            num_children: AtomicU64::new(0),
            num_active_vmas: AtomicU64::new(0),
        })
    }

    /// The identity (unique, never 0).
    #[inline]
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The identity of the root of this anon_vma's fork hierarchy (its own id if it has no parent).
    #[inline]
    pub fn root_id(&self) -> u64 {
        self.root_id
    }

    /// The anon_vma this one was forked from.
    #[inline]
    pub fn parent(&self) -> Option<&Arc<AnonVma>> {
        self.parent.as_ref()
    }
}

/// Equality is identity: two anon_vmas are equal iff they have the same id.
impl PartialEq for AnonVma {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for AnonVma {}

impl fmt::Debug for AnonVma {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnonVma")
            .field("id", &self.id)
            .field("root_id", &self.root_id)
            .field("parent", &self.parent.as_ref().map(|p| p.id))
            // Relaxed: diagnostic snapshot.
            .field("num_children", &self.num_children.load(Ordering::Relaxed))
            .field("num_active_vmas", &self.num_active_vmas.load(Ordering::Relaxed))
            .finish()
    }
}

/// An `Option<Arc<T>>` that readers may load concurrently with a writer's replacement.
///
/// Representation: a pointer obtained from `Arc::into_raw` (null for `None`); the cell owns one strong count of
/// it. [`RcuArc::load`] takes an RCU guard, loads the pointer and adds a strong count. [`RcuArc::store`] swaps
/// the pointer and releases the old strong count only after a grace period, so every reader that could have
/// loaded the old pointer has finished its increment first.
///
/// Writers must be serialised by the caller (the VMA write lock); concurrent stores would still be memory-safe
/// (each swaps out a distinct owned reference) but the winner would be arbitrary.
pub struct RcuArc<T: Send + Sync + 'static> {
    ptr: AtomicPtr<T>,
    _owns: PhantomData<Arc<T>>,
}

impl<T: Send + Sync + 'static> RcuArc<T> {
    /// An empty cell.
    pub fn empty() -> Self {
        Self { ptr: AtomicPtr::new(ptr::null_mut()), _owns: PhantomData }
    }

    /// A clone of the current value.
    pub fn load(&self) -> Option<Arc<T>> {
        let _guard = vmspace_rcu::pin();
        // Acquire: pairs with the release half of `store`'s swap, so the payload's initialisation is visible.
        let p = self.ptr.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: `p` came from `Arc::into_raw` and the cell's strong count on it is released only after a grace
        // period that began after the pointer was unpublished; `_guard` was taken before the load, so that grace
        // period has not ended and the count is still at least 1.
        unsafe {
            Arc::increment_strong_count(p);
            Some(Arc::from_raw(p))
        }
    }

    /// True if the cell holds a value.
    pub fn is_some(&self) -> bool {
        // Relaxed: a presence test; the payload is not dereferenced.
        !self.ptr.load(Ordering::Relaxed).is_null()
    }

    /// True if the cell holds exactly this allocation (pointer identity), without touching the count.
    pub fn is(&self, other: Option<&Arc<T>>) -> bool {
        // Relaxed: pointer identity only; the payload is not dereferenced.
        let p = self.ptr.load(Ordering::Relaxed);
        match other {
            None => p.is_null(),
            Some(a) => ptr::eq(p, Arc::as_ptr(a)),
        }
    }

    /// Replaces the value; the old reference is dropped after a grace period.
    pub fn store(&self, value: Option<Arc<T>>) {
        let new = value.map_or(ptr::null_mut(), |a| Arc::into_raw(a).cast_mut());
        // AcqRel: release publishes the new payload to `load`'s acquire; acquire orders the old payload's use
        // (its deferred drop) after whoever published it.
        let old = self.ptr.swap(new, Ordering::AcqRel);
        if !old.is_null() {
            let addr = old as usize;
            let guard = vmspace_rcu::pin();
            guard.defer(move || {
                // SAFETY: `addr` is the strong count the cell owned on a pointer from `Arc::into_raw`; it has been
                // unpublished by the swap above and is released exactly once, after a grace period.
                drop(unsafe { Arc::from_raw(addr as *const T) });
            });
        }
    }
}

impl<T: Send + Sync + 'static> Drop for RcuArc<T> {
    fn drop(&mut self) {
        // `&mut self`: no reader can hold a reference to the cell any more. Acquire: pairs with the release
        // half of the `store` that published the payload (a plain load, as loom's atomics have no `get_mut`).
        let p = self.ptr.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: the cell owns one strong count on `p` (from `Arc::into_raw`), released here exactly once.
            drop(unsafe { Arc::from_raw(p) });
        }
    }
}

impl<T: Send + Sync + fmt::Debug + 'static> fmt::Debug for RcuArc<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.load().fmt(f)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn rcu_arc_load_store_and_counts() {
        let cell = RcuArc::<VmFile>::empty();
        assert!(cell.load().is_none());
        assert!(!cell.is_some());
        let f = Arc::new(VmFile { name: "/f".into(), dev_major: 8, dev_minor: 1, inode: 42, size: 8192 });
        cell.store(Some(f.clone()));
        assert!(cell.is(Some(&f)));
        let got = cell.load().expect("stored");
        assert!(Arc::ptr_eq(&got, &f));
        assert_eq!(Arc::strong_count(&f), 3);
        drop(got);
        cell.store(None);
        assert!(cell.is(None));
        // The cell's own count is released after a grace period; wait for it.
        for _ in 0..10_000 {
            if Arc::strong_count(&f) == 1 {
                break;
            }
            vmspace_rcu::pin().flush();
            std::thread::yield_now();
        }
        assert_eq!(Arc::strong_count(&f), 1);
    }

    #[test]
    fn anon_vma_identity_and_root() {
        let a = AnonVma::new(None);
        let b = AnonVma::new(Some(a.clone()));
        assert_ne!(a.id(), b.id());
        assert_ne!(a.id(), 0);
        assert_eq!(b.root_id(), a.id());
        assert_eq!(b.parent().map(|p| p.id()), Some(a.id()));
    }
}
