//! The address space and its calls (see the crate docs).
