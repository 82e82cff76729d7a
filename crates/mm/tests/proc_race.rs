//! The `/proc` readers under concurrent writers, in every reader mode: chunked `read(2)` of the files
//! ([`ProcFile`]), the lockless reader paused inside a record while the very VMA is unmapped, and
//! `smaps_rollup`'s drop of the mmap lock for a waiting writer. The proc-maps-race scenarios themselves run on
//! the engine through `vmspace_bench::race` (`vmspace race`), with the kernel check's verdicts.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use vmspace_mm::{MapFlags, Mm, MmConfig, PAGE_SIZE, ProcFileKind, Prot, ReaderMode, VmaSnapshot};

const P: u64 = PAGE_SIZE;
const A: u64 = 0x3000_0000_0000;
const ANON: MapFlags = MapFlags::PRIVATE.union(MapFlags::ANONYMOUS).union(MapFlags::FIXED);

/// Many VMAs of alternating protections (they do not merge), the read-write ones' pages touched if `touch`.
fn many(mm: &Mm, n: u64, touch: bool) {
    for i in 0..n {
        let prot = if i % 2 == 0 { Prot::READ } else { Prot::RW };
        mm.mmap(A + i * P, P, prot, ANON, None, 0).unwrap();
        if touch && i % 2 == 1 {
            mm.write(A + i * P, b"x").unwrap();
        }
    }
}

/// Read in chunks of any size (1 byte, odd sizes, a page, more), every mode gives the text of the whole-file
/// reader, restarting the walk for every chunk at the end of the last record shown.
#[test]
fn chunked_reads_give_the_whole_file() {
    let mm = Mm::new(MmConfig::default());
    many(&mm, 200, true);
    let maps = mm.maps_text();
    assert!(maps.len() > 2 * 4096, "the test needs several chunks");
    let smaps = mm.reader().smaps();
    for mode in ReaderMode::ALL {
        let r = mm.reader_with(mode);
        assert_eq!(r.maps(), maps, "{mode}");
        assert_eq!(r.smaps(), smaps, "{mode}");
        for size in [1usize, 7, 100, 4096, 10_000] {
            for (kind, want) in [(ProcFileKind::Maps, &maps), (ProcFileKind::Smaps, &smaps)] {
                let mut f = r.open(kind);
                let mut buf = vec![0u8; size];
                let mut text = Vec::new();
                let mut reads = 0;
                loop {
                    let n = f.read(&mut buf);
                    assert!(n <= size);
                    if n == 0 {
                        break;
                    }
                    reads += 1;
                    text.extend_from_slice(&buf[..n]);
                }
                assert_eq!(String::from_utf8(text).unwrap(), **want, "{mode} {kind:?} in {size}-byte reads");
                assert_eq!(f.read(&mut buf), 0, "EOF stays EOF");
                let records = want.lines().filter(|l| l.starts_with("3000")).count() as u64;
                // A chunk renders at least one record and stops once it holds the bytes asked for or a page.
                let most = records.max(1);
                assert!(f.chunks() >= want.len().div_ceil(4096.max(size)) as u64 && f.chunks() <= most + 1);
                if size == 1 {
                    // One record per chunk: the walk restarts at every record (the last chunk finds the end).
                    assert_eq!(f.chunks(), records, "{mode} {kind:?}");
                    assert_eq!(reads, want.len());
                }
                assert_eq!(f.last_pos(), A + 200 * P);
            }
        }
    }
}

/// A chunk stops before a record that would overflow its page, and the next chunk starts at that record.
#[test]
fn a_chunk_holds_at_most_a_page_of_whole_records() {
    let mm = Mm::new(MmConfig::default());
    many(&mm, 100, true);
    for mode in ReaderMode::ALL {
        let mut f = mm.reader_with(mode).open(ProcFileKind::Smaps);
        let mut buf = vec![0u8; 1 << 20];
        let n = f.read(&mut buf);
        assert!(n <= 4096 && n > 3000, "{mode}: {n}");
        let text = std::str::from_utf8(&buf[..n]).unwrap();
        assert!(text.ends_with("VmFlags: rd wr mr mw me ac \n") || text.ends_with("VmFlags: rd mr mw me \n"));
        let last = vmspace_proc::parse_smaps(text).unwrap().last().unwrap().header.end;
        assert_eq!(f.last_pos(), last, "{mode}");
    }
}

/// Between chunks the mode's lock is dropped: a writer changes the address space, and the next chunk
/// shows the change (a VMA that moved below `last_pos` is not shown again; one that grew over it is shown
/// twice: before and after).
#[test]
fn chunks_see_changes_made_between_them() {
    for mode in ReaderMode::ALL {
        let mm = Mm::new(MmConfig::default());
        many(&mm, 4, false);
        let mut f = mm.reader_with(mode).open(ProcFileKind::Maps);
        let mut buf = [0u8; 1];
        let mut text = Vec::new();
        // The first chunk: the first line.
        let line_len = mm.maps_text().lines().next().unwrap().len() + 1;
        for _ in 0..line_len {
            assert_eq!(f.read(&mut buf), 1);
            text.push(buf[0]);
        }
        assert_eq!(f.last_pos(), A + P);
        // Read-only second and fourth pages: the four VMAs merge into one (no anon_vma anywhere).
        mm.mprotect(A + P, P, Prot::READ).unwrap();
        mm.mprotect(A + 3 * P, P, Prot::READ).unwrap();
        loop {
            if f.read(&mut buf) == 0 {
                break;
            }
            text.push(buf[0]);
        }
        let text = String::from_utf8(text).unwrap();
        let starts: Vec<&str> = text.lines().map(|l| &l[..12]).collect();
        // [A, A+P) before; then the merged [A, A+4P) found again from A+P (its "after").
        assert_eq!(starts, ["300000000000", "300000000000"], "{mode}:\n{text}");
        assert!(
            text.lines().nth(1).unwrap().starts_with("300000000000-300000004000 r--p"),
            "{mode}:\n{text}"
        );
    }
}

/// A lockless reader paused for 100 ms inside the record of a VMA holds nothing the munmap of that VMA waits
/// for: the munmap completes well before the pause ends. The same pause in the per-VMA and mmap-lock modes
/// (a VMA read lock, the mmap read lock) holds the munmap until the reader moves on: the test can fail.
#[test]
fn a_paused_lockless_reader_never_delays_munmap() {
    const PAUSE: Duration = Duration::from_millis(100);
    for mode in ReaderMode::ALL {
        let mm = Mm::new(MmConfig::default());
        many(&mm, 3, true);
        let target = A + P;
        let (entered_tx, entered_rx) = mpsc::channel::<()>();
        let entered_tx = std::sync::Mutex::new(entered_tx);
        let paused = AtomicBool::new(false);
        let hook = |v: &VmaSnapshot| {
            if v.start == target && !paused.swap(true, Ordering::SeqCst) {
                entered_tx.lock().unwrap().send(()).unwrap();
                std::thread::sleep(PAUSE);
            }
        };
        let (munmap_took, record) = std::thread::scope(|s| {
            let reader = s.spawn(|| mm.reader_with(mode).with_record_hook(&hook).smaps_record(target));
            entered_rx.recv_timeout(Duration::from_secs(10)).expect("the reader reached the record");
            let t = Instant::now();
            mm.munmap(target, P).unwrap();
            let took = t.elapsed();
            (took, reader.join().unwrap())
        });
        // The reader rendered the VMA as it was when it copied it.
        let record = record.expect("the record of the VMA the reader held");
        assert_eq!((record.header.start, record.header.end), (target, target + P));
        assert!(mm.vma_at(target).is_none());
        mm.validate().unwrap();
        if mode == ReaderMode::Lockless {
            assert!(munmap_took < PAUSE / 4, "lockless: the munmap waited {munmap_took:?} for the reader");
        } else {
            assert!(
                munmap_took >= PAUSE / 2,
                "{mode}: the munmap did not wait for the reader ({munmap_took:?})"
            );
        }
    }
}

/// `smaps_rollup` sums the same counters in every mode on a quiet address space.
#[test]
fn rollup_agrees_across_modes() {
    let mm = Mm::new(MmConfig::default());
    many(&mm, 50, true);
    let want = mm.reader().smaps_rollup();
    assert_eq!((want.start, want.end), (A, A + 50 * P));
    assert_eq!(want.stats.rss, 25 * 4);
    for mode in ReaderMode::ALL {
        assert_eq!(mm.reader_with(mode).smaps_rollup(), want, "{mode}");
    }
}

/// In mmap-lock mode `smaps_rollup` drops the mmap lock when a writer waits for it and resumes after the last
/// VMA summed: a writer that starts waiting during the walk gets in before the walk ends.
#[test]
fn rollup_lets_a_waiting_writer_in() {
    let mm = Mm::new(MmConfig::default());
    many(&mm, 20, true);
    let seen = AtomicU64::new(0);
    let seq_before = AtomicU64::new(u64::MAX);
    let done_at_vma = AtomicU64::new(0);
    std::thread::scope(|s| {
        let hook = |v: &VmaSnapshot| {
            // `mm_lock_seq` moves when a writer takes the mmap lock: read without any lock.
            let seq = mm.locking().lock_seq();
            let n = seen.fetch_add(1, Ordering::SeqCst) + 1;
            if n == 5 {
                seq_before.store(seq, Ordering::SeqCst);
                // Start a writer and wait until it waits for our read hold.
                s.spawn(|| {
                    mm.mmap(A + 100 * P, P, Prot::RW, ANON, None, 0).unwrap();
                });
                let t = Instant::now();
                while !mm.locking().is_contended() {
                    assert!(t.elapsed() < Duration::from_secs(10), "the writer never waited");
                    std::thread::yield_now();
                }
            } else if seq > seq_before.load(Ordering::SeqCst) && done_at_vma.load(Ordering::SeqCst) == 0 {
                done_at_vma.store(v.start, Ordering::SeqCst);
            }
        };
        let r = mm.reader().with_record_hook(&hook).smaps_rollup();
        // The writer got in during the walk (its write section was seen over at the next VMA), and the walk
        // went on to the end, including the writer's new VMA.
        let at = done_at_vma.load(Ordering::SeqCst);
        assert_eq!(at, A + 5 * P, "the writer waited for more than one VMA (seen done at {at:#x})");
        assert_eq!(r.end, A + 101 * P);
    });
}
