//! `Errno`: a Linux errno number with its symbolic name, as op-script results print it (`-ENOMEM`).
//!
//! Values are x86-64 Linux's (`include/uapi/asm-generic/errno-base.h`, `errno.h`).

use core::fmt;

/// A Linux errno value (positive, as in `errno`; the syscall returned its negation).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Errno(i32);

/// (value, name) of every errno this crate names; others print as `E<n>`.
const NAMES: &[(i32, &str)] = &[
    (1, "EPERM"),
    (2, "ENOENT"),
    (3, "ESRCH"),
    (4, "EINTR"),
    (5, "EIO"),
    (6, "ENXIO"),
    (7, "E2BIG"),
    (9, "EBADF"),
    (11, "EAGAIN"),
    (12, "ENOMEM"),
    (13, "EACCES"),
    (14, "EFAULT"),
    (16, "EBUSY"),
    (17, "EEXIST"),
    (19, "ENODEV"),
    (22, "EINVAL"),
    (23, "ENFILE"),
    (24, "EMFILE"),
    (26, "ETXTBSY"),
    (27, "EFBIG"),
    (28, "ENOSPC"),
    (30, "EROFS"),
    (34, "ERANGE"),
    (36, "ENAMETOOLONG"),
    (38, "ENOSYS"),
    (75, "EOVERFLOW"),
    (95, "EOPNOTSUPP"),
];

impl Errno {
    /// Operation not permitted.
    pub const EPERM: Self = Self(1);
    /// I/O error (the engine's answer for a user fault that raises SIGBUS).
    pub const EIO: Self = Self(5);
    /// No such entry.
    pub const ENOENT: Self = Self(2);
    /// Interrupted.
    pub const EINTR: Self = Self(4);
    /// Argument list too long.
    pub const E2BIG: Self = Self(7);
    /// Bad file descriptor (an `fd=NAME` whose file does not exist).
    pub const EBADF: Self = Self(9);
    /// Try again.
    pub const EAGAIN: Self = Self(11);
    /// Out of memory, or a range that is not (fully) mapped.
    pub const ENOMEM: Self = Self(12);
    /// Permission denied (e.g. a writable shared mapping of a read-only file).
    pub const EACCES: Self = Self(13);
    /// Bad address: a memory access (`touch`, `fill`, `check`) of an unmapped or inaccessible page.
    pub const EFAULT: Self = Self(14);
    /// Already exists (`fixed_noreplace` over a mapping).
    pub const EEXIST: Self = Self(17);
    /// No such device (a file that cannot be mapped).
    pub const ENODEV: Self = Self(19);
    /// Invalid argument.
    pub const EINVAL: Self = Self(22);
    /// Value too large (file offset overflow).
    pub const EOVERFLOW: Self = Self(75);
    /// Operation not supported (`MAP_SHARED_VALIDATE` with an unknown flag).
    pub const EOPNOTSUPP: Self = Self(95);
    /// No such process (the mm of a /proc reader is gone).
    pub const ESRCH: Self = Self(3);
    /// Device or resource busy (no free gap in a tree search).
    pub const EBUSY: Self = Self(16);
    /// Name too long.
    pub const ENAMETOOLONG: Self = Self(36);
    /// File too large (`ftruncate` beyond the file system's or the process's limit).
    pub const EFBIG: Self = Self(27);
    /// No space left (`pkey_alloc` with every protection key allocated).
    pub const ENOSPC: Self = Self(28);
    /// Function not implemented (an op-script target that cannot perform an op: the engine's `fill` and
    /// `check` before it has page contents).
    pub const ENOSYS: Self = Self(38);

    /// The errno with this positive value.
    pub const fn from_raw(v: i32) -> Self {
        Self(v)
    }

    /// The positive value.
    pub const fn raw(self) -> i32 {
        self.0
    }

    /// The symbolic name (`"ENOMEM"`), or `"E<n>"` for a value this table does not name.
    pub fn name(self) -> String {
        match NAMES.iter().find(|(v, _)| *v == self.0) {
            Some((_, n)) => (*n).to_string(),
            None => format!("E{}", self.0),
        }
    }

    /// Parses a name as [`Errno::name`] prints it (`ENOMEM`, `E123`).
    pub fn from_name(s: &str) -> Option<Self> {
        if let Some((v, _)) = NAMES.iter().find(|(_, n)| *n == s) {
            return Some(Self(*v));
        }
        let n: i32 = s.strip_prefix('E')?.parse().ok()?;
        (n > 0).then_some(Self(n))
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

impl fmt::Display for Errno {
    /// `-ENAME`, the form result lines use.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "-{}", self.name())
    }
}

impl std::error::Error for Errno {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for (v, n) in NAMES {
            assert_eq!(Errno::from_raw(*v).name(), *n);
            assert_eq!(Errno::from_name(n), Some(Errno::from_raw(*v)));
        }
        assert_eq!(Errno::from_raw(200).to_string(), "-E200");
        assert_eq!(Errno::from_name("E200"), Some(Errno::from_raw(200)));
        assert_eq!(Errno::EEXIST.to_string(), "-EEXIST");
    }
}
