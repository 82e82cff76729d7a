//! The report on a terminal: every line within a width (100 columns by default), the full tables only when
//! asked (`vmspace report --wide`); the JSON and the HTML page always hold everything.
//!
//! A table that does not fit is made narrower in steps, each taken only if the one before was not enough:
//! 1. cells keep their central figure: `X [a-b]` becomes `X`, `a/b/c` (min/median/max) becomes `b`, and the
//!    long names of the engine's sides become short ones (`engine, readers under per-VMA locks`: `engine
//!    per-VMA`);
//! 2. numeric columns that are not ratios are left out, widest first (a ratio or percentage column is what a
//!    verdict rests on);
//! 3. then the others, right to left.
//!
//! The key columns that name a row (up to the `side` column; else the first and a count right after it, a
//! tree's `n`) always stay.
//!
//! The table's caption says what was left out and that `--wide` (or the page) shows it. Captions, notes and
//! verdicts are wrapped at the width; a section's verdict is one short sentence: its targets' tally when it has
//! targets, else the first clause of its verdict (the page has the whole reading).

use crate::model::{Section, Table};
use crate::run::Presentation;
use crate::targets::{Status, TargetResult};

/// The default width of the terminal text, in columns.
pub const WIDTH: usize = 100;

/// Long side names and their short forms on a narrow terminal (and in a figure's outside legend).
pub const SHORT_NAMES: [(&str, &str); 8] = [
    ("engine, readers under per-VMA locks", "engine per-VMA"),
    ("engine, readers under mmap_lock", "engine mmap_lock"),
    ("engine, lockless readers", "engine lockless"),
    ("engine, per-VMA locks", "engine per-VMA"),
    ("engine, mmap_lock only", "engine mmap_lock"),
    ("engine, tree copy (dup)", "engine dup"),
    ("engine, re-insertion", "engine re-insert"),
    ("engine, lockless", "engine lockless"),
];

/// The width of a line in columns (characters; the report's text has no wide characters).
fn cols(s: &str) -> usize {
    s.chars().count()
}

/// The widest line of `s`.
pub fn widest(s: &str) -> usize {
    s.lines().map(cols).max().unwrap_or(0)
}

/// `text` wrapped at `width` at spaces, continuation lines indented by `indent` spaces; a word longer than a
/// line stays whole on its own line.
pub fn wrap(text: &str, width: usize, indent: usize) -> String {
    let mut out = String::new();
    for para in text.lines() {
        let mut line = String::new();
        for word in para.split(' ') {
            let has_words = !line.trim_start().is_empty();
            if has_words && cols(&line) + 1 + cols(word) > width {
                out.push_str(line.trim_end());
                out.push('\n');
                line = " ".repeat(indent);
            } else if has_words {
                line.push(' ');
            }
            line.push_str(word);
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A cell's central figure (step 1 of the module's docs).
fn central(cell: &str) -> String {
    let mut c = cell.to_string();
    // `X [a-b]` -> `X`.
    if let Some(i) = c.find(" [")
        && c.ends_with(']')
    {
        c.truncate(i);
    }
    // `a/b/c` of three numbers -> `b`.
    let parts: Vec<&str> = c.split('/').collect();
    if parts.len() == 3
        && parts.iter().all(|p| !p.is_empty() && p.chars().all(|ch| ch.is_ascii_digit() || ".,".contains(ch)))
    {
        c = parts[1].to_string();
    }
    for (long, short) in SHORT_NAMES {
        if c == long {
            return short.to_string();
        }
    }
    c
}

fn is_numeric(v: &str) -> bool {
    v.chars().next().is_some_and(|c| c.is_ascii_digit() || c == '.' || c == '-')
        && v.chars().all(|c| c.is_ascii_digit() || ".,-/x%e+ ".contains(c))
}

fn is_count(v: &str) -> bool {
    v.chars().all(|c| c.is_ascii_digit() || c == ',')
}

fn is_ratio(v: &str) -> bool {
    is_numeric(v) && (v.ends_with('x') || v.ends_with('%'))
}

/// `t` as text within `width` columns (the module's steps); the full table when it fits as it is.
pub fn fit_table(t: &Table, width: usize) -> String {
    if widest(&t.text()) <= width {
        return t.text();
    }
    let rows: Vec<Vec<String>> = t.rows.iter().map(|r| r.iter().map(|c| central(c)).collect()).collect();
    let ncol = t.headers.len();
    let cell = |r: &Vec<String>, c: usize| r.get(c).cloned().unwrap_or_default();
    let col_width =
        |c: usize| rows.iter().map(|r| cols(&cell(r, c))).chain([cols(&t.headers[c])]).max().unwrap_or(0);
    let column_is = |c: usize, f: fn(&str) -> bool| {
        rows.iter().map(|r| cell(r, c)).filter(|v| !v.is_empty() && v != "-" && v != "n/a").all(|v| f(&v))
    };
    // The key columns name a row and are never left out: up to the `side` column, else the first column and
    // a count right after it (a tree's `n`).
    let keys = match t.headers.iter().position(|h| h == "side") {
        Some(i) => i + 1,
        None => 1 + usize::from(ncol > 1 && column_is(1, is_count)),
    };
    // The order in which the others are left out: non-ratio numeric columns, widest first, then the rest
    // right to left.
    let mut order: Vec<usize> =
        (keys..ncol).filter(|&c| column_is(c, is_numeric) && !column_is(c, is_ratio)).collect();
    order.sort_by_key(|&c| std::cmp::Reverse((col_width(c), c)));
    let rest: Vec<usize> = (keys..ncol).rev().filter(|c| !order.contains(c)).collect();
    order.extend(rest);
    let mut kept: Vec<usize> = (0..ncol).collect();
    let render = |kept: &[usize]| {
        let headers: Vec<&str> = kept.iter().map(|&c| t.headers[c].as_str()).collect();
        let rows: Vec<Vec<String>> =
            rows.iter().map(|r| kept.iter().map(|&c| cell(r, c)).collect()).collect();
        vmspace_results::table::render(&headers, &rows)
    };
    let mut text = render(&kept);
    let mut left_out = Vec::new();
    for c in order {
        if widest(&text) <= width {
            break;
        }
        kept.retain(|&k| k != c);
        left_out.push(t.headers[c].clone());
        text = render(&kept);
    }
    let mut caption = t.caption.clone();
    caption.push_str(if caption.is_empty() { "" } else { "; " });
    caption.push_str("central figures only");
    if !left_out.is_empty() {
        left_out.reverse();
        caption.push_str(&format!(", not shown: {}", left_out.join(", ")));
    }
    caption.push_str(" (--wide or the page: the whole table)");
    with_caption(&caption, &text, width)
}

fn with_caption(caption: &str, table: &str, width: usize) -> String {
    if caption.is_empty() { table.to_string() } else { format!("{}{table}", wrap(caption, width, 0)) }
}

/// The section's verdict as one short sentence: its targets' tally, else the first clause of its verdict.
pub fn short_verdict(s: &Section, targets: &[TargetResult], width: usize) -> String {
    let mine: Vec<&TargetResult> = targets.iter().filter(|t| t.experiment == s.id).collect();
    let count = |st: Status| mine.iter().filter(|t| t.status == st).count();
    let line = if mine.iter().any(|t| t.status != Status::NotMeasured) {
        let mut parts = vec![format!("{} of {} targets met", count(Status::Met), mine.len())];
        for (st, word) in [
            (Status::Missed, "missed"),
            (Status::Undecided, "undecided"),
            (Status::NotMeasurable, "not measurable here"),
            (Status::NotMeasured, "not measured"),
        ] {
            if count(st) > 0 {
                parts.push(format!("{} {word}", count(st)));
            }
        }
        format!("verdict: {} (the page reads the figures)", parts.join(", "))
    } else {
        let first = s.verdict.split("; ").next().unwrap_or("").trim_end_matches('.');
        let room = width - "verdict: ".len() - " (...)".len();
        if cols(first) <= room && first.len() == s.verdict.trim_end_matches('.').len() {
            format!("verdict: {first}.")
        } else if cols(first) <= room {
            format!("verdict: {first} (...)")
        } else {
            let mut cut = String::new();
            for w in first.split(' ') {
                if cols(&cut) + 1 + cols(w) > room {
                    break;
                }
                if !cut.is_empty() {
                    cut.push(' ');
                }
                cut.push_str(w);
            }
            format!("verdict: {} (...)", cut.trim_end_matches(','))
        }
    };
    wrap(&line, width, 9)
}

/// The targets as lines: `STATUS  what (where): measured, goal G`, wrapped at `width`.
pub fn targets_lines(targets: &[TargetResult], width: usize) -> String {
    let mut out = wrap(
        "targets (met or missed when the 95% interval of the median lies wholly on one side of the goal; \
         --wide: the table with the notes)",
        width,
        0,
    );
    for x in targets {
        let status = match x.status {
            Status::Met | Status::Missed => {
                x.status_text().to_uppercase().replace("INDICATIVE", "indicative")
            }
            Status::NotMeasured => "n/a".into(),
            Status::NotMeasurable => "not measurable".into(),
            _ => x.status_text(),
        };
        let line = format!("{status:<14} {} ({}): {}, goal {}", x.what, x.at, x.measured(), x.goal_text());
        out.push_str(&wrap(&line, width, 15));
    }
    out
}

/// The terminal text of a presentation within `width` columns.
pub fn text(p: &Presentation, width: usize) -> String {
    let mut out = String::new();
    for s in &p.sections {
        out.push_str(&format!("\n== {} ==\n", s.title));
        match &s.completion {
            crate::model::Completion::Complete => {}
            crate::model::Completion::Interrupted => {
                out.push_str("(interrupted: what was measured before Ctrl-C)\n")
            }
            crate::model::Completion::Failed(e) => {
                out.push_str(&wrap(&format!("(FAILED: {e}; what was measured before)"), width, 1))
            }
            crate::model::Completion::NotRun(why) => {
                out.push_str(&wrap(&format!("not run: {why}"), width, 9));
                continue;
            }
        }
        for t in &s.tables {
            if !t.rows.is_empty() {
                out.push_str(&fit_table(t, width));
            }
        }
        for u in &s.unavailable {
            out.push_str(&wrap(u, width, 2));
        }
        out.push_str(&short_verdict(s, &p.targets, width));
    }
    out.push_str("\n== Summary ==\n");
    if let Some(i) = &p.indicative {
        out.push_str(&wrap(i, width, 0));
    }
    out.push_str(&targets_lines(&p.targets, width));
    out.push_str(&wrap(&format!("verdict: {}", p.verdict.line), width, 9));
    out.push_str(&wrap(
        &format!(
            "machine: load average {} before, {} after; {}",
            p.machine.load_before, p.machine.load_after, p.machine.during
        ),
        width,
        9,
    ));
    out.push_str(&wrap(&format!("build: {}", p.build_line()), width, 7));
    if let Some(w) = p.debug_warning() {
        out.push_str(&wrap(&format!("WARNING: {w}"), width, 9));
    }
    for w in p.machine.warnings() {
        out.push_str(&wrap(&format!("warning: {w}"), width, 9));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wide_table_is_narrowed_in_steps() {
        let mut t = Table::new("latency", &["config", "side", "mean ms", "calls/run", "mean/base"]);
        for i in 0..3 {
            t.row(vec![
                format!("smaps_rollup, 1 scanner + 1 busy B={i}"),
                "engine, readers under per-VMA locks".into(),
                "0.0040/0.0042/0.0043".into(),
                "1,234,567,890,123".into(),
                format!("{i}.5x [1.0-2.0]"),
            ]);
        }
        let wide = t.text();
        assert!(widest(&wide) > 100, "{wide}");
        let narrow = fit_table(&t, 100);
        assert!(widest(&narrow) <= 100, "{narrow}");
        assert!(narrow.contains("engine per-VMA") && narrow.contains("0.0042") && narrow.contains("1.5x"));
        assert!(!narrow.contains("[1.0-2.0]"));
        // Steps 1 were enough here: nothing left out.
        assert!(!narrow.contains("not shown"), "{narrow}");
        let narrower = fit_table(&t, 75);
        assert!(widest(&narrower) <= 75, "{narrower}");
        // The count column goes before the ratio, and the caption says so.
        assert!(narrower.contains("not shown: calls/run"), "{narrower}");
        assert!(narrower.contains("mean/base"), "{narrower}");
        // A table that fits is left whole.
        let mut small = Table::new("", &["a", "b"]);
        small.row(vec!["x".into(), "1.0 [0.5-2.0]".into()]);
        assert_eq!(fit_table(&small, 100), small.text());
    }

    #[test]
    fn wrapping_keeps_words_and_indents() {
        let w = wrap("verdict: aaa bbb ccc ddd", 12, 9);
        assert_eq!(w, "verdict: aaa\n         bbb\n         ccc\n         ddd\n");
        assert!(widest(&wrap(&"word ".repeat(100), 100, 4)) <= 100);
    }
}
