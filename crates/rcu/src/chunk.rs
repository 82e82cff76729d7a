//! Aligned chunks of the system's memory for the allocators built on this crate's reclamation: the maple
//! tree's node slab and the frame contents of the page tables.
//!
//! A chunk is an anonymous private mapping, zeroed by the kernel, aligned to its size (a power of two). Chunks of
//! 2 MiB and more are marked `MADV_HUGEPAGE`, so that with transparent huge pages in `madvise` mode each 2 MiB
//! is one huge page: one TLB entry covers a chunk's objects, and the memory comes in one fault per 2 MiB
//! instead of one per 4 KiB. Under Miri and loom chunks come from the global allocator instead.
//!
//! These are the one set of memory-management system calls outside the live-kernel crate (`vmspace_linux`):
//! this crate is below every other, so it cannot call through it (ARCHITECTURE.md, "Layers").

use std::ptr::NonNull;

/// A chunk of `size` bytes (a power of two, at least a page), aligned to `size`, zeroed; `None` if the system
/// has no memory. An anonymous private mapping, over-mapped by `size` and trimmed to the aligned part;
/// `MADV_HUGEPAGE` from 2 MiB up (one huge page per 2 MiB when THP is in `madvise` mode).
#[cfg(not(any(miri, loom)))]
pub fn map(size: usize) -> Option<NonNull<u8>> {
    let page = 4096;
    let len = if size <= page { size } else { 2 * size };
    // SAFETY: a new anonymous mapping at an address the kernel chooses; it touches no existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    let p = p.cast::<u8>();
    let head = p.addr().next_multiple_of(size) - p.addr();
    let tail = len - head - size;
    // SAFETY: `[p, p + head)` and the tail after the aligned chunk lie inside the mapping just made, and
    // nothing refers to them.
    unsafe {
        if head > 0 {
            libc::munmap(p.cast(), head);
        }
        if tail > 0 {
            libc::munmap(p.add(head + size).cast(), tail);
        }
    }
    let base = p.wrapping_add(head);
    if size >= 2 << 20 {
        // SAFETY: advice on our own mapping; a failure (no THP) leaves it in small pages, which is fine.
        unsafe { libc::madvise(base.cast(), size, libc::MADV_HUGEPAGE) };
    }
    NonNull::new(base)
}

/// Unmaps a chunk.
///
/// # Safety
///
/// `base` came from [`map`] with this `size`, and nothing refers to its memory any more.
#[cfg(not(any(miri, loom)))]
pub unsafe fn unmap(base: NonNull<u8>, size: usize) {
    // SAFETY: the caller's contract.
    unsafe { libc::munmap(base.as_ptr().cast(), size) };
}

/// Under Miri and loom the chunks come from the global allocator (Miri checks them like any allocation).
#[cfg(any(miri, loom))]
pub fn map(size: usize) -> Option<NonNull<u8>> {
    let layout = std::alloc::Layout::from_size_align(size, size).ok()?;
    // SAFETY: a non-zero size.
    NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })
}

/// # Safety
///
/// `base` came from [`map`] with this `size`, and nothing refers to its memory any more.
#[cfg(any(miri, loom))]
pub unsafe fn unmap(base: NonNull<u8>, size: usize) {
    let layout = std::alloc::Layout::from_size_align(size, size).expect("the layout of map");
    // SAFETY: the caller's contract.
    unsafe { std::alloc::dealloc(base.as_ptr(), layout) };
}
