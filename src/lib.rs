//! tfbench: a benchmark runner for the work of a transformer stack.
//!
//! Data flows one way:
//!
//! ```text
//! suites/*.toml + configs/*.toml|yaml + CLI flags
//!         |  config (defaults < profile < config file < suite section < CLI)
//!         v
//!       Plan = Vec<Case>         (plan: suite x benchmark x grid, filtered)
//!         |  harness (warm-up, calibration, samples, allocations; no statistics)
//!         v
//!       Samples
//!         |  analysis + stats (pure functions)
//!         v
//!       RunReport                (results: estimates, CIs, outliers, throughput)
//!         |
//!         +-- report::{table, json, jsonl, csv, markdown, bencher}
//! ```
#![deny(missing_docs)]

/// Unit tests run with the counting allocator installed, as the binary does,
/// so workloads' allocator checks are exercised for real (`.cargo/config.toml`
/// runs tests one at a time so the process-wide counters are not shared).
#[cfg(test)]
#[global_allocator]
static TEST_ALLOC: harness::alloc::CountingAlloc = harness::alloc::CountingAlloc;

pub mod analysis;
pub mod app;
pub mod baseline;
pub mod cli;
pub mod compare;
pub mod config;
pub mod data;
pub mod env;
pub mod harness;
pub mod history;
pub mod isa;
pub mod kernels;
pub mod merge;
pub mod models;
pub mod plan;
pub mod probe;
pub mod progress;
pub mod report;
pub mod results;
pub mod stats;
pub mod suites;
pub mod util;
