//! Page tables, frames and the page cache for vmspace: the mechanism under the address space's faults, fork,
//! munmap, mprotect, mremap and smaps.
//!
//! ```
//! use vmspace_abi::VmFlags;
//! use vmspace_pgtable::{
//!     Access, CopyVma, FaultVma, Memory, MemoryConfig, MmuError, PageTable, VmFault, ZapDetails,
//!     handle_mm_fault,
//! };
//!
//! // One machine's memory, one address space's page table.
//! let mem = Memory::new(MemoryConfig::default());
//! let parent = PageTable::new(&mem)?;
//! // A private anonymous read-write VMA of 16 pages, described for the fault core.
//! let flags = VmFlags::READ | VmFlags::WRITE | VmFlags::MAYREAD | VmFlags::MAYWRITE;
//! let (start, end) = (0x7000_0000, 0x7001_0000);
//! let mut vma = FaultVma::anonymous(start, end, flags);
//!
//! // What a CPU does: access, and on a page fault let the kernel resolve it and retry.
//! let write = |pt: &PageTable, vma: &mut FaultVma, addr: u64, data: &[u8]| loop {
//!     match pt.write(addr, data) {
//!         Ok(()) => return,
//!         Err(MmuError::Fault { access, .. }) => match handle_mm_fault(pt, vma, addr, access) {
//!             VmFault::Handled(_) => {}
//!             // No anon_vma yet: the address space prepares one under the mmap lock, then retries.
//!             VmFault::Retry => vma.anon_vma = true,
//!             // Readahead dropped the lock for its I/O: fault again, as a retry.
//!             VmFault::RetryIo { .. } => vma.tried = true,
//!             other => panic!("{other:?}"),
//!         },
//!         Err(MmuError::NoMem) => panic!("out of memory"),
//!     }
//! };
//! write(&parent, &mut vma, start + 8, b"parent");
//! assert_eq!(parent.rss().anon, 1);
//!
//! // fork: the child shares the page, write-protected on both sides.
//! let child = PageTable::new(&mem)?;
//! parent.copy_page_range(&child, &CopyVma { start, end, flags, dst_uffd_wp: false })?;
//! parent.flush_tlb();
//! let mut buf = [0u8; 6];
//! child.read(start + 8, &mut buf).expect("mapped read-only");
//! assert_eq!(&buf, b"parent");
//! // The child's write copies the page (do_wp_page); the parent still sees its own bytes.
//! let mut child_vma = vma;
//! write(&child, &mut child_vma, start + 8, b"child!");
//! parent.read(start + 8, &mut buf).unwrap();
//! assert_eq!(&buf, b"parent");
//!
//! // /proc/PID/smaps counts it: one private dirty anonymous page in each.
//! let mut acc = vmspace_proc::MemStatsAccumulator::default();
//! parent.smaps_range(start, end, false, &mut acc);
//! assert_eq!(acc.finish().private_dirty, 4);
//!
//! // munmap: zap the range, free its tables; everything returns to the memory after a grace period.
//! parent.zap_range(start, end, &ZapDetails::UNMAP);
//! parent.free_pgd_range(start, end, 0, 0);
//! parent.validate().expect("consistent");
//! drop((parent, child));
//! vmspace_rcu::synchronize();
//! assert_eq!(mem.stats().frames_in_use, 0);
//! assert_eq!(mem.stats().tables_in_use, 0);
//! # Ok::<(), vmspace_abi::Errno>(())
//! ```
//!
//! # What it is
//!
//! The address space (`vmspace-mm`) owns VMAs and their locks; this crate owns what lies under them, the
//! kernel's `mm/memory.c`, `mm/pgtable-generic.c`, `mm/mremap.c`'s table moves, `mm/filemap.c` and
//! `mm/truncate.c` in miniature, and `fs/proc/task_mmu.c`'s page walk:
//! - [`Memory`]: the frame table (refcount, mapcount, anonymous or file, dirty/referenced/swap-backed state,
//!   4 KiB contents allocated on first write), the shared zero page, and the one counted, fault-injectable
//!   allocator of frames, contents, table pages and page-cache nodes (module `frame`).
//! - [`PageTable`]: x86-64 4-level tables of [`Pte`]s with split PTE-table locks, populated locklessly,
//!   walked locklessly under RCU by the emulated MMU ([`PageTable::read`], [`PageTable::write`],
//!   [`PageTable::access`]) and by lockless readers; tables and frames are freed a grace period after they
//!   are unlinked (module `pgtable`, `table`, `gather`).
//! - the operations the syscalls need, each the kernel function's counterpart: [`PageTable::zap_range`]
//!   (`zap_pte_range`, with `MADV_DONTNEED`'s table reclaim), [`PageTable::free_pgd_range`],
//!   [`PageTable::change_protection`], [`PageTable::move_page_tables`], [`PageTable::copy_page_range`] (fork),
//!   [`PageTable::madvise_free`], guard markers, and [`PageTable::smaps_range`] /
//!   [`PageTable::smaps_range_lockless`] (`smaps_pte_range`).
//! - [`PageCache`]: a file's pages (folios of one page or large), size, truncation (`unmap_mapping_range` with
//!   `even_cows`: private copies beyond the end go too) and hole punching (without: private copies stay),
//!   writeback, `MADV_PAGEOUT`'s reclaim, and the registry of mappings truncation reaches (module `cache`); its
//!   readahead on faults, `MADV_WILLNEED` and the per-file `mmap_miss` as Linux 6.18 on ext4 does ([`Bdi`],
//!   [`RaState`]; module `readahead`).
//! - [`PageTableView`]: a read-only borrow of a page table: the emulated MMU, the lockless walks and the
//!   counters, nothing that changes an entry or a table (module `view`).
//! - [`check_memory`]: whole-memory accounting (every frame's mapcount and refcount against the entries and
//!   cache slots of every page table and cache of a memory), for tests.
//! - [`handle_mm_fault`]: the fault core over a [`FaultVma`] description (module `fault`), with
//!   [`VmFault`] results including `Retry` when the VMA needs an anon_vma and `RetryIo` when readahead dropped
//!   the fault's lock, and per-page-table counters.
//!
//! # How the address space embeds it
//!
//! One [`Memory`] per emulated machine; one [`PageTable`] per `Mm` (`Arc` if file mappings register it with a
//! page cache); one [`PageCache`] per file or shmem object. Every operation documents its caller contract: the
//! lock the kernel holds when it calls the counterpart (mmap lock, VMA lock, write-locked VMAs). The contract
//! makes the result exact (the kernel's); memory safety does not rest on it: every safe function is sound
//! whatever runs beside it, because tables are unlinked atomically (a PTE table under its lock, an upper one
//! by a swap in `free_pgd_range`) and walked inside RCU read-side sections (module `pgtable`), and frames are
//! referenced only through entries, cache slots and `folio_try_get`. The owner of a page table that must keep
//! it consistent with its own state lends others a [`PageTableView`] (the emulated MMU, the lockless walks,
//! the counters), as `vmspace-mm` does. The one unsafe function is [`Memory::read_pfn`] (a frame read by
//! number, which the caller keeps from being freed). No operation
//! takes a lock shared by all faulters: a fault takes its PTE table's lock, its thread's frame-list shard, and
//! the page cache's mutex for file pages; counters are sharded per thread.
//!
//! Depends on `abi` (errno, `VmFlags`), `rcu` (guards, grace periods, the loom seam) and `proc` (the smaps
//! accumulator); never on `mm`.

#![cfg_attr(not(loom), warn(missing_docs))]

mod arch;
mod cache;
mod check;
mod counters;
mod fault;
mod fork;
mod frame;
mod gather;
mod mprotect;
mod mremap;
mod pgtable;
mod readahead;
mod smaps;
mod table;
#[cfg(all(test, not(loom)))]
mod testutil;
mod view;
mod zap;

pub use arch::{
    Marker, PAGE_BYTES, PAGE_SIZE, PAGE_WORDS, PGDIR_SIZE, PMD_SIZE, PTRS_PER_TABLE, PUD_SIZE, PageProt, Pfn,
    Pte, TABLE_SHIFT, VA_END, bits,
};
pub use cache::{FileMapping, MappingId, PageCache, partial_block_page};
pub use check::check_memory;
pub use counters::nshards;
pub use fault::{FaultKind, FaultStats, FaultVma, VmFault, handle_mm_fault, handle_mm_fault_speculative};
pub use fork::{CopyVma, is_cow_mapping, vma_needs_copy};
pub use frame::{FrameFlags, FrameInfo, MAX_FRAMES, Memory, MemoryConfig, MemoryStats};
pub use mprotect::{ChangeProt, GuardInstall};
pub use mremap::MoveFlags;
pub use pgtable::{Access, MmuError, PageTable, PageTableCheck, Rss};
pub use readahead::{Bdi, MAX_PAGECACHE_ORDER, MMAP_LOTSAMISS, RaState, VM_READAHEAD_PAGES};
pub use table::TABLE_BYTES;
pub use view::PageTableView;
pub use zap::{ZapDetails, ZapStats, vma_has_recency};
