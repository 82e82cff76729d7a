//! The terminal text of a real report (the run behind the README's figures, `results/report-2026-11-28.json`)
//! fits 100 columns, and `--wide`'s text keeps every table whole.

use vmspace_report::terminal::{WIDTH, widest};
use vmspace_results::report::ReportSet;

fn presentation() -> vmspace_report::run::Presentation {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../results/report-2026-11-28.json");
    let set: ReportSet = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    vmspace_report::run::present(&set)
}

#[test]
fn the_default_text_fits_100_columns() {
    let p = presentation();
    let text = vmspace_report::run::text(&p);
    let over: Vec<&str> = text.lines().filter(|l| l.chars().count() > WIDTH).collect();
    assert!(over.is_empty(), "{} lines over {WIDTH} columns:\n{}", over.len(), over.join("\n"));
    // Every section and every target is still there, and each section's verdict is one line.
    for s in &p.sections {
        assert!(text.contains(&format!("== {} ==", s.title)), "{}", s.title);
    }
    let verdicts: Vec<&str> = text.lines().filter(|l| l.starts_with("verdict: ")).collect();
    assert_eq!(verdicts.len(), p.sections.len() + 1, "{verdicts:#?}");
    let after_verdicts = text
        .lines()
        .zip(text.lines().skip(1))
        .filter(|(a, b)| a.starts_with("verdict: ") && b.starts_with("         "));
    assert_eq!(after_verdicts.count(), 0, "a section verdict ran onto a second line:\n{text}");
    // One entry per target in the summary (continuation lines are indented).
    let summary = text.split("== Summary ==").nth(1).unwrap();
    let entries = summary.lines().filter(|l| {
        ["MET ", "MISSED ", "undecided ", "not measurable ", "n/a "].iter().any(|s| l.starts_with(s))
    });
    assert_eq!(entries.count(), p.targets.len(), "{summary}");
}

#[test]
fn the_wide_text_keeps_whole_tables() {
    let p = presentation();
    let wide = vmspace_report::run::text_wide(&p);
    assert!(widest(&wide) > WIDTH);
    // The range of the engine's mmap+munmap rate, which the narrow text leaves out.
    assert!(wide.contains("2,041,749 [2,011,318-2,088,710]"));
    assert!(!vmspace_report::run::text(&p).contains("2,041,749 [2,011,318-2,088,710]"));
}
