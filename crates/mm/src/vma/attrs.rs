//! The VMA's reference-counted attributes: the model file ([`VmFile`]) and the RCU-safe cell ([`RcuArc`]) that
//! holds each attribute (file, anon_vma, anon name) inside a [`Vma`](super::Vma).
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

use vmspace_rcu::sync::{AtomicPtr, Ordering};

/// What kind of object a file-backed VMA maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// A regular file (ext4, tmpfs...): pages beyond its size raise SIGBUS.
    Regular,
    /// The shmem object behind a shared anonymous mapping (`shmem_zero_setup`): shows as `/dev/zero
    /// (deleted)`, device 00:01, sized to the mapping.
    ShmemZero,
}

/// A model file (an open `struct file` and its inode): what a file-backed VMA shows in `/proc/PID/maps` (path,
/// device, inode), its size (which bounds faults on the mapping) and the open mode mmap checks. Immutable once
/// created. Identity is the `Arc`: two VMAs map "the same file" (`vm_file` equality, needed to merge) when
/// they hold the same allocation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VmFile {
    /// The path printed in the maps name column (without ` (deleted)`).
    pub name: String,
    /// Whether the path was unlinked (` (deleted)` in maps).
    pub deleted: bool,
    /// Device major number (`MAJOR(s_dev)`).
    pub dev_major: u32,
    /// Device minor number (`MINOR(s_dev)`).
    pub dev_minor: u32,
    /// Inode number.
    pub inode: u64,
    /// Size in bytes.
    pub size: u64,
    /// Opened for reading (`FMODE_READ`).
    pub readable: bool,
    /// Opened for writing (`FMODE_WRITE`).
    pub writable: bool,
    /// The file system is mounted noexec.
    pub noexec: bool,
    /// Regular file or shmem.
    pub kind: FileKind,
}

impl VmFile {
    /// A regular file opened read-write on an exec-allowed file system, on device 00:00 (what op scripts
    /// create).
    pub fn regular(name: impl Into<String>, inode: u64, size: u64) -> Arc<VmFile> {
        Arc::new(VmFile {
            name: name.into(),
            deleted: false,
            dev_major: 0,
            dev_minor: 0,
            inode,
            size,
            readable: true,
            writable: true,
            noexec: false,
            kind: FileKind::Regular,
        })
    }

    /// The shmem object `shmem_zero_setup` gives a shared anonymous mapping of `size` bytes: `/dev/zero
    /// (deleted)` on 00:01 with inode `inode`.
    pub fn shmem_zero(inode: u64, size: u64) -> Arc<VmFile> {
        Arc::new(VmFile {
            name: "/dev/zero".into(),
            deleted: true,
            dev_major: 0,
            dev_minor: 1,
            inode,
            size,
            readable: true,
            writable: true,
            noexec: false,
            kind: FileKind::ShmemZero,
        })
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
        // Relaxed: writers are serialised (see the type docs), so only this thread changes the pointer; an
        // empty cell that stays empty needs no swap (a locked instruction) and no grace period.
        if value.is_none() && self.ptr.load(Ordering::Relaxed).is_null() {
            return;
        }
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
        let f = VmFile::regular("/f", 42, 8192);
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
}
