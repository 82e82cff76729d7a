//! CPU placement of an experiment's tasks: explicit, checked against the CPUs that exist, and reported.
//!
//! The reference layout for the proc-vs-map test is "mapper on CPU 0, scanners and busy tasks on CPU 1": the mapper
//! runs alone, and each busy task competes with a scanner for one CPU (that competition is what starves a
//! scanner while it holds a lock). [`Layout::resolve`] keeps that shape on any machine: the mapper gets
//! `--mapper-cpu` (default: the first usable CPU), the others get `--others-cpus` (default: every other usable
//! CPU), and scanner *i* and busy task *i* both go to `others[i % len]`, so pairs always share a CPU. When the
//! requested layout cannot be had (a CPU that is not usable, a single-CPU machine) it either fails with the
//! reason or adapts and records a note — never silently.

use anyhow::{Result, bail};

/// A resolved placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The mapper's CPU.
    pub mapper: usize,
    /// The CPUs the other tasks rotate over.
    pub others: Vec<usize>,
    /// What was adapted and why.
    pub notes: Vec<String>,
}

impl Layout {
    /// Resolves the layout for the `usable` CPUs.
    pub fn resolve(
        usable: &[usize],
        mapper_cpu: Option<usize>,
        others_cpus: Option<&[usize]>,
    ) -> Result<Layout> {
        if usable.is_empty() {
            bail!("no usable CPU in this process's affinity mask");
        }
        let mut notes = Vec::new();
        let mapper = mapper_cpu.unwrap_or(usable[0]);
        if !usable.contains(&mapper) {
            bail!("--mapper-cpu {mapper} is not usable here (usable CPUs: {usable:?})");
        }
        let others = match others_cpus {
            Some(list) => {
                if list.is_empty() {
                    bail!("--others-cpus is empty");
                }
                if let Some(bad) = list.iter().find(|c| !usable.contains(c)) {
                    bail!(
                        "--others-cpus contains CPU {bad}, which is not usable here (usable CPUs: {usable:?})"
                    );
                }
                if list.contains(&mapper) {
                    notes
                        .push(format!("CPU {mapper} is shared by the mapper and other tasks (as requested)"));
                }
                list.to_vec()
            }
            None => {
                let rest: Vec<usize> = usable.iter().copied().filter(|&c| c != mapper).collect();
                if rest.is_empty() {
                    notes.push(format!(
                        "only one usable CPU ({mapper}): the mapper shares it with every scanner and busy task; \
                         this is not the reference layout and results are not comparable with theirs"
                    ));
                    vec![mapper]
                } else {
                    rest
                }
            }
        };
        Ok(Layout { mapper, others, notes })
    }

    /// The CPU of the `i`-th task of a role placed on the "others" CPUs.
    pub fn other(&self, i: usize) -> usize {
        self.others[i % self.others.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_cpu_default_is_the_seeds_layout() {
        let l = Layout::resolve(&[0, 1], None, None).unwrap();
        assert_eq!((l.mapper, l.others.clone()), (0, vec![1]));
        assert_eq!((l.other(0), l.other(3)), (1, 1));
        assert!(l.notes.is_empty());
    }

    #[test]
    fn larger_machine_pairs_share() {
        let l = Layout::resolve(&[0, 1, 2, 3], Some(2), None).unwrap();
        assert_eq!(l.others, vec![0, 1, 3]);
        assert_eq!((l.other(0), l.other(1), l.other(2), l.other(3)), (0, 1, 3, 0));
    }

    #[test]
    fn one_cpu_adapts_with_a_note() {
        let l = Layout::resolve(&[5], None, None).unwrap();
        assert_eq!((l.mapper, l.others.clone()), (5, vec![5]));
        assert_eq!(l.notes.len(), 1);
    }

    #[test]
    fn bad_requests_fail() {
        assert!(Layout::resolve(&[0, 1], Some(2), None).is_err());
        assert!(Layout::resolve(&[0, 1], None, Some(&[3])).is_err());
        assert!(Layout::resolve(&[0, 1], None, Some(&[])).is_err());
        assert!(Layout::resolve(&[], None, None).is_err());
        let l = Layout::resolve(&[0, 1], Some(1), Some(&[1])).unwrap();
        assert_eq!(l.notes.len(), 1);
    }
}
