//! `Errno`: the error of every address-space call, a Linux errno value (x86-64 numbering).
//!
//! The address space reports exactly the errno Linux 6.18 returns for the same call on the same state; the
//! op-script runner converts it to the script crate's errno through [`Errno::raw`].

use core::fmt;

/// A Linux errno value (positive; the syscall returns its negation).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(i32);

impl Errno {
    /// Operation not permitted.
    pub const EPERM: Self = Self(1);
    /// No such entry.
    pub const ENOENT: Self = Self(2);
    /// Interrupted.
    pub const EINTR: Self = Self(4);
    /// Bad file descriptor / file-backed VMA where only anonymous ones are allowed (anon names).
    pub const EBADF: Self = Self(9);
    /// Try again (madvise's spelling of ENOMEM).
    pub const EAGAIN: Self = Self(11);
    /// Out of memory, address-space limits, or a range that is not fully mapped.
    pub const ENOMEM: Self = Self(12);
    /// Permission denied (mprotect beyond the VM_MAY* bits, shared writable mapping of a read-only file).
    pub const EACCES: Self = Self(13);
    /// Bad address (mremap of an unmapped address, touch of an inaccessible page).
    pub const EFAULT: Self = Self(14);
    /// Already exists (`MAP_FIXED_NOREPLACE` over a mapping).
    pub const EEXIST: Self = Self(17);
    /// No such device (a file that cannot be mapped).
    pub const ENODEV: Self = Self(19);
    /// Invalid argument.
    pub const EINVAL: Self = Self(22);
    /// Value too large (file offset overflow).
    pub const EOVERFLOW: Self = Self(75);
    /// Operation not supported (`MAP_SHARED_VALIDATE` with an unknown flag).
    pub const EOPNOTSUPP: Self = Self(95);

    /// The errno with this positive value.
    pub const fn from_raw(v: i32) -> Self {
        Self(v)
    }

    /// The positive value.
    pub const fn raw(self) -> i32 {
        self.0
    }

    /// The symbolic name, or `E<n>`.
    pub fn name(self) -> String {
        let s = match self.0 {
            1 => "EPERM",
            2 => "ENOENT",
            4 => "EINTR",
            9 => "EBADF",
            11 => "EAGAIN",
            12 => "ENOMEM",
            13 => "EACCES",
            14 => "EFAULT",
            17 => "EEXIST",
            19 => "ENODEV",
            22 => "EINVAL",
            75 => "EOVERFLOW",
            95 => "EOPNOTSUPP",
            n => return format!("E{n}"),
        };
        s.to_string()
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "-{}", self.name())
    }
}

impl std::error::Error for Errno {}
