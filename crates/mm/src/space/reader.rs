//! The `/proc/PID` readers of the engine: `maps`, `smaps`, `smaps_rollup` and `PROCMAP_QUERY`, rendered
//! byte-identical to Linux 6.18 (`fs/proc/task_mmu.c`) through the `proc` crate's formats.
//!
//! # The handle
//!
//! [`Mm::reader`] hands out a [`ProcReader`]: a borrowed, `Send + Sync` handle that any thread may use while
//! other threads map, unmap, fault and fork in the same address space, as a process reading `/proc/PID/smaps`
//! of another does. What a reader sees of concurrent changes depends on its [`ReaderMode`], the locking
//! discipline of one kernel reader:
//!
//! - [`ReaderMode::MmapLock`] (6.18's `smaps` and `smaps_rollup`, and `maps` before the per-VMA series): the
//!   mmap read lock is taken for every *chunk* of the output and dropped between chunks (`m_start` /
//!   `m_stop` of the seq_file); a chunk here is one VMA's record, and the next chunk looks the next VMA up
//!   from the previous record's end (`proc_get_vma`'s `last_addr`), so a VMA that changed between chunks is
//!   seen as it is when its own chunk is read, never torn. `smaps_rollup` holds the lock across its whole
//!   walk (`show_smaps_rollup`; the kernel drops it when a writer is waiting and resumes from the last end,
//!   which the engine does not: its walks are short). A `PROCMAP_QUERY` holds it for one lookup.
//! - [`ReaderMode::PerVma`] (6.18's `maps` and `PROCMAP_QUERY` with `CONFIG_PER_VMA_LOCK`,
//!   `lock_next_vma`): each VMA is found under RCU and read-locked on its own (`vma_start_read`); when that
//!   fails (a writer holds the VMA) the reader falls back to the mmap read lock for that one step
//!   (`lock_next_vma`'s fallback). The mm-wide values a record reads besides its VMA (the break, for
//!   `[heap]`) are read racily, as the kernel reads them: a reader holding a VMA lock never waits for the
//!   mmap lock, whose writer may be waiting in `vma_start_write` for that VMA's readers.
//!
//! A third mode, lockless (seqcount-validated VMA copies, page tables walked under RCU,
//! `PageTable::smaps_range_lockless`), fits the same API: every record function takes the VMA it renders as
//! a value the mode produced, never a lock it must hold.
//!
//! # Records
//!
//! Each output is built from per-VMA record functions ([`ProcReader::smaps_record`] and the maps line), so that
//! chunked `read(2)` rendering can stop and resume between records. A record of `smaps` (`show_smap`):
//! the maps line; `Size`; `KernelPageSize` and `MMUPageSize` (the huge page size for hugetlb VMAs, else 4
//! kB); the counters of `smap_gather_stats` (the page walk, `vmspace_pgtable`'s `smaps_range`: Rss without
//! the zero page, Pss divided by each page's mapcount, Private/Shared by mapcount, Referenced from the
//! accessed bits, Anonymous, LazyFree, Locked = Pss of a `VM_LOCKED` VMA); hugetlb VMAs count their huge
//! pages as `Shared_Hugetlb` or `Private_Hugetlb` instead (`smaps_hugetlb_range`); `THPeligible`
//! (`thp_vma_allowable_orders(vma, vm_flags, TVA_SMAPS, THP_ORDERS_ALL)`); `ProtectionKey` when the CPU has
//! protection keys (`arch_pkeys_enabled`); `VmFlags`. `smaps_rollup` sums the counters of every VMA under
//! one header `first start-last end ---p 00000000 00:00 0 [rollup]`.
//!
//! `PROCMAP_QUERY` (`do_procmap_query`): the request's checks ([`QueryRequest::validate`]), the lookup
//! (`query_matching_vma`: the first VMA ending above the address, skipped while it fails the permission or
//! file filters with `COVERING_OR_NEXT_VMA`, else ENOENT), then the answer: range, permission flags
//! (`VM_MAYSHARE` for shared), the page size, the file offset, device and inode, and the maps name when a
//! name buffer was given (ENAMETOOLONG when it does not fit). Build IDs: the engine's files are not ELF
//! objects, so `build_id_parse` fails and the answer's build ID size is 0, as the kernel answers for such
//! files.

use vmspace_proc::query::{
    PROCMAP_QUERY_VMA_EXECUTABLE, PROCMAP_QUERY_VMA_READABLE, PROCMAP_QUERY_VMA_SHARED,
    PROCMAP_QUERY_VMA_WRITABLE,
};
use vmspace_proc::{
    MapsLine, MemStatsAccumulator, QueryAnswer, QueryRequest, SmapsRecord, SmapsRollup, VmFlagsLine,
};

use super::config::{PAGE_SHIFT, PAGE_SIZE};
use super::tree::VmaExt;
use super::{FileKind, Mm, MmRead, ThpMode, VmFlags};
use crate::vma::{Vma, VmaReadGuard};

/// `HPAGE_PMD_ORDER` on x86-64.
const PMD_ORDER: u32 = 9;
/// The highest page-cache order (`MAX_PAGECACHE_ORDER` on x86-64 with 4 KiB pages: the PMD order).
const MAX_PAGECACHE_ORDER: u32 = PMD_ORDER;
/// `THP_ORDERS_ALL_ANON`: every order from 2 to the PMD order (order 1 is never used for anonymous memory).
const THP_ORDERS_ALL_ANON: u64 = ((1 << (PMD_ORDER + 1)) - 1) & !((1 << 0) | (1 << 1));
/// `THP_ORDERS_ALL_FILE_DEFAULT`: every order from 1 to `MAX_PAGECACHE_ORDER`.
const THP_ORDERS_ALL_FILE_DEFAULT: u64 = ((1 << (MAX_PAGECACHE_ORDER + 1)) - 1) & !1;

/// How a [`ProcReader`] synchronises with writers (module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReaderMode {
    /// The mmap read lock per output chunk (one VMA record), across the walk for `smaps_rollup`.
    #[default]
    MmapLock,
    /// Each VMA under its own read lock (`lock_next_vma`), falling back to the mmap read lock.
    PerVma,
}

impl ReaderMode {
    /// Every mode, in the order tables list them (the mmap lock first: the baseline discipline).
    pub const ALL: [ReaderMode; 2] = [ReaderMode::MmapLock, ReaderMode::PerVma];

    /// The mode's name on command lines and in reports: `mmap-lock`, `per-vma`.
    pub fn name(self) -> &'static str {
        match self {
            ReaderMode::MmapLock => "mmap-lock",
            ReaderMode::PerVma => "per-vma",
        }
    }
}

impl std::str::FromStr for ReaderMode {
    type Err = String;

    /// Parses a [`ReaderMode::name`] (`mmap_lock` and `per_vma` are accepted too).
    fn from_str(s: &str) -> Result<ReaderMode, String> {
        let norm = s.replace('_', "-");
        ReaderMode::ALL.into_iter().find(|m| m.name() == norm).ok_or_else(|| {
            let names: Vec<&str> = ReaderMode::ALL.iter().map(|m| m.name()).collect();
            format!("unknown reader mode {s:?} ({})", names.join(", "))
        })
    }
}

/// A `/proc/PID` reader of one address space (module docs). `Send + Sync`: it borrows the [`Mm`], which
/// threads share.
#[derive(Clone, Copy)]
pub struct ProcReader<'a> {
    mm: &'a Mm,
    mode: ReaderMode,
}

impl Mm {
    /// A reader in the mmap-lock mode (`smaps` and `smaps_rollup` as 6.18 reads them).
    pub fn reader(&self) -> ProcReader<'_> {
        self.reader_with(ReaderMode::MmapLock)
    }

    /// A reader in `mode`.
    pub fn reader_with(&self, mode: ReaderMode) -> ProcReader<'_> {
        ProcReader { mm: self, mode }
    }
}

/// The VMA a record is made of, held as the reader's mode holds it.
enum Held<'r, 'a> {
    /// Under the mmap read lock.
    Locked(&'r MmRead<'a>, &'static Vma),
    /// Under the VMA's own read lock.
    Vma(VmaReadGuard<'static>),
}

impl Held<'_, '_> {
    fn vma(&self) -> &Vma {
        match self {
            Held::Locked(_, v) => v,
            Held::Vma(g) => g,
        }
    }
}

impl<'a> ProcReader<'a> {
    /// The mode.
    pub fn mode(&self) -> ReaderMode {
        self.mode
    }

    /// Runs `f` on the first VMA ending above `from` (`None` past the last), held as the mode holds it.
    fn with_next<R>(&self, from: u64, f: impl FnOnce(Option<Held<'_, '_>>) -> R) -> R {
        if self.mode == ReaderMode::PerVma {
            let shared = &self.mm.vmas.shared;
            match crate::vma::lock_next_vma(&shared.locking, &**shared, from) {
                Ok(Some(g)) => return f(Some(Held::Vma(g))),
                Ok(None) => return f(None),
                // The VMA could not be read-locked: fall back to the mmap read lock for this step.
                Err(_) => {}
            }
        }
        self.mm.read_locked(|r| {
            let v = r.find(from);
            f(v.map(|v| Held::Locked(r, v)))
        })
    }

    /// The maps line of a held VMA: under the mmap lock directly; under a VMA lock with the mm-wide values
    /// (the break) read racily, never under the mmap lock (`Mm::maps_line_unlocked`: taking it while holding
    /// the VMA lock deadlocks against a writer waiting for this VMA's readers).
    fn line_of(&self, h: &Held<'_, '_>) -> MapsLine {
        match h {
            Held::Locked(r, v) => r.maps_line_locked(v),
            Held::Vma(g) => self.mm.maps_line_unlocked(g),
        }
    }

    /// Walks the VMAs from address 0, one chunk per VMA (module docs), calling `f` with each held VMA.
    fn each(&self, mut f: impl FnMut(&Held<'_, '_>)) {
        let mut from = 0u64;
        loop {
            let next = self.with_next(from, |h| {
                h.map(|h| {
                    f(&h);
                    h.vma().end()
                })
            });
            match next {
                Some(end) => from = end,
                None => return,
            }
        }
    }

    /// `/proc/PID/maps`.
    pub fn maps(&self) -> String {
        let mut s = String::new();
        self.each(|h| self.line_of(h).render_into(&mut s));
        s
    }

    /// `/proc/PID/smaps`: every VMA's record.
    pub fn smaps(&self) -> String {
        let mut s = String::new();
        self.each(|h| self.record_of(h).render_into(&mut s));
        s
    }

    /// The smaps records of the VMAs overlapping `[start, end)`, in order.
    pub fn smaps_records(&self, start: u64, end: u64) -> Vec<SmapsRecord> {
        let mut out = Vec::new();
        let mut from = start;
        while from < end {
            let next = self.with_next(from, |h| {
                let h = h?;
                if h.vma().start() >= end {
                    return None;
                }
                out.push(self.record_of(&h));
                Some(h.vma().end())
            });
            match next {
                Some(e) => from = e,
                None => break,
            }
        }
        out
    }

    /// The smaps record of the VMA containing `addr`, if any.
    pub fn smaps_record(&self, addr: u64) -> Option<SmapsRecord> {
        self.with_next(addr, |h| {
            let h = h?;
            (h.vma().start() <= addr).then(|| self.record_of(&h))
        })
    }

    /// `/proc/PID/smaps_rollup` (`show_smaps_rollup`): the counters of every VMA summed, under one mmap read
    /// lock across the walk (whatever the mode: 6.18 has no per-VMA rollup). An empty address space prints
    /// the range `0-0`.
    pub fn smaps_rollup(&self) -> SmapsRollup {
        self.mm.read_locked(|r| {
            let mut acc = MemStatsAccumulator::default();
            let (mut first, mut last) = (None, 0);
            for v in r.areas() {
                first.get_or_insert(v.start());
                last = v.end();
                self.gather(v, &mut acc);
            }
            SmapsRollup { start: first.unwrap_or(0), end: last, stats: acc.finish() }
        })
    }

    /// `smap_gather_stats` for the whole VMA `v` (held by the caller): the page walk, or the hugetlb walk.
    fn gather(&self, v: &Vma, acc: &mut MemStatsAccumulator) {
        let pt = self.mm.page_table();
        let locked = v.fl().intersects(VmFlags::LOCKED);
        match huge_size(v) {
            None => pt.smaps_range(v.start(), v.end(), locked, acc),
            Some(size) => {
                // `smaps_hugetlb_range`: a huge page present in this VMA (the engine maps its 4 KiB pages one by
                // one: any of them present) counts its whole size, shared when its pages are mapped elsewhere
                // too (`folio_maybe_mapped_shared`).
                let mut block = v.start();
                while block < v.end() {
                    let entries = pt.entries(block, (block + size).min(v.end()));
                    let mapped: Vec<u32> = entries
                        .iter()
                        .filter(|(_, pte)| pte.is_present() && !pte.is_special())
                        .map(|(_, pte)| self.mm.memory().frame_info(pte.pfn()).map_or(0, |i| i.mapcount))
                        .collect();
                    if !mapped.is_empty() {
                        if mapped.iter().any(|&m| m >= 2) {
                            acc.bytes.shared_hugetlb += size;
                        } else {
                            acc.bytes.private_hugetlb += size;
                        }
                    }
                    block += size;
                }
            }
        }
    }

    /// One smaps record (`show_smap`) of a held VMA.
    fn record_of(&self, h: &Held<'_, '_>) -> SmapsRecord {
        let v = h.vma();
        let mut acc = MemStatsAccumulator::default();
        self.gather(v, &mut acc);
        let page_kb = huge_size(v).unwrap_or(PAGE_SIZE) >> 10;
        let cfg = self.mm.config();
        SmapsRecord {
            header: self.line_of(h),
            size_kb: v.len() >> 10,
            kernel_page_size_kb: page_kb,
            mmu_page_size_kb: page_kb,
            stats: acc.finish(),
            thp_eligible: u64::from(self.thp_eligible(v)),
            protection_key: cfg.pku.then(|| (v.fl().bits() >> 32) & 0xf),
            vm_flags: VmFlagsLine::from_flags(v.fl()),
        }
    }

    /// `!!thp_vma_allowable_orders(vma, vma->vm_flags, TVA_SMAPS, THP_ORDERS_ALL)` (`include/linux/huge_mm.h`,
    /// `mm/huge_memory.c: __thp_vma_allowable_orders`). The per-size anonymous settings are the kernel's
    /// defaults (the PMD size `inherit`s the global mode, the smaller sizes `never`).
    fn thp_eligible(&self, v: &Vma) -> bool {
        let cfg = self.mm.config();
        if !cfg.transparent_hugepage {
            return false;
        }
        let fl = v.fl();
        let anon = v.is_anonymous();
        let global_enabled = matches!(cfg.thp_enabled, ThpMode::Always | ThpMode::Madvise);
        let global_always = cfg.thp_enabled == ThpMode::Always;
        let mut orders = if anon {
            // thp_vma_allowable_orders: the sysfs mask of anonymous orders (only the PMD order, `inherit`).
            let inherit = global_always || (fl.intersects(VmFlags::HUGEPAGE) && global_enabled);
            if inherit { THP_ORDERS_ALL_ANON & (1 << PMD_ORDER) } else { 0 }
        } else if fl.intersects(VmFlags::HUGETLB) {
            0
        } else {
            THP_ORDERS_ALL_FILE_DEFAULT
        };
        if orders == 0 {
            return false;
        }
        // vma_thp_disabled (MMF_DISABLE_THP is not modelled).
        if fl.intersects(VmFlags::NOHUGEPAGE) {
            return false;
        }
        // The size and alignment filter, from the highest order down.
        while orders != 0 {
            let order = 63 - orders.leading_zeros();
            let size = PAGE_SIZE << order;
            if let Some(addr) = v.end().checked_sub(size)
                && thp_vma_suitable_order(v, addr, size, anon)
            {
                break;
            }
            orders &= !(1 << order);
        }
        if orders == 0 {
            return false;
        }
        match v.file() {
            None => true,
            Some(f) if f.kind == FileKind::ShmemZero => {
                // shmem_allowable_huge_orders with the mount's (the global shmem) setting.
                match cfg.thp_shmem_enabled {
                    ThpMode::Always | ThpMode::Force => true,
                    ThpMode::Madvise => fl.intersects(VmFlags::HUGEPAGE),
                    ThpMode::WithinSize => {
                        let end_index = (v.pgoff() + v.pages()) << PAGE_SHIFT;
                        f.size.get() >= end_index
                    }
                    ThpMode::Never | ThpMode::Deny => false,
                }
            }
            Some(f) => {
                if !global_enabled || (!fl.intersects(VmFlags::HUGEPAGE) && !global_always) {
                    return false;
                }
                // file_thp_enabled: read-only THP of a regular file nobody has open for writing.
                f.kind == FileKind::Regular && cfg.read_only_thp_for_fs && !f.writable
            }
        }
    }

    /// `PROCMAP_QUERY` (module docs): the answer, or the errno (positive).
    pub fn query(&self, req: &QueryRequest) -> Result<QueryAnswer, i32> {
        req.validate()?;
        let k = req.as_read();
        let mut from = k.addr;
        loop {
            let step = self.with_next(from, |h| {
                let Some(h) = h else { return Err(Err(vmspace_proc::query::errno::ENOENT)) };
                let v = h.vma();
                let perms = perms_of(v.fl());
                let found = k.find([(v.start(), v.end(), perms, v.is_file_backed())]);
                match found {
                    Ok(_) => Err(self.answer(&h, &k)),
                    // With COVERING_OR_NEXT a rejected VMA continues the search from its end.
                    Err(_) if k.flags & vmspace_proc::query::PROCMAP_QUERY_COVERING_OR_NEXT_VMA != 0 => {
                        Ok(v.end())
                    }
                    Err(e) => Err(Err(e)),
                }
            });
            match step {
                Ok(next) => from = next,
                Err(answer) => return answer,
            }
        }
    }

    /// The answer of a matched VMA: its fields, and its name when the request has a name buffer.
    fn answer(&self, h: &Held<'_, '_>, k: &QueryRequest) -> Result<QueryAnswer, i32> {
        let v = h.vma();
        let line = self.line_of(h);
        let mut a = QueryAnswer {
            vma_start: v.start(),
            vma_end: v.end(),
            vma_flags: perms_of(v.fl()),
            vma_page_size: huge_size(v).unwrap_or(PAGE_SIZE),
            vma_offset: line.offset,
            inode: line.inode,
            dev_major: line.dev_major,
            dev_minor: line.dev_minor,
            name: None,
        };
        if k.vma_name_size != 0 {
            a.name = line.name.as_ref().map(|n| n.to_string());
            a.name_size(k.vma_name_size)?;
        }
        Ok(a)
    }
}

/// The `PROCMAP_QUERY_VMA_*` bits of `vm_flags`.
fn perms_of(fl: VmFlags) -> u64 {
    let mut p = 0;
    if fl.intersects(VmFlags::READ) {
        p |= PROCMAP_QUERY_VMA_READABLE;
    }
    if fl.intersects(VmFlags::WRITE) {
        p |= PROCMAP_QUERY_VMA_WRITABLE;
    }
    if fl.intersects(VmFlags::EXEC) {
        p |= PROCMAP_QUERY_VMA_EXECUTABLE;
    }
    if fl.intersects(VmFlags::MAYSHARE) {
        p |= PROCMAP_QUERY_VMA_SHARED;
    }
    p
}

/// The huge page size of a hugetlb VMA (`vma_kernel_pagesize`), `None` for others.
fn huge_size(v: &Vma) -> Option<u64> {
    if !v.fl().intersects(VmFlags::HUGETLB) {
        return None;
    }
    v.file().and_then(|f| f.huge_page_size())
}

/// `thp_vma_suitable_order`: a naturally aligned block of `size` bytes around `addr` lies inside the VMA, and
/// for a file VMA the file offset is aligned with it.
fn thp_vma_suitable_order(v: &Vma, addr: u64, size: u64, anon: bool) -> bool {
    let pages = size >> PAGE_SHIFT;
    if !anon && !(v.start() >> PAGE_SHIFT).wrapping_sub(v.pgoff()).is_multiple_of(pages) {
        return false;
    }
    let haddr = addr & !(size - 1);
    haddr >= v.start() && haddr.checked_add(size).is_some_and(|e| e <= v.end())
}

// The reader is shared between threads, as `/proc/PID` files are read by other processes.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<ProcReader<'static>>();
};

#[cfg(test)]
mod tests {
    use super::ReaderMode;

    #[test]
    fn mode_names_round_trip() {
        for m in ReaderMode::ALL {
            assert_eq!(m.name().parse::<ReaderMode>(), Ok(m));
        }
        assert_eq!("per_vma".parse::<ReaderMode>(), Ok(ReaderMode::PerVma));
        let e = "rcu".parse::<ReaderMode>().unwrap_err();
        assert!(e.contains("mmap-lock, per-vma"), "{e}");
    }
}
