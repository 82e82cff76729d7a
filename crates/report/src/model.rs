//! What a presented experiment is made of: tables (printed on the terminal and drawn in HTML from the same
//! cells), figures (SVG text), a verdict line, and what could not be measured.

use vmspace_results::table::render;

/// One table: a caption, a header row and rows of cells, all text.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Table {
    /// One line above the table (units, what the ranges are).
    pub caption: String,
    /// Column headers.
    pub headers: Vec<String>,
    /// Rows of cells (as many as headers).
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with `caption` and `headers`, no rows yet.
    pub fn new(caption: impl Into<String>, headers: &[&str]) -> Table {
        Table {
            caption: caption.into(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Appends a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The plain-text rendering (aligned columns), caption first.
    pub fn text(&self) -> String {
        let headers: Vec<&str> = self.headers.iter().map(String::as_str).collect();
        let mut out = String::new();
        if !self.caption.is_empty() {
            out.push_str(&self.caption);
            out.push('\n');
        }
        out.push_str(&render(&headers, &self.rows));
        out
    }
}

/// One figure: an SVG document and the file it is written to.
#[derive(Debug, Clone, PartialEq)]
pub struct Figure {
    /// File name inside the output directory, e.g. `fork.svg`.
    pub file: String,
    /// Title (also drawn in the SVG).
    pub title: String,
    /// One sentence under the figure in the HTML page.
    pub caption: String,
    /// The SVG document.
    pub svg: String,
}

/// How far an experiment got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Completion {
    /// It ran to its end.
    Complete,
    /// Ctrl-C stopped it: what it measured before is shown.
    Interrupted,
    /// It failed with this error: what it measured before is shown.
    Failed(String),
    /// It did not run, for this reason (interrupted before it started, left out with `--experiments`).
    NotRun(String),
}

impl Completion {
    /// The word stored in the report set (`complete`, `interrupted`, `failed: ...`, `not run: ...`).
    pub fn word(&self) -> String {
        match self {
            Completion::Complete => "complete".into(),
            Completion::Interrupted => "interrupted".into(),
            Completion::Failed(e) => format!("failed: {e}"),
            Completion::NotRun(why) => format!("not run: {why}"),
        }
    }

    /// Parses [`Completion::word`].
    pub fn parse(s: &str) -> Completion {
        if s == "complete" {
            Completion::Complete
        } else if s == "interrupted" {
            Completion::Interrupted
        } else if let Some(e) = s.strip_prefix("failed: ") {
            Completion::Failed(e.to_string())
        } else {
            Completion::NotRun(s.strip_prefix("not run: ").unwrap_or(s).to_string())
        }
    }
}

/// One experiment as presented.
#[derive(Debug, Clone, PartialEq)]
pub struct Section {
    /// The experiment's id (the HTML anchor).
    pub id: String,
    /// Its title.
    pub title: String,
    /// Its short name (navigation).
    pub short: String,
    /// What was measured and how.
    pub method: String,
    /// Its tables.
    pub tables: Vec<Table>,
    /// What the figures say, in one line of plain words.
    pub verdict: String,
    /// Sides that were not measured, each with why (`engine, per-VMA locks: not yet measured on the engine
    /// (awaits ...)`).
    pub unavailable: Vec<String>,
    /// Its figures.
    pub figures: Vec<Figure>,
    /// Notes the reports carry (placement adjustments, caveats), deduplicated.
    pub notes: Vec<String>,
    /// How far it got.
    pub completion: Completion,
    /// Which of its figures other work on the machine distorts.
    pub load_effect: String,
}

impl Section {
    /// An empty section of experiment `id`.
    pub fn new(id: &str, title: &str) -> Section {
        Section {
            id: id.to_string(),
            title: title.to_string(),
            short: title.to_string(),
            method: String::new(),
            tables: Vec::new(),
            verdict: String::new(),
            unavailable: Vec::new(),
            figures: Vec::new(),
            notes: Vec::new(),
            completion: Completion::Complete,
            load_effect: String::new(),
        }
    }

    /// Adds the notes of `reports`, without repeats.
    pub fn collect_notes<'r>(
        &mut self,
        reports: impl IntoIterator<Item = &'r vmspace_results::report::Report>,
    ) {
        for r in reports {
            for n in &r.notes {
                if !self.notes.contains(n) {
                    self.notes.push(n.clone());
                }
            }
        }
    }
}

/// `x` with about three significant digits: `0.0123`, `1.23`, `12.3`, `123`, `1,234`.
pub fn sig3(x: f64) -> String {
    if !x.is_finite() {
        return "-".into();
    }
    let a = x.abs();
    if a == 0.0 {
        "0".into()
    } else if a < 0.01 {
        format!("{x:.4}")
    } else if a < 1.0 {
        format!("{x:.3}")
    } else if a < 10.0 {
        format!("{x:.2}")
    } else if a < 100.0 {
        format!("{x:.1}")
    } else {
        vmspace_results::table::count(x)
    }
}

/// A ratio as `1.23x` (three significant digits).
pub fn ratio(x: f64) -> String {
    if x.is_finite() { format!("{}x", sig3(x)) } else { "-".into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_words() {
        assert_eq!(sig3(0.001234), "0.0012");
        assert_eq!(sig3(0.1234), "0.123");
        assert_eq!(sig3(1.234), "1.23");
        assert_eq!(sig3(12.34), "12.3");
        assert_eq!(sig3(1234.5), "1,235");
        assert_eq!(ratio(f64::NAN), "-");
        for c in [
            Completion::Complete,
            Completion::Interrupted,
            Completion::Failed("fork: EAGAIN".into()),
            Completion::NotRun("left out".into()),
        ] {
            assert_eq!(Completion::parse(&c.word()), c);
        }
        let mut t = Table::new("caption", &["a", "b"]);
        t.row(vec!["x".into(), "1".into()]);
        assert!(t.text().starts_with("caption\na"));
    }
}
