//! The driver of a user's `harness = false` bench target ([`main`]): reads
//! `cargo bench`'s command line and runs the registered benchmarks
//! ([`crate::bench`]) in the mode it asks for, through the same plan,
//! harness, reports, baselines and gate as `tfbench run`.

mod modes;

use crate::app::{EXIT_USAGE, Outcome};
use crate::bench::Benches;
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
