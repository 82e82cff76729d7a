//! `PROCMAP_QUERY`: the binary VMA query on an open `/proc/PID/maps` file (Linux 6.11+).
//!
//! The ioctl number is `_IOWR('f', 17, struct procmap_query)` = `0xC0686611`; the struct (104 bytes, all fields
//! naturally aligned) is `vmspace_proc::query::procmap_query` (from `linux-raw-sys`), as are the flags. One call finds the first VMA with `end > query_addr` and, unless
//! [`COVERING_OR_NEXT`] is set, requires it to contain the address (`ENOENT` otherwise). A full walk starts at
//! address 0 with [`COVERING_OR_NEXT`] and continues from each result's end until `ENOENT` ([`walk`]).
//! Each result is a self-consistent snapshot of one VMA; nothing is consistent across calls.

use rustix::io::Errno;
use std::fs::File;
use std::os::fd::AsFd;
use vmspace_proc::query::procmap_query;

/// The ioctl request number (`vmspace_proc::query`, where the struct's one layout is).
pub use vmspace_proc::query::PROCMAP_QUERY;

/// Return the covering VMA or, if the address is in a gap, the next one.
pub use vmspace_proc::query::PROCMAP_QUERY_COVERING_OR_NEXT_VMA as COVERING_OR_NEXT;
/// Only file-backed VMAs.
pub use vmspace_proc::query::PROCMAP_QUERY_FILE_BACKED_VMA as FILE_BACKED;
/// Executable.
pub use vmspace_proc::query::PROCMAP_QUERY_VMA_EXECUTABLE as VMA_EXECUTABLE;
/// VMA flag bits in [`Vma::flags`]: readable.
pub use vmspace_proc::query::PROCMAP_QUERY_VMA_READABLE as VMA_READABLE;
/// May be shared (`s` in the maps text).
pub use vmspace_proc::query::PROCMAP_QUERY_VMA_SHARED as VMA_SHARED;
/// Writable.
pub use vmspace_proc::query::PROCMAP_QUERY_VMA_WRITABLE as VMA_WRITABLE;

const _: () = assert!(PROCMAP_QUERY == rustix::ioctl::opcode::read_write::<procmap_query>(b'f', 17) as u32);

/// One VMA as the ioctl reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vma {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `VMA_*` bits.
    pub flags: u64,
    /// File offset in bytes (0 for anonymous VMAs).
    pub offset: u64,
    /// Device major number.
    pub dev_major: u32,
    /// Device minor number.
    pub dev_minor: u32,
    /// Inode number (0 if anonymous).
    pub inode: u64,
    /// Page size the kernel uses for the VMA.
    pub page_size: u64,
    /// The name, if requested and the VMA has one.
    pub name: Option<String>,
}

impl Vma {
    /// The permission string as in the maps text (`rw-p`).
    pub fn perms(&self) -> String {
        let b = |bit, c| if self.flags & bit != 0 { c } else { '-' };
        [
            b(VMA_READABLE, 'r'),
            b(VMA_WRITABLE, 'w'),
            b(VMA_EXECUTABLE, 'x'),
            if self.flags & VMA_SHARED != 0 { 's' } else { 'p' },
        ]
        .iter()
        .collect()
    }
}

/// Queries `file` (an open `/proc/PID/maps`) at `addr` with `flags`; fetches the name into `name_buf` if given.
pub fn query(file: &File, addr: u64, flags: u64, name_buf: Option<&mut Vec<u8>>) -> Result<Vma, Errno> {
    // SAFETY: `procmap_query` is a plain C struct of integers, for which all-zero bytes are valid.
    let mut q: procmap_query = unsafe { std::mem::zeroed() };
    q.size = std::mem::size_of::<procmap_query>() as u64;
    q.query_flags = flags;
    q.query_addr = addr;
    let want_name = name_buf.is_some();
    let mut buf_ptr = std::ptr::null_mut::<u8>();
    if name_buf.as_deref().is_some_and(|b| b.capacity() == 0) {
        return Err(Errno::INVAL);
    }
    let mut name_buf = name_buf;
    if let Some(b) = name_buf.as_deref_mut() {
        b.clear();
        buf_ptr = b.as_mut_ptr();
        q.vma_name_addr = buf_ptr as u64;
        q.vma_name_size = b.capacity().min(u32::MAX as usize) as u32;
    }
    // SAFETY: the opcode is PROCMAP_QUERY, whose argument is exactly `struct procmap_query` (size asserted
    // above); the name buffer, if any, is writable for `vma_name_size` bytes and outlives the call.
    let upd = unsafe { rustix::ioctl::Updater::<{ PROCMAP_QUERY as rustix::ioctl::Opcode }, _>::new(&mut q) };
    // SAFETY: as above: the Updater's type matches what the kernel reads and writes for this opcode.
    unsafe { rustix::ioctl::ioctl(file.as_fd(), upd)? };
    let name = if want_name && q.vma_name_size > 0 {
        let b = name_buf.expect("name buffer present");
        // The kernel wrote `vma_name_size` bytes, including the terminating NUL.
        let n = (q.vma_name_size as usize).min(b.capacity());
        // SAFETY: the kernel initialised the first `n` bytes of the buffer (`buf_ptr` is `b`'s storage).
        unsafe { b.set_len(n) };
        debug_assert_eq!(b.as_ptr(), buf_ptr);
        let s = b.strip_suffix(&[0]).unwrap_or(b);
        Some(String::from_utf8_lossy(s).into_owned())
    } else {
        None
    };
    Ok(Vma {
        start: q.vma_start,
        end: q.vma_end,
        flags: q.vma_flags,
        offset: q.vma_offset,
        dev_major: q.dev_major,
        dev_minor: q.dev_minor,
        inode: q.inode,
        page_size: q.vma_page_size,
        name,
    })
}

/// Walks all VMAs of the process behind `file` with `COVERING_OR_NEXT` queries, optionally with names.
pub fn walk(file: &File, with_names: bool) -> Result<Vec<Vma>, Errno> {
    let mut out = Vec::new();
    let mut buf = Vec::with_capacity(4096);
    let mut addr = 0u64;
    loop {
        match query(file, addr, COVERING_OR_NEXT, with_names.then_some(&mut buf)) {
            Ok(v) => {
                addr = v.end;
                out.push(v);
            }
            Err(Errno::NOENT) => return Ok(out),
            Err(e) => return Err(e),
        }
    }
}

/// Walks without collecting: counts VMAs (what a scanner does in a loop). Uses `buf` for names if non-empty
/// capacity is given.
pub fn walk_count(file: &File, buf: &mut Vec<u8>) -> Result<usize, Errno> {
    let mut n = 0;
    let mut addr = 0u64;
    loop {
        let b = if buf.capacity() > 0 { Some(&mut *buf) } else { None };
        match query(file, addr, COVERING_OR_NEXT, b) {
            Ok(v) => {
                addr = v.end;
                n += 1;
            }
            Err(Errno::NOENT) => return Ok(n),
            Err(e) => return Err(e),
        }
    }
}

/// Whether PROCMAP_QUERY works here: `Ok(())`, or the errno of a query of this process's first VMA.
pub fn supported() -> Result<(), Errno> {
    let f = File::open("/proc/self/maps").map_err(|e| Errno::from_io_error(&e).unwrap_or(Errno::IO))?;
    query(&f, 0, COVERING_OR_NEXT, None).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::maps::parse_maps;

    #[test]
    fn walk_agrees_with_maps_text() {
        // Compare a walk with the text; the process is quiet enough between the two (retry a few times in case
        // the allocator or another test thread maps something in between).
        let mut last = String::new();
        for _ in 0..20 {
            let f = File::open("/proc/self/maps").unwrap();
            let walk = walk(&f, true).unwrap();
            let text = std::fs::read_to_string("/proc/self/maps").unwrap();
            // The gate area ([vsyscall]) is printed by the text file but is not in the VMA tree.
            let mut lines = parse_maps(&text).unwrap();
            lines.retain(|l| l.name != Some(vmspace_proc::MapsName::Special("[vsyscall]".into())));
            let same = walk.len() == lines.len()
                && walk.iter().zip(&lines).all(|(w, l)| {
                    w.start == l.start
                        && w.end == l.end
                        && w.perms() == l.perms.to_string()
                        && w.offset == l.offset
                        && w.inode == l.inode
                        && (w.dev_major, w.dev_minor) == (l.dev_major, l.dev_minor)
                        && w.name.as_deref().unwrap_or("")
                            == l.name.as_ref().map(|n| n.to_string()).unwrap_or_default()
                });
            if same {
                return;
            }
            last = format!("{walk:#?}\n{text}");
        }
        panic!("walk never agreed with the text: {last}");
    }

    #[test]
    fn errors() {
        let f = File::open("/proc/self/maps").unwrap();
        // Address 0 is never mapped; without COVERING_OR_NEXT that is ENOENT.
        assert_eq!(query(&f, 0, 0, None).unwrap_err(), Errno::NOENT);
        // Unknown flag bits are EINVAL.
        assert_eq!(query(&f, 0, 1 << 40, None).unwrap_err(), Errno::INVAL);
        supported().unwrap();
    }
}
