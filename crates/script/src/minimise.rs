//! Delta debugging of scripts: the smallest script (by lines removed) that still shows a difference.
//!
//! [`minimise`] removes chunks of ops, halving the chunk size down to single ops, and keeps a removal when
//! the caller's predicate still holds for the smaller script (`ddmin` without the complement step). A
//! removal that would leave an `fd=NAME` or `ftruncate NAME` of a file the original script declares without
//! that declaration before it is not tried: such a name would silently turn into a descriptor that is not open
//! (EBADF), a different script rather than a smaller one. Names the original never declares stay as they are.
//! The result is renumbered (op `i` on line `i + 1`), ready to print and commit.

use crate::ast::{Fd, Op, Script};

/// Whether every use of a name in `declared` (the original script's files) follows its declaration in `ops`.
fn valid(ops: &[Op], declared: &[&str]) -> bool {
    let mut files: Vec<&str> = Vec::new();
    for op in ops {
        let used = match op {
            Op::File { name, .. } => {
                files.push(name);
                None
            }
            Op::Mmap { file: Some((Fd::Name(name), _)), .. } | Op::Ftruncate { name, .. } => {
                Some(name.as_str())
            }
            _ => None,
        };
        if let Some(n) = used
            && declared.contains(&n)
            && !files.contains(&n)
        {
            return false;
        }
    }
    true
}

/// Shrinks `script` while `still_fails` holds for the candidate (it is assumed to hold for `script`).
/// Calls the predicate O(n log n) times for n ops in the usual case.
pub fn minimise(script: &Script, mut still_fails: impl FnMut(&Script) -> bool) -> Script {
    let declared = script.file_names();
    let mut ops: Vec<Op> = script.lines.iter().map(|l| l.op.clone()).collect();
    let mut chunk = ops.len().div_ceil(2).max(1);
    loop {
        let mut removed_any = false;
        let mut i = 0;
        while i < ops.len() {
            let end = (i + chunk).min(ops.len());
            let mut cand = ops.clone();
            cand.drain(i..end);
            if !cand.is_empty() && valid(&cand, &declared) && still_fails(&Script::from_ops(cand.clone())) {
                ops = cand;
                removed_any = true;
            } else {
                i += chunk;
            }
        }
        if chunk == 1 && !removed_any {
            break;
        }
        if !removed_any {
            chunk = (chunk / 2).max(1);
        }
    }
    Script::from_ops(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_what_the_failure_needs() {
        let s = Script::parse(
            "file a 8192\nmunmap 0 1\nmmap 0x1000 4096 r-- private fd=a off=0\nmunmap 0 2\nbrk 7\nmunmap 0 3\n",
        )
        .unwrap();
        // "Fails" while a brk 7 and the file mapping are present.
        let fails = |s: &Script| {
            s.lines.iter().any(|l| l.op == Op::Brk { addr: 7 })
                && s.lines.iter().any(|l| matches!(l.op, Op::Mmap { .. }))
        };
        let m = minimise(&s, fails);
        assert_eq!(m.to_text(), "file a 0x2000\nmmap 0x1000 0x1000 r-- private fd=a off=0\nbrk 7\n");
    }

    #[test]
    fn keeps_declarations_of_truncated_files_and_drops_nothing_else_needed() {
        let s = Script::parse("file a 8192\nbrk 1\nftruncate a 0\nmmap 0 1 r-- private fd=zz off=0\nbrk 2\n")
            .unwrap();
        // "Fails" while an ftruncate of a and the mapping of the undeclared zz are present.
        let fails = |s: &Script| {
            s.lines.iter().any(|l| matches!(&l.op, Op::Ftruncate { .. }))
                && s.lines.iter().any(|l| matches!(l.op, Op::Mmap { .. }))
        };
        let m = minimise(&s, fails);
        assert_eq!(m.to_text(), "file a 0x2000\nftruncate a 0\nmmap 0 1 r-- private fd=zz off=0\n");
    }
}
