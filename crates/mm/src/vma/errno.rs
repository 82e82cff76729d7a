//! `Errno`: a Linux error number, the error type of every fallible call in the engine.
//!
//! The values are x86-64 Linux's (`include/uapi/asm-generic/errno-base.h`, `errno.h`). [`Errno::name`] gives the
//! symbolic name used in op-script output (`-ENOMEM`).

use std::fmt;

/// A Linux errno value (positive, as in `errno`; syscalls return its negation).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(i32);

impl Errno {
    /// Operation not permitted.
    pub const EPERM: Self = Self(1);
    /// No such file or directory / no such entry.
    pub const ENOENT: Self = Self(2);
    /// Interrupted (a fatal signal during a killable wait).
    pub const EINTR: Self = Self(4);
    /// Argument list too long / value too big for the buffer.
    pub const E2BIG: Self = Self(7);
    /// Try again (e.g. a VMA detached under a lockless reader).
    pub const EAGAIN: Self = Self(11);
    /// Out of memory, or an address range that is not (fully) mapped.
    pub const ENOMEM: Self = Self(12);
    /// Bad address.
    pub const EFAULT: Self = Self(14);
    /// Already exists (`MAP_FIXED_NOREPLACE` over a mapping).
    pub const EEXIST: Self = Self(17);
    /// Invalid argument.
    pub const EINVAL: Self = Self(22);
    /// Name too long.
    pub const ENAMETOOLONG: Self = Self(36);

    /// The errno with this positive value.
    #[inline]
    pub const fn from_raw(v: i32) -> Self {
        Self(v)
    }

    /// The positive value.
    #[inline]
    pub const fn raw(self) -> i32 {
        self.0
    }

    /// The symbolic name (`"ENOMEM"`), or `"E<n>"` for values this table does not name.
    pub fn name(self) -> std::borrow::Cow<'static, str> {
        let s = match self.0 {
            1 => "EPERM",
            2 => "ENOENT",
            4 => "EINTR",
            7 => "E2BIG",
            11 => "EAGAIN",
            12 => "ENOMEM",
            14 => "EFAULT",
            17 => "EEXIST",
            22 => "EINVAL",
            36 => "ENAMETOOLONG",
            n => return std::borrow::Cow::Owned(format!("E{n}")),
        };
        std::borrow::Cow::Borrowed(s)
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.name())
    }
}

impl std::error::Error for Errno {}

#[cfg(test)]
mod tests {
    use super::Errno;

    #[test]
    fn names_and_values() {
        assert_eq!(Errno::ENOMEM.raw(), 12);
        assert_eq!(Errno::EAGAIN.name(), "EAGAIN");
        assert_eq!(Errno::from_raw(99).name(), "E99");
        assert_eq!(format!("{}", Errno::EINVAL), "EINVAL");
    }
}
