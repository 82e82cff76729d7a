//! Which placement a mapped file's file system asks for: the `get_unmapped_area` method of its
//! `file_operations`, known from the file system's `statfs` magic number (`include/uapi/linux/magic.h`).

/// `EXT4_SUPER_MAGIC` (ext2, ext3 and ext4 share it).
pub const EXT4_SUPER_MAGIC: u64 = 0xEF53;
/// `XFS_SUPER_MAGIC` (`"XFSB"`).
pub const XFS_SUPER_MAGIC: u64 = 0x5846_5342;
/// `BTRFS_SUPER_MAGIC`.
pub const BTRFS_SUPER_MAGIC: u64 = 0x9123_683E;
/// `EROFS_SUPER_MAGIC_V1`.
pub const EROFS_SUPER_MAGIC_V1: u64 = 0xE0F5_E1E2;
/// `TMPFS_MAGIC` (tmpfs, and the internal shmem mount behind memfd, SysV shared memory and shared anonymous
/// memory).
pub const TMPFS_MAGIC: u64 = 0x0102_1994;

/// The `get_unmapped_area` a file's `file_operations` install, which `mm/mmap.c: __get_unmapped_area` calls
/// instead of the address space's own search.
///
/// Linux 6.18: ext2/ext4 (`fs/ext4/file.c`, `fs/ext2/file.c`), xfs (`fs/xfs/xfs_file.c`), btrfs
/// (`fs/btrfs/file.c`) and erofs install `thp_get_unmapped_area` (which is `NULL` without
/// `CONFIG_TRANSPARENT_HUGEPAGE`); tmpfs and shmem install `shmem_get_unmapped_area` (`mm/shmem.c`); hugetlbfs
/// has its own (not described here: a hugetlb file is known by its pool); other file systems install none and
/// get the address space's search (`mm_get_unmapped_area`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FileArea {
    /// No method of its own: `mm_get_unmapped_area`, the search of anonymous memory.
    #[default]
    Mm,
    /// `thp_get_unmapped_area`: a mapping that covers a whole 2 MiB-aligned block of file offsets is placed so
    /// that file offset and address agree modulo 2 MiB (`mm/huge_memory.c: __thp_get_unmapped_area`).
    Thp,
    /// `shmem_get_unmapped_area`: huge-page alignment when the mount allows huge pages.
    Shmem {
        /// The mount's `huge=` option is not `never` (`SHMEM_SB(sb)->huge != SHMEM_HUGE_NEVER`).
        huge: bool,
    },
}

impl FileArea {
    /// The method of a file system whose `statfs` `f_type` is `magic`; `shmem_huge` is the mount's `huge=`
    /// state (used only for tmpfs).
    pub fn of_fs_magic(magic: u64, shmem_huge: bool) -> FileArea {
        match magic {
            EXT4_SUPER_MAGIC | XFS_SUPER_MAGIC | BTRFS_SUPER_MAGIC | EROFS_SUPER_MAGIC_V1 => FileArea::Thp,
            TMPFS_MAGIC => FileArea::Shmem { huge: shmem_huge },
            _ => FileArea::Mm,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn magic_numbers_name_their_methods() {
        assert_eq!(FileArea::of_fs_magic(EXT4_SUPER_MAGIC, false), FileArea::Thp);
        assert_eq!(FileArea::of_fs_magic(XFS_SUPER_MAGIC, true), FileArea::Thp);
        assert_eq!(FileArea::of_fs_magic(BTRFS_SUPER_MAGIC, false), FileArea::Thp);
        assert_eq!(FileArea::of_fs_magic(TMPFS_MAGIC, true), FileArea::Shmem { huge: true });
        assert_eq!(FileArea::of_fs_magic(TMPFS_MAGIC, false), FileArea::Shmem { huge: false });
        // NFS_SUPER_MAGIC: no method of its own.
        assert_eq!(FileArea::of_fs_magic(0x6969, false), FileArea::Mm);
    }
}
