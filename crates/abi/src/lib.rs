//! Linux user-ABI values that every layer of vmspace shares: the errno type that the engine returns, the
//! op-script output prints and the live-kernel runner reads back from real syscalls.
//!
//! One type, so that the engine and the kernel's answers compare without conversion tables. Depends on nothing.

mod errno;

pub use errno::Errno;
