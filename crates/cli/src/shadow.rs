//! `vmspace shadow`: a real program as the engine's oracle, live.
//!
//! The program runs under the tracer of `vmspace_linux::shadow` (ptrace, with a seccomp filter that stops it
//! only at memory calls). Its address space is imported into the engine when it starts (`Mm::import` of
//! `vmspace_linux::procfs::read_snapshot`, at the `execve` event), and every memory call it makes is mirrored:
//! at the call's entry the call is decoded into the op-script `Op` (the one representation of a call: the
//! value `vmspace replay` parses a script line into), the kernel runs it, the engine's target
//! (`vmspace_replay::EngineTarget`) applies the same op, and the two results must be the same (the same errno;
//! for `mmap`, `mremap` and `brk` the same address, top-down placement included), and then the engine's maps
//! must be the kernel's `/proc/PID/maps`, line for line. With `--smaps`, each VMA's page-independent smaps
//! fields must be the kernel's too (`SMAPS_FIELDS` says which and why: every other field is gathered from the
//! resident pages, which faults change without a call); maps and smaps then come from one reading of
//! `/proc/PID/smaps`. This module is where engine and oracle meet (as
//! `vmspace diff` is, ARCHITECTURE.md "Layers"): `vmspace_linux` traces and decodes, `vmspace_mm` mirrors,
//! neither depends on the other.
//!
//! Before each mirrored call the process's maps are read again (and `pagemap`, and `smaps` only when a page may
//! have brought an anon_vma: `Shadow::refresh`) and what faults
//! changed without a call is brought into the engine: the growth of a growsdown VMA (the `[stack]`, or a
//! `MAP_GROWSDOWN` mapping: `Mm::mirror_stack_growth`) and the anon_vma of a VMA that got anonymous pages (`Mm::mirror_anon_vma`),
//! which decide later merges. With `--smaps` the compared smaps fields are read there too, and a change of
//! them without a call (`prctl(PR_SET_THP_DISABLE)`, which the import takes in from `THP_enabled:` of
//! `/proc/PID/status`; `PR_SET_MEMORY_MERGE`; the THP settings) is a resynchronisation; what an import cannot
//! take in is remembered per space and not counted again while it stays as found. A resynchronisation keeps
//! the space's `mmap_base` (`Shadow::import`). Maps compare with the inode numbers of shmem and hugetlbfs objects without a
//! path renumbered by first appearance on both sides (`same_maps`: the kernel takes them from a global
//! counter). Anything else that differs there changed without a traced call: the engine is
//! resynchronised (imported again) and the resynchronisation is reported with the reason. So is every call the
//! engine does not model (`mbind`, SysV `shmat`/`shmdt`, userfaultfd registration, `process_madvise`,
//! `remap_file_pages`, `PR_SET_MM`, `io_setup`, `map_shadow_stack`): it runs, then the engine is imported again.
//!
//! Processes: a task made without `CLONE_VM` gets the engine's fork of its parent's address space
//! (`Mm::fork`, at the fork event, when the kernel's copy was made); a thread or a `vfork` child shares its
//! parent's; an `execve` imports the new image. A file mapping names descriptor N as the script file `fdN`,
//! bound to the engine's mirror of the file the descriptor refers to (device, inode, size, path:
//! `VmFile::imported`); a new file under the same descriptor number gets a new binding.
//!
//! Reporting: the first difference prints the thread, the call as its canonical script line with the
//! syscall's name, both results, and the maps lines that differ with their neighbours; mirroring then stops
//! (the program runs to its end untraced by the engine) unless `--keep-going`, which imports the process again
//! and counts. `--record FILE` writes every mirrored call as an op script (canonical lines; a comment marks
//! each change of address space, and the process's maps at the start, which a script cannot create, are in
//! the header). At the end: the calls mirrored by kind, the differences, the resynchronisations, the program's
//! exit status, the time with the shadow and, with `--baseline` (the program run once untraced first), without.
//!
//! Timings and debug builds: shadow is a check, not a benchmark; it runs from a debug build (the engine's
//! share of the time is then larger) and says so beside the times.

use crate::common::{self, JsonOut, Status, Text, usage};
use crate::say;
use anyhow::{Context, Result, anyhow};
use clap::Args;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};
use vmspace_linux::shadow::{self as tracer, Event, ShadowError, TaskExit, Tracer, decode};
use vmspace_mm::{Errno, Mm, MmConfig, VmFile};
use vmspace_replay::EngineTarget;
use vmspace_results::report::{Report, ReportSet, Verdict};
use vmspace_script::{Arena, CallError, Fd, Op, Outcome, Target, canonical_maps, value_of};

/// Arguments of `vmspace shadow`.
#[derive(Debug, Args)]
pub struct ShadowArgs {
    /// Attach to this running process (all its threads) instead of running a program; Ctrl-C detaches and
    /// leaves it running. Every system call of the process stops (a filter cannot be installed from
    /// outside), so it runs slower while attached.
    #[arg(long, value_name = "PID", conflicts_with_all = ["program", "baseline"])]
    pid: Option<i32>,
    /// Continue after a difference: import the process again, count it, go on.
    #[arg(long)]
    keep_going: bool,
    /// Write every mirrored call as an op script (canonical lines, `vmspace replay` runs it) to FILE.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Run the program once untraced first, to show its time without the shadow.
    #[arg(long)]
    baseline: bool,
    /// Also compare each VMA's page-independent smaps fields after every mirrored call: `Size`,
    /// `KernelPageSize`, `MMUPageSize`, `THPeligible`, `ProtectionKey` (where the CPU has protection keys)
    /// and `VmFlags`. A change of them without a traced call is taken in before the next call, as the maps'
    /// are. Reads `/proc/PID/smaps` twice per call: slower.
    #[arg(long)]
    smaps: bool,
    /// Print every mirrored call and its result.
    #[arg(long, short)]
    verbose: bool,
    /// Also write the result as JSON to FILE (`-`: JSON to standard output, the text to standard error).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// The program and its arguments, after `--` (`vmspace shadow -- ls -l`); a name without `/` is looked
    /// up in PATH.
    #[arg(
        value_name = "PROGRAM",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required_unless_present = "pid"
    )]
    program: Vec<String>,
}

/// One engine address space mirroring one of the program's.
struct Space {
    engine: EngineTarget,
    /// A task of it, for `/proc` reads.
    pid: i32,
    /// Descriptor number -> (device major, minor, inode) of the file bound to `fdN`.
    fds: HashMap<i32, (u32, u32, u64)>,
    /// `--smaps`: the field differences ([`smaps_fields_diff`] lines) that changed without a traced call and
    /// that an import could not take in (state the import does not describe: `MMF_DISABLE_THP` of
    /// `PR_SET_THP_DISABLE`, a file someone else has open for writing). They are not counted again while
    /// they stay exactly as found; any other difference is.
    smaps_untaken: std::collections::HashSet<String>,
}

/// The whole shadow's state.
struct Shadow {
    cfg: MmConfig,
    spaces: HashMap<usize, Space>,
    next_space: usize,
    task_space: HashMap<i32, usize>,
    calls: BTreeMap<&'static str, u64>,
    differences: Vec<String>,
    resyncs: Vec<String>,
    keep_going: bool,
    /// `--smaps`: compare the page-independent smaps fields too ([`smaps_fields_diff`]).
    smaps: bool,
    mirroring: bool,
    verbose: bool,
    record: Option<Vec<String>>,
    last_recorded_space: Option<usize>,
    /// The recorded script's name of each bound `fdN` (a script declares a name once).
    record_names: HashMap<String, String>,
    record_decls: u64,
    /// Frames that `pagemap` shows present and not file pages but `smaps` does not count as anonymous (the
    /// zero pages): no reason to read `smaps` (`Shadow::refresh`).
    not_anon: std::collections::HashSet<u64>,
    text: Text,
}

/// The kernel's return register as an outcome.
fn kernel_outcome(ret: i64) -> Outcome {
    if (-4095..0).contains(&ret) {
        Err(CallError::Errno(Errno::from_raw(-ret as i32)))
    } else {
        Ok(ret as u64)
    }
}

/// The maps lines that differ, each with one line of context on both sides.
fn maps_diff(kernel: &str, engine: &str) -> String {
    let k: Vec<&str> = kernel.lines().collect();
    let e: Vec<&str> = engine.lines().collect();
    let ks: std::collections::HashSet<&str> = k.iter().copied().collect();
    let es: std::collections::HashSet<&str> = e.iter().copied().collect();
    let mut out = String::new();
    let show = |out: &mut String, lines: &[&str], other: &std::collections::HashSet<&str>, tag: &str| {
        for (i, l) in lines.iter().enumerate() {
            let near = (i.saturating_sub(1)..=(i + 1).min(lines.len().saturating_sub(1)))
                .any(|j| !other.contains(lines[j]));
            if !other.contains(l) {
                out.push_str(&format!("  {tag} {l}\n"));
            } else if near {
                out.push_str(&format!("    {l}\n"));
            }
        }
    };
    out.push_str("  kernel (- only in the kernel):\n");
    show(&mut out, &k, &es, "-");
    out.push_str("  engine (+ only in the engine):\n");
    show(&mut out, &e, &ks, "+");
    out
}

/// Whether the kernel's `kernel` maps differ from the engine's `engine` only in the names of mapped files:
/// the same lines but for the path of some file mappings (same range, permissions, offset, device and a
/// nonzero inode), which another thread renamed or unlinked (` (deleted)`) since they were mapped.
fn only_unlinked(kernel: &str, engine: &str) -> bool {
    let (k, e): (Vec<&str>, Vec<&str>) = (kernel.lines().collect(), engine.lines().collect());
    let same_mapping = |k: &str, e: &str| {
        let (kf, ef): (Vec<&str>, Vec<&str>) =
            (k.split_whitespace().take(5).collect(), e.split_whitespace().take(5).collect());
        kf.len() == 5 && kf == ef && kf[4] != "0"
    };
    k.len() == e.len()
        && k.iter().zip(&e).all(|(k, e)| k.trim_end() == e.trim_end() || same_mapping(k, e))
        && k != e
}

/// Mirrors into `mm` every growsdown VMA (the `[stack]` and any `MAP_GROWSDOWN` mapping) that faults extended
/// down in the kernel's `lines`: the kernel's VMA ends where the engine's does and starts below it. A fault is
/// the only way such a VMA grows, so no traced call can be the cause.
fn mirror_growth(mm: &vmspace_mm::Mm, lines: &[vmspace_proc::MapsLine]) {
    for v in lines {
        if let Some(ev) = mm.vma_at(v.end - 1)
            && ev.end == v.end
            && v.start < ev.start
            && ev.flags.intersects(vmspace_mm::VmFlags::GROWSDOWN)
        {
            let _ = mm.mirror_stack_growth(v.start);
        }
    }
}

/// Whether the kernel's maps and the engine's are the same but for the inode numbers of objects without a
/// path of their own: the shmem object of a shared anonymous mapping (`/dev/zero (deleted)`) and the hugetlbfs
/// object of a `MAP_HUGETLB` mapping get their inode from `get_next_ino()` (`fs/inode.c`), a global counter
/// that every process's `shmem_zero_setup` advances, so no model of one address space can know it. Both sides
/// number those objects by first appearance, as op-script outputs do (`vmspace_script::canonical_maps`), so
/// two VMAs of one object must still agree with each other.
fn same_maps(kernel: &str, engine: &str) -> bool {
    let all = Arena { base: 0, size: u64::MAX };
    kernel == engine || canonical_maps(kernel, all, &[]) == canonical_maps(engine, all, &[])
}

/// The smaps fields that `--smaps` compares: those of `show_smap` (`fs/proc/task_mmu.c`) that are not
/// gathered from the VMA's pages. `Size` is the VMA's length; `KernelPageSize` and `MMUPageSize` are
/// `vma_kernel_pagesize`/`vma_mmu_pagesize` (the hugetlb page size of a hugetlb VMA, else the base page);
/// `THPeligible` is `thp_vma_allowable_orders(vma, vma->vm_flags, TVA_SMAPS, THP_ORDERS_ALL)`, from the
/// VMA's flags, range and file and the THP settings; `ProtectionKey` is `vma_pkey` (printed only when
/// `arch_pkeys_enabled()`); `VmFlags` is `show_smap_vma_flags` of `vm_flags`. Every other field (`Rss`
/// through `SwapPss`, and `Locked`, which is the proportional size of the resident pages of a `VM_LOCKED`
/// VMA) comes from `smap_gather_stats`' walk of the page tables, so it depends on which pages are resident,
/// which the engine does not mirror (a traced program's faults are not calls).
const SMAPS_FIELDS: [&str; 6] =
    ["Size", "KernelPageSize", "MMUPageSize", "THPeligible", "ProtectionKey", "VmFlags"];

/// The page-independent smaps fields ([`SMAPS_FIELDS`]) of one record, as printed.
fn smaps_fields(r: &vmspace_proc::SmapsRecord) -> [String; 6] {
    [
        format!("{} kB", r.size_kb),
        format!("{} kB", r.kernel_page_size_kb),
        format!("{} kB", r.mmu_page_size_kb),
        r.thp_eligible.to_string(),
        r.protection_key.map_or_else(|| "(not printed)".to_string(), |k| k.to_string()),
        r.vm_flags.mnemonics.join(" "),
    ]
}

/// The page-independent smaps fields ([`SMAPS_FIELDS`]) that differ between the kernel's `/proc/PID/smaps`
/// records and the engine's smaps text, one line each: the VMA (its maps line, the kernel's), the field, both values. The
/// VMAs are paired by range (the maps were compared first); a VMA only one side has is reported as such.
/// Shmem and hugetlbfs inode numbers are not compared here (the maps comparison renumbers them).
fn smaps_fields_diff(k: &[vmspace_proc::SmapsRecord], engine: &str) -> Result<Vec<String>> {
    let e = vmspace_proc::parse_smaps(engine).map_err(|(n, e)| anyhow!("engine smaps line {n}: {e:?}"))?;
    let by_range: HashMap<(u64, u64), &vmspace_proc::SmapsRecord> =
        e.iter().map(|r| ((r.header.start, r.header.end), r)).collect();
    let mut out = Vec::new();
    for kr in k {
        let vma = kr.header.render();
        let vma = vma.trim_end();
        let Some(er) = by_range.get(&(kr.header.start, kr.header.end)) else {
            out.push(format!("  {vma}: only in the kernel's smaps"));
            continue;
        };
        for ((field, kv), ev) in SMAPS_FIELDS.iter().zip(smaps_fields(kr)).zip(smaps_fields(er)) {
            if kv != ev {
                out.push(format!("  {vma}: {field}: kernel {kv}, engine {ev}"));
            }
        }
    }
    let kr: std::collections::HashSet<(u64, u64)> =
        k.iter().map(|r| (r.header.start, r.header.end)).collect();
    for er in e.iter().filter(|r| !kr.contains(&(r.header.start, r.header.end))) {
        out.push(format!("  {}: only in the engine's smaps", er.header.render().trim_end()));
    }
    Ok(out)
}

/// The kernel's `/proc/PID/maps` of process `pid` and, with `smaps`, its `/proc/PID/smaps` records: then the
/// maps text is the records' headers (the maps lines smaps prints), so that both come from one reading and a
/// change by another thread cannot fall between them.
fn read_kernel(pid: i32, smaps: bool) -> Result<(String, Option<Vec<vmspace_proc::SmapsRecord>>)> {
    if !smaps {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .with_context(|| format!("reading /proc/{pid}/maps"))?;
        return Ok((maps, None));
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps"))
        .with_context(|| format!("reading /proc/{pid}/smaps"))?;
    let recs =
        vmspace_proc::parse_smaps(&text).map_err(|(n, e)| anyhow!("/proc/{pid}/smaps line {n}: {e:?}"))?;
    let maps = recs.iter().map(|r| r.header.render()).collect();
    Ok((maps, Some(recs)))
}

/// Whether process `pid` still has an address space: a zombie's or an exiting process's `maps` reads empty
/// (`m_start` finds no mm), and a reaped one's does not open.
fn has_mm(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| !m.is_empty())
}

/// `/proc/PID/pagemap` entry bits (`fs/proc/task_mmu.c`: `PM_PRESENT`, `PM_SWAP`, `PM_FILE`, the PFN field).
const PM_PRESENT: u64 = 1 << 63;
const PM_SWAP: u64 = 1 << 62;
const PM_FILE: u64 = 1 << 61;
const PM_PFN: u64 = (1 << 55) - 1;

/// The frame numbers of the pages of `[start, end)` that `pagemap` shows present and not a file page, less
/// those of `not_anon`, plus a 0 for each swap entry: empty when no page there can be anonymous. (The frame
/// number reads as 0 without `CAP_SYS_ADMIN`; such a page is then always a suspect.)
fn anon_frames(
    pm: &std::fs::File,
    start: u64,
    end: u64,
    not_anon: &std::collections::HashSet<u64>,
) -> std::io::Result<Vec<u64>> {
    use std::os::unix::fs::FileExt;
    const CHUNK: u64 = 4096;
    let mut out = Vec::new();
    let (mut page, last) = (start / vmspace_mm::PAGE_SIZE, end / vmspace_mm::PAGE_SIZE);
    let mut buf = vec![0u8; (CHUNK * 8) as usize];
    while page < last {
        let n = (last - page).min(CHUNK);
        let bytes = &mut buf[..(n * 8) as usize];
        pm.read_exact_at(bytes, page * 8)?;
        for e in bytes.chunks_exact(8).map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes"))) {
            if e & PM_SWAP != 0 {
                out.push(0);
            } else if e & PM_PRESENT != 0 && e & PM_FILE == 0 {
                let pfn = e & PM_PFN;
                if pfn == 0 || !not_anon.contains(&pfn) {
                    out.push(pfn);
                }
            }
        }
        page += n;
    }
    Ok(out)
}

fn fmt_outcome(op: &Op, r: Outcome) -> String {
    value_of(op, r).to_string()
}

impl Shadow {
    /// An engine address space imported from process `pid` now; `mmap_base`: the process's, when an earlier
    /// import of the same address space (or of the one it was forked from) knows it.
    ///
    /// `mmap_base` is fixed at `execve` (`arch_pick_mmap_layout`) and copied by fork; nothing else moves it.
    /// The import can only infer it from the maps and *today's* `RLIMIT_STACK` (`procfs` module docs), and a
    /// program that raised its stack limit since (stress-ng raises it to the hard limit) would be given a
    /// `mmap_base` far below the real one. So a resynchronisation keeps the value the space had.
    fn import(&self, pid: i32, mmap_base: Option<u64>) -> Result<(EngineTarget, String)> {
        let mut snap =
            vmspace_linux::procfs::read_snapshot(pid).with_context(|| format!("reading process {pid}"))?;
        if let Some(base) = mmap_base {
            snap.layout.mmap_base = base;
        }
        let mm = Mm::import(&self.cfg, &snap.layout)
            .map_err(|e| anyhow!("the engine refused the address space of process {pid}: {e:?}"))?;
        Ok((EngineTarget::from_mm(mm), snap.maps))
    }

    /// A new space imported from `pid`, assigned to `pid`; a difference if the import does not read back as
    /// the kernel's maps.
    fn new_space(&mut self, pid: i32, why: &str) -> Result<()> {
        let (mut engine, maps) = self.import(pid, None)?;
        let id = self.next_space;
        self.next_space += 1;
        let em = engine.maps();
        if !same_maps(&maps, &em) {
            self.difference(format!(
                "process {pid}: the imported address space ({why}) differs from the kernel's maps\n{}",
                maps_diff(&maps, &em)
            ));
        }
        if let Some(rec) = &mut self.record {
            rec.push(format!("# space {id}: process {pid} ({why}); its maps at the start:"));
            rec.extend(maps.lines().map(|l| format!("#   {l}")));
        }
        self.spaces.insert(id, Space { engine, pid, fds: HashMap::new(), smaps_untaken: Default::default() });
        self.task_space.insert(pid, id);
        Ok(())
    }

    /// Imports space `id` again from its process, for `reason`.
    fn resync(&mut self, id: usize, reason: String) -> Result<()> {
        let pid = self.spaces[&id].pid;
        let base = self.spaces[&id].engine.mm().config().mmap_base;
        let (engine, _) = self.import(pid, Some(base))?;
        let sp = self.spaces.get_mut(&id).expect("space exists");
        sp.engine = engine;
        sp.fds.clear();
        if self.verbose {
            say!(self.text, "resync: {reason}");
        }
        if let Some(rec) = &mut self.record {
            rec.push(format!("# resynchronised (imported again): {reason}"));
        }
        self.resyncs.push(reason);
        Ok(())
    }

    fn difference(&mut self, report: String) {
        say!(self.text, "DIFFERENCE {}: {report}", self.differences.len() + 1);
        self.differences.push(report);
    }

    /// Forgets task `tid`: its space goes with its last task; another task of it reads `/proc` from now on.
    fn remove_task(&mut self, tid: i32) {
        let Some(id) = self.task_space.remove(&tid) else { return };
        match self.task_space.iter().find(|&(_, &s)| s == id).map(|(&t, _)| t) {
            None => {
                self.spaces.remove(&id);
            }
            Some(other) => {
                if let Some(sp) = self.spaces.get_mut(&id)
                    && sp.pid == tid
                {
                    sp.pid = other;
                }
            }
        }
    }

    /// Brings the faults' changes into space `id` (module docs); resynchronises on any other drift.
    ///
    /// Cheap where nothing changed: `/proc/PID/maps` (no page-table walk) for the growsdown VMAs and the
    /// comparison, and `/proc/PID/pagemap` over only the VMAs whose anon_vma a fault can have prepared since
    /// the last call (private, accessible, none yet in the engine). `smaps` is read only when one of those
    /// shows a present page that is not a file page, or a swap entry: its `Anonymous`/`Swap` then decide, as
    /// at the import. A page that was neither (the zero page or the huge zero page, which `pagemap` shows
    /// without `PM_FILE` but `smaps` does not count) has its frame number remembered in `not_anon`, so that
    /// the next refresh needs no `smaps` for it.
    fn refresh(&mut self, id: usize) -> Result<()> {
        use vmspace_mm::VmFlags;
        let pid = self.spaces[&id].pid;
        let (kmaps, ksmaps) = read_kernel(pid, self.smaps)?;
        let lines =
            vmspace_proc::parse_maps(&kmaps).map_err(|(n, e)| anyhow!("/proc/{pid}/maps line {n}: {e:?}"))?;
        let sp = self.spaces.get_mut(&id).expect("space exists");
        let mm = sp.engine.mm();
        mirror_growth(mm, &lines);
        // The VMAs whose pages may have come with a new anon_vma. An inaccessible one can have got none since
        // the last refresh: the mprotect that made it so was a traced call, with a refresh before it.
        let candidates: Vec<(u64, u64)> = mm
            .vmas()
            .filter(|v| {
                v.anon_vma_id.is_none()
                    && !v.flags.intersects(VmFlags::MAYSHARE)
                    && v.flags.intersects(VmFlags::READ | VmFlags::WRITE | VmFlags::EXEC)
            })
            .map(|v| (v.start, v.end))
            .collect();
        let mut suspects: Vec<(u64, Vec<u64>)> = Vec::new();
        if !candidates.is_empty() {
            let pm = std::fs::File::open(format!("/proc/{pid}/pagemap"))
                .with_context(|| format!("opening /proc/{pid}/pagemap"))?;
            for (start, end) in candidates {
                let frames = anon_frames(&pm, start, end, &self.not_anon)
                    .with_context(|| format!("reading /proc/{pid}/pagemap"))?;
                if !frames.is_empty() {
                    suspects.push((start, frames));
                }
            }
        }
        if !suspects.is_empty() {
            let smaps = match &ksmaps {
                Some(r) => r.clone(),
                None => {
                    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps"))
                        .with_context(|| format!("reading /proc/{pid}/smaps"))?;
                    vmspace_proc::parse_smaps(&text)
                        .map_err(|(n, e)| anyhow!("/proc/{pid}/smaps line {n}: {e:?}"))?
                }
            };
            for (start, frames) in suspects {
                let Some(r) = smaps.iter().find(|r| r.header.start <= start && start < r.header.end) else {
                    continue;
                };
                if r.stats.anonymous > 0 || r.stats.swap > 0 {
                    let _ = mm.mirror_anon_vma(start);
                } else {
                    self.not_anon.extend(frames.into_iter().filter(|&f| f != 0));
                }
            }
        }
        let em = sp.engine.maps();
        if !same_maps(&kmaps, &em) {
            let d = maps_diff(&kmaps, &em);
            return self.resync(id, format!("process {pid}: maps changed without a traced call\n{d}"));
        }
        if let Some(k) = ksmaps {
            // `--smaps`: flags and THP eligibility that changed without a memory call (`prctl`'s
            // `PR_SET_THP_DISABLE` and `PR_SET_MEMORY_MERGE`, the THP settings, a file opened for writing
            // elsewhere) are taken in as the maps' changes are.
            // What the import cannot take in stays in `smaps_untaken`, so that it is neither imported again
            // before every call nor reported after one.
            let mut d = smaps_fields_diff(&k, &sp.engine.smaps())?;
            d.retain(|l| !sp.smaps_untaken.contains(l));
            if !d.is_empty() {
                let lines = d.join("\n");
                self.resync(
                    id,
                    format!("process {pid}: smaps fields changed without a traced call\n{lines}"),
                )?;
                let sp = self.spaces.get_mut(&id).expect("space exists");
                if let (kmaps, Some(k)) = read_kernel(pid, true)?
                    && same_maps(&kmaps, &sp.engine.maps())
                {
                    sp.smaps_untaken = smaps_fields_diff(&k, &sp.engine.smaps())?.into_iter().collect();
                }
            }
        }
        Ok(())
    }

    /// Binds `fdN` of `op` (a file mmap) in space `id` to the file task `tid`'s descriptor refers to.
    fn bind_fd(&mut self, id: usize, tid: i32, op: &Op) {
        let Op::Mmap { file: Some((Fd::Name(name), _)), .. } = op else { return };
        let Some(n) = name.strip_prefix("fd").and_then(|n| n.parse::<i32>().ok()) else { return };
        let Some(f) = tracer::fd_file(tid, n) else { return };
        let sp = self.spaces.get_mut(&id).expect("space exists");
        let key = (f.dev_major, f.dev_minor, f.inode);
        if sp.fds.get(&n) == Some(&key) && sp.engine.bound_file(name).is_some() {
            return;
        }
        sp.fds.insert(n, key);
        let size = f.size;
        // The file of a VMA already mapping it (an imported one after a resynchronisation), so that the new
        // mapping can merge with it as the kernel's (one `struct file` behind one descriptor) does.
        let existing = sp.engine.mm().vmas().into_iter().find_map(|v| {
            v.file.filter(|x| {
                (x.dev_major, x.dev_minor, x.inode) == key && x.name == f.path && x.deleted == f.deleted
            })
        });
        sp.engine.bind_file(name, existing.unwrap_or_else(|| VmFile::imported(&f, &self.cfg)));
        if let Some(rec) = &mut self.record {
            // A script declares each name once: a later file under the same descriptor gets a new name.
            self.record_decls += 1;
            let rname = format!("{name}_{}", self.record_decls);
            rec.push(format!("# {rname}: {} ({:x}:{:02x} {})", f.path, f.dev_major, f.dev_minor, f.inode));
            rec.push(Op::File { name: rname.clone(), size }.to_string());
            self.record_names.insert(name.clone(), rname);
        }
    }

    /// One memory call of task `tid` stopped at its entry.
    fn call(&mut self, t: &mut Tracer, tid: i32, nr: i64, args: [u64; 6]) -> Result<()> {
        let name = decode::name_of(nr);
        let Some(&id) = self.task_space.get(&tid) else {
            // The spawned child before its execve: not the program yet.
            return Ok(t.resume(tid)?);
        };
        let decoded = decode::decode(nr, &args, |a| t.read_string(tid, a));
        *self.calls.entry(name).or_default() += 1;
        let op = match decoded {
            decode::Decoded::Process => return Ok(t.resume(tid)?),
            decode::Decoded::Unreadable => {
                t.complete(tid)?;
                return Ok(t.resume(tid)?);
            }
            decode::Decoded::Unmodelled => {
                let done = t.complete(tid)?;
                if self.mirroring && done.is_some() {
                    let ret = done.unwrap_or(0);
                    self.resync(id, format!("task {tid}: {name} (= {ret}) is not modelled by the engine"))?;
                }
                return Ok(t.resume(tid)?);
            }
            decode::Decoded::Op(op) => op,
        };
        if !self.mirroring {
            return Ok(t.resume(tid)?);
        }
        if let Err(e) = self.refresh(id) {
            if !has_mm(self.spaces[&id].pid) {
                // The process is being torn down (killed, or another thread's exit_group) while this thread
                // stopped at the call: `/proc` shows no mm any more (`proc_mem_open` answers ESRCH), the call
                // never completes, and the exit event ends the space.
                return match t.complete(tid)? {
                    Some(_) => Ok(t.resume(tid)?),
                    None => Ok(()),
                };
            }
            return Err(e);
        }
        self.bind_fd(id, tid, &op);
        let Some(ret) = t.complete(tid)? else { return Ok(()) };
        if (-516..=-512).contains(&ret) {
            // ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND, ENOIOCTLCMD, ERESTART_RESTARTBLOCK
            // (`include/linux/errno.h`): a signal interrupted the call and the program never sees this value;
            // the kernel restarts the call (which stops here again and is mirrored then) or returns EINTR. What
            // it did before the signal is taken in by importing the space again, not mirrored.
            self.resync(id, format!("task {tid}: {name} (= {ret}) was interrupted by a signal"))?;
            return Ok(t.resume(tid)?);
        }
        let kernel = kernel_outcome(ret);
        let sp = self.spaces.get_mut(&id).expect("space exists");
        let engine = sp.engine.apply(&op);
        let pid = sp.pid;
        if let Some(rec) = &mut self.record {
            if self.last_recorded_space != Some(id) {
                rec.push(format!("# space {id} (process {pid})"));
                self.last_recorded_space = Some(id);
            }
            let mut rop = op.clone();
            if let Op::Mmap { file: Some((Fd::Name(n), _)), .. } = &mut rop
                && let Some(r) = self.record_names.get(n)
            {
                *n = r.clone();
            }
            rec.push(rop.to_string());
        }
        let (kv, ev) = (fmt_outcome(&op, kernel), fmt_outcome(&op, engine));
        if self.verbose {
            say!(self.text, "[{tid}] {name}: {op} = {kv}");
        }
        // The process can have ended meanwhile (another thread's exit_group): nothing to read then.
        let (kmaps, ksmaps) = read_kernel(pid, self.smaps).unwrap_or_default();
        let mut emaps = sp.engine.maps();
        let mut maps_agree = same_maps(&kmaps, &emaps);
        if !maps_agree && let Ok(lines) = vmspace_proc::parse_maps(&kmaps) {
            // The program's other threads ran on while this call was in flight: a fault of theirs may have
            // grown a stack since the refresh before the call. Only that is taken in before comparing again.
            mirror_growth(sp.engine.mm(), &lines);
            emaps = sp.engine.maps();
            maps_agree = same_maps(&kmaps, &emaps);
        }
        if kv == ev && !maps_agree && only_unlinked(&kmaps, &emaps) {
            // Another thread renamed or unlinked a mapped file while this call was in flight (not memory calls,
            // and the engine does not model them): taken in as a change without a traced call.
            self.resync(
                id,
                format!("process {pid}: a mapped file was renamed or unlinked (not a memory call)"),
            )?;
            return Ok(t.resume(tid)?);
        }
        let mut smaps_d = match &ksmaps {
            Some(k) if maps_agree => smaps_fields_diff(k, &sp.engine.smaps())?,
            _ => Vec::new(),
        };
        smaps_d.retain(|l| !sp.smaps_untaken.contains(l));
        if kv != ev || !maps_agree || !smaps_d.is_empty() {
            let mut r =
                format!("task {tid} (process {pid}), {name}: `{op}`\n  kernel = {kv}\n  engine = {ev}\n");
            if !maps_agree {
                r.push_str(&maps_diff(&kmaps, &emaps));
            } else {
                r.push_str("  the maps agree\n");
            }
            if !smaps_d.is_empty() {
                r.push_str("  smaps fields that differ (VMA: field: kernel, engine):\n");
                for l in &smaps_d {
                    r.push_str(&format!("  {l}\n"));
                }
            }
            r.push_str(&format!(
                "  as a script line: {op}\n  (`--record FILE` writes the whole call stream; a script starts from an \
                 empty address space, so calls that depend on the imported layout replay only with it)"
            ));
            self.difference(r);
            if self.keep_going {
                self.resync(id, format!("after difference {}", self.differences.len()))?;
            } else {
                say!(
                    self.text,
                    "mirroring stops at the first difference (--keep-going resynchronises and goes on)"
                );
                self.mirroring = false;
            }
        }
        Ok(t.resume(tid)?)
    }
}

/// `vmspace shadow`.
pub fn run(args: ShadowArgs) -> Result<Status> {
    let json = JsonOut::new(args.json.as_deref())?;
    if let Some(p) = &args.record {
        common::check_writable_file(p, "--record")?;
    }
    let text = Text::new(&json);
    let shadow_err = |e: ShadowError| -> anyhow::Error {
        match e {
            ShadowError::Program(m) => usage(m),
            ShadowError::Interrupted => anyhow::Error::new(vmspace_linux::child::Interrupted),
            e => anyhow::Error::new(e),
        }
    };
    vmspace_linux::child::install_interrupt_handler()
        .map_err(|e| anyhow!("installing the Ctrl-C handler: {e}"))?;
    let (label, baseline) = match args.pid {
        Some(pid) => (format!("process {pid}"), None),
        None => {
            let prog = tracer::resolve_program(&args.program[0]).map_err(shadow_err)?;
            let baseline = if args.baseline {
                let start = Instant::now();
                let st = std::process::Command::new(&prog)
                    .args(&args.program[1..])
                    .status()
                    .with_context(|| format!("running {} untraced", prog.display()))?;
                Some((start.elapsed(), st))
            } else {
                None
            };
            (args.program.join(" "), baseline)
        }
    };
    let start = Instant::now();
    let mut t = match args.pid {
        Some(pid) => Tracer::attach(pid).map_err(shadow_err)?,
        None => {
            let prog = tracer::resolve_program(&args.program[0]).map_err(shadow_err)?;
            Tracer::spawn(&prog, &args.program[1..]).map_err(shadow_err)?
        }
    };
    let mut s = Shadow {
        cfg: MmConfig::host(),
        spaces: HashMap::new(),
        next_space: 0,
        task_space: HashMap::new(),
        calls: BTreeMap::new(),
        differences: Vec::new(),
        resyncs: Vec::new(),
        keep_going: args.keep_going,
        smaps: args.smaps,
        mirroring: true,
        verbose: args.verbose,
        record: args.record.as_ref().map(|_| vec![format!("# vmspace shadow: {label}")]),
        last_recorded_space: None,
        record_names: HashMap::new(),
        record_decls: 0,
        not_anon: Default::default(),
        text,
    };
    if let Some(pid) = args.pid {
        s.new_space(pid, "attached")?;
        // Every thread of the process is in the same space.
        if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
            for tid in rd.flatten().filter_map(|e| e.file_name().to_str().and_then(|n| n.parse().ok())) {
                s.task_space.insert(tid, 0);
            }
        }
    }
    let root = t.root();
    let mut status: Option<TaskExit> = None;
    let mut interrupted = false;
    loop {
        let ev = match t.next_event() {
            Ok(Some(ev)) => ev,
            Ok(None) => break,
            Err(ShadowError::Interrupted) if args.pid.is_some() => {
                interrupted = true;
                t.detach();
                say!(s.text, "interrupted: detached from process {root}, which goes on running");
                break;
            }
            Err(e) => return Err(shadow_err(e)),
        };
        match ev {
            Event::Call { tid, nr, args } => s.call(&mut t, tid, nr, args)?,
            Event::NewTask { parent, child, shares_vm } => {
                if let Some(&id) = s.task_space.get(&parent) {
                    if shares_vm {
                        s.task_space.insert(child, id);
                    } else {
                        let mm =
                            s.spaces[&id].engine.mm().fork().map_err(|e| anyhow!("engine fork: {e:?}"))?;
                        let nid = s.next_space;
                        s.next_space += 1;
                        s.spaces.insert(
                            nid,
                            Space {
                                engine: EngineTarget::from_mm(mm),
                                pid: child,
                                fds: HashMap::new(),
                                smaps_untaken: s.spaces[&id].smaps_untaken.clone(),
                            },
                        );
                        s.task_space.insert(child, nid);
                        if let Some(rec) = &mut s.record {
                            rec.push(format!("# space {nid}: process {child}, forked from space {id}"));
                        }
                    }
                }
            }
            Event::Exec { tid, former } => {
                s.remove_task(former);
                s.remove_task(tid);
                s.new_space(tid, "execve")?;
                t.resume(tid)?;
            }
            Event::Exit { tid, status: st } => {
                s.remove_task(tid);
                if tid == root {
                    status = Some(st);
                }
            }
        }
    }
    let elapsed = start.elapsed();
    drop(t);
    if let (Some(p), Some(rec)) = (&args.record, &s.record) {
        common::write_atomically(p, |w| {
            for l in rec {
                writeln!(w, "{l}")?;
            }
            Ok(())
        })?;
    }
    summary(&s, &label, status, elapsed, baseline, interrupted, &json)
}

fn secs(d: Duration) -> String {
    format!("{:.3} s", d.as_secs_f64())
}

fn summary(
    s: &Shadow,
    label: &str,
    status: Option<TaskExit>,
    elapsed: Duration,
    baseline: Option<(Duration, std::process::ExitStatus)>,
    interrupted: bool,
    json: &JsonOut,
) -> Result<Status> {
    let t = &s.text;
    let total: u64 = s.calls.values().sum();
    say!(t, "shadow of {label}");
    say!(t, "{:<26} {:>10}", "call", "mirrored");
    for (k, v) in &s.calls {
        say!(t, "{k:<26} {v:>10}");
    }
    say!(t, "{:<26} {total:>10}", "total");
    let compared =
        if s.smaps { "results, maps and the page-independent smaps fields" } else { "results and maps" };
    say!(t, "compared after each call: {compared}");
    say!(t, "differences: {}", s.differences.len());
    say!(t, "resynchronisations: {}", s.resyncs.len());
    for r in &s.resyncs {
        say!(t, "  {}", r.lines().next().unwrap_or(""));
    }
    let program = match status {
        Some(st) => st.to_string(),
        None if interrupted => "still running (detached)".into(),
        None => "unknown (not seen to end)".into(),
    };
    say!(t, "program: {program}");
    let debug = crate::provenance::build().is_debug();
    let note = if debug {
        " (debug build of vmspace: the engine's share is larger than in a release build)"
    } else {
        ""
    };
    say!(t, "time with the shadow: {}{note}", secs(elapsed));
    match baseline {
        Some((d, st)) => say!(t, "time without (untraced run first, {st}): {}", secs(d)),
        None => say!(t, "time without: not measured (--baseline runs the program once untraced first)"),
    }
    let host = vmspace_linux::hostinfo::gather();
    let mut r = Report::new("shadow", label.to_string(), host);
    r.param("keep_going", s.keep_going);
    r.param("smaps", s.smaps);
    let mut m = BTreeMap::new();
    for (k, v) in &s.calls {
        m.insert(format!("calls.{k}"), *v as f64);
    }
    m.insert("calls.total".into(), total as f64);
    m.insert("differences".into(), s.differences.len() as f64);
    m.insert("resyncs".into(), s.resyncs.len() as f64);
    m.insert("time_traced_s".into(), elapsed.as_secs_f64());
    if let Some((d, _)) = baseline {
        m.insert("time_untraced_s".into(), d.as_secs_f64());
    }
    if let Some(TaskExit::Code(c)) = status {
        m.insert("exit_status".into(), c as f64);
    }
    r.push_run(m);
    r.summarise();
    r.notes.push(format!("program: {program}"));
    r.notes.extend(s.resyncs.iter().map(|x| format!("resync: {x}")));
    r.output = s.differences.clone();
    let verdict = if s.differences.is_empty() {
        Verdict::new(1, 0, format!("engine and kernel agree on {total} calls"))
    } else {
        Verdict::new(
            0,
            s.differences.len() as u64,
            format!("{} differences in {total} calls", s.differences.len()),
        )
    };
    json.write(&ReportSet::new(common::command_line(), vec![r]).with_verdict(verdict))?;
    if interrupted && s.differences.is_empty() {
        return Ok(Status::Success);
    }
    Ok(if s.differences.is_empty() { Status::Success } else { Status::Failed })
}

#[cfg(test)]
mod tests {
    use super::only_unlinked;

    #[test]
    fn only_unlinked_accepts_a_renamed_or_deleted_file_and_nothing_else() {
        let e = "7f00-7f08 rw-s 00000000 fe:00 10 /tmp/f\n7f08-7f09 ---p 00000000 00:00 0 \n";
        let k = "7f00-7f08 rw-s 00000000 fe:00 10 /tmp/f (deleted)\n7f08-7f09 ---p 00000000 00:00 0 \n";
        assert!(only_unlinked(k, e));
        assert!(!only_unlinked(e, e), "no difference at all is not an unlink");
        let moved = "7f00-7f09 rw-s 00000000 fe:00 10 /tmp/f (deleted)\n7f08-7f09 ---p 00000000 00:00 0 \n";
        assert!(!only_unlinked(moved, e), "a range that changed is a difference");
        assert!(
            !only_unlinked(k, "7f00-7f08 rw-s 00000000 fe:00 10 /tmp/f\n"),
            "a missing line is a difference"
        );
    }
}
