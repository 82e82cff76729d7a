//! The HTML pages: `index.html` of a report and `compare.html` of a comparison.
//!
//! Each page is one self-contained document: the style sheet is inline, every figure is an inline `<svg>`
//! element, and nothing is fetched: no script, no external style sheet, font or image, no URL at all (the
//! links are fragment links within the page). It opens the same from a file, offline. The markup is
//! well-formed (every element closed, void elements written `<br/>`), so simple tools can check it.

use std::fmt::Write as _;

use crate::compare::Comparison;
use crate::model::{Completion, Section, Table};
use crate::plot::inline;
use crate::run::Presentation;
use crate::targets::Status;

/// Escapes text for HTML content and attribute values.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "
:root { --fg: #1d2430; --muted: #5b6576; --line: #d9dee7; --bg: #ffffff; --soft: #f5f7fa;
        --met: #1a7f37; --missed: #c62828; --undecided: #9a6700; --na: #6e7781; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.5 system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif;
       color: var(--fg); background: var(--bg); }
main { max-width: 1320px; margin: 0 auto; padding: 24px 24px 48px; }
header h1 { margin: 0 0 4px; font-size: 28px; }
.sub { color: var(--muted); margin: 0 0 12px; }
dl.run { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 0 0 16px; }
dl.run dt { color: var(--muted); }
dl.run dd { margin: 0; }
code { font: 13px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: var(--soft);
       padding: 1px 5px; border-radius: 4px; }
nav { position: sticky; top: 0; background: var(--bg); border-bottom: 1px solid var(--line); padding: 8px 0;
      margin-bottom: 8px; z-index: 1; display: flex; flex-wrap: wrap; gap: 4px 16px; }
nav a { color: #0b57d0; text-decoration: none; white-space: nowrap; }
nav a:hover { text-decoration: underline; }
section { border-top: 1px solid var(--line); padding-top: 10px; margin-top: 26px; }
h2 { font-size: 21px; margin: 6px 0 8px; }
.method { color: var(--muted); margin: 4px 0 10px; }
.verdict { font-weight: 600; background: var(--soft); border-left: 4px solid #0b57d0; padding: 8px 12px;
           margin: 10px 0; }
.warn { background: #fff4e5; border: 1px solid #f0c36d; border-radius: 6px; padding: 8px 14px; margin: 12px 0; }
.warn p { margin: 4px 0; }
.warn ul { margin: 4px 0; padding-left: 22px; }
.debug { background: #fdecea; border: 2px solid var(--missed); border-radius: 6px; padding: 8px 14px; margin: 12px 0;
         color: var(--missed); font-weight: 600; }
.na { background: #f1f3f5; border: 1px dashed #adb5bd; border-radius: 6px; padding: 6px 12px; margin: 8px 0; }
.na p { margin: 2px 0; }
.state { color: var(--missed); font-weight: 600; }
.scroll { overflow-x: auto; margin: 8px 0 12px;
          background: linear-gradient(to right, var(--bg) 30%, rgba(255,255,255,0)) left / 32px 100% no-repeat local,
            linear-gradient(to left, var(--bg) 30%, rgba(255,255,255,0)) right / 32px 100% no-repeat local,
            radial-gradient(farthest-side at 0 50%, rgba(0,0,0,.28), rgba(0,0,0,0)) left / 12px 100% no-repeat scroll,
            radial-gradient(farthest-side at 100% 50%, rgba(0,0,0,.28), rgba(0,0,0,0)) right / 12px 100% no-repeat
            scroll; }
@media (max-width: 760px) {
  .scroll::before { content: '\\2190  scroll sideways for the whole table  \\2192'; display: block; position: sticky;
                    left: 0; width: max-content; color: var(--muted); font-size: 12px; margin-bottom: 2px; }
}
table { border-collapse: collapse; font-size: 12.5px; }
p.cap { color: var(--muted); font-size: 13px; margin: 10px 0 2px; }
th, td { border-bottom: 1px solid var(--line); padding: 3px 8px; text-align: left; vertical-align: top; }
td.st { white-space: nowrap; }
th { background: var(--soft); font-weight: 600; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr:hover td { background: #fafbfd; }
.s-met { color: var(--met); font-weight: 700; }
.s-missed { color: var(--missed); font-weight: 700; }
.s-undecided { color: var(--undecided); font-weight: 700; }
.s-not-measured { color: var(--na); }
.s-not-measurable { color: var(--undecided); font-style: italic; }
.indicative { background: #eef4ff; border: 1px solid #9ab8f0; border-radius: 6px; padding: 8px 14px; margin: 12px 0; }
figure { margin: 14px 0; }
figure svg { width: 100%; max-width: 980px; height: auto; border: 1px solid var(--line); border-radius: 6px; }
figcaption { color: var(--muted); font-size: 13px; }
details { margin: 8px 0; color: var(--muted); font-size: 13px; }
footer { margin-top: 36px; color: var(--muted); font-size: 13px; border-top: 1px solid var(--line);
         padding-top: 10px; }
";

/// Whether a cell reads as a number (right-aligned): `1,234`, `0.77x`, `1.2 [1.0-1.4]`, `93%`.
fn numeric(v: &str) -> bool {
    v.chars().next().is_some_and(|c| c.is_ascii_digit() || c == '.' || c == '-')
        && v.chars().all(|c| {
            c.is_ascii_digit()
                || ".,-/x%e+ []()".contains(c)
                || c.is_ascii_alphabetic() && "Mopsx".contains(c)
        })
}

/// A table of measurements: cells that read as numbers are right-aligned.
fn table(out: &mut String, t: &Table) {
    table_aligned(out, t, true)
}

fn table_aligned(out: &mut String, t: &Table, align_numbers: bool) {
    if t.rows.is_empty() {
        return;
    }
    if !t.caption.is_empty() {
        let _ = write!(out, "<p class=\"cap\">{}</p>", esc(&t.caption));
    }
    out.push_str("<div class=\"scroll\"><table>");
    out.push_str("<thead><tr>");
    for h in &t.headers {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>");
    for r in &t.rows {
        out.push_str("<tr>");
        for (i, c) in r.iter().enumerate() {
            if align_numbers && i > 0 && numeric(c) {
                let _ = write!(out, "<td class=\"num\">{}</td>", esc(c));
            } else {
                let _ = write!(out, "<td>{}</td>", esc(c));
            }
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table></div>\n");
}

fn status_class(s: Status) -> &'static str {
    match s {
        Status::Met => "s-met",
        Status::Missed => "s-missed",
        Status::Undecided => "s-undecided",
        Status::NotMeasured => "s-not-measured",
        Status::NotMeasurable => "s-not-measurable",
    }
}

fn head(out: &mut String, title: &str) {
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<meta name=\"viewport\" \
         content=\"width=device-width, initial-scale=1\"/>\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n\
         <body>\n<main>\n",
        esc(title)
    );
}

fn section(out: &mut String, s: &Section) {
    let _ = write!(out, "<section id=\"{}\">\n<h2>{}</h2>\n", esc(&s.id), esc(&s.title));
    match &s.completion {
        Completion::Complete => {}
        Completion::Interrupted => {
            out.push_str("<p class=\"state\">Interrupted (Ctrl-C): what was measured before is shown.</p>\n")
        }
        Completion::Failed(e) => {
            let _ = writeln!(
                out,
                "<p class=\"state\">Failed: {}. What was measured before is shown.</p>",
                esc(e)
            );
        }
        Completion::NotRun(why) => {
            let _ = writeln!(out, "<p class=\"state\">Not run: {}.</p>", esc(why));
        }
    }
    if !s.method.is_empty() {
        let _ = writeln!(out, "<p class=\"method\">{}</p>", esc(&s.method));
    }
    if !matches!(s.completion, Completion::NotRun(_)) {
        let _ = writeln!(out, "<p class=\"verdict\">{}</p>", esc(&s.verdict));
    }
    if !s.unavailable.is_empty() {
        out.push_str("<div class=\"na\">");
        for u in &s.unavailable {
            let _ = write!(out, "<p>{}</p>", esc(u));
        }
        out.push_str("</div>\n");
    }
    for t in &s.tables {
        table(out, t);
    }
    for f in &s.figures {
        let _ = write!(
            out,
            "<figure>\n{}\n<figcaption>{} (<code>{}</code>)</figcaption>\n</figure>\n",
            inline(&f.svg),
            esc(&f.caption),
            esc(&f.file)
        );
    }
    if !s.notes.is_empty() {
        out.push_str("<details><summary>Notes</summary><ul>");
        for n in &s.notes {
            let _ = write!(out, "<li>{}</li>", esc(n));
        }
        out.push_str("</ul></details>\n");
    }
    out.push_str("</section>\n");
}

/// `index.html` of a presented report; `files` are the files written beside it.
pub fn index(p: &Presentation, files: &[String]) -> String {
    let mut out = String::new();
    head(&mut out, &format!("vmspace report, {}", p.started_utc));
    let _ = write!(
        out,
        "<header>\n<h1>vmspace report</h1>\n<p class=\"sub\">{}</p>\n<dl class=\"run\">\
         <dt>command</dt><dd><code>{}</code></dd><dt>started</dt><dd>{}</dd><dt>length</dt><dd>{} ({:.0} s)</dd>\
         <dt>build</dt><dd>{}</dd><dt>verdict</dt><dd>{}</dd></dl>\n</header>\n",
        esc(&p.host_line),
        esc(&p.command),
        esc(&p.started_utc),
        esc(&p.length),
        p.elapsed_s,
        build_html(p),
        esc(&p.verdict.line)
    );
    if let Some(w) = p.debug_warning() {
        let _ = writeln!(out, "<div class=\"debug\"><p>{}.</p></div>", code_spans(&capitalised(&w)));
    }
    out.push_str("<nav><a href=\"#summary\">Summary</a>");
    for s in &p.sections {
        let _ = write!(out, "<a href=\"#{}\">{}</a>", esc(&s.id), esc(&s.short));
    }
    out.push_str("<a href=\"#machine\">Machine</a></nav>\n");
    let m = &p.machine;
    if m.busy.is_some() || !m.disturbed.is_empty() {
        out.push_str("<div class=\"warn\"><p><strong>Busy machine: timings are disturbed.</strong></p>");
        if let Some(b) = &m.busy {
            let _ = write!(out, "<p>{}.</p>", esc(&capitalised(b)));
        }
        if !m.disturbed.is_empty() {
            out.push_str("<p>Other work competed for the CPUs during these experiments:</p><ul>");
            for d in &m.disturbed {
                let _ = write!(out, "<li>{}.</li>", esc(d));
            }
            out.push_str("</ul>");
        }
        out.push_str("</div>\n");
    }
    if let Some(i) = &p.indicative {
        let _ = writeln!(
            out,
            "<div class=\"indicative\"><p><strong>{}.</strong></p></div>",
            esc(&capitalised(i))
        );
    }
    out.push_str("<section id=\"summary\">\n<h2>Summary</h2>\n");
    let _ = writeln!(out, "<p class=\"verdict\">Targets: {}.</p>", esc(&p.verdict.line));
    out.push_str(
        "<p class=\"cap\">measured: the median of the values (one per run or per pair of interleaved batches) and \
         the 95% order-statistic confidence interval of that median (min-max for 5 values or fewer); met: the \
         whole interval meets the goal; missed: none of it does; undecided: it straddles the goal (the spread is \
         wider than the margin); not measurable here: values exist but this machine could not show the quantity \
         (the note gives the measured reason); not measured: no value in this run; (indicative): decided on a \
         single short run per point (--quick)</p><div class=\"scroll\"><table>\
         <thead><tr><th>status</th><th>target</th><th>where</th><th>goal</th><th>measured [interval]</th>\
         <th>note</th></tr></thead><tbody>",
    );
    for t in &p.targets {
        let _ = write!(
            out,
            "<tr><td class=\"st {}\">{}</td><td>{}</td><td class=\"st\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td>{}</td></tr>",
            status_class(t.status),
            esc(&t.status_text()),
            esc(&t.what),
            esc(&t.at),
            esc(&t.goal_text()),
            esc(&t.measured()),
            esc(&t.why)
        );
    }
    out.push_str("</tbody></table></div>\n<ul>");
    for s in &p.sections {
        let _ = write!(
            out,
            "<li><a href=\"#{}\">{}</a>: {}</li>",
            esc(&s.id),
            esc(&s.title),
            esc(&match &s.completion {
                Completion::NotRun(why) => format!("not run ({why})"),
                _ => s.verdict.clone(),
            })
        );
    }
    out.push_str("</ul>\n</section>\n");
    for s in &p.sections {
        section(&mut out, s);
    }
    out.push_str("<section id=\"machine\">\n<h2>Machine</h2>\n");
    let mut facts = Table::new("the host (crates/host, vmspace kernel info)", &["fact", "value"]);
    for (k, v) in &p.machine.facts {
        facts.row(vec![k.clone(), v.clone()]);
    }
    table_aligned(&mut out, &facts, false);
    if let Some(prov) = &p.provenance {
        let b = &prov.build;
        let mut build = Table::new(
            "the build that measured and the CPU it ran on (report.json: provenance; docs/REPORT.md \"Provenance\")",
            &["fact", "value"],
        );
        for (k, v) in [
            ("vmspace", b.version.clone()),
            ("commit", b.commit.clone()),
            ("working tree", b.tree_state().to_string()),
            ("profile", b.profile_line()),
            ("compiler", b.rustc.clone()),
            ("target", b.target.clone()),
            ("CPU model", prov.cpu.model.clone().unwrap_or_else(|| "unknown".into())),
        ] {
            build.row(vec![k.to_string(), v]);
        }
        table_aligned(&mut out, &build, false);
        let _ = writeln!(
            out,
            "<details><summary>CPU flags ({})</summary><p><code>{}</code></p></details>",
            prov.cpu.flags.split_whitespace().count(),
            esc(&prov.cpu.flags)
        );
    }
    let _ = writeln!(
        out,
        "<p>1-minute, 5-minute and 15-minute load averages: {} before the run, {} after it; {}.</p>",
        esc(&p.machine.load_before),
        esc(&p.machine.load_after),
        esc(&p.machine.during)
    );
    out.push_str("</section>\n");
    let _ = writeln!(
        out,
        "<footer>Written by <code>{}</code>. Files beside this page: {}. The figures above are the same SVG \
         documents, inline.</footer>",
        esc(&p.command),
        files.iter().map(|f| format!("<code>{}</code>", esc(f))).collect::<Vec<_>>().join(", ")
    );
    out.push_str("</main>\n</body>\n</html>\n");
    out
}

/// `s` escaped, its back-quoted spans (`` `cargo build --release` ``) set as code.
fn code_spans(s: &str) -> String {
    let mut out = String::new();
    for (i, part) in s.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{}</code>", esc(part));
        } else {
            out.push_str(&esc(part));
        }
    }
    out
}

/// The build of the header: the one-line build, the full commit in a tooltip.
fn build_html(p: &Presentation) -> String {
    match &p.provenance {
        Some(prov) => format!("<code title=\"{}\">{}</code>", esc(&prov.build.commit), esc(&p.build_line())),
        None => "not recorded".to_string(),
    }
}

/// `s` with its first letter upper-case.
fn capitalised(s: &str) -> String {
    crate::experiments::capitalise(s)
}

/// `compare.html` of a comparison.
pub fn compare(c: &Comparison) -> String {
    let mut out = String::new();
    head(&mut out, "vmspace report: comparison");
    let _ = write!(
        out,
        "<header>\n<h1>vmspace report: comparison</h1>\n<dl class=\"run\"><dt>old</dt><dd><code>{}</code> ({})</dd>\
         <dt>old build</dt><dd>{}</dd><dt>new</dt><dd><code>{}</code> ({})</dd><dt>new build</dt><dd>{}</dd>\
         <dt>verdict</dt><dd>{}</dd></dl>\n</header>\n",
        esc(&c.old_command),
        esc(&c.old_started),
        esc(&c.old_build),
        esc(&c.new_command),
        esc(&c.new_started),
        esc(&c.new_build),
        esc(&c.line())
    );
    out.push_str("<section id=\"targets\">\n<h2>Targets</h2>\n");
    table(&mut out, &c.targets_table());
    out.push_str(
        "</section>\n<section id=\"figures\">\n<h2>Figures that moved beyond their run-to-run spread</h2>\n",
    );
    let _ = writeln!(
        out,
        "<p class=\"method\">A figure moved when the ranges of its runs in the two sets do not overlap (new min above \
         old max, or new max below old min); figures with a single run on either side cannot be judged. {} figures \
         compared, {} moved.</p>",
        c.compared,
        c.moved.len()
    );
    table(&mut out, &c.moved_table());
    out.push_str("</section>\n</main>\n</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_numbers() {
        assert_eq!(esc("<a href=\"x\">&'"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
        assert!(numeric("1,234") && numeric("0.77x") && numeric("1.2 [1.0-1.4]") && numeric("93%"));
        assert!(!numeric("kernel") && !numeric("T=1"));
        assert_eq!(capitalised("the machine"), "The machine");
        assert_eq!(code_spans("run `a<b` now"), "run <code>a&lt;b</code> now");
    }

    #[test]
    fn a_table_wider_than_the_screen_shows_that_it_scrolls() {
        // Every table sits in a `.scroll` box, whose edge shadows (backgrounds attached to the scrolled content
        // covering ones fixed to the box) appear on the side where there is more; on a phone a line above the
        // table says so in words.
        let mut t = Table::new("", &["a"]);
        t.row(vec!["1".into()]);
        let mut out = String::new();
        table(&mut out, &t);
        assert!(out.starts_with("<div class=\"scroll\"><table>"), "{out}");
        let rule = STYLE.split(".scroll {").nth(1).unwrap().split('}').next().unwrap();
        assert!(
            rule.contains("overflow-x: auto") && rule.contains("no-repeat local") && rule.contains("scroll;")
        );
        assert!(STYLE.contains("@media (max-width: 760px)") && STYLE.contains("scroll sideways"));
    }
}
