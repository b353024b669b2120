//! The `tfbench` binary: parse, dispatch, map errors to exit codes.

use clap::Parser;
use std::process::ExitCode;
use tfbench::app::{self, EXIT_USAGE, Outcome};
use tfbench::cli::{Cli, Command};

#[global_allocator]
static ALLOC: tfbench::alloc::CountingAlloc = tfbench::alloc::CountingAlloc;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args_os().map(|a| a.to_string_lossy().into_owned()).collect();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        // --help and --version come here too; clap prints and exits as usual.
        Err(e) => app::suggest::with_suggestion(e, &args).exit(),
    };
    if let Err(e) = app::check_process(cli.data_dir.as_deref()) {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_USAGE);
    }
    let result = match &cli.command {
        Command::List(a) => app::list(a).and_then(|t| app::print_stdout(&t)).map(|_| Outcome::Success),
        Command::Run(a) => app::run(a),
        Command::Sysinfo(a) => app::sysinfo(a).and_then(|t| app::print_stdout(&t)).map(|_| Outcome::Success),
        Command::Compare(a) => app::compare(a),
        Command::Baseline(a) => {
            app::baseline(a).and_then(|t| app::print_stdout(&t)).map(|_| Outcome::Success)
        }
        Command::History(a) => app::history(a).and_then(|t| app::print_stdout(&t)).map(|_| Outcome::Success),
        Command::Report(a) => app::report(a).map(|t| eprint!("{t}")).map(|_| Outcome::Success),
        Command::Merge(a) => app::merge(a).map(|t| eprint!("{t}")).map(|_| Outcome::Success),
        Command::Serve(a) => app::serve(a),
        Command::Ab(a) => app::ab(a),
        Command::Load(a) => app::load(a),
        Command::AbWorker(a) => app::ab_worker(a),
        Command::CountWorker(a) => app::count_worker(a),
        Command::Completions(a) => {
            app::completions(a).and_then(|t| app::print_stdout(&t)).map(|_| Outcome::Success)
        }
        Command::Man(a) => app::man(a)
            .and_then(|(page, note)| {
                note.iter().for_each(|n| eprint!("{n}"));
                app::print_stdout(&page)
            })
            .map(|_| Outcome::Success),
    };
    match result {
        Ok(outcome) => ExitCode::from(outcome.code()),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}
