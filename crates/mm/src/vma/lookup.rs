//! `lock_vma_under_rcu`: find the VMA that covers an address and read-lock it without mmap_lock (the page-fault
//! fast path, `linux-mm.md` §2.4, the 6.17+/6.18 form).
//!
//! ```text
//! loop {
//!     pin an RCU guard; walk the tree at addr
//!     no VMA                       -> abort, None        (the caller falls back to mmap_lock)
//!     vma_start_read(mm, vma):
//!         Detached (-EAGAIN)       -> miss, walk again   (the VMA was replaced or removed under us)
//!         any other failure        -> abort, None
//!     leave the RCU section
//!     addr outside [start, end)    -> unlock, abort, None (recycled within this mm at another range)
//!     success                      -> the VMA, read-locked
//! }
//! ```
//!
//! The retry on `Detached` terminates because writers update the tree *before* they detach a VMA: a walk that
//! starts after the detach finds the replacement (or nothing).
//!
//! The tree is abstracted by [`VmaLookup`] so that the lock protocol does not depend on one tree type; the
//! maple tree of VMAs implements it (the `mas_walk` of the kernel).

use vmspace_maple::MapleTree;
use vmspace_rcu::Guard;

use super::lock::{VmaReadGuard, vma_start_read};
use super::mmap_lock::MmLocking;
use super::object::Vma;

/// A structure that maps an address to the VMA whose range contains it, readable under an RCU guard.
pub trait VmaLookup {
    /// The VMA stored for the range containing `addr`, if any. Called under `guard`; the result may be stale
    /// (detached, recycled) by the time it is used, which the caller detects.
    fn vma_at(&self, addr: u64, guard: &Guard) -> Option<&'static Vma>;
}

impl<T: VmaLookup + ?Sized> VmaLookup for &T {
    #[inline]
    fn vma_at(&self, addr: u64, guard: &Guard) -> Option<&'static Vma> {
        (**self).vma_at(addr, guard)
    }
}

/// The VMA tree: `mas_walk` is a point lookup of the range containing `addr`.
impl VmaLookup for MapleTree<&'static Vma> {
    #[inline]
    fn vma_at(&self, addr: u64, guard: &Guard) -> Option<&'static Vma> {
        self.load_in(addr, guard)
    }
}

/// Finds and read-locks the VMA of `mm` covering `addr` without mmap_lock. `None` means "fall back to
/// mmap_lock" (no VMA, or it could not be locked). Counts success, abort and miss in `mm.stats()`.
pub fn lock_vma_under_rcu<T: VmaLookup + ?Sized>(
    mm: &MmLocking,
    tree: &T,
    addr: u64,
) -> Option<VmaReadGuard<'static>> {
    loop {
        let guard = vmspace_rcu::pin();
        let Some(vma) = tree.vma_at(addr, &guard) else {
            drop(guard);
            mm.stats().record_abort();
            return None;
        };
        match vma_start_read(mm, vma) {
            Ok(locked) => {
                drop(guard);
                // The VMA may have been recycled within this mm at another range between the walk and the lock.
                if !locked.contains(addr) {
                    drop(locked);
                    mm.stats().record_abort();
                    return None;
                }
                mm.stats().record_success();
                return Some(locked);
            }
            Err(fail) if fail.is_detached() => {
                drop(guard);
                mm.stats().record_miss();
            }
            Err(_) => {
                drop(guard);
                mm.stats().record_abort();
                return None;
            }
        }
    }
}
