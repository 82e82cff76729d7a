//! The pipeline without the live kernel: the cut points, the repeat rule and minimisation's predicate, with the
//! engine itself standing in for the kernel (it agrees with itself), altered where a test needs a difference.

use super::*;

fn script(text: &str) -> Script {
    Script::parse(text).unwrap()
}

/// A mapping at the arena's base, a second one, and an unmapping of part of the first.
const THREE: &str = "mmap 0x200000000000 0x3000 rw- private|anon|fixed\n\
                     mmap 0x200000010000 0x1000 r-- private|anon|fixed\n\
                     munmap 0x200000001000 0x1000\n";

/// The engine's output for `s`, as a stand-in kernel's.
fn engine_output(s: &Script, opts: &DiffOptions) -> Output {
    run_engine(s, &DiffOptions { validate: false, ..*opts }, &mut |_| {}).unwrap()
}

/// `out` with the result of the call on script line `line` replaced by `value`.
fn with_value(mut out: Output, line: usize, value: Value) -> Output {
    for e in &mut out.entries {
        if let Entry::Call { line: l, value: v, .. } = e
            && *l == line
        {
            *v = value;
        }
    }
    out
}

/// An address outside the default arena.
const OUTSIDE: u64 = 0x7f00_0000_0000;

#[test]
fn the_cut_comes_after_the_first_future_lock() {
    let s = script(
        "mlockall current\nmmap 0x200000000000 0x1000 rw- private|anon|fixed\nmlockall current|future\nmlockall future\nmunlockall\n",
    );
    assert_eq!(after_future_lock(&s), Some(4));
    assert_eq!(after_future_lock(&script(THREE)), None);
}

#[test]
fn the_cut_comes_at_the_first_placement_outside_the_arena_but_not_at_brk() {
    let arena = Arena::default();
    let mut out = Output::default();
    out.entries.push(Entry::Call { line: 1, op: "brk".into(), value: Value::Addr(OUTSIDE) });
    out.entries.push(Entry::Call { line: 2, op: "mmap".into(), value: Value::Addr(arena.base) });
    assert_eq!(first_call_leaving_arena(&out, arena), None);
    out.entries.push(Entry::Call { line: 3, op: "mremap".into(), value: Value::Addr(OUTSIDE) });
    out.entries.push(Entry::Call { line: 4, op: "mmap".into(), value: Value::Addr(OUTSIDE) });
    assert_eq!(first_call_leaving_arena(&out, arena), Some(3));
    // Another arena: line 3's address is inside it, line 2's is not.
    assert_eq!(first_call_leaving_arena(&out, Arena { base: OUTSIDE, ..arena }), Some(2));
}

#[test]
fn the_cut_point_is_the_earliest_of_both_sides_and_the_future_lock() {
    let s = script(&format!("{THREE}mlockall future\nmunlockall\n"));
    let opts = DiffOptions::default();
    let e = engine_output(&s, &opts);
    assert_eq!(cut_point(&s, &e, &e, opts.arena), Some(Cut { line: 5, reason: CutReason::FutureLock }));
    let k = with_value(e.clone(), 2, Value::Addr(OUTSIDE));
    assert_eq!(cut_point(&s, &e, &k, opts.arena), Some(Cut { line: 2, reason: CutReason::LeftArena }));
    assert_eq!(cut_point(&s, &k, &e, opts.arena), Some(Cut { line: 2, reason: CutReason::LeftArena }));
}

#[test]
fn agreeing_sides_cost_one_kernel_run_and_count_their_calls() {
    let s = script(
        "mmap 0x200000000000 0x1000 rw- private|anon|fixed\nmunmap 0x1000 0x1000\nmmap 0 0x1000 rw- private|anon|fixed\n",
    );
    let opts = DiffOptions::default();
    let mut runs = 0;
    let c = diff_with(&s, &opts, &mut |_, _| {}, &mut |s, o, _| {
        runs += 1;
        Ok(engine_output(s, o))
    })
    .unwrap();
    assert_eq!(runs, 1);
    assert!(!c.differs() && !c.difference_did_not_repeat());
    assert_eq!((c.calls, c.enomem, c.kernel_runs, c.differing_runs, c.cut), (3, 0, 1, 0, None));
}

#[test]
fn enomem_results_are_counted() {
    // More than the address space: ENOMEM.
    let s = script("mmap 0 0x7ffffffff0000000 rw- private|anon\n");
    let c = diff_with(&s, &DiffOptions::default(), &mut |_, _| {}, &mut |s, o, _| Ok(engine_output(s, o)))
        .unwrap();
    assert_eq!((c.calls, c.enomem), (1, 1), "{c:?}");
}

/// A stand-in kernel whose first `differing` runs answer line 3 with EINVAL.
fn flaky_kernel(
    differing: u32,
) -> impl FnMut(&Script, &DiffOptions, &mut dyn FnMut(u64)) -> Result<Output, ReplayError> {
    let mut runs = 0;
    move |s, o, _| {
        runs += 1;
        let out = engine_output(s, o);
        Ok(if runs <= differing { with_value(out, 3, Value::Err(Errno::EINVAL)) } else { out })
    }
}

#[test]
fn a_difference_that_does_not_repeat_is_agreement() {
    let s = script(THREE);
    let c = diff_with(&s, &DiffOptions::default(), &mut |_, _| {}, &mut flaky_kernel(2)).unwrap();
    assert!(!c.differs());
    assert!(c.difference_did_not_repeat());
    assert_eq!((c.kernel_runs, c.differing_runs), (3, 2));
    assert_eq!(c.calls, 3);
}

#[test]
fn a_difference_in_every_run_counts_and_reports_the_first() {
    let s = script(THREE);
    for repeats in [1, 2, REPEATS] {
        let opts = DiffOptions { repeats, ..DiffOptions::default() };
        let mut kernel = flaky_kernel(u32::MAX);
        let c = diff_with(&s, &opts, &mut |_, _| {}, &mut kernel).unwrap();
        assert_eq!((c.kernel_runs, c.differing_runs), (repeats, repeats));
        let Some(Mismatch::Output(d)) = &c.mismatch else { panic!("{c:?}") };
        assert_eq!(d.left.as_deref(), Some("L3 munmap = 0"));
        assert_eq!(d.right.as_deref(), Some("L3 munmap = -EINVAL"));
        assert!(c.mismatch.as_ref().unwrap().to_string().contains("- engine: L3 munmap = 0"));
    }
    // Zero repeats is one.
    let opts = DiffOptions { repeats: 0, ..DiffOptions::default() };
    let c = diff_with(&s, &opts, &mut |_, _| {}, &mut flaky_kernel(1)).unwrap();
    assert_eq!((c.differs(), c.kernel_runs), (true, 1));
}

#[test]
fn a_headroom_run_compares_up_to_the_first_call_leaving_the_arena() {
    let s = script(THREE);
    // The kernel places line 2 outside the arena (a refused hint lands among the runner's mappings) and then
    // answers line 3 differently: after the cut, nothing of that is compared.
    let mut kernel = |s: &Script, o: &DiffOptions, _: &mut dyn FnMut(u64)| {
        let out = with_value(engine_output(s, o), 2, Value::Addr(OUTSIDE));
        Ok(with_value(out, 3, Value::Err(Errno::ENOMEM)))
    };
    let headroom = DiffOptions { headroom: Some(6), ..DiffOptions::default() };
    let c = diff_with(&s, &headroom, &mut |_, _| {}, &mut kernel).unwrap();
    assert!(!c.differs(), "{c:?}");
    assert_eq!(c.cut, Some(Cut { line: 2, reason: CutReason::LeftArena }));
    assert_eq!((c.calls, c.enomem, c.kernel_runs), (1, 0, 1));
    assert_eq!(
        c.cut.unwrap().to_string(),
        "compared up to line 1: line 2 placed a mapping outside the arena, among the runner's own"
    );
    // Without a headroom the same kernel differs at line 2.
    let c = diff_with(&s, &DiffOptions::default(), &mut |_, _| {}, &mut kernel).unwrap();
    let Some(Mismatch::Output(d)) = &c.mismatch else { panic!("{c:?}") };
    assert_eq!(d.right.as_deref(), Some(&*format!("L2 mmap = {OUTSIDE:#x}")));
    assert_eq!(c.cut, None);
}

#[test]
fn a_headroom_run_whose_first_call_leaves_the_arena_compares_nothing() {
    let s = script(THREE);
    let mut kernel = |s: &Script, o: &DiffOptions, _: &mut dyn FnMut(u64)| {
        Ok(with_value(engine_output(s, o), 1, Value::Addr(OUTSIDE)))
    };
    let opts = DiffOptions { headroom: Some(1), ..DiffOptions::default() };
    let c = diff_with(&s, &opts, &mut |_, _| {}, &mut kernel).unwrap();
    assert!(!c.differs());
    assert_eq!((c.calls, c.cut.map(|c| c.line)), (0, Some(1)));
}

#[test]
fn a_headroom_run_compares_up_to_the_future_lock() {
    let s = script(&format!("mlockall future\n{THREE}"));
    // Line 4 (the munmap) differs after the lock: compared only with the host's limit.
    let mut kernel = |s: &Script, o: &DiffOptions, _: &mut dyn FnMut(u64)| {
        Ok(with_value(engine_output(s, o), 4, Value::Err(Errno::ENOMEM)))
    };
    let headroom = DiffOptions { headroom: Some(3), ..DiffOptions::default() };
    let c = diff_with(&s, &headroom, &mut |_, _| {}, &mut kernel).unwrap();
    assert!(!c.differs(), "{c:?}");
    assert_eq!(c.cut, Some(Cut { line: 2, reason: CutReason::FutureLock }));
    assert_eq!(c.calls, 1);
    assert!(diff_with(&s, &DiffOptions::default(), &mut |_, _| {}, &mut kernel).unwrap().differs());
    // A script that ends with its lock is compared whole.
    let s = script("mmap 0x200000000000 0x1000 rw- private|anon|fixed\nmlockall future\n");
    let c = diff_with(&s, &headroom, &mut |_, _| {}, &mut |s, o, _| Ok(engine_output(s, o))).unwrap();
    assert_eq!((c.differs(), c.calls, c.cut), (false, 2, None));
}

#[test]
fn kernel_errors_are_errors_not_verdicts() {
    let s = script(THREE);
    let r = diff_with(&s, &DiffOptions::default(), &mut |_, _| {}, &mut |_, _, _| {
        Err(ReplayError::Refused("test".into()))
    });
    assert!(matches!(r, Err(ReplayError::Refused(_))));
}

#[test]
fn progress_is_reported_from_both_sides() {
    let s = script(THREE);
    let mut seen = Vec::new();
    diff_with(&s, &DiffOptions::default(), &mut |side, n| seen.push((side, n)), &mut |s, o, cb| {
        cb(7);
        Ok(engine_output(s, o))
    })
    .unwrap();
    // The engine's three calls and its closing maps read; then the kernel's report.
    assert!(seen.starts_with(&[(Side::Engine, 1), (Side::Engine, 2), (Side::Engine, 3)]), "{seen:?}");
    assert_eq!(seen.last(), Some(&(Side::Kernel, 7)));
}

#[test]
fn minimisation_keeps_the_lines_the_difference_needs_and_repeats_each_candidate() {
    // The stand-in kernel answers every munmap with EINVAL (a lasting difference) and, in every third run,
    // the mprotect too (a passing disturbance). With three runs per candidate no candidate without a munmap
    // differs in all of them, so none is kept for the disturbance.
    let s = script(&format!("{THREE}mprotect 0x200000000000 0x1000 r--\nmunmap 0x200000010000 0x1000\n"));
    let mut runs = 0u32;
    let mut kernel = |s: &Script, o: &DiffOptions, _: &mut dyn FnMut(u64)| {
        runs += 1;
        let mut out = engine_output(s, o);
        for l in &s.lines {
            let disturbed = runs.is_multiple_of(3) && matches!(l.op, Op::Mprotect { .. });
            if disturbed || matches!(l.op, Op::Munmap { .. }) {
                out = with_value(out, l.line, Value::Err(Errno::EINVAL));
            }
        }
        Ok(out)
    };
    let opts = DiffOptions { repeats: 3, ..DiffOptions::default() };
    let small = minimise_with(&s, &opts, &mut |_, _| {}, &mut kernel);
    assert_eq!(small.lines.len(), 1, "{}", small.to_text());
    assert!(matches!(small.lines[0].op, Op::Munmap { .. }), "{}", small.to_text());
}

#[test]
fn a_panic_of_the_engine_is_a_mismatch_without_a_kernel_run() {
    // A panic on the engine's side of the run (here from its progress report, standing in for a broken
    // invariant under validation) is caught, reported with its message, and needs no kernel run.
    let s = script(THREE);
    let mut panicking = |side: Side, n: u64| {
        if side == Side::Engine && n == 2 {
            panic!("engine invariant broken after `mmap`: a test");
        }
    };
    let mut kernel_runs = 0;
    let c = diff_with(&s, &DiffOptions::default(), &mut panicking, &mut |s, o, _| {
        kernel_runs += 1;
        Ok(engine_output(s, o))
    })
    .unwrap();
    assert_eq!(kernel_runs, 0);
    assert_eq!(
        c.mismatch,
        Some(Mismatch::EngineFailed("engine invariant broken after `mmap`: a test".into()))
    );
    assert_eq!(
        c.mismatch.as_ref().unwrap().to_string(),
        "the engine panicked: engine invariant broken after `mmap`: a test"
    );
    // A message that is not a string literal is kept too.
    let r = run_engine(&s, &DiffOptions::default(), &mut |n| assert!(n < 3, "call {n}"));
    assert_eq!(r, Err("call 3".to_string()));
}
