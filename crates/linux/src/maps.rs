//! A small, strict parser of `/proc/PID/maps` lines, and page-sized reads of /proc files.
//!
//! The probe needs only the fields of a maps line (and of an smaps record header, which is a maps line) to
//! compare them with PROCMAP_QUERY and to find page boundaries; the full text formats live in the `proc` crate.
//! A line is `start-end perms offset major:minor inode [padding name]`, numbers in hex except the inode.

use rustix::io::Errno;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

/// One parsed maps line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapsLine {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `rwxp`-style permissions.
    pub perms: String,
    /// File offset.
    pub offset: u64,
    /// Device major.
    pub dev_major: u32,
    /// Device minor.
    pub dev_minor: u32,
    /// Inode.
    pub inode: u64,
    /// Name (path or `[heap]` etc.), empty if none.
    pub name: String,
}

/// Parses one maps line (or smaps header line); `None` if it is not one.
pub fn parse_line(line: &str) -> Option<MapsLine> {
    let mut it = line.splitn(6, ' ');
    let range = it.next()?;
    let perms = it.next()?;
    let offset = it.next()?;
    let dev = it.next()?;
    let inode = it.next()?;
    let rest = it.next().unwrap_or("");
    let (s, e) = range.split_once('-')?;
    let start = u64::from_str_radix(s, 16).ok()?;
    let end = u64::from_str_radix(e, 16).ok()?;
    if perms.len() != 4 || start > end {
        return None;
    }
    let (ma, mi) = dev.split_once(':')?;
    Some(MapsLine {
        start,
        end,
        perms: perms.to_string(),
        offset: u64::from_str_radix(offset, 16).ok()?,
        dev_major: u32::from_str_radix(ma, 16).ok()?,
        dev_minor: u32::from_str_radix(mi, 16).ok()?,
        inode: inode.parse().ok()?,
        name: rest.trim_start().to_string(),
    })
}

/// Parses a whole maps file; `None` if any line is malformed.
pub fn parse_maps(text: &str) -> Option<Vec<MapsLine>> {
    text.lines().map(parse_line).collect()
}

/// Whether `line` starts like a maps/smaps record header (`hex-hex `).
pub fn is_header(line: &str) -> bool {
    let Some((range, _)) = line.split_once(' ') else { return false };
    let Some((a, b)) = range.split_once('-') else { return false };
    !a.is_empty() && !b.is_empty() && a.bytes().chain(b.bytes()).all(|c| c.is_ascii_hexdigit())
}

/// Reads `file` from the start with one `read()` per page-sized buffer, returning each read's bytes as a string
/// (each read of a seq_file returns whole records); stops at EOF or after `max_reads` reads.
pub fn read_pages(
    file: &mut File,
    page: usize,
    max_reads: usize,
    buf: &mut Vec<u8>,
) -> Result<Vec<String>, Errno> {
    let io = |e: std::io::Error| Errno::from_io_error(&e).unwrap_or(Errno::IO);
    file.seek(SeekFrom::Start(0)).map_err(io)?;
    buf.resize(page, 0);
    let mut out = Vec::new();
    while out.len() < max_reads {
        let n = file.read(&mut buf[..page]).map_err(io)?;
        if n == 0 {
            break;
        }
        out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    Ok(out)
}

/// Reads a whole file with reads of `buf.len()` bytes and discards the contents; returns the byte count. (What
/// `cat FILE > /dev/null` does.)
pub fn read_discard(path: &str, buf: &mut [u8]) -> Result<usize, Errno> {
    let io = |e: std::io::Error| Errno::from_io_error(&e).unwrap_or(Errno::IO);
    let mut f = File::open(path).map_err(io)?;
    let mut total = 0;
    loop {
        match f.read(buf) {
            Ok(0) => return Ok(total),
            Ok(n) => total += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_anonymous_and_named_lines() {
        let l = parse_line("7f0000001000-7f0000004000 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!(
            (l.start, l.end, l.perms.as_str(), l.inode, l.name.as_str()),
            (0x7f0000001000, 0x7f0000004000, "rw-p", 0, "")
        );
        let l = parse_line(
            "55d0c0a00000-55d0c0a21000 r-xp 00002000 fd:01 1234                       /usr/bin/some thing",
        )
        .unwrap();
        assert_eq!((l.offset, l.dev_major, l.dev_minor, l.inode), (0x2000, 0xfd, 1, 1234));
        assert_eq!(l.name, "/usr/bin/some thing");
        assert!(parse_line("Rss:                   4 kB").is_none());
        assert!(parse_line("zz-10 rw-p 0 00:00 0").is_none());
        assert!(is_header("7f00-7f10 rw-p 0 00:00 0"));
        assert!(!is_header("VmFlags: rd wr mr mw me ac"));
    }

    #[test]
    fn self_maps_parses_and_pages_are_whole_lines() {
        let text = std::fs::read_to_string("/proc/self/maps").unwrap();
        let lines = parse_maps(&text).unwrap();
        assert!(lines.len() > 5);
        assert!(lines.windows(2).all(|w| w[0].end <= w[1].start));
        let mut f = File::open("/proc/self/smaps").unwrap();
        let pages = read_pages(&mut f, 4096, usize::MAX, &mut Vec::new()).unwrap();
        assert!(pages.len() > 1);
        assert!(pages.iter().all(|p| p.ends_with('\n') && is_header(p.lines().next().unwrap())));
    }
}
