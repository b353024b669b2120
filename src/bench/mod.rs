//! tfbench as the harness behind `cargo bench`: a user's own benchmarks get
//! tfbench's sampling, statistics, baselines, history, gate and reports.
//!
//! In the user's crate: `tfbench` as a dev-dependency, a bench target with
//! `harness = false`, and one call of [`main`]:
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
//!     tfbench::bench::main(|c| {
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
//! `tfbench run` applies ([`crate::cli::BenchArgs`]), with criterion's
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
mod modes;
mod registry;

pub use closure::{Bencher, IntoRoutine, IntoVerification, Routine, Timed};
pub use registry::{Benches, Grid};
// The vocabulary a benchmark needs, in one place.
pub use crate::plan::{Case, ParamValue};
pub use crate::suites::Suite;
pub use crate::workload::{Metric, Throughput, Verification, Workload, skip};
/// The `Result` of setups and checks (anyhow's: any error converts).
pub use anyhow::Result;

use crate::app::{EXIT_USAGE, Outcome};
use crate::cli::BenchArgs;
use clap::Parser;
use std::process::ExitCode;

/// The entry point of a `harness = false` bench target: `register` adds the
/// benchmarks, then the command line (`cargo bench -- [OPTIONS] [FILTER]`)
/// says what to do. Returns the exit status, as `tfbench run` would: 0, 1
/// for a regression with `--fail-on-regression`, 2 for bad input (nothing
/// run or written), 3 when a case failed (the others' results are still
/// written).
pub fn main(register: impl FnOnce(&mut Benches)) -> ExitCode {
    let args: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    let name = args.first().map_or_else(|| "bench".to_string(), |a| target_name(a));
    main_with(&name, args, register)
}

/// [`main`] with the suite name and arguments given (tests).
fn main_with(name: &str, args: Vec<String>, register: impl FnOnce(&mut Benches)) -> ExitCode {
    let cli = match BenchArgs::try_parse_from(&args) {
        Ok(cli) => cli,
        // --help comes here too; clap prints it and exits 0.
        Err(e) => e.exit(),
    };
    let mut benches = Benches::new(name);
    register(&mut benches);
    let outcome = crate::app::check_process(cli.data_dir.as_deref())
        .and_then(|()| benches.into_registry())
        .and_then(|registry| modes::dispatch(&registry, cli));
    match outcome {
        Ok(outcome) => ExitCode::from(outcome.code()),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// The bench target's name from its executable: cargo names it
/// `<target>-<16 hex digits>`; the hash is dropped.
fn target_name(argv0: &str) -> String {
    let stem =
        std::path::Path::new(argv0).file_stem().map_or(argv0.into(), |s| s.to_string_lossy().into_owned());
    match stem.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            name.to_string()
        }
        _ => stem,
    }
}

/// How a bench target's run ended, as [`Outcome`] codes.
fn outcome_of(failed: usize) -> Outcome {
    if failed > 0 { Outcome::CaseFailures } else { Outcome::Success }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_name_drops_cargos_hash() {
        assert_eq!(target_name("/x/target/release/deps/sums-0123456789abcdef"), "sums");
        assert_eq!(target_name("my_bench-0123456789abcdef"), "my_bench");
        assert_eq!(target_name("./sums-v2"), "sums-v2");
    }
}
