//! The documents against the repository: every repository path that README.md, ARCHITECTURE.md, BENCHMARKS.md
//! and docs/*.md cite exists, every relative link in them leads to a file, and every `vmspace ...` command line
//! they cite parses with the real command line (the binary's hidden `--check-args`, which parses with clap and
//! exits; a bare command name such as `vmspace kernel` is checked with `--help`).
//!
//! What counts as a citation:
//! - a path: a word that starts with `crates/`, `scripts/`, `docs/`, `fuzz/`, `results/` or `.ci/` (not inside
//!   another path such as `/proc/...`), up to the first character that cannot be in a file name here; a pattern
//!   (`crates/*/tests`, `{a,b}`) is not checked;
//! - a link: the target of `[text](target)` that is not a URL or an anchor, resolved from the document's
//!   directory;
//! - a command: a backticked span that starts with `vmspace `, and a line of a fenced block that starts with
//!   `vmspace ` or `cargo run ... -p vmspace -- `. A synopsis is checked without its optional `[...]` parts and
//!   with its placeholders (`FILE`, `SHELL`, `A..B`, ...) replaced by example values; `| ...` after a command and
//!   `# ...` comments are not part of it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The documents whose citations are checked.
fn documents() -> Vec<PathBuf> {
    let root = repo();
    let mut docs: Vec<PathBuf> =
        ["README.md", "ARCHITECTURE.md", "BENCHMARKS.md"].iter().map(|f| root.join(f)).collect();
    let mut more: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    more.sort();
    docs.extend(more);
    docs
}

const ROOTS: [&str; 6] = ["crates/", "scripts/", "docs/", "fuzz/", "results/", ".ci/"];

fn path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/')
}

/// The repository paths cited in `text` (see the module's docs).
fn cited_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    for (i, _) in text.char_indices() {
        let Some(root) = ROOTS.iter().find(|r| text[i..].starts_with(*r)) else { continue };
        if i > 0 {
            let prev = bytes[i - 1] as char;
            if path_char(prev) {
                continue; // inside another path (`/proc/...`, `crates/mm/...` already taken)
            }
        }
        let end = text[i..].find(|c: char| !path_char(c)).map_or(text.len(), |e| i + e);
        if text[end..].starts_with(['*', '{', '$', '<']) {
            continue; // a pattern
        }
        let p = text[i..end].trim_end_matches(['.', ',', ':', ';']);
        if p.len() > root.len() || *root == "results/" || *root == "docs/" {
            out.push(p.to_string());
        }
    }
    out
}

/// The targets of the relative links of `text`.
fn cited_links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let Some(end) = after.find(')') else { break };
        let target = after[..end].split('#').next().unwrap_or("");
        if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            out.push(target.to_string());
        }
        rest = &after[end..];
    }
    out
}

/// The `vmspace` command lines of `text`, as argument lists (without `vmspace`).
fn cited_commands(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            let l = line.trim_start().trim_start_matches("$ ");
            let cmd = if let Some(r) = l.strip_prefix("vmspace ") {
                Some(r)
            } else if l.starts_with("cargo run") && l.contains("-p vmspace -- ") {
                l.split_once("-p vmspace -- ").map(|(_, r)| r)
            } else {
                None
            };
            if let Some(c) = cmd {
                out.push((format!("vmspace {}", c.trim_end()), args_of(c)));
            }
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find('`') {
            let after = &rest[i + 1..];
            let Some(end) = after.find('`') else { break };
            let span = &after[..end];
            if let Some(c) = span.strip_prefix("vmspace ") {
                out.push((span.to_string(), args_of(c)));
            }
            rest = &after[end + 1..];
        }
    }
    out
}

/// Example values for a synopsis's placeholders.
fn example(word: &str) -> Option<&'static str> {
    Some(match word {
        "FILE" => "out.json",
        "DIR" => "out",
        "SHELL" => "bash",
        // A shell variable holding a process id (`$!`, `"$PID"`) in a copied command.
        "PID" | "JVM" | "$!" | "$PID" | "\"$PID\"" => "1",
        "PROGRAM" => "true",
        "COMMAND" => "report",
        "N" => "10",
        "R" => "3",
        "D" => "1s",
        "A..B" => "0..2",
        "LIST" => "1",
        "OLD/report.json" => "old/report.json",
        "NEW/report.json" => "new/report.json",
        _ => return None,
    })
}

/// Splits a command line as a shell would (single and double quotes, `#` comments), stopping at a pipe, after
/// dropping the optional `[...]` parts and taking the first of `a|b` alternatives outside quotes.
fn args_of(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut has = false;
    let mut quote: Option<char> = None;
    let mut depth = 0usize;
    for c in line.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => cur.push(c),
            None if depth > 0 => match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                _ => {}
            },
            None => match c {
                '\'' | '"' => {
                    quote = Some(c);
                    has = true;
                }
                '[' if !has => depth = 1,
                '#' if !has => break,
                '|' if !has => break,
                c if c.is_whitespace() => {
                    if has {
                        words.push(std::mem::take(&mut cur));
                        has = false;
                    }
                }
                _ => {
                    cur.push(c);
                    has = true;
                }
            },
        }
    }
    if has {
        words.push(cur);
    }
    words
        .into_iter()
        .map(|w| {
            // `--engine|--kernel`, `maps|smaps`: the first alternative (a quoted shell pipeline keeps its `|`).
            let alternatives = !w.contains(' ')
                && w.contains('|')
                && (w.starts_with('-') || w.chars().all(|c| c.is_ascii_lowercase() || c == '|'));
            if alternatives {
                w.split('|').next().unwrap().to_string()
            } else {
                example(&w).map_or(w, str::to_string)
            }
        })
        .filter(|w| w != "...")
        .collect()
}

/// Whether `args` parse: `--check-args` for a command line, `--help` for a bare command name.
fn parses(args: &[String]) -> Result<(), String> {
    let run = |extra: &[&str], args: &[String]| {
        Command::new(env!("CARGO_BIN_EXE_vmspace")).args(extra).args(args).output().expect("run vmspace")
    };
    let o = run(&["--check-args"], args);
    if o.status.success() {
        return Ok(());
    }
    if args.iter().all(|a| !a.starts_with('-')) {
        let mut with_help = args.to_vec();
        with_help.push("--help".into());
        if run(&[], &with_help).status.success() {
            return Ok(());
        }
    }
    Err(String::from_utf8_lossy(&o.stderr).lines().next().unwrap_or("").to_string())
}

/// Every broken citation of the document `name` (in `dir`) with text `text`.
fn problems(name: &str, dir: &Path, text: &str) -> Vec<String> {
    let root = repo();
    let mut out = Vec::new();
    for p in cited_paths(text) {
        if !root.join(&p).exists() {
            out.push(format!("{name}: path {p} does not exist"));
        }
    }
    for l in cited_links(text) {
        if !dir.join(&l).exists() {
            out.push(format!("{name}: link target {l} does not exist"));
        }
    }
    for (line, args) in cited_commands(text) {
        if let Err(e) = parses(&args) {
            out.push(format!("{name}: `{line}` (as {args:?}) does not parse: {e}"));
        }
    }
    out
}

#[test]
fn every_cited_path_link_and_command_is_real() {
    let root = repo();
    let mut all = Vec::new();
    let mut counted = (0, 0, 0);
    for doc in documents() {
        let text = std::fs::read_to_string(&doc).unwrap();
        let name = doc.strip_prefix(&root).unwrap().display().to_string();
        counted.0 += cited_paths(&text).len();
        counted.1 += cited_links(&text).len();
        counted.2 += cited_commands(&text).len();
        all.extend(problems(&name, doc.parent().unwrap(), &text));
    }
    assert!(all.is_empty(), "{} broken citations:\n{}", all.len(), all.join("\n"));
    // The documents cite plenty of each: a scanner that finds nothing would pass the check above vacuously.
    assert!(counted.0 > 100 && counted.1 > 10 && counted.2 > 30, "citations found: {counted:?}");
}

#[test]
fn the_check_fails_on_a_bad_path_link_or_command() {
    let root = repo();
    let text = "See `crates/mm/src/nosuch.rs` and [the page](docs/NOSUCH.md); run `vmspace bench nosuch` or \
                `vmspace report --no-such-option`.\n\n```sh\nvmspace race --file nosuchfile\n```\n";
    let p = problems("test.md", &root, text);
    // The link's target is a cited path too: five citations, six findings.
    assert_eq!(p.len(), 6, "{p:#?}");
    assert!(p[0].contains("crates/mm/src/nosuch.rs"), "{p:#?}");
    assert!(p[1].contains("path docs/NOSUCH.md") && p[2].contains("link target docs/NOSUCH.md"), "{p:#?}");
    assert!(p.iter().any(|l| l.contains("race --file nosuchfile")), "{p:#?}");
    assert!(p.iter().any(|l| l.contains("bench nosuch")), "{p:#?}");
    assert!(p.iter().any(|l| l.contains("--no-such-option")), "{p:#?}");
    // And the same sentences with real citations pass.
    let good = "See `crates/mm/src/lib.rs` and [the page](docs/REPORT.md); run `vmspace bench tree` or \
                `vmspace report --quick`.\n\n```sh\nvmspace race --file smaps   # a comment\n```\n";
    assert_eq!(problems("test.md", &root, good), Vec::<String>::new());
}

#[test]
fn synopses_become_example_command_lines() {
    assert_eq!(args_of("diff --seeds A..B [--calls N] [--fork]"), ["diff", "--seeds", "0..2"]);
    assert_eq!(
        args_of("shadow --keep-going -- python3 -c 'x = bytearray(1 << 24)'"),
        ["shadow", "--keep-going", "--", "python3", "-c", "x = bytearray(1 << 24)"]
    );
    assert_eq!(args_of("report | head -1"), ["report"]);
    assert_eq!(args_of("race --file maps  # the default"), ["race", "--file", "maps"]);
    assert_eq!(
        args_of("kernel reader-cost --agent \"pmap -X {pid}\""),
        ["kernel", "reader-cost", "--agent", "pmap -X {pid}"]
    );
    assert_eq!(
        cited_paths("`/proc/self/maps`, crates/mm/src/lib.rs: and crates/*/tests"),
        ["crates/mm/src/lib.rs"]
    );
}
