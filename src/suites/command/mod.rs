//! The `command` suite: benchmarks of external commands, one per
//! `[[command]]` table of a config file (see `docs/commands.md`).
//!
//! Unlike the built-in suites its benchmarks are data given at run time:
//! [`CommandSuite::from_config`] checks the tables and the plan expands
//! each one's parameter grid like any suite file's. Each case is timed as
//! processes, one per sample ([`workload::CommandWorkload`]), with the
//! child's user and system CPU time and peak RSS from `wait4` reported as
//! metrics, and the same statistics, baselines, history, gate and reports
//! as every suite.
//!
//! | part | file |
//! |------|------|
//! | the `[[command]]` keys and their checks | `spec.rs` |
//! | one process: group, watchdog, `wait4` | `process.rs` |
//! | a case: verify, run, hooks, metrics | `workload.rs` |

use crate::plan::{Case, SuiteSpec};
use crate::suites::Suite;
use crate::workload::Workload;
use anyhow::Result;

mod process;
pub mod spec;
mod workload;

pub use spec::{CommandSpec, SpecError};

/// The suite's name on the command line and in case ids.
pub const NAME: &str = "command";

/// The commands of one config file, as a suite.
pub struct CommandSuite {
    commands: Vec<CommandSpec>,
}

impl CommandSuite {
    /// A suite of `commands`, checked (empty argv, unused or unknown
    /// placeholders, bad checks); the error names the table and key.
    pub fn from_config(commands: Vec<CommandSpec>) -> Result<Self, SpecError> {
        spec::validate(&commands)?;
        Ok(Self { commands })
    }
}

impl Suite for CommandSuite {
    fn name(&self) -> &'static str {
        NAME
    }
    fn describe(&self) -> &'static str {
        "External commands from the config's [[command]] tables, timed as processes (wall, user and system CPU, peak RSS)"
    }
    /// No built-in file: the benchmarks come from the config ([`Suite::spec`]).
    fn spec_toml(&self) -> &'static str {
        ""
    }
    /// Dispatch is by the config's command names, not a fixed table.
    fn benchmarks(&self) -> Vec<&'static str> {
        Vec::new()
    }
    fn spec(&self) -> Result<SuiteSpec> {
        Ok(SuiteSpec { benchmarks: self.commands.iter().map(spec::benchmark).collect() })
    }
    fn prepare(&self, case: &Case, _ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
        let Some(c) = self.commands.iter().find(|c| c.name == case.benchmark) else {
            let names: Vec<&str> = self.commands.iter().map(|c| c.name.as_str()).collect();
            anyhow::bail!("the config has no command `{}`; valid: {}", case.benchmark, names.join(", "));
        };
        let params = case.params.iter().map(|(k, v)| (k.clone(), v.to_string())).collect();
        Ok(Box::new(workload::CommandWorkload::new(c, &params)?))
    }
}

#[cfg(test)]
mod tests;
