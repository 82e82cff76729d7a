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

use vmspace_abi::{Errno, FileArea};
use vmspace_rcu::sync::{AtomicPtr, AtomicU64, Ordering};

/// What kind of object a file-backed VMA maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// A regular file (ext4, tmpfs...): pages beyond its size raise SIGBUS.
    Regular,
    /// The shmem object behind a shared anonymous mapping (`shmem_zero_setup`): shows as `/dev/zero
    /// (deleted)`, device 00:01, sized to the mapping.
    ShmemZero,
    /// The hugetlbfs object behind a `MAP_HUGETLB` mapping (`hugetlb_file_setup`): shows as `/anon_hugepage
    /// (deleted)` on the internal hugetlbfs mount of its page size; its pages and reservations are in
    /// [`VmFile::huge`].
    Hugetlb,
}

/// A file's size (`i_size`), which `ftruncate` changes while mappings of the file exist: every VMA of the file
/// holds the same [`VmFile`] and sees the new size at its next fault.
///
/// An atomic so that the shared file can change through `&VmFile`. Relaxed: the size publishes nothing else
/// (the kernel's `i_size_read`/`i_size_write` are plain on 64-bit too); a fault racing with a truncation sees
/// the old or the new size. Clones, comparisons and hashes use the current value.
pub struct FileSize(AtomicU64);

impl FileSize {
    /// A size of `bytes`.
    pub fn new(bytes: u64) -> Self {
        FileSize(AtomicU64::new(bytes))
    }

    /// The current size in bytes.
    pub fn get(&self) -> u64 {
        // Relaxed: see the type docs.
        self.0.load(Ordering::Relaxed)
    }

    /// Sets the size (the caller checked the limits).
    pub(crate) fn set(&self, bytes: u64) {
        // Relaxed: see the type docs.
        self.0.store(bytes, Ordering::Relaxed);
    }
}

impl Clone for FileSize {
    fn clone(&self) -> Self {
        FileSize::new(self.get())
    }
}

impl PartialEq for FileSize {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for FileSize {}

impl std::hash::Hash for FileSize {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.get().hash(state);
    }
}

impl fmt::Debug for FileSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.get())
    }
}

/// One hugetlb page size's pool as an address space (and its fork children) use it: how many huge pages new
/// reservations and faults may still take (`free_hugepages - resv_hugepages` of the pool). Shared by every
/// hugetlb object of the engine's process tree.
pub struct HugePool {
    /// Huge page size in bytes.
    pub size: u64,
    /// Pages available. Changed under the mmap write lock of an mm using the pool; the mutex is for fork
    /// children, whose locks are their own.
    available: vmspace_rcu::sync::Mutex<u64>,
}

impl HugePool {
    /// A pool of `size`-byte pages with `available` pages.
    pub fn new(size: u64, available: u64) -> Self {
        HugePool { size, available: vmspace_rcu::sync::Mutex::new(available) }
    }

    /// Pages available now.
    pub fn available(&self) -> u64 {
        *self.available.lock()
    }

    /// Takes `n` pages, or none and `false` if fewer are available.
    pub(crate) fn take(&self, n: u64) -> bool {
        let mut a = self.available.lock();
        if *a < n {
            return false;
        }
        *a -= n;
        true
    }

    /// Gives `n` pages back.
    pub(crate) fn give(&self, n: u64) {
        *self.available.lock() += n;
    }
}

impl fmt::Debug for HugePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HugePool({:#x}: {} available)", self.size, self.available())
    }
}

/// The huge pages of one hugetlb object, by page index in the object (huge-page units): those reserved and
/// not yet faulted in, and those faulted in (present).
#[derive(Debug, Default)]
pub(crate) struct HugePages {
    pub reserved: std::collections::BTreeSet<u64>,
    pub faulted: std::collections::BTreeSet<u64>,
}

/// The hugetlbfs side of a `MAP_HUGETLB` object: its pool, its pages, and who owns its reservations
/// (`space::hugetlb` describes the model).
pub struct HugeObject {
    /// The pool of its page size.
    pub pool: Arc<HugePool>,
    /// Created by a `MAP_SHARED` mapping (reservations and pages belong to the object, as in the page cache of
    /// a hugetlbfs inode); otherwise private to its creating mapping (`HPAGE_RESV_OWNER`).
    pub shared: bool,
    /// The mm (`MmLocking::id`) whose private mapping owns the reservations; fork children do not.
    pub owner_mm: u64,
    /// Reserved and present pages. Changed under the mmap write lock; the mutex is for fork children.
    pub(crate) pages: vmspace_rcu::sync::Mutex<HugePages>,
}

impl HugeObject {
    /// Huge pages of the object reserved and not yet faulted in.
    pub fn reserved(&self) -> usize {
        self.pages.lock().reserved.len()
    }

    /// Huge pages of the object faulted in.
    pub fn faulted(&self) -> usize {
        self.pages.lock().faulted.len()
    }
}

impl fmt::Debug for HugeObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.pages.lock();
        write!(
            f,
            "HugeObject({:#x}, {} reserved, {} faulted)",
            self.pool.size,
            p.reserved.len(),
            p.faulted.len()
        )
    }
}

/// A hugetlb object compares by identity (it is one inode).
#[derive(Clone)]
pub struct HugeRef(pub Arc<HugeObject>);

impl PartialEq for HugeRef {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for HugeRef {}

impl std::hash::Hash for HugeRef {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.0).hash(state);
    }
}

impl fmt::Debug for HugeRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// `MAX_LFS_FILESIZE` on 64-bit: the largest `loff_t`.
pub const MAX_LFS_FILESIZE: u64 = i64::MAX as u64;

/// A model file (an open `struct file` and its inode): what a file-backed VMA shows in `/proc/PID/maps` (path,
/// device, inode), its size (which bounds faults on the mapping, and which [`VmFile::ftruncate`] changes for
/// every mapping at once), the open mode mmap checks, the limits a truncation obeys, and its contents: the page
/// cache ([`FilePages`]). Identity is the `Arc`: two VMAs map "the same file" (`vm_file` equality, needed to
/// merge) when they hold the same allocation. Comparisons, hashes and clones use the descriptive fields only (a
/// clone is a new file of the same description, with no pages).
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
    /// Size in bytes (`i_size`), shared by every mapping of the file. Changed only with the file's rmap lock
    /// held, together with the page cache's size ([`FilePages`]).
    pub size: FileSize,
    /// Opened for reading (`FMODE_READ`).
    pub readable: bool,
    /// Opened for writing (`FMODE_WRITE`).
    pub writable: bool,
    /// The file system is mounted noexec.
    pub noexec: bool,
    /// Regular file, shmem or hugetlbfs.
    pub kind: FileKind,
    /// A DAX file (`IS_DAX`): the only kind `MAP_SYNC` may map (ext4 and xfs refuse `VM_SYNC` otherwise).
    pub dax: bool,
    /// The largest size the file's file system allows (`s_maxbytes`): growing beyond it is EFBIG.
    pub max_bytes: u64,
    /// The placement method of the file's file system (`file_operations.get_unmapped_area`): where a mapping
    /// of it goes when the caller does not fix the address (`space/unmapped.rs`). Ignored for hugetlb files.
    pub area: FileArea,
    /// `RLIMIT_FSIZE` of the process that truncates the file (`u64::MAX`: unlimited): growing beyond it is
    /// EFBIG (and SIGXFSZ, not modelled).
    pub fsize_limit: u64,
    /// The hugetlbfs object of a [`FileKind::Hugetlb`] file.
    pub huge: Option<HugeRef>,
    /// The readahead settings of the file's device (`inode_to_bdi`), copied into the open file's readahead
    /// state when its page cache is made; only a regular file reads ahead.
    pub bdi: vmspace_pgtable::Bdi,
    /// The contents (the page cache) and the rmap lock: opaque, a file of its own for each `VmFile` value
    /// (`FilePages::default()` for a new one, as `Clone` makes).
    pub pages: FilePages,
}

/// A file's pages: its page cache ([`vmspace_pgtable::PageCache`]: the file's bytes, zero-filled where never
/// written, and the registry of the mappings that map it), created in the memory of the first address space
/// that maps the file, and the file's rmap lock.
///
/// # The rmap lock (`i_mmap_rwsem`'s role)
///
/// Truncation (`VmFile::ftruncate`, `MADV_REMOVE`'s hole punch) zaps the file's pages in every registered
/// mapping. While it runs, no address space may move the entries of a mapping of the file between addresses
/// (mremap's `move_page_tables`, which the kernel runs under `take_rmap_locks`) or copy them into a child whose
/// registration the zap might already have passed (fork's `copy_page_range`): both hold this lock across the
/// registration change and the entry move. Lock order: mmap lock, VMA write locks, this lock, then the page
/// cache's registry and state mutexes, then PTE locks. Truncation takes no mmap or VMA lock.
pub struct FilePages {
    cache: std::sync::OnceLock<Arc<vmspace_pgtable::PageCache>>,
    rmap: vmspace_rcu::sync::Mutex<()>,
    /// Before the cache exists: the pages a truncation cached without reading them
    /// ([`vmspace_pgtable::partial_block_page`]), with the number of truncations that looked each up (each
    /// lookup marks it accessed, so a second one activates it), made when the cache is.
    unread: vmspace_rcu::sync::Mutex<std::collections::BTreeMap<u64, u32>>,
}

impl FilePages {
    fn new() -> Self {
        FilePages {
            cache: std::sync::OnceLock::new(),
            rmap: vmspace_rcu::sync::Mutex::new(()),
            unread: vmspace_rcu::sync::Mutex::new(std::collections::BTreeMap::new()),
        }
    }
}

impl Default for FilePages {
    /// No page cache yet (the first mapping creates it).
    fn default() -> Self {
        FilePages::new()
    }
}

impl fmt::Debug for FilePages {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.cache.get() {
            Some(c) => write!(f, "FilePages({c:?})"),
            None => f.write_str("FilePages(no cache)"),
        }
    }
}

impl VmFile {
    fn described(&self) -> impl PartialEq + std::hash::Hash + '_ {
        (
            (&self.name, self.deleted, self.dev_major, self.dev_minor, self.inode, &self.size),
            (
                self.readable,
                self.writable,
                self.noexec,
                self.kind,
                self.dax,
                self.max_bytes,
                self.fsize_limit,
                self.area,
            ),
            &self.huge,
        )
    }
}

impl PartialEq for VmFile {
    fn eq(&self, other: &Self) -> bool {
        self.described() == other.described()
    }
}

impl Eq for VmFile {}

impl std::hash::Hash for VmFile {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.described().hash(state);
    }
}

impl Clone for VmFile {
    /// A file of the same description with no pages of its own.
    fn clone(&self) -> Self {
        VmFile {
            name: self.name.clone(),
            deleted: self.deleted,
            dev_major: self.dev_major,
            dev_minor: self.dev_minor,
            inode: self.inode,
            size: self.size.clone(),
            readable: self.readable,
            writable: self.writable,
            noexec: self.noexec,
            kind: self.kind,
            dax: self.dax,
            max_bytes: self.max_bytes,
            fsize_limit: self.fsize_limit,
            area: self.area,
            huge: self.huge.clone(),
            bdi: self.bdi,
            pages: FilePages::new(),
        }
    }
}

impl fmt::Debug for VmFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VmFile")
            .field("name", &self.name)
            .field("deleted", &self.deleted)
            .field("dev", &format_args!("{:02x}:{:02x}", self.dev_major, self.dev_minor))
            .field("inode", &self.inode)
            .field("size", &self.size)
            .field("kind", &self.kind)
            .field("huge", &self.huge)
            .field("pages", &self.pages)
            .finish()
    }
}

impl VmFile {
    /// A regular file opened read-write on an exec-allowed file system, on device 00:00 (what op scripts
    /// create), with no size limit but `MAX_LFS_FILESIZE`, reading ahead as a default block device does
    /// ([`vmspace_pgtable::Bdi::default`]), placed by the address space's own search ([`FileArea::Mm`]; the
    /// op-script target sets its configured file system's method, [`MmConfig::file_area`](crate::MmConfig)).
    /// Its contents are `size` zero bytes.
    pub fn regular(name: impl Into<String>, inode: u64, size: u64) -> Arc<VmFile> {
        Arc::new(VmFile::regular_file(name.into(), inode, size))
    }

    fn regular_file(name: String, inode: u64, size: u64) -> VmFile {
        VmFile {
            name,
            deleted: false,
            dev_major: 0,
            dev_minor: 0,
            inode,
            size: FileSize::new(size),
            readable: true,
            writable: true,
            noexec: false,
            kind: FileKind::Regular,
            dax: false,
            max_bytes: MAX_LFS_FILESIZE,
            fsize_limit: u64::MAX,
            area: FileArea::Mm,
            huge: None,
            bdi: vmspace_pgtable::Bdi::default(),
            pages: FilePages::new(),
        }
    }

    /// A regular file as [`VmFile::regular`] on a file system whose largest file is `max_bytes`, for a
    /// process with `RLIMIT_FSIZE` `fsize_limit`, created empty and then truncated to `size` as the op-script
    /// `file NAME SIZE` does (`open(O_CREAT)` + `ftruncate`): the truncation's errno if it refuses `size`.
    pub fn regular_sized(
        name: impl Into<String>,
        inode: u64,
        size: u64,
        max_bytes: u64,
        fsize_limit: u64,
    ) -> Result<Arc<VmFile>, Errno> {
        let f = VmFile { max_bytes, fsize_limit, ..VmFile::regular_file(name.into(), inode, 0) };
        f.ftruncate(size)?;
        Ok(Arc::new(f))
    }

    /// The shmem object `shmem_zero_setup` gives a shared anonymous mapping of `size` bytes: `/dev/zero
    /// (deleted)` on 00:01 with inode `inode`.
    pub fn shmem_zero(inode: u64, size: u64) -> Arc<VmFile> {
        Arc::new(VmFile {
            name: "/dev/zero".into(),
            deleted: true,
            dev_major: 0,
            dev_minor: 1,
            kind: FileKind::ShmemZero,
            // The internal shmem mount (`shm_mnt`); whether it allows huge pages is the address space's
            // `shmem_enabled` (`space/unmapped.rs`).
            area: FileArea::Shmem { huge: false },
            ..VmFile::regular_file(String::new(), inode, size)
        })
    }

    /// The current size in bytes.
    pub fn size(&self) -> u64 {
        self.size.get()
    }

    /// The huge page size of a hugetlb file.
    pub fn huge_page_size(&self) -> Option<u64> {
        self.huge.as_ref().map(|h| h.0.pool.size)
    }

    /// The page cache, if a mapping created it (tests and diagnostics).
    pub fn page_cache(&self) -> Option<&Arc<vmspace_pgtable::PageCache>> {
        self.pages.cache.get()
    }

    /// The page cache in `mem`, created (with the file's current size) at the first call: the address space
    /// calls it when it maps the file. EINVAL if the file's pages already live in another memory (two address
    /// spaces of different machines cannot share a file's pages).
    pub(crate) fn cache_in(
        &self,
        mem: &Arc<vmspace_pgtable::Memory>,
    ) -> Result<&Arc<vmspace_pgtable::PageCache>, Errno> {
        let c = match self.pages.cache.get() {
            Some(c) => c,
            None => {
                // Under the rmap lock, so that a concurrent truncation either sees the cache or ran before the
                // size is read.
                let _g = self.pages.rmap.lock();
                let c = self.pages.cache.get_or_init(|| {
                    let shmem = self.kind != FileKind::Regular;
                    let bdi = if shmem { vmspace_pgtable::Bdi::NONE } else { self.bdi };
                    Arc::new(vmspace_pgtable::PageCache::with_bdi(mem, self.size(), shmem, bdi))
                });
                for (i, lookups) in std::mem::take(&mut *self.pages.unread.lock()) {
                    for _ in 0..lookups {
                        c.cache_not_uptodate(i);
                    }
                }
                c
            }
        };
        if Arc::ptr_eq(c.memory(), mem) { Ok(c) } else { Err(Errno::EINVAL) }
    }

    /// The rmap lock ([`FilePages`]).
    pub(crate) fn rmap_lock(&self) -> vmspace_rcu::sync::MutexGuard<'_, ()> {
        self.pages.rmap.lock()
    }

    /// Sets the size to `bytes` under the rmap lock: the page cache follows (`truncate_setsize` +
    /// `truncate_pagecache`: shrinking unmaps every page beyond the new end from every mapping, private copies
    /// included, and drops it from the cache; growing only changes the size).
    pub(crate) fn set_size(&self, bytes: u64) {
        let _g = self.pages.rmap.lock();
        let old = self.size();
        self.size.set(bytes);
        if let Some(c) = self.pages.cache.get() {
            c.truncate(bytes);
        } else if self.kind == FileKind::Regular {
            let mut unread = self.pages.unread.lock();
            let end = bytes.div_ceil(vmspace_abi::PAGE_SIZE);
            unread.retain(|&i, _| i < end);
            if let Some(i) = vmspace_pgtable::partial_block_page(old, bytes) {
                // A third lookup leaves the page active and referenced, as every later one does.
                let n = unread.entry(i).or_insert(0);
                *n = (*n + 1).min(3);
            }
        }
    }

    /// `vfs_fallocate(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)` of `[offset, offset + len)` (`MADV_REMOVE`):
    /// the whole pages are unmapped from every mapping (private copies made before stay) and dropped from the
    /// cache, partial pages zeroed over the hole; the size stays. A hole reaching past the end of file ends at
    /// the end of the page holding it (`ext4_punch_hole`: `round_up(i_size, PAGE_SIZE)`), so the bytes a
    /// shared mapping stored beyond the end of file in that page go too; one starting at or beyond the end of
    /// file punches nothing.
    pub(crate) fn punch_hole(&self, offset: u64, len: u64) {
        let _g = self.pages.rmap.lock();
        if let Some(c) = self.pages.cache.get() {
            let end = offset.saturating_add(len).min(self.size().next_multiple_of(vmspace_abi::PAGE_SIZE));
            if end > offset {
                c.punch_hole(offset, end - offset);
            }
        }
    }

    /// `ftruncate(fd, size)` on a regular file opened for writing (`fs/open.c: do_ftruncate`,
    /// `fs/attr.c: inode_newsize_ok`): a size above `i64::MAX` is EINVAL (a negative `loff_t`), a file not
    /// opened for writing or not regular EINVAL; growing beyond `RLIMIT_FSIZE` or the file system's largest
    /// file is EFBIG (shrinking is never refused by them). The new size holds for every mapping of the file:
    /// the pages beyond it are unmapped from every mapping, private copied-on-write pages included
    /// (`truncate_pagecache` with `even_cows`; checked on the live kernel), and dropped from the page cache, and
    /// the tail of a partial last page reads as zeroes from then on; growing the file again exposes zeroes. No
    /// VMA changes.
    pub fn ftruncate(&self, size: u64) -> Result<(), Errno> {
        if size > MAX_LFS_FILESIZE {
            return Err(Errno::EINVAL);
        }
        if self.kind != FileKind::Regular || !self.writable {
            return Err(Errno::EINVAL);
        }
        if size > self.size() && (size > self.fsize_limit || size > self.max_bytes) {
            return Err(Errno::EFBIG);
        }
        self.set_size(size);
        Ok(())
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

    /// `f` applied to the value the cell holds, read under RCU without taking a reference (no count is
    /// touched: a reader's look that shares no written line with other readers).
    pub fn with<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        let _guard = vmspace_rcu::pin();
        // Acquire: pairs with the release half of `store`'s swap, so the payload's initialisation is visible.
        let p = self.ptr.load(Ordering::Acquire);
        if p.is_null() {
            return None;
        }
        // SAFETY: `p` came from `Arc::into_raw`; the cell's strong count on it is released only after a grace
        // period that began after the pointer was unpublished, and `_guard` (taken before the load) keeps that
        // grace period from ending while `f` runs.
        Some(f(unsafe { &*p }))
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

    /// Makes this empty cell hold what `src` holds (one more strong count on the same payload), without pinning
    /// a read section or swapping: `dup_mmap`'s copy of a parent VMA's file or name into the child's fresh VMA.
    ///
    /// # Safety
    ///
    /// No store to `src` may run concurrently (its VMA is write-locked by the caller, who holds its mm's mmap
    /// write lock), so its payload cannot be unpublished and released during the increment; `self` must be empty
    /// and have no concurrent writer (a detached VMA owned by the caller).
    pub unsafe fn init_clone_from(&self, src: &RcuArc<T>) {
        // Relaxed: the caller is `src`'s writer (or ordered after it by the mmap lock), see the safety contract.
        let p = src.ptr.load(Ordering::Relaxed);
        debug_assert!(self.ptr.load(Ordering::Relaxed).is_null(), "init_clone_from into a full cell");
        if p.is_null() {
            return;
        }
        // SAFETY: `p` came from `Arc::into_raw` and `src` owns a strong count on it that no one can release while
        // the caller keeps `src`'s writers out (the safety contract); the new count is owned by `self`.
        unsafe { Arc::increment_strong_count(p) };
        // Release: publishes the payload to `load`'s acquire, as `store` does.
        self.ptr.store(p, Ordering::Release);
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
