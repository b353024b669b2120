//! tfbench: a benchmark runner for the work of a transformer stack.
//!
//! Data flows one way:
//!
//! ```text
//! suites/*.toml + configs/*.toml|yaml + CLI flags (--suite, FILTER, --device)
//!         |  config::resolve (defaults < profile < config file < suite section < CLI)
//!         v
//!       Plan = Vec<Case>   (plan: suite x benchmark x grid x device, filtered)
//!         |  harness::runner (prepare on the case's device, verify, warm up,
//!         |  calibrate, sample; Workload::sync before every clock read;
//!         |  canaries between cases; no statistics)
//!         v
//!       Samples
//!         |  analysis + stats (pure functions)
//!         v
//!       RunReport          (results: estimates, CIs, outliers, throughput)
//!         |
//!         +-- report::{table, json, jsonl, csv, markdown, bencher, html}
//!         +-- live (run --live pushes each case; serve shows the report, updating)
//!         +-- baseline::Store (several runs per baseline) / history
//!         +-- compare (stored sets) / app::ab (two builds, paired) -> verdicts, gate
//! ```
//!
//! Layers, from the bottom up (a module imports only from layers below it;
//! `tests/layering.rs` checks there is no cycle):
//!
//! ```text
//! app (commands) / cli (parsing) / live / report / compare / baseline / history
//! harness (runner, sampler, placement, canaries)   analysis, stats
//! suites/*            the benchmarks: parameters, inputs, work counts, references
//! kernels/            every CPU numeric kernel, once
//! backend/{cpu,cuda}  the devices: availability, threads, buffers, sync, roofs
//! workload, plan, env, isa, util   the vocabulary every layer speaks
//! ```
//!
//! Where things plug in:
//! - **a suite**: a folder under `src/suites/` implementing [`Suite`], a
//!   file under `suites/`, one line in [`suites::registry`]; it speaks the
//!   vocabulary of [`workload`] ([`Workload`], [`Verification`], ...),
//!   takes its threads from the execution context `prepare` is handed
//!   ([`backend::cpu::Context`]), imports no other suite, and keeps its
//!   numeric kernels in [`kernels`].
//! - **a device**: one folder under `src/backend/` with a type implementing
//!   [`backend::Backend`] (availability and the skip reason, the environment
//!   record, `sysinfo` lines, its probe), its line in [`backend::registry`],
//!   and a variant of [`backend::Device`]; its workloads wait for it in
//!   [`Workload::sync`] and give their roof in [`Workload::roof`]. The
//!   steps are spelled out in [`backend`]; CUDA ([`backend::cuda`]) is the
//!   worked example.
//! - **a model**: the model runtime [`model`], beside [`kernels`]: model
//!   graphs and shapes, GGUF and Hugging Face files ([`model::open`]),
//!   tokenizers from files, KV caches, the forward passes on the CPU and on
//!   CUDA (`model::cuda`, on [`backend::cuda`]). It imports no suite, plan or config; the
//!   inference suite (`suites/inference/`) is a description of cases over
//!   it, and `--model` reaches it through [`model::open`] and
//!   [`suites::model_cases`].
//! - **external commands**: a config's `[[command]]` tables become the
//!   `command` suite ([`suites::command`]), a suite built at run time that
//!   [`config::resolve`] adds to the plan; its processes use the workload's
//!   optional per-sample hooks and time limit.
//! - **an output format**: a file under `src/report/`.
//! - **a user's own benchmarks**: a `harness = false` bench target calling
//!   [`main`] with closures registered on [`Benches`] (or its own
//!   [`Suite`]); they run through the same plan, harness, reports,
//!   baselines and gate. The crate root re-exports what such a target
//!   needs; every other module is the binary's machinery, public for the
//!   binary and the integration tests, hidden from the docs.

#![deny(missing_docs)]

/// Unit tests run with the counting allocator installed, as the binary does,
/// so workloads' allocator checks are exercised for real (`.cargo/config.toml`
/// runs tests one at a time so the process-wide counters are not shared).
#[cfg(test)]
#[global_allocator]
static TEST_ALLOC: alloc::CountingAlloc = alloc::CountingAlloc;

// The public API: what a user's bench target needs. Everything else is the
// binary's machinery: public so the `tfbench` binary and the integration
// tests can reach it, hidden from the docs and not covered by semver.
pub use app::bench_target::main;
pub use bench::{Bencher, Benches, Grid};
pub use config::Settings;
pub use plan::{Case, ParamValue};
pub use results::{CaseResult, RunReport};
pub use suites::Suite;
pub use workload::{Metric, Throughput, ThroughputKind, Verification, Workload, skip};

#[doc(hidden)]
pub mod alloc;
#[doc(hidden)]
pub mod analysis;
#[doc(hidden)]
pub mod app;
#[doc(hidden)]
pub mod backend;
#[doc(hidden)]
pub mod baseline;
pub mod bench;
#[doc(hidden)]
pub mod cli;
#[doc(hidden)]
pub mod compare;
#[doc(hidden)]
pub mod config;
#[doc(hidden)]
pub mod data;
#[doc(hidden)]
pub mod env;
#[doc(hidden)]
pub mod harness;
#[doc(hidden)]
pub mod history;
/// A look inside a case: instruction counts, hardware counters, profiles (issue 50).
pub mod inside;
#[doc(hidden)]
pub mod isa;
#[doc(hidden)]
pub mod kernels;
#[doc(hidden)]
pub mod live;
/// Serving under load: LoadGen's scenarios, the continuous-batching engine, the OpenAI-compatible client.
#[cfg(feature = "models")]
pub mod load;
#[doc(hidden)]
pub mod merge;
#[doc(hidden)]
pub mod model;
#[doc(hidden)]
pub mod plan;
#[doc(hidden)]
pub mod probe;
#[doc(hidden)]
pub mod progress;
#[doc(hidden)]
pub mod report;
pub mod results;
#[doc(hidden)]
pub mod stats;
#[doc(hidden)]
pub mod suites;
#[doc(hidden)]
pub mod units;
#[doc(hidden)]
pub mod util;
#[doc(hidden)]
pub mod workload;
