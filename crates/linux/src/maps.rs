//! Maps lines as the probe uses them (the `proc` crate's parser) and page-sized reads of /proc files.
//!
//! The probe needs the fields of a maps line (and of an smaps record header, which is a maps line) to compare
//! them with PROCMAP_QUERY and to find page boundaries.

use rustix::io::Errno;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};

pub use vmspace_proc::{MapsLine, parse_maps};

/// Parses one maps line (or smaps header line) with the `proc` crate's parser; `None` if it is not one.
pub fn parse_line(line: &str) -> Option<MapsLine> {
    line.parse().ok()
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
    fn record_headers_parse_and_field_lines_do_not() {
        let l = parse_line("7f0000001000-7f0000004000 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!(
            (l.start, l.end, l.perms.to_string(), l.inode, l.name),
            (0x7f0000001000, 0x7f0000004000, "rw-p".into(), 0, None)
        );
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
