//! The op-script parser target: any text, parsed as an op script and as a run's output.
//!
//! [`check`] requires, for arbitrary bytes (decoded lossily as UTF-8):
//! - [`Script::parse`] never panics; an error names a line that exists (1 ..= number of lines);
//! - a script that parses prints ([`Script::to_text`]) to text that parses again to the same ops, numbered
//!   1, 2, 3, ..., and printing that gives the same text: `to_text` is a fixed point after one round;
//! - [`Output::parse`] never panics; an output that parses renders ([`Output::render`]) to text that parses
//!   to the same entries and renders to the same text.

use vmspace_script::{Output, Script};

/// Checks one input; panics (the fuzzer's crash) at the first broken property.
pub fn check(data: &[u8]) {
    check_text(&String::from_utf8_lossy(data));
}

/// The checks on text.
pub fn check_text(text: &str) {
    let nlines = text.lines().count();
    match Script::parse(text) {
        Err(e) => {
            assert!(e.line >= 1 && e.line <= nlines, "error on line {} of {nlines}: {e}", e.line);
            let _ = e.to_string();
        }
        Ok(s) => {
            assert!(s.lines.windows(2).all(|w| w[0].line < w[1].line), "line numbers not increasing: {s:?}");
            assert!(s.lines.last().is_none_or(|l| l.line <= nlines), "line number past the end: {s:?}");
            let printed = s.to_text();
            let back = Script::parse(&printed)
                .unwrap_or_else(|e| panic!("printed script does not parse: {e}\n{printed}"));
            let ops = |s: &Script| s.lines.iter().map(|l| l.op.clone()).collect::<Vec<_>>();
            assert_eq!(ops(&back), ops(&s), "ops changed by print + parse\n{printed}");
            assert!(
                back.lines.iter().enumerate().all(|(i, l)| l.line == i + 1),
                "printed script's line numbers are not 1..n\n{printed}"
            );
            assert_eq!(back.to_text(), printed, "to_text is not a fixed point");
            let _ = s.file_names();
        }
    }
    match Output::parse(text) {
        Err(e) => {
            assert!(e.line <= nlines.max(1), "output error on line {} of {nlines}: {e}", e.line);
            let _ = e.to_string();
        }
        Ok(o) => {
            let rendered = o.render();
            let back = Output::parse(&rendered)
                .unwrap_or_else(|e| panic!("rendered output does not parse: {e}\n{rendered}"));
            assert_eq!(back, o, "entries changed by render + parse\n{rendered:?}");
            assert_eq!(back.render(), rendered, "render is not a fixed point");
        }
    }
}
