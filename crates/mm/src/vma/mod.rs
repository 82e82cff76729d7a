//! The VMA and its locks (see the crate docs).
