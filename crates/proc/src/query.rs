//! The `PROCMAP_QUERY` model: the ioctl's flags, request and answer as plain Rust values, with the argument
//! validation and the matching rule of Linux 6.18 (`fs/proc/task_mmu.c: do_procmap_query`), independent of the ioctl
//! itself. The engine's query reader implements the lookup over its VMAs; the live-kernel side fills the
//! same answer from the real ioctl; the two compare as values.
//!
//! Matching rule (`query_matching_vma`): start from the first VMA whose end is above the address; reject it
//! if FILE_BACKED is asked and it has no file, or if it lacks one of the asked permissions (the asked
//! permissions must be a subset of the VMA's). Without COVERING_OR_NEXT the first VMA found must contain the
//! address, otherwise the answer is ENOENT; with it, a rejected VMA makes the search continue from that VMA's
//! end, so the answer is the covering VMA or the closest following one that matches.

use core::mem::{offset_of, size_of};

use linux_raw_sys::general::procmap_query_flags as qf;

/// `struct procmap_query` (`include/uapi/linux/fs.h`), the ioctl's argument: the one definition of its layout
/// in the workspace, from `linux-raw-sys`. The model below works on plain values; the live-kernel side passes
/// this struct (or, for sizes other than the kernel's, bytes laid out by [`layout`]).
pub use linux_raw_sys::general::procmap_query;

/// `PROCFS_IOCTL_MAGIC`.
pub const PROCFS_IOCTL_MAGIC: u8 = b'f';
/// The ioctl number's `nr`: `_IOWR('f', 17, struct procmap_query)`.
pub const PROCMAP_QUERY_NR: u8 = 17;
/// Size of `struct procmap_query` in bytes.
pub const PROCMAP_QUERY_SIZE: usize = size_of::<procmap_query>();
/// The smallest `size` the kernel accepts: `offsetofend(struct procmap_query, query_addr)`.
pub const PROCMAP_QUERY_MIN_SIZE: usize = layout::ADDR + 8;
/// The ioctl request: `_IOWR('f', 17, struct procmap_query)` (`_IOC(_IOC_READ | _IOC_WRITE, ...)`).
pub const PROCMAP_QUERY: u32 = (3 << 30)
    | ((PROCMAP_QUERY_SIZE as u32) << 16)
    | ((PROCFS_IOCTL_MAGIC as u32) << 8)
    | PROCMAP_QUERY_NR as u32;

/// Byte offsets of the fields of [`procmap_query`], for callers that lay out a struct of another size than the
/// kernel's (a shorter one is what an older ABI passes; a longer one a newer ABI's).
pub mod layout {
    use super::{offset_of, procmap_query};

    /// `size`.
    pub const SIZE: usize = offset_of!(procmap_query, size);
    /// `query_flags`.
    pub const FLAGS: usize = offset_of!(procmap_query, query_flags);
    /// `query_addr`.
    pub const ADDR: usize = offset_of!(procmap_query, query_addr);
    /// `vma_start`.
    pub const VMA_START: usize = offset_of!(procmap_query, vma_start);
    /// `vma_end`.
    pub const VMA_END: usize = offset_of!(procmap_query, vma_end);
    /// `vma_flags`.
    pub const VMA_FLAGS: usize = offset_of!(procmap_query, vma_flags);
    /// `vma_page_size`.
    pub const PAGE_SIZE: usize = offset_of!(procmap_query, vma_page_size);
    /// `vma_offset`.
    pub const OFFSET: usize = offset_of!(procmap_query, vma_offset);
    /// `inode`.
    pub const INODE: usize = offset_of!(procmap_query, inode);
    /// `dev_major`.
    pub const DEV_MAJOR: usize = offset_of!(procmap_query, dev_major);
    /// `dev_minor`.
    pub const DEV_MINOR: usize = offset_of!(procmap_query, dev_minor);
    /// `vma_name_size`.
    pub const NAME_SIZE: usize = offset_of!(procmap_query, vma_name_size);
    /// `build_id_size`.
    pub const BUILD_ID_SIZE: usize = offset_of!(procmap_query, build_id_size);
    /// `vma_name_addr`.
    pub const NAME_ADDR: usize = offset_of!(procmap_query, vma_name_addr);
    /// `build_id_addr`.
    pub const BUILD_ID_ADDR: usize = offset_of!(procmap_query, build_id_addr);
}

/// The VMA must be readable.
pub const PROCMAP_QUERY_VMA_READABLE: u64 = qf::PROCMAP_QUERY_VMA_READABLE as u64;
/// The VMA must be writable.
pub const PROCMAP_QUERY_VMA_WRITABLE: u64 = qf::PROCMAP_QUERY_VMA_WRITABLE as u64;
/// The VMA must be executable.
pub const PROCMAP_QUERY_VMA_EXECUTABLE: u64 = qf::PROCMAP_QUERY_VMA_EXECUTABLE as u64;
/// The VMA must be shared (VM_MAYSHARE).
pub const PROCMAP_QUERY_VMA_SHARED: u64 = qf::PROCMAP_QUERY_VMA_SHARED as u64;
/// Return the covering VMA or, failing that, the next matching one.
pub const PROCMAP_QUERY_COVERING_OR_NEXT_VMA: u64 = qf::PROCMAP_QUERY_COVERING_OR_NEXT_VMA as u64;
/// Only file-backed VMAs match.
pub const PROCMAP_QUERY_FILE_BACKED_VMA: u64 = qf::PROCMAP_QUERY_FILE_BACKED_VMA as u64;
/// All flags the kernel knows; any other bit is EINVAL.
pub const PROCMAP_QUERY_ALL_FLAGS: u64 = 0x3f;
/// The permission bits among the flags (also the bits of [`QueryAnswer::vma_flags`]).
pub const PROCMAP_QUERY_VMA_PERMS: u64 = 0x0f;

const _: () = assert!(PROCMAP_QUERY_SIZE == 104 && PROCMAP_QUERY == 0xC068_6611);

/// Linux errno values the query can return.
pub mod errno {
    /// No such file or directory: no matching VMA.
    pub const ENOENT: i32 = 2;
    /// No such process: the mm is gone.
    pub const ESRCH: i32 = 3;
    /// Interrupted.
    pub const EINTR: i32 = 4;
    /// Out of memory.
    pub const ENOMEM: i32 = 12;
    /// Bad address in a user buffer.
    pub const EFAULT: i32 = 14;
    /// Invalid argument.
    pub const EINVAL: i32 = 22;
    /// Argument list too long: struct size too big, or non-zero unknown tail.
    pub const E2BIG: i32 = 7;
    /// Name (or build ID) buffer too small.
    pub const ENAMETOOLONG: i32 = 36;
}

/// `PATH_MAX`: the kernel's name buffer is at most this long, whatever `vma_name_size` says.
pub const PATH_MAX: u32 = 4096;

/// A query, as the caller fills it (the input fields of `struct procmap_query`).
///
/// The kernel reads only the first `size` bytes of the caller's struct (`copy_struct_from_user`): a field
/// that ends beyond `size` is read as zero, and one that `size` cuts through keeps only its low bytes
/// (x86-64 is little-endian). [`QueryRequest::as_read`] applies that rule; [`QueryRequest::validate`] and
/// the lookups work on what the kernel reads, not on what the caller filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueryRequest {
    /// `size`: the caller's struct size.
    pub size: u64,
    /// `query_flags`.
    pub flags: u64,
    /// `query_addr`.
    pub addr: u64,
    /// `vma_name_size`: capacity of the name buffer (0 = no name wanted).
    pub vma_name_size: u32,
    /// `vma_name_addr`: the name buffer's user address (0 = none).
    pub vma_name_addr: u64,
    /// `build_id_size`: capacity of the build-ID buffer.
    pub build_id_size: u32,
    /// `build_id_addr`: the build-ID buffer's user address (0 = none).
    pub build_id_addr: u64,
    /// Whether a byte of the caller's struct past the kernel's 104 (up to `size`) is non-zero: such a
    /// struct is from a newer ABI whose extra fields this kernel cannot honour (`copy_struct_from_user`:
    /// E2BIG).
    pub nonzero_tail: bool,
}

use layout::{
    ADDR as OFF_ADDR, BUILD_ID_ADDR as OFF_BUILD_ID_ADDR, BUILD_ID_SIZE as OFF_BUILD_ID_SIZE,
    FLAGS as OFF_FLAGS, NAME_ADDR as OFF_NAME_ADDR, NAME_SIZE as OFF_NAME_SIZE,
};

impl QueryRequest {
    /// A request of the current struct size, without name or build-ID buffers.
    pub fn new(flags: u64, addr: u64) -> Self {
        QueryRequest { size: PROCMAP_QUERY_SIZE as u64, flags, addr, ..Default::default() }
    }

    /// The input fields as the kernel reads them: the caller's struct bytes up to `size` (at most the 104
    /// the kernel knows), zeros after that (`copy_struct_from_user`). `size` itself is always read whole.
    #[inline]
    pub fn as_read(&self) -> QueryRequest {
        if self.size >= PROCMAP_QUERY_SIZE as u64 {
            // Every input field lies within the caller's struct: read as given (the common case, a caller of
            // this kernel's ABI or a newer one).
            return QueryRequest {
                nonzero_tail: self.nonzero_tail && self.size > PROCMAP_QUERY_SIZE as u64,
                ..*self
            };
        }
        self.as_read_short()
    }

    /// [`QueryRequest::as_read`] of a struct shorter than the kernel's: the fields `size` cuts through or
    /// leaves out, byte by byte.
    #[cold]
    fn as_read_short(&self) -> QueryRequest {
        let mut b = [0u8; PROCMAP_QUERY_SIZE];
        b[OFF_FLAGS..OFF_FLAGS + 8].copy_from_slice(&self.flags.to_le_bytes());
        b[OFF_ADDR..OFF_ADDR + 8].copy_from_slice(&self.addr.to_le_bytes());
        b[OFF_NAME_SIZE..OFF_NAME_SIZE + 4].copy_from_slice(&self.vma_name_size.to_le_bytes());
        b[OFF_BUILD_ID_SIZE..OFF_BUILD_ID_SIZE + 4].copy_from_slice(&self.build_id_size.to_le_bytes());
        b[OFF_NAME_ADDR..OFF_NAME_ADDR + 8].copy_from_slice(&self.vma_name_addr.to_le_bytes());
        b[OFF_BUILD_ID_ADDR..OFF_BUILD_ID_ADDR + 8].copy_from_slice(&self.build_id_addr.to_le_bytes());
        let copied = usize::try_from(self.size).unwrap_or(usize::MAX).min(PROCMAP_QUERY_SIZE);
        b[copied..].fill(0);
        let u64_at = |o: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(w)
        };
        let u32_at = |o: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&b[o..o + 4]);
            u32::from_le_bytes(w)
        };
        QueryRequest {
            size: self.size,
            flags: u64_at(OFF_FLAGS),
            addr: u64_at(OFF_ADDR),
            vma_name_size: u32_at(OFF_NAME_SIZE),
            vma_name_addr: u64_at(OFF_NAME_ADDR),
            build_id_size: u32_at(OFF_BUILD_ID_SIZE),
            build_id_addr: u64_at(OFF_BUILD_ID_ADDR),
            nonzero_tail: self.nonzero_tail && self.size > PROCMAP_QUERY_SIZE as u64,
        }
    }

    /// The argument checks the kernel makes before looking anything up (`fs/proc/task_mmu.c:
    /// do_procmap_query`), in its order: size too big (E2BIG), too small (EINVAL), a non-zero tail past the
    /// known struct (E2BIG, from `copy_struct_from_user`), unknown flags (EINVAL), name size/address not both
    /// zero or both set (EINVAL), the same for the build ID (EINVAL); fields past `size` read as zero
    /// ([`QueryRequest::as_read`]). Returns the errno (positive) on failure.
    pub fn validate(&self) -> Result<(), i32> {
        self.checked().map(|_| ())
    }

    /// [`QueryRequest::validate`], returning the request as the kernel read it ([`QueryRequest::as_read`])
    /// when it passes: what a lookup works on, read once.
    #[inline]
    pub fn checked(&self) -> Result<QueryRequest, i32> {
        if self.size > 4096 {
            return Err(errno::E2BIG);
        }
        if self.size < PROCMAP_QUERY_MIN_SIZE as u64 {
            return Err(errno::EINVAL);
        }
        let k = self.as_read();
        if k.nonzero_tail {
            return Err(errno::E2BIG);
        }
        if k.flags & !PROCMAP_QUERY_ALL_FLAGS != 0 {
            return Err(errno::EINVAL);
        }
        if (k.vma_name_size != 0) != (k.vma_name_addr != 0) {
            return Err(errno::EINVAL);
        }
        if (k.build_id_size != 0) != (k.build_id_addr != 0) {
            return Err(errno::EINVAL);
        }
        Ok(k)
    }

    /// [`QueryRequest::checked`] reduced to what a lookup without a name reads ([`QueryArgs`]), field by
    /// field: a caller's request of the kernel's size or larger (the common case) is checked in place, in
    /// the kernel's order (the size checks cannot fail there; then the tail, the flags, the name and build-ID
    /// pairs), without copying the request (a copy read back at once costs more than the checks).
    #[inline]
    pub fn args(&self) -> Result<QueryArgs, i32> {
        if (PROCMAP_QUERY_SIZE as u64..=4096).contains(&self.size) {
            if self.nonzero_tail && self.size > PROCMAP_QUERY_SIZE as u64 {
                return Err(errno::E2BIG);
            }
            if self.flags & !PROCMAP_QUERY_ALL_FLAGS != 0 {
                return Err(errno::EINVAL);
            }
            if (self.vma_name_size != 0) != (self.vma_name_addr != 0) {
                return Err(errno::EINVAL);
            }
            if (self.build_id_size != 0) != (self.build_id_addr != 0) {
                return Err(errno::EINVAL);
            }
            return Ok(QueryArgs { flags: self.flags, addr: self.addr, vma_name_size: self.vma_name_size });
        }
        let k = self.checked()?;
        Ok(QueryArgs { flags: k.flags, addr: k.addr, vma_name_size: k.vma_name_size })
    }

    /// Whether a VMA with these permission bits (`PROCMAP_QUERY_VMA_*`) and file-ness passes the filters
    /// (not the address condition).
    pub fn accepts(&self, vma_perms: u64, file_backed: bool) -> bool {
        if self.flags & PROCMAP_QUERY_FILE_BACKED_VMA != 0 && !file_backed {
            return false;
        }
        let want = self.flags & PROCMAP_QUERY_VMA_PERMS;
        want & vma_perms == want
    }

    /// The matching rule over VMAs in address order, each given as `(start, end, perms, file_backed)`:
    /// returns the index of the answer, or ENOENT.
    pub fn find<I>(&self, vmas: I) -> Result<usize, i32>
    where
        I: IntoIterator<Item = (u64, u64, u64, bool)>,
    {
        let covering_or_next = self.flags & PROCMAP_QUERY_COVERING_OR_NEXT_VMA != 0;
        for (i, (start, end, perms, file)) in vmas.into_iter().enumerate() {
            if end <= self.addr {
                continue;
            }
            if !covering_or_next && start > self.addr {
                return Err(errno::ENOENT);
            }
            if self.accepts(perms, file) {
                return Ok(i);
            }
            if !covering_or_next {
                return Err(errno::ENOENT);
            }
        }
        Err(errno::ENOENT)
    }
}

/// The fields of a checked request that the lookup reads ([`QueryRequest::args`]), as the kernel read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryArgs {
    /// `query_flags`.
    pub flags: u64,
    /// `query_addr`.
    pub addr: u64,
    /// `vma_name_size` (0: no name wanted).
    pub vma_name_size: u32,
}

impl QueryArgs {
    /// `query_matching_vma`'s verdict on the first VMA ending above the address searched from (`start`,
    /// `end`, its `PROCMAP_QUERY_VMA_*` bits, whether it has a file): `Ok(true)` if it is the answer,
    /// `Ok(false)` if the search goes on from its end (`COVERING_OR_NEXT_VMA` and a filter rejected it),
    /// else ENOENT ([`QueryRequest::find`] over one VMA).
    #[inline]
    pub fn matches(&self, start: u64, end: u64, perms: u64, file_backed: bool) -> Result<bool, i32> {
        let covering_or_next = self.flags & PROCMAP_QUERY_COVERING_OR_NEXT_VMA != 0;
        if end <= self.addr {
            return if covering_or_next { Ok(false) } else { Err(errno::ENOENT) };
        }
        if !covering_or_next && start > self.addr {
            return Err(errno::ENOENT);
        }
        let want = self.flags & PROCMAP_QUERY_VMA_PERMS;
        let file_ok = self.flags & PROCMAP_QUERY_FILE_BACKED_VMA == 0 || file_backed;
        if file_ok && want & perms == want {
            return Ok(true);
        }
        if covering_or_next { Ok(false) } else { Err(errno::ENOENT) }
    }
}

/// What a successful query returns (the output fields of `struct procmap_query`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct QueryAnswer {
    /// `vma_start`.
    pub vma_start: u64,
    /// `vma_end` (exclusive).
    pub vma_end: u64,
    /// `vma_flags`: `PROCMAP_QUERY_VMA_*` bits.
    pub vma_flags: u64,
    /// `vma_page_size`.
    pub vma_page_size: u64,
    /// `vma_offset`: `vm_pgoff << PAGE_SHIFT` for file VMAs, 0 for anonymous.
    pub vma_offset: u64,
    /// `inode` (0 if anonymous).
    pub inode: u64,
    /// `dev_major`.
    pub dev_major: u32,
    /// `dev_minor`.
    pub dev_minor: u32,
    /// The name the kernel would copy out (same text as the maps name column), if asked and present.
    pub name: Option<String>,
}

impl QueryAnswer {
    /// `vma_name_size` as returned: bytes written including the NUL, 0 without a name; ENAMETOOLONG when
    /// the name does not fit the kernel's buffer, which is the caller's capacity `cap` (including the NUL)
    /// capped at [`PATH_MAX`] (`do_procmap_query`: `name_buf_sz = min(PATH_MAX, vma_name_size)`).
    pub fn name_size(&self, cap: u32) -> Result<u32, i32> {
        match &self.name {
            None => Ok(0),
            Some(n) => {
                let need = n.len() as u64 + 1;
                if need > u64::from(cap.min(PATH_MAX)) { Err(errno::ENAMETOOLONG) } else { Ok(need as u32) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// `args` is `checked` reduced to three fields, for every request (sizes around the kernel's and the
        /// short ones included), and `matches` is `find` over one VMA as the readers use it (a rejection with
        /// `COVERING_OR_NEXT_VMA` continues the search).
        #[test]
        fn args_and_matches_agree_with_checked_and_find(
            size in proptest::prop_oneof![0u64..130, 4090u64..4100, proptest::num::u64::ANY],
            flags in proptest::prop_oneof![0u64..0x41, proptest::num::u64::ANY],
            addr: u64, name_size in proptest::prop_oneof![0u32..2, proptest::num::u32::ANY],
            name_addr in proptest::prop_oneof![0u64..2, proptest::num::u64::ANY],
            build_size in 0u32..2, build_addr in 0u64..2, tail: bool,
            start: u64, len in 1u64..1 << 20, perms in 0u64..16, file: bool,
        ) {
            let req = QueryRequest {
                size, flags, addr, vma_name_size: name_size, vma_name_addr: name_addr,
                build_id_size: build_size, build_id_addr: build_addr, nonzero_tail: tail,
            };
            let checked = req.checked();
            let args = req.args();
            proptest::prop_assert_eq!(
                args, checked.map(|k| QueryArgs { flags: k.flags, addr: k.addr, vma_name_size: k.vma_name_size })
            );
            if let Ok(a) = args {
                let k = checked.unwrap();
                let end = start.saturating_add(len);
                let want = match k.find([(start, end, perms, file)]) {
                    Ok(_) => Ok(true),
                    Err(_) if k.flags & PROCMAP_QUERY_COVERING_OR_NEXT_VMA != 0 => Ok(false),
                    Err(e) => Err(e),
                };
                proptest::prop_assert_eq!(a.matches(start, end, perms, file), want);
            }
        }
    }

    const R: u64 = PROCMAP_QUERY_VMA_READABLE;
    const W: u64 = PROCMAP_QUERY_VMA_WRITABLE;

    #[test]
    fn validation_order() {
        assert_eq!(QueryRequest { size: 8192, ..QueryRequest::new(0, 0) }.validate(), Err(errno::E2BIG));
        assert_eq!(QueryRequest { size: 16, ..QueryRequest::new(0, 0) }.validate(), Err(errno::EINVAL));
        assert_eq!(QueryRequest::new(0x40, 0).validate(), Err(errno::EINVAL));
        assert_eq!(
            QueryRequest { vma_name_size: 10, ..QueryRequest::new(0, 0) }.validate(),
            Err(errno::EINVAL)
        );
        assert_eq!(
            QueryRequest { build_id_addr: 0x1000, ..QueryRequest::new(0, 0) }.validate(),
            Err(errno::EINVAL)
        );
        assert_eq!(
            QueryRequest { size: 200, nonzero_tail: true, ..QueryRequest::new(0, 0) }.validate(),
            Err(errno::E2BIG)
        );
        assert_eq!(QueryRequest { size: 200, ..QueryRequest::new(0, 0) }.validate(), Ok(()));
        assert_eq!(QueryRequest::new(PROCMAP_QUERY_ALL_FLAGS, 0).validate(), Ok(()));
    }

    /// A caller with an older, shorter struct: the kernel reads only `size` bytes, so a name size or buffer
    /// address left past `size` is not seen (the model once said EINVAL here).
    #[test]
    fn fields_past_size_read_as_zero() {
        let q =
            QueryRequest { size: 24, vma_name_size: 10, build_id_addr: 0x1000, ..QueryRequest::new(0, 0) };
        assert_eq!(q.validate(), Ok(()));
        assert_eq!(q.as_read().vma_name_size, 0);
        // A size that cuts through vma_name_addr (offset 88) keeps its low bytes only.
        let q = QueryRequest {
            size: 90,
            vma_name_size: 16,
            vma_name_addr: 0x7f00_0000_0000,
            ..QueryRequest::new(0, 0)
        };
        assert_eq!(q.as_read().vma_name_addr, 0);
        assert_eq!(q.validate(), Err(errno::EINVAL));
        let q = QueryRequest { vma_name_addr: 0x7f00_0000_0001, ..q };
        assert_eq!(q.as_read().vma_name_addr, 1);
        assert_eq!(q.validate(), Ok(()));
        // The tail past 104 bytes only exists when size says so.
        let q = QueryRequest { nonzero_tail: true, ..QueryRequest::new(0, 0) };
        assert_eq!(q.validate(), Ok(()));
    }

    #[test]
    fn matching_rule() {
        let vmas =
            [(0x1000, 0x2000, R, false), (0x3000, 0x4000, R | W, true), (0x5000, 0x6000, R | W, false)];
        assert_eq!(QueryRequest::new(0, 0x1800).find(vmas), Ok(0));
        assert_eq!(QueryRequest::new(0, 0x2800).find(vmas), Err(errno::ENOENT));
        assert_eq!(QueryRequest::new(PROCMAP_QUERY_COVERING_OR_NEXT_VMA, 0x2800).find(vmas), Ok(1));
        assert_eq!(QueryRequest::new(W, 0x1800).find(vmas), Err(errno::ENOENT));
        assert_eq!(QueryRequest::new(W | PROCMAP_QUERY_COVERING_OR_NEXT_VMA, 0x1800).find(vmas), Ok(1));
        let f = PROCMAP_QUERY_FILE_BACKED_VMA | PROCMAP_QUERY_COVERING_OR_NEXT_VMA;
        assert_eq!(QueryRequest::new(f, 0x3800).find(vmas), Ok(1));
        assert_eq!(QueryRequest::new(f, 0x4000).find(vmas), Err(errno::ENOENT));
    }

    #[test]
    fn name_size_counts_the_nul() {
        let a = QueryAnswer { name: Some("[heap]".into()), ..Default::default() };
        assert_eq!(a.name_size(7), Ok(7));
        assert_eq!(a.name_size(6), Err(errno::ENAMETOOLONG));
        assert_eq!(QueryAnswer::default().name_size(0), Ok(0));
        // The kernel's buffer is at most PATH_MAX bytes however large the caller's is.
        let long = QueryAnswer { name: Some("/".repeat(4096)), ..Default::default() };
        assert_eq!(long.name_size(u32::MAX), Err(errno::ENAMETOOLONG));
        let fits = QueryAnswer { name: Some("/".repeat(4095)), ..Default::default() };
        assert_eq!(fits.name_size(u32::MAX), Ok(4096));
    }
}
