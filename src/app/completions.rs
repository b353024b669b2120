//! `tfbench completions SHELL` and `tfbench man`: generated from the same
//! clap definitions the parser uses, so they always match the CLI.

use crate::cli::{Cli, CompletionsArgs, ManArgs};
use anyhow::{Context, Result, bail};
use clap::CommandFactory;

/// The completion script for `args.shell`.
pub fn completions(args: &CompletionsArgs) -> Result<String> {
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "tfbench", &mut buf);
    String::from_utf8(buf).context("the completion script is not UTF-8")
}

/// The man page of `tfbench` as roff on stdout, or with `--dir` one page
/// per command written there; returns what to print.
pub fn man(args: &ManArgs) -> Result<(String, Option<String>)> {
    let cmd = Cli::command();
    match &args.dir {
        None => {
            let mut buf = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut buf).context("cannot render the man page")?;
            Ok((String::from_utf8(buf).context("the man page is not UTF-8")?, None))
        }
        Some(dir) => {
            if !dir.is_dir() {
                bail!("cannot write --dir {}: it is not an existing folder", dir.display());
            }
            clap_mangen::generate_to(cmd, dir)
                .with_context(|| format!("cannot write the man pages to --dir {}", dir.display()))?;
            Ok((String::new(), Some(format!("man pages written to {}\n", dir.display()))))
        }
    }
}
