//! A user's own benchmarks, for tfbench as the harness behind `cargo bench`:
//! they get tfbench's sampling, statistics, baselines, history, gate and
//! reports. This module is the vocabulary of registering them ([`Benches`],
//! [`Bencher`], ...); the driver that reads the command line and runs them
//! is [`crate::main`] (it lives with the commands, in `app`, so that this
//! library never imports the CLI).
//!
//! In the user's crate: `tfbench` as a dev-dependency, a bench target with
//! `harness = false`, and one call of [`crate::main`]:
//!
//! ```toml
//! [dev-dependencies]
//! tfbench = "0.1"
//!
//! [[bench]]
//! name = "sums"
//! harness = false
//! ```
//!
//! ```no_run
//! // benches/sums.rs
//! use tfbench::bench::{Throughput, Verification};
//!
//! fn main() -> std::process::ExitCode {
//!     tfbench::main(|c| {
//!         c.bench_with_input("sum", "n", [1_000u64, 1_000_000], |b, &n| {
//!             let data: Vec<u64> = (0..n).collect(); // setup: untimed
//!             b.throughput(Throughput::elements(n as f64));
//!             b.iter(move || data.iter().sum::<u64>()) // timed
//!                 .verify(move |s| Verification::equal("n(n-1)/2", s, &(n * (n - 1) / 2)))
//!         });
//!     })
//! }
//! ```
//!
//! Then `cargo bench -- --quick --save-baseline main` and later
//! `cargo bench -- --baseline main --fail-on-regression`: every option of
//! `tfbench run` applies (`tfbench help run`), with criterion's
//! spellings (`--save-baseline`, `--baseline`, `--sample-size`,
//! `--measurement-time`, `--warm-up-time`, `--profile-time`,
//! `--output-format`). Case ids read `<bench target>/<benchmark>/<params>`.
//!
//! Modes, from the arguments: `--bench` (which `cargo bench` passes)
//! measures; without it (`cargo test --benches`) or with `--test` each case
//! is prepared, checked and run once, as a test; `--list` lists the cases;
//! `--profile-time SECS` runs each case for SECS seconds, nothing analysed
//! or written. A setup, routine or check that panics or fails fails its
//! case with the message; the other cases still run.

mod closure;
mod registry;

pub use closure::{Bencher, IntoRoutine, IntoVerification, Routine, Timed};
pub use registry::{Benches, Grid};
// The vocabulary a benchmark needs, in one place.
pub use crate::plan::{Case, ParamValue};
pub use crate::suites::Suite;
pub use crate::workload::{Metric, Throughput, Verification, Workload, skip};
/// The `Result` of setups and checks (anyhow's: any error converts).
pub use anyhow::Result;
