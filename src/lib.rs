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
//! Where things plug in:
//! - **a suite**: a folder under `src/suites/` implementing
//!   [`suites::Suite`], a file under `suites/`, one line in
//!   [`suites::registry`]; it speaks the vocabulary of [`workload`]
//!   ([`workload::Workload`], [`workload::Verification`], ...) and imports
//!   no other suite; its numeric kernels live in [`kernels`].
//! - **a device**: a variant of [`device::Device`] with its availability
//!   check, and the benchmarks that list it in [`suites::Suite::devices`];
//!   its workloads wait for it in [`workload::Workload::sync`]. CUDA is
//!   [`cuda`] (driver, contexts, NVRTC, cuBLAS, the GPU workload harness),
//!   with its kernels in `kernels::cuda`.
//! - **a model**: the model runtime [`model`], beside [`kernels`]: model
//!   graphs and shapes, GGUF and Hugging Face files ([`model::open`]),
//!   tokenizers from files, KV caches, the forward passes on the CPU and on
//!   CUDA (`model::cuda`). It imports no suite, plan or config; the
//!   inference suite (`suites/inference/`) is a description of cases over
//!   it, and `--model` reaches it through [`model::open`] and
//!   [`suites::inference::model_cases`].
//! - **external commands**: a config's `[[command]]` tables become the
//!   `command` suite ([`suites::command`]), a suite built at run time that
//!   [`config::resolve`] adds to the plan; its processes use the workload's
//!   optional per-sample hooks and time limit.
//! - **an output format**: a file under `src/report/`.
//! - **a user's own benchmarks**: a `harness = false` bench target calling
//!   [`bench::main`]; its closures (or its own [`suites::Suite`]) run
//!   through the same plan, harness, reports, baselines and gate.

#![deny(missing_docs)]

/// Unit tests run with the counting allocator installed, as the binary does,
/// so workloads' allocator checks are exercised for real (`.cargo/config.toml`
/// runs tests one at a time so the process-wide counters are not shared).
#[cfg(test)]
#[global_allocator]
static TEST_ALLOC: harness::alloc::CountingAlloc = harness::alloc::CountingAlloc;

pub mod alloc;
pub mod analysis;
pub mod app;
pub mod backend;
pub mod baseline;
pub mod bench;
pub mod cli;
pub mod compare;
pub mod config;
pub mod data;
pub mod env;
pub mod harness;
pub mod history;
pub mod isa;
pub mod kernels;
pub mod live;
pub mod merge;
pub mod model;
pub mod plan;
pub mod probe;
pub mod progress;
pub mod report;
pub mod results;
pub mod stats;
pub mod suites;
pub mod units;
pub mod util;
pub mod workload;
