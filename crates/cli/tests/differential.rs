//! The differential gate: generated op scripts run on the engine and on the live kernel must produce the same
//! output (every call's result, the arena's maps, and with the `proc` family its smaps records and
//! PROCMAP_QUERY answers; `vmspace_script::output`, "Comparison").
//!
//! * `generated_scripts_match_the_kernel`: `VMSPACE_DIFF_SCRIPTS` scripts (default 2,000) of
//!   `VMSPACE_DIFF_CALLS` calls (default 60) from the script crate's seeded generator, seeds
//!   `VMSPACE_DIFF_SEED..` (default 0), on a grid of `VMSPACE_DIFF_GRID` pages (the generator's default),
//!   split over two threads (the kernel runner forks a child per script).
//!   Every difference is minimised (delta debugging: drop chunks of lines while the difference persists) and
//!   printed as a ready-to-commit regression script; the test fails on any difference.
//! * `generated_fork_scripts_match_the_kernel`: the same with `fork` enabled (a smaller batch).
//! * `generated_scripts_match_the_kernel_at_max_map_count`: generated scripts with the process 1, 3, 6 and 12
//!   VMAs short of `vm.max_map_count` (the kernel runner fills its child with VMAs; the engine runs with
//!   `max_map_count` = that headroom), `VMSPACE_DIFF_LIMIT_SCRIPTS` per headroom (default 30), `fork` enabled
//!   for two of the four, the `proc` family off (a `smaps` there renders 65,000 filler VMAs). A script is
//!   compared up to its first call that places a mapping outside the arena (see `difference`). On a host whose
//!   `vm.max_map_count` is above `VMSPACE_DIFF_LIMIT_FILL_MAX` (default 300,000), where filling a process per
//!   script would take minutes, the test lowers the sysctl to the kernel's default 65,530 (or to that variable,
//!   if lower) for the batches and restores it after; that needs root, and the test fails without it.
//! * `regression_scripts_match_the_kernel`: every `scripts/regress/*.script` (each a difference once found
//!   and since fixed) must match.
//!
//! The engine runs with the host's configuration (`MmConfig::host`), as the semantics contract requires.
//! A script that differs is run again: the difference counts only if it shows in each of five runs, since the
//! kernel's page batches are per CPU and another task on the runner's CPU can drain them early
//! (`lasting_difference`).
//!
//! Generator families (`vmspace_script::Families`): the gate runs every family except those listed in
//! [`GATE_FAMILIES_OFF`], each with the reason it is off; every batch prints the list. `VMSPACE_DIFF_WITHOUT`
//! (comma-separated family names, or `none`) replaces the list for one run.

use std::path::{Path, PathBuf};
use std::time::Instant;

use vmspace_linux::replay::{ReplayOptions, replay_kernel_with};
use vmspace_mm::MmConfig;
use vmspace_proc::{MapsLine, MapsName};
use vmspace_replay::EngineTarget;
use vmspace_script::{
    Arena, Entry, Families, GenConfig, Op, Output, Script, Value, compare, generate, minimise, run,
};

/// The generator families the gate leaves out, and why. Delete an entry when its engine side is merged.
const GATE_FAMILIES_OFF: &[(&str, &str)] = &[];

/// The families the gate runs ([`GATE_FAMILIES_OFF`], or `VMSPACE_DIFF_WITHOUT`), announced on stderr.
fn gate_families() -> Families {
    let mut f = Families::ALL;
    let off: Vec<(String, String)> = match std::env::var("VMSPACE_DIFF_WITHOUT") {
        Ok(list) if list == "none" => Vec::new(),
        Ok(list) => list.split(',').map(|n| (n.to_string(), "VMSPACE_DIFF_WITHOUT".to_string())).collect(),
        Err(_) => GATE_FAMILIES_OFF.iter().map(|(n, why)| (n.to_string(), why.to_string())).collect(),
    };
    for (name, why) in &off {
        f.set(name, false).unwrap_or_else(|e| panic!("{e}"));
        say(&format!("differential: generator family {name} OFF: {why}"));
    }
    let on: Vec<&str> = Families::NAMES.into_iter().filter(|n| f.get(n)).collect();
    say(&format!(
        "differential: generator families on: {}",
        if on.is_empty() { "none".into() } else { on.join(" ") }
    ));
    f
}

/// Prints `msg` past the test harness's output capture (which takes only the print macros' output), so that
/// a lowered sysctl or an empty scan shows in every `cargo test` run, not only in a failing one.
fn say(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// The kernel's default `vm.max_map_count` (`DEFAULT_MAX_MAP_COUNT`, `include/linux/mm.h`).
const DEFAULT_MAX_MAP_COUNT: u64 = 65_530;

/// The largest `vm.max_map_count` the limit batches fill a process to (`VMSPACE_DIFF_LIMIT_FILL_MAX` replaces
/// it): above it they lower the sysctl ([`LoweredMaxMapCount`]).
const LIMIT_FILL_MAX: u64 = 300_000;

/// `vm.max_map_count` as the tests of this binary see it: every test holds a read guard while it runs, and
/// [`LoweredMaxMapCount`] the write guard while the sysctl is lowered, so no other test starts or runs with a
/// limit that changes under it (the engine's `MmConfig::host()` and the kernel child's fill read it).
static SYSCTL: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// `vm.max_map_count` lowered for the limit batches, restored on drop (also when a batch fails: the test's
/// panic unwinds through it). Needs root; a host where it cannot be written fails the test with the command
/// that lowers it by hand. While it is lowered, any process of the machine that maps more VMAs than the new
/// limit is refused further ones; the line printed before says how to restore the value if the run is killed.
struct LoweredMaxMapCount {
    was: u64,
    _held: std::sync::RwLockWriteGuard<'static, ()>,
}

const MAX_MAP_COUNT: &str = "/proc/sys/vm/max_map_count";

impl LoweredMaxMapCount {
    fn to(limit: u64) -> Self {
        let held = SYSCTL.write().unwrap_or_else(|e| e.into_inner());
        let was = MmConfig::host().max_map_count;
        say(&format!(
            "differential: vm.max_map_count lowered from {was} to {limit} for the limit batches (filling a process \
             to {was} per script would take too long); if this run is killed, `sysctl vm.max_map_count={was}` \
             restores it"
        ));
        std::fs::write(MAX_MAP_COUNT, format!("{limit}\n")).unwrap_or_else(|e| {
            panic!(
                "cannot lower vm.max_map_count from {was} to {limit} for the limit batches ({MAX_MAP_COUNT}: {e}): \
                 run the test as root, or lower it by hand (`sysctl vm.max_map_count={limit}`) for the run"
            )
        });
        assert_eq!(MmConfig::host().max_map_count, limit, "{MAX_MAP_COUNT} did not take {limit}");
        LoweredMaxMapCount { was, _held: held }
    }
}

impl Drop for LoweredMaxMapCount {
    fn drop(&mut self) {
        let restored = std::fs::write(MAX_MAP_COUNT, format!("{}\n", self.was));
        if let Err(e) = &restored {
            say(&format!("differential: restoring vm.max_map_count to {} FAILED: {e}", self.was));
        }
        // A second panic while unwinding would abort; the message above says what went wrong then.
        if !std::thread::panicking() {
            restored.unwrap_or_else(|e| panic!("restoring vm.max_map_count to {}: {e}", self.was));
            assert_eq!(MmConfig::host().max_map_count, self.was, "vm.max_map_count not restored");
        }
        say(&format!("differential: vm.max_map_count restored to {}", self.was));
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn engine(script: &Script, cfg: &MmConfig) -> Output {
    // The CPU's side of `fill` as this machine has it (`MmConfig::refused_string_store_accessed`).
    let mut cfg = cfg.clone();
    if let Some(a) = vmspace_linux::uaccess::refused_string_store_sets_accessed() {
        cfg.refused_string_store_accessed = a;
    }
    // The engine's invariants are checked after every call.
    let mut t = EngineTarget::validating(cfg);
    run(script, &mut t)
}

/// Shared anonymous mappings show the inode of their shmem object, which the kernel numbers from a global
/// counter: both sides' inodes are renumbered in order of first appearance (1, 2, ...) before comparing.
fn canon_shmem(out: &mut Output) {
    let mut seen: Vec<u64> = Vec::new();
    for e in &mut out.entries {
        let Entry::Maps(lines) = e else { continue };
        for l in lines.iter_mut() {
            let Ok(mut m) = l.parse::<MapsLine>() else { continue };
            let is_shmem = matches!(&m.name, Some(MapsName::Path { path, deleted: true }) if path == "/dev/zero")
                || matches!(&m.name, Some(MapsName::AnonShmem(_)));
            if !is_shmem {
                continue;
            }
            let idx = match seen.iter().position(|&i| i == m.inode) {
                Some(i) => i,
                None => {
                    seen.push(m.inode);
                    seen.len() - 1
                }
            };
            m.inode = idx as u64 + 1;
            *l = m.to_string();
        }
    }
}

/// Runs of a script that differs before the difference counts ([`lasting_difference`]).
const KERNEL_RUNS: usize = 5;

/// [`difference`], counted only when it shows in each of [`KERNEL_RUNS`] runs (the first run's is returned).
/// The kernel's `smaps` counters that depend on the CPU's page batches (`lru_add`, `lru_lazyfree`; module docs
/// of `crates/linux/src/replay/mod.rs`) are per CPU, not per process: another task on the runner's CPU (another
/// test's runner, a build) that fills a batch drains the runner's pages with its own, earlier than the
/// script's calls would, so a run on a busy machine can differ from the undisturbed kernel. The engine is
/// deterministic: if any run of the kernel agrees with it, the engine does what the kernel does.
fn lasting_difference(script: &Script, cfg: &MmConfig) -> Option<String> {
    let first = difference(script, cfg)?;
    for run in 1..KERNEL_RUNS {
        if difference(script, cfg).is_none() {
            eprintln!(
                "differential: a difference did not repeat (kernel run {} of {KERNEL_RUNS} agreed)",
                run + 1
            );
            return None;
        }
    }
    Some(first)
}

/// The first difference between the engine and the kernel on `script`, rendered, or `None`. With a
/// `cfg.max_map_count` below the host's, the kernel child is filled with VMAs until it has exactly that many
/// left (the runner's headroom mode), so both sides meet the limit at the same call.
fn difference(script: &Script, cfg: &MmConfig) -> Option<String> {
    let headroom = (cfg.max_map_count < MmConfig::host().max_map_count).then_some(cfg.max_map_count);
    let opts = ReplayOptions { arena: Arena::default(), map_count_headroom: headroom };
    let mut script = std::borrow::Cow::Borrowed(script);
    // Each round runs both sides; a headroom run may cut the script shorter (below), which ends after a bounded
    // number of rounds: every cut keeps strictly fewer lines.
    let (e, k) = loop {
        let mut k = match replay_kernel_with(&script, opts) {
            Ok(o) => o,
            Err(e) => return Some(format!("kernel runner failed: {e}")),
        };
        canon_shmem(&mut k);
        let mut e = engine(&script, cfg);
        canon_shmem(&mut e);
        // Near the limit, a mapping placed outside the arena (an occupied hint, a move) lands among the
        // runner's own mappings and may merge with one of them, which the engine cannot see: from that call on
        // the two processes' VMA counts may differ. Compare the script up to the call before it. Likewise after
        // mlockall(MCL_FUTURE): a VMA the runner itself makes from then on is locked and no longer merges with
        // its unlocked neighbours (a heap extension becomes a VMA of its own), so compare up to that call.
        let cut_at = headroom.and_then(|_| {
            [first_call_leaving_arena(&k), first_call_leaving_arena(&e), after_future_lock(&script)]
                .into_iter()
                .flatten()
                .min()
        });
        let Some(line) = cut_at else { break (e, k) };
        let kept: Vec<_> = script.lines.iter().filter(|l| l.line < line).cloned().collect();
        if kept.len() == script.lines.len() {
            // Nothing after the cut (the script ends with its mlockall): the run compares as it is.
            break (e, k);
        }
        if kept.is_empty() {
            return None;
        }
        script = std::borrow::Cow::Owned(Script { lines: kept });
    };
    let d = compare(&e, &k, Arena::default(), ("engine", "kernel")).map(|d| d.to_string());
    if d.is_none() {
        let calls = k.entries.iter().filter(|x| matches!(x, Entry::Call { .. })).count() as u64;
        let enomem = k
            .entries
            .iter()
            .filter(|x| matches!(x, Entry::Call { value: Value::Err(vmspace_script::Errno::ENOMEM), .. }))
            .count() as u64;
        TALLY.with(|t| t.set((t.get().0 + calls, t.get().1 + enomem)));
    }
    d
}

thread_local! {
    /// Calls compared and ENOMEM results among them, by this worker thread (for the batch's summary line).
    static TALLY: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((0, 0)) };
}

/// The line after the first `mlockall` with MCL_FUTURE (2).
fn after_future_lock(script: &Script) -> Option<usize> {
    script.lines.iter().find(|l| matches!(l.op, Op::Mlockall { flags } if flags & 2 != 0)).map(|l| l.line + 1)
}

/// The script line of the first call that returned an address outside the arena.
fn first_call_leaving_arena(out: &Output) -> Option<usize> {
    let arena = Arena::default();
    out.entries.iter().find_map(|e| match e {
        Entry::Call { line, value: Value::Addr(a), op } if op != "brk" && !arena.contains(*a) => Some(*line),
        _ => None,
    })
}

fn run_batch(first_seed: u64, count: u64, gen_cfg: GenConfig, cfg: MmConfig) {
    let t0 = Instant::now();
    let threads = 2u64;
    let mut tally = (0u64, 0u64);
    let failures: Vec<(u64, String, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let cfg = cfg.clone();
                s.spawn(move || {
                    TALLY.with(|t| t.set((0, 0)));
                    let mut out = Vec::new();
                    let mut seed = first_seed + t;
                    while seed < first_seed + count {
                        let script = generate(seed, &gen_cfg);
                        if let Some(d) = lasting_difference(&script, &cfg) {
                            let min = minimise(&script, |s| difference(s, &cfg).is_some());
                            let md = difference(&min, &cfg).unwrap_or(d);
                            out.push((seed, min.to_text(), md));
                            if out.len() >= 3 {
                                break;
                            }
                        }
                        seed += threads;
                    }
                    // Minimisation's runs count too; only a failing batch has them.
                    (out, TALLY.with(|t| t.get()))
                })
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            let (out, (c, e)) = h.join().expect("worker");
            all.extend(out);
            tally = (tally.0 + c, tally.1 + e);
        }
        all
    });
    let el = t0.elapsed();
    let (calls, enomem) = tally;
    eprintln!(
        "differential: {count} scripts x {} calls (seeds {first_seed}..{}), fork={}, max_map_count={}, families \
         off: {}, {:.1}s, {} different; {calls} call results compared, {enomem} of them ENOMEM",
        gen_cfg.calls,
        first_seed + count,
        gen_cfg.fork,
        cfg.max_map_count,
        gen_cfg.families.off().join(","),
        el.as_secs_f64(),
        failures.len()
    );
    assert!(
        calls > 0 || !failures.is_empty(),
        "the batch compared no call result ({count} scripts from seed {first_seed})"
    );
    if !failures.is_empty() {
        let mut msg = String::new();
        for (seed, text, d) in &failures {
            msg.push_str(&format!("--- seed {seed}: minimised script:\n{text}--- difference:\n{d}\n"));
        }
        panic!("{} scripts differ from the kernel\n{msg}", failures.len());
    }
}

#[test]
fn generated_scripts_match_the_kernel() {
    let _sysctl = SYSCTL.read().unwrap_or_else(|e| e.into_inner());
    let count = env_u64("VMSPACE_DIFF_SCRIPTS", 2000);
    let calls = env_u64("VMSPACE_DIFF_CALLS", 60) as usize;
    let seed = env_u64("VMSPACE_DIFF_SEED", 0);
    let grid_pages = env_u64("VMSPACE_DIFF_GRID", GenConfig::default().grid_pages);
    let families = gate_families();
    run_batch(
        seed,
        count,
        GenConfig { calls, grid_pages, families, ..GenConfig::default() },
        MmConfig::host(),
    );
}

/// The generated scripts with the process a few VMAs short of `vm.max_map_count` (the kernel runner's
/// headroom mode): every limit check (mmap's `map_count > max`, split's `map_count >= max`, munmap's refusal
/// to split the middle of a VMA, mremap's `map_count + 2 >= max - 3`, brk's) meets the real kernel's.
#[test]
fn generated_scripts_match_the_kernel_at_max_map_count() {
    // Each script's kernel child maps `vm.max_map_count` filler VMAs first: cheap at the default 65,530, far
    // too slow where a distribution raised the limit to a million or more. There the batches run with the
    // sysctl lowered to the default for their duration (`LoweredMaxMapCount`), the other tests of this binary
    // held off meanwhile.
    let host_max = MmConfig::host().max_map_count;
    let fill_max = env_u64("VMSPACE_DIFF_LIMIT_FILL_MAX", LIMIT_FILL_MAX);
    let lowered = (host_max > fill_max).then(|| LoweredMaxMapCount::to(DEFAULT_MAX_MAP_COUNT.min(fill_max)));
    let _sysctl = lowered.is_none().then(|| SYSCTL.read().unwrap_or_else(|e| e.into_inner()));
    let count = env_u64("VMSPACE_DIFF_LIMIT_SCRIPTS", 30);
    let calls = env_u64("VMSPACE_DIFF_CALLS", 60) as usize;
    // Half the batches with `fork` (dup_mmap copies the count; the child meets the limit as the parent did).
    // Without the `proc` family: each `smaps` would make the kernel render the records of all 65,000 filler
    // VMAs (seconds per script), and the readers are held against the kernel by the other batches; what these
    // batches test is the limit.
    let mut families = gate_families();
    families.set("proc", false).expect("the proc family");
    say("differential: the limit batches run without the proc family (smaps over the fillers is too slow)");
    for (i, headroom) in [1u64, 3, 6, 12].into_iter().enumerate() {
        let fork = i % 2 == 1;
        let seed = env_u64("VMSPACE_DIFF_SEED", 0) + 2_000_000 + i as u64 * 100_000;
        let cfg = MmConfig { max_map_count: headroom, ..MmConfig::host() };
        run_batch(seed, count, GenConfig { calls, fork, families, ..GenConfig::default() }, cfg);
    }
}

#[test]
fn generated_fork_scripts_match_the_kernel() {
    let _sysctl = SYSCTL.read().unwrap_or_else(|e| e.into_inner());
    let count = env_u64("VMSPACE_DIFF_FORK_SCRIPTS", 300);
    let calls = env_u64("VMSPACE_DIFF_CALLS", 60) as usize;
    let seed = env_u64("VMSPACE_DIFF_SEED", 0) + 1_000_000;
    let grid_pages = env_u64("VMSPACE_DIFF_GRID", GenConfig::default().grid_pages);
    let families = gate_families();
    run_batch(
        seed,
        count,
        GenConfig { calls, fork: true, grid_pages, families, ..GenConfig::default() },
        MmConfig::host(),
    );
}

fn regress_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/regress")
}

#[test]
fn regression_scripts_match_the_kernel() {
    let _sysctl = SYSCTL.read().unwrap_or_else(|e| e.into_inner());
    let cfg = MmConfig::host();
    let mut n = 0;
    let mut bad = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(regress_dir())
        .unwrap_or_else(|e| panic!("{}: {e}", regress_dir().display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for p in entries.iter().filter(|p| p.extension().is_some_and(|e| e == "script")) {
        let text = std::fs::read_to_string(p).expect("read regression script");
        let script = Script::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        n += 1;
        if let Some(d) = lasting_difference(&script, &cfg) {
            bad.push(format!("{}:\n{d}", p.display()));
        }
    }
    eprintln!("regression scripts: {n} replayed, {} different", bad.len());
    assert!(n > 0, "no regression script found in {}", regress_dir().display());
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
