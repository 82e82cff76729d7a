//! The engine against the live kernel: one op script run on both sides and compared, and a differing script
//! minimised. `vmspace diff` (`crates/cli/src/replay.rs`) and the differential gate
//! (`crates/cli/tests/differential.rs`) both run this pipeline, so a verdict of the one is a verdict of the
//! other.
//!
//! [`diff`] takes a script and [`DiffOptions`] and returns a [`Comparison`]: whether the two sides differ (the
//! first difference, [`Mismatch`]), how many call results were compared and how many of them were `ENOMEM`,
//! how many kernel runs were made and how many of them differed, and where the script was cut ([`Cut`]). Its
//! steps, each with the reason it exists:
//!
//! 1. **The engine** runs the script under the host's configuration ([`engine_config`]: `MmConfig::host`,
//!    as the semantics contract requires for a comparison with the live kernel: `mmap_min_addr`,
//!    `max_map_count`, anonymous VMA names, ...), with the CPU's side of a refused string store measured on
//!    this machine (`vmspace_linux::uaccess::refused_string_store_sets_accessed`, which `fill` depends on),
//!    and with [`DiffOptions::validate`] every invariant checked after every call ([`vmspace_mm::Mm::validate`]). A panic
//!    of the engine (an invariant broken, or any other) is caught and is the comparison's mismatch
//!    ([`Mismatch::EngineFailed`]): the engine must never panic, so it is a difference like any other, and it
//!    is minimised like one. The process's panic hook still prints the panic where it happens.
//! 2. **The kernel** runs the script in a child process (`vmspace_linux::replay`), with
//!    [`DiffOptions::headroom`] first filled with VMAs until only that many more fit under the real
//!    `vm.max_map_count`; the engine then runs with `max_map_count` = the headroom, so both sides meet the
//!    limit at the same call. A runner error (a script the runner's guard refuses, a failed set-up, a child
//!    that died, an interruption) is the caller's error, never a verdict.
//! 3. **The cut** (headroom runs only). Near the limit, a mapping placed outside the arena (an occupied hint, a
//!    moving `mremap`) lands among the runner's own mappings and may merge with one of them, which the engine
//!    cannot see: from that call on the two processes' VMA counts may differ. Likewise after `mlockall` with
//!    `MCL_FUTURE`: a VMA the runner itself makes from then on (a heap extension for its own allocations) is
//!    locked and no longer merges with its unlocked neighbours, so it costs the runner a VMA the engine does
//!    not spend. The script is cut before the first call that returned an address outside the arena on either
//!    side ([`first_call_leaving_arena`]; `brk` excepted: its result is the break, not a placement) and after
//!    the first `mlockall(MCL_FUTURE)` ([`after_future_lock`]), whichever comes first, and both sides run the
//!    shorter script again (a cut keeps strictly fewer lines, so this ends). Without a headroom the runner has
//!    room to spare and nothing is cut.
//! 4. **Canonicalisation** is the script driver's (`vmspace_script::run_in`), the same on both sides: maps,
//!    smaps headers and PROCMAP_QUERY answers show a script file as `fd=NAME`, and a shmem or hugetlbfs
//!    object (whose inode the kernel numbers from a global counter and the engine from its own) by its order
//!    of first appearance in the block, named parts of a shmem object included (`vmspace_script::output`).
//!    The comparison ([`vmspace_script::compare`]) then takes two addresses that both lie outside the arena
//!    as equal. So the two outputs compare line for line, with nothing to renumber here.
//! 5. **The repeats.** A difference counts only if it shows in each of [`DiffOptions::repeats`] kernel runs
//!    (the first run's difference is reported). Some of the kernel's `smaps` counters depend on the CPU's page
//!    batches (`lru_add`, `lru_lazyfree`: module docs of `vmspace_linux::replay`), which are per CPU, not per
//!    process: another task on the runner's CPU that fills a batch drains the runner's pages with its own,
//!    earlier than the script's calls would, so a run on a busy machine can differ from the undisturbed
//!    kernel. The engine is deterministic: if any kernel run agrees with it, the engine does what the kernel
//!    does. A script that agrees at once costs one kernel run; one that differs, up to `repeats`.
//!
//! [`minimise`] shrinks a differing script by delta debugging (`vmspace_script::minimise`) under the
//! predicate "[`diff`] finds a difference", repeats included: a candidate kept because of one disturbed
//! kernel run would end the search on a script that does not reproduce. A candidate on which the kernel
//! runner fails (its guard refuses a shortened script) is not a difference of the engine and is not kept;
//! after an interruption (`vmspace_linux::child::interrupted`) no candidate is kept, so the search ends
//! quickly.
//!
//! Both sides report their progress through one callback (`on_calls(side, calls)`): the engine after every
//! call, the kernel about every 250 ms with the runner's count.

use std::panic::{AssertUnwindSafe, catch_unwind};

use vmspace_linux::replay::{ReplayError, ReplayOptions, replay_kernel_observed};
use vmspace_mm::MmConfig;
use vmspace_script::{Arena, Difference, Entry, Errno, Observed, Op, Output, Script, Value, compare, run_in};

use crate::EngineTarget;

/// The kernel runs a difference must show in before it counts, unless the caller says otherwise (module
/// docs, step 5).
pub const REPEATS: u32 = 5;

/// How a script is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiffOptions {
    /// The address window the script uses; maps lines and placements outside it are not compared.
    pub arena: Arena,
    /// Run this many VMAs short of `vm.max_map_count` (the kernel child filled with VMAs first, the engine
    /// with `max_map_count` = this); the script is then cut where the runner's own mappings could interfere
    /// (module docs, step 3). `None`: the host's limit, nothing cut.
    pub headroom: Option<u64>,
    /// Kernel runs a difference must show in (at least 1; 0 counts as 1).
    pub repeats: u32,
    /// Check the engine's invariants ([`vmspace_mm::Mm::validate`]) after every call.
    pub validate: bool,
}

impl Default for DiffOptions {
    /// The differential gate's settings: the default arena, no headroom, [`REPEATS`] runs, validation on.
    fn default() -> Self {
        DiffOptions { arena: Arena::default(), headroom: None, repeats: REPEATS, validate: true }
    }
}

/// Which side a progress report is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The engine.
    Engine,
    /// The live kernel.
    Kernel,
}

/// Why a headroom run compared only the start of a script (module docs, step 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CutReason {
    /// The call at the cut line returned an address outside the arena (on either side).
    LeftArena,
    /// The line before the cut is the first `mlockall` with `MCL_FUTURE`.
    FutureLock,
}

/// Where a script was cut: only its lines before `line` were compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cut {
    /// The first script line (1-based) not compared.
    pub line: usize,
    /// Why.
    pub reason: CutReason,
}

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.reason {
            CutReason::LeftArena => write!(
                f,
                "compared up to line {}: line {} placed a mapping outside the arena, among the runner's own",
                self.line - 1,
                self.line
            ),
            CutReason::FutureLock => write!(
                f,
                "compared up to line {}: after mlockall(MCL_FUTURE) the runner's own VMAs stop merging",
                self.line - 1
            ),
        }
    }
}

/// How the two sides differ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// The canonical outputs differ: the first difference, with its context.
    Output(Difference),
    /// The engine panicked (with validation: an invariant broke after a call); the panic's message.
    EngineFailed(String),
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::Output(d) => d.fmt(f),
            Mismatch::EngineFailed(m) => write!(f, "the engine panicked: {m}"),
        }
    }
}

/// What [`diff`] compared and found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comparison {
    /// The first kernel run's difference, if every kernel run differed; `None` when the sides agree.
    pub mismatch: Option<Mismatch>,
    /// Call results compared (the deciding run's: the agreeing one, or the first differing one).
    pub calls: u64,
    /// How many of those were `ENOMEM`.
    pub enomem: u64,
    /// Kernel runs made (1 unless the first differed; 0 if the engine failed first).
    pub kernel_runs: u32,
    /// Of those, how many differed from the engine (all of them for a lasting difference; all but the last
    /// for a difference that did not repeat).
    pub differing_runs: u32,
    /// Where a headroom run cut the script (the deciding run's cut).
    pub cut: Option<Cut>,
}

impl Comparison {
    /// Whether the sides differ.
    pub fn differs(&self) -> bool {
        self.mismatch.is_some()
    }

    /// Whether a kernel run differed but a later one agreed (the verdict is agreement).
    pub fn difference_did_not_repeat(&self) -> bool {
        self.mismatch.is_none() && self.differing_runs > 0
    }
}

/// The engine's configuration for a comparison with this host's kernel: [`MmConfig::host`], the CPU's side
/// of a refused string store as measured here, and `max_map_count` = `headroom` when given.
pub fn engine_config(headroom: Option<u64>) -> MmConfig {
    let mut cfg = MmConfig::host();
    if let Some(a) = vmspace_linux::uaccess::refused_string_store_sets_accessed() {
        cfg.refused_string_store_accessed = a;
    }
    if let Some(h) = headroom {
        cfg.max_map_count = h;
    }
    cfg
}

/// Runs `script` on the engine ([`engine_config`], validating after every call with `opts.validate`),
/// calling `on_calls` after every call with the count so far. A panic of the engine is caught and returned
/// as its message.
pub fn run_engine(
    script: &Script,
    opts: &DiffOptions,
    on_calls: &mut dyn FnMut(u64),
) -> Result<Output, String> {
    let cfg = engine_config(opts.headroom);
    let target = if opts.validate { EngineTarget::validating(cfg) } else { EngineTarget::new(cfg) };
    // AssertUnwindSafe: the target is dropped right after a panic and nothing of it is looked at again.
    catch_unwind(AssertUnwindSafe(|| {
        let mut t = Observed::new(target, &mut *on_calls);
        run_in(script, &mut t, opts.arena)
    }))
    .map_err(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".to_string())
    })
}

/// Runs `script` on the live kernel (`vmspace_linux::replay`, with `opts.headroom`), calling `on_calls` with
/// the runner's call count about every 250 ms.
pub fn run_kernel(
    script: &Script,
    opts: &DiffOptions,
    on_calls: &mut dyn FnMut(u64),
) -> Result<Output, ReplayError> {
    replay_kernel_observed(
        script,
        ReplayOptions { arena: opts.arena, map_count_headroom: opts.headroom },
        on_calls,
    )
}

/// Runs `script` on both sides and compares them (module docs): [`REPEATS`] or `opts.repeats` kernel runs
/// for a difference to count. `on_calls(side, calls)` reports progress. Errors are the kernel runner's; an
/// interruption (`vmspace_linux::child::interrupted`) between runs is [`ReplayError::Interrupted`].
pub fn diff(
    script: &Script,
    opts: &DiffOptions,
    on_calls: &mut dyn FnMut(Side, u64),
) -> Result<Comparison, ReplayError> {
    diff_with(script, opts, on_calls, &mut |s, o, cb| run_kernel(s, o, cb))
}

/// Shrinks a script that differs (delta debugging) while [`diff`] still finds a difference, repeats
/// included (module docs); returns the smallest script found (`script` itself if no line can go).
pub fn minimise(script: &Script, opts: &DiffOptions, on_calls: &mut dyn FnMut(Side, u64)) -> Script {
    minimise_with(script, opts, on_calls, &mut |s, o, cb| run_kernel(s, o, cb))
}

/// How the kernel side runs: [`run_kernel`], or a stand-in in the unit tests.
type KernelRun<'a> =
    dyn FnMut(&Script, &DiffOptions, &mut dyn FnMut(u64)) -> Result<Output, ReplayError> + 'a;

fn minimise_with(
    script: &Script,
    opts: &DiffOptions,
    on_calls: &mut dyn FnMut(Side, u64),
    kernel: &mut KernelRun<'_>,
) -> Script {
    vmspace_script::minimise(script, |s| {
        !vmspace_linux::child::interrupted()
            && diff_with(s, opts, on_calls, kernel).is_ok_and(|c| c.differs())
    })
}

fn diff_with(
    script: &Script,
    opts: &DiffOptions,
    on_calls: &mut dyn FnMut(Side, u64),
    kernel: &mut KernelRun<'_>,
) -> Result<Comparison, ReplayError> {
    let (compared, first) = match compare_once(script, opts, on_calls, kernel)? {
        Once::Agree(c) => return Ok(c.verdict(None, 1, 0)),
        Once::EngineFailed(m) => {
            let mismatch = Some(Mismatch::EngineFailed(m));
            return Ok(Comparison {
                mismatch,
                calls: 0,
                enomem: 0,
                kernel_runs: 0,
                differing_runs: 0,
                cut: None,
            });
        }
        Once::Differ(c, d) => (c, d),
    };
    let repeats = opts.repeats.max(1);
    for run in 2..=repeats {
        match compare_once(script, opts, on_calls, kernel)? {
            Once::Agree(c) => return Ok(c.verdict(None, run, run - 1)),
            // The engine is deterministic: having run once, it runs again the same way.
            Once::EngineFailed(m) => {
                return Ok(compared.verdict(Some(Mismatch::EngineFailed(m)), run, run - 1));
            }
            Once::Differ(..) => {}
        }
    }
    Ok(compared.verdict(Some(Mismatch::Output(first)), repeats, repeats))
}

/// What one round of both sides compared (before the repeat rule).
struct Compared {
    calls: u64,
    enomem: u64,
    cut: Option<Cut>,
}

impl Compared {
    fn verdict(self, mismatch: Option<Mismatch>, kernel_runs: u32, differing_runs: u32) -> Comparison {
        Comparison {
            mismatch,
            calls: self.calls,
            enomem: self.enomem,
            kernel_runs,
            differing_runs,
            cut: self.cut,
        }
    }
}

/// One kernel run's verdict.
enum Once {
    Agree(Compared),
    Differ(Compared, Difference),
    EngineFailed(String),
}

/// One kernel run against the engine, the headroom cut applied (module docs, steps 1 to 4).
fn compare_once(
    script: &Script,
    opts: &DiffOptions,
    on_calls: &mut dyn FnMut(Side, u64),
    kernel: &mut KernelRun<'_>,
) -> Result<Once, ReplayError> {
    let mut script = std::borrow::Cow::Borrowed(script);
    let mut cut = None;
    // Each round runs both sides; a headroom run may cut the script shorter, which ends after a bounded number
    // of rounds: every cut keeps strictly fewer lines.
    let (e, k) = loop {
        let e = match run_engine(&script, opts, &mut |n| on_calls(Side::Engine, n)) {
            Ok(e) => e,
            Err(m) => return Ok(Once::EngineFailed(m)),
        };
        if vmspace_linux::child::interrupted() {
            return Err(ReplayError::Interrupted);
        }
        let k = kernel(&script, opts, &mut |n| on_calls(Side::Kernel, n))?;
        let Some(c) = opts.headroom.and_then(|_| cut_point(&script, &e, &k, opts.arena)) else {
            break (e, k);
        };
        let kept = truncate(&script, c.line);
        if kept.lines.len() == script.lines.len() {
            // Nothing after the cut (the script ends with its mlockall): the run compares as it is.
            break (e, k);
        }
        cut = Some(c);
        if kept.lines.is_empty() {
            return Ok(Once::Agree(Compared { calls: 0, enomem: 0, cut }));
        }
        script = std::borrow::Cow::Owned(kept);
    };
    let (calls, enomem) = tally(&k);
    let compared = Compared { calls, enomem, cut };
    Ok(match compare(&e, &k, opts.arena, ("engine", "kernel")) {
        None => Once::Agree(compared),
        Some(d) => Once::Differ(compared, d),
    })
}

/// Call results in an output, and how many of them are `ENOMEM`.
pub fn tally(out: &Output) -> (u64, u64) {
    let calls = out.entries.iter().filter(|x| matches!(x, Entry::Call { .. })).count() as u64;
    let enomem = out
        .entries
        .iter()
        .filter(|x| matches!(x, Entry::Call { value: Value::Err(Errno::ENOMEM), .. }))
        .count() as u64;
    (calls, enomem)
}

/// Where a headroom run must cut `script` given both sides' outputs (module docs, step 3): the earliest of
/// the first call leaving the arena on either side and the line after the first `mlockall(MCL_FUTURE)`.
pub fn cut_point(script: &Script, engine: &Output, kernel: &Output, arena: Arena) -> Option<Cut> {
    let left = [first_call_leaving_arena(engine, arena), first_call_leaving_arena(kernel, arena)]
        .into_iter()
        .flatten()
        .min()
        .map(|line| Cut { line, reason: CutReason::LeftArena });
    let locked = after_future_lock(script).map(|line| Cut { line, reason: CutReason::FutureLock });
    [left, locked].into_iter().flatten().min_by_key(|c| c.line)
}

/// The line after the first `mlockall` with `MCL_FUTURE` (2).
pub fn after_future_lock(script: &Script) -> Option<usize> {
    script.lines.iter().find(|l| matches!(l.op, Op::Mlockall { flags } if flags & 2 != 0)).map(|l| l.line + 1)
}

/// The script line of the first call that returned an address outside `arena` (`brk` excepted: it returns
/// the break, wherever the heap is).
pub fn first_call_leaving_arena(out: &Output, arena: Arena) -> Option<usize> {
    out.entries.iter().find_map(|e| match e {
        Entry::Call { line, value: Value::Addr(a), op } if op != "brk" && !arena.contains(*a) => Some(*line),
        _ => None,
    })
}

/// The lines of `script` before line `line` (numbers kept, so outputs still name the original lines).
fn truncate(script: &Script, line: usize) -> Script {
    Script { lines: script.lines.iter().filter(|l| l.line < line).cloned().collect() }
}

#[cfg(test)]
mod tests;
