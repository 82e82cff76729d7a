//! Plain-text tables for the terminal: a header row, a rule, and rows; text columns are left-aligned and
//! columns whose cells all look numeric are right-aligned. Shared by every command that prints results.

/// Renders `rows` under `headers`. Rows shorter than the header are padded with empty cells.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let ncol = headers.len();
    let mut width: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    let mut numeric = vec![true; ncol];
    for r in rows {
        for (c, w) in width.iter_mut().enumerate() {
            let v = cell(r, c);
            *w = (*w).max(v.chars().count());
            if !v.is_empty() && !looks_numeric(v) {
                numeric[c] = false;
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(c, v)| {
                if numeric[c] && c > 0 {
                    format!("{v:>w$}", w = width[c])
                } else {
                    format!("{v:<w$}", w = width[c])
                }
            })
            .collect();
        parts.join("  ").trim_end().to_string()
    };
    let mut out = line(headers.to_vec());
    out.push('\n');
    out.push_str(&width.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join("  "));
    out.push('\n');
    for r in rows {
        out.push_str(&line((0..ncol).map(|c| cell(r, c)).collect()));
        out.push('\n');
    }
    out
}

fn cell(r: &[String], c: usize) -> &str {
    r.get(c).map(String::as_str).unwrap_or("")
}

/// Whether a cell is a number, possibly with a unit-free decoration such as `1.2x`, `3/4/5` or `12%`.
fn looks_numeric(v: &str) -> bool {
    v.chars().next().is_some_and(|c| c.is_ascii_digit() || c == '.' || c == '-')
        && v.chars().all(|c| c.is_ascii_digit() || ".,-/x%e+ ".contains(c))
}

/// Formats a latency in ms with about 3 significant digits (`.0142`, `3.34`, `73.5`, `1251`).
pub fn ms(v: f64) -> String {
    if v == 0.0 {
        "0".to_string()
    } else if v < 0.1 {
        format!("{v:.4}")
    } else if v < 10.0 {
        format!("{v:.3}")
    } else if v < 100.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.0}")
    }
}

/// Formats a count or rate with thousands separators (`1,638,421`).
pub fn count(v: f64) -> String {
    let n = v.round() as i128;
    let s = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    if n < 0 { format!("-{out}") } else { out }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(ms(0.01423), "0.0142");
        assert_eq!(ms(3.3412), "3.341");
        assert_eq!(ms(73.51), "73.5");
        assert_eq!(ms(1251.4), "1251");
        assert_eq!(count(1638421.0), "1,638,421");
        assert_eq!(count(999.0), "999");
        assert_eq!(count(-1000.0), "-1,000");
    }

    #[test]
    fn aligns() {
        let t = render(
            &["config", "mean"],
            &[vec!["a".into(), "1.5".into()], vec!["longer".into(), "12.25".into()]],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "config   mean");
        assert_eq!(lines[1], "------  -----");
        assert_eq!(lines[2], "a         1.5");
        assert_eq!(lines[3], "longer  12.25");
    }
}
