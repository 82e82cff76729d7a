//! The maple tree: an RCU-safe range B-tree (seed 004; `linux-mm.md` §1).
//!
//! Depends only on `rcu`.
