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
//!   compared up to its first call that places a mapping outside the arena and up to its first
//!   `mlockall(MCL_FUTURE)` (the cut of `vmspace_replay::diff`, whose docs say why). On a host whose
//!   `vm.max_map_count` is above `VMSPACE_DIFF_LIMIT_FILL_MAX` (default 300,000), where filling a process per
//!   script would take minutes, the test lowers the sysctl to the kernel's default 65,530 (or to that variable,
//!   if lower) for the batches and restores it after; that needs root, and the test fails without it.
//! * `regression_scripts_match_the_kernel`: every `scripts/regress/*.script` (each a difference once found
//!   and since fixed) must match.
//!
//! Every script goes through `vmspace_replay::diff`, the pipeline `vmspace diff` runs too (its module docs
//! explain each step): the engine with the host's configuration (`MmConfig::host`), as the semantics contract
//! requires, and its invariants checked after every call; a difference counted only if it shows in each of
//! five kernel runs (`vmspace_replay::diff::REPEATS`), since the kernel's page batches are per CPU and another
//! task on the runner's CPU can drain them early; minimisation under the same rule. A failure of the kernel
//! runner fails the test too.
//!
//! Generator families (`vmspace_script::Families`): the gate runs every family except those listed in
//! [`GATE_FAMILIES_OFF`], each with the reason it is off; every batch prints the list. `VMSPACE_DIFF_WITHOUT`
//! (comma-separated family names, or `none`) replaces the list for one run.

use std::path::{Path, PathBuf};
use std::time::Instant;

use vmspace_mm::MmConfig;
use vmspace_replay::diff::{self, DiffOptions};
use vmspace_script::{Families, GenConfig, Script, generate};

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

/// Compares `script` (`vmspace_replay::diff`: the engine validated after every call, the headroom cut, the
/// repeat rule); `Some(difference)` when it differs or the kernel runner fails on it, with the calls compared
/// and the ENOMEM results among them.
fn difference(script: &Script, opts: &DiffOptions) -> (Option<String>, (u64, u64)) {
    match diff::diff(script, opts, &mut |_, _| {}) {
        Ok(c) => {
            if c.difference_did_not_repeat() {
                say(&format!(
                    "differential: a difference did not repeat (kernel run {} of {} agreed)",
                    c.kernel_runs, opts.repeats
                ));
            }
            (c.mismatch.map(|m| m.to_string()), (c.calls, c.enomem))
        }
        Err(e) => (Some(format!("kernel runner failed: {e}")), (0, 0)),
    }
}

fn run_batch(first_seed: u64, count: u64, gen_cfg: GenConfig, headroom: Option<u64>) {
    let t0 = Instant::now();
    let threads = 2u64;
    let opts = DiffOptions { headroom, ..DiffOptions::default() };
    let mut tally = (0u64, 0u64);
    let failures: Vec<(u64, String, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut tally = (0u64, 0u64);
                    let mut out = Vec::new();
                    let mut seed = first_seed + t;
                    while seed < first_seed + count {
                        let script = generate(seed, &gen_cfg);
                        let (d, (calls, enomem)) = difference(&script, &opts);
                        tally = (tally.0 + calls, tally.1 + enomem);
                        if let Some(d) = d {
                            let min = diff::minimise(&script, &opts, &mut |_, _| {});
                            let md = difference(&min, &opts).0.unwrap_or(d);
                            out.push((seed, min.to_text(), md));
                            if out.len() >= 3 {
                                break;
                            }
                        }
                        seed += threads;
                    }
                    (out, tally)
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
        diff::engine_config(headroom).max_map_count,
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
    run_batch(seed, count, GenConfig { calls, grid_pages, families, ..GenConfig::default() }, None);
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
        run_batch(seed, count, GenConfig { calls, fork, families, ..GenConfig::default() }, Some(headroom));
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
        None,
    );
}

fn regress_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/regress")
}

#[test]
fn regression_scripts_match_the_kernel() {
    let _sysctl = SYSCTL.read().unwrap_or_else(|e| e.into_inner());
    let opts = DiffOptions::default();
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
        if let Some(d) = difference(&script, &opts).0 {
            bad.push(format!("{}:\n{d}", p.display()));
        }
    }
    eprintln!("regression scripts: {n} replayed, {} different", bad.len());
    assert!(n > 0, "no regression script found in {}", regress_dir().display());
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
