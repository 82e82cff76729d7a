//! `vmspace report`: every experiment of the project, engine beside kernel, in one run, written as one JSON
//! report set, SVG figures and one self-contained HTML page; and the comparison of two such runs.
//!
//! # Shape
//!
//! An experiment is a module of [`experiments`] with one interface, [`experiment::Experiment`]: it says what
//! it measures ([`Experiment::method`](experiment::Experiment::method)), how long it will take at a
//! [`Length`](experiment::Length), runs (pushing reports in the shared schema, `vmspace_results::report`,
//! through a [`Ctx`](experiment::Ctx) that also carries progress and Ctrl-C), and presents its reports: a
//! [`Section`](model::Section) (tables in the kernel threads' own shapes, a one-line verdict in plain words,
//! figures) and its [`TargetResult`](targets::TargetResult)s. Presenting reads only reports, so a section can
//! be drawn again from a `report.json`.
//!
//! The engine-beside-kernel experiments (faults, fork, contention, tearing) are built from *sides*: one
//! [`Side`](experiment::Side) per thing measured (the live kernel, each engine mode), all run on the same
//! points of one plan ([`Plan`](experiment::Plan): thread counts, VMA counts, grid rows, tests), one point at a
//! time for every side, so that the engine's figure and the kernel's are taken minutes apart at most. An
//! engine side whose engine code has not landed yet is an [`AwaitingEngine`](experiment::AwaitingEngine): it
//! is never run, and every table, figure, verdict and target says "not yet measured on the engine" and what
//! it awaits where its figures would be; no number stands in for it.
//!
//! # Plugging in an engine side
//!
//! 1. Implement [`Side<P>`](experiment::Side) for the experiment's plan type `P`
//!    ([`experiments::faults::FaultsPlan`], [`experiments::fork::ForkPlan`],
//!    [`experiments::contention::ContentionPlan`], [`experiments::tearing::TearingPlan`]): `info` names it,
//!    `measure(plan, point, ctx)` measures one point and returns one [`Report`](vmspace_results::report::Report)
//!    with the metrics that experiment's module documents ("Contract of a side's report"), calling
//!    [`Ctx::step`](experiment::Ctx::step) after each run and stopping with
//!    [`Interrupted`](vmspace_linux::child::Interrupted) when [`Ctx::interrupted`](experiment::Ctx::interrupted).
//! 2. Put it in place of the placeholder in [`engine`] ([`engine::faults_sides`], [`engine::fork_sides`],
//!    [`engine::contention_sides`], [`engine::tearing_sides`]: one function per experiment, the seam). Nothing
//!    else changes: the tables, figures, verdicts and targets pick the side up by its id.
//!
//! # Modules
//! - [`experiment`]: the interface (experiments, sides, plans, the run context, lengths);
//! - [`experiments`]: the six experiments and their run order; [`engine`]: the engine sides (faults, fork,
//!   contention and tearing measured; the lockless reader mode's placeholder until it lands);
//! - [`targets`]: targets judged with their run-to-run spread (met, missed, undecided, not measurable here, not
//!   measured; indicative in a `--quick` run);
//! - [`model`]: what a section is made of (tables, figures); [`plot`]: SVG figures (plotters);
//! - [`machine`]: load average, CPU steal and other work on the machine during each phase;
//! - [`run`]: the whole run, its report set, and the presentation of a report set; [`terminal`]: its text
//!   within 100 columns (the whole tables with `--wide`);
//! - [`html`]: the self-contained pages; [`compare`]: two report sets side by side.
//!
//! Depends on `bench` (the range trees, the address space against the kernel, and the engine's fault and fork
//! workloads its engine sides call), `linux` (the kernel's sides of the probe experiments), `results` (the schema) and `host` (the machine's description); nothing
//! depends on it but the CLI.

pub mod compare;
pub mod engine;
pub mod experiment;
pub mod experiments;
pub mod html;
pub mod machine;
pub mod model;
pub mod plot;
pub mod run;
pub mod targets;
pub mod terminal;
