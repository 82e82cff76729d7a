//! The address space: `Mm` (mmap_lock, `mm_lock_seq`, the VMA maple tree), `Vma` with its per-VMA lock, the
//! Linux 6.18 syscall surface with its merge/split rules, and the readers.
//!
//! Depends on `rcu`, `maple`, `proc` and `script`; never on the live kernel (`linux`) or on benchmarks.
