//! The driver-worker protocol of `tfbench ab` and the plan both sides run.

use crate::cli::WorkerPlan;
use crate::config::{self, CliOverrides, Resolved, Settings};
use crate::plan::Filter;
use anyhow::Result;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the driver-worker protocol; both builds must speak the same.
pub const PROTOCOL: u32 = 1;

/// The worker's greeting: what it will run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Hello {
    /// [`PROTOCOL`].
    pub protocol: u32,
    /// The results schema version of the build.
    pub schema_version: u32,
    /// The build: version and git revision.
    pub build: String,
    /// Case ids in plan order, with their suites.
    pub cases: Vec<(String, String)>,
    /// Harness settings per suite.
    pub settings: BTreeMap<String, Settings>,
    /// Rounds over the plan.
    pub rounds: u32,
    /// The injection test hook in force in this worker, if any.
    pub injected: Option<String>,
    /// The worker understands [`Request::PrepareVerified`] (builds before it
    /// lack the field: they are always sent [`Request::Prepare`]).
    #[serde(default)]
    pub verify_once: bool,
    /// The worker understands [`Request::SampleTimed`] and reports its
    /// timing thread's CPU time with each sample (builds before it lack the
    /// field: they are sent [`Request::Sample`] and screened on wall time
    /// alone).
    #[serde(default)]
    pub cpu_time: bool,
}

/// What the driver asks.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    /// Prepare and verify case `id`.
    Prepare(String),
    /// Prepare case `id` without verifying it: a process of the same build
    /// verified it in an earlier round on the same seeded inputs. Sent only
    /// to workers whose [`Hello::verify_once`] is set.
    PrepareVerified(String),
    /// Warm the prepared case up for this many seconds.
    WarmUp(f64),
    /// Time one sample of this many iterations.
    Sample(u64),
    /// Time one sample of this many iterations and report the timing
    /// thread's CPU time with it ([`Reply::Timed`]). Sent only to workers
    /// whose [`Hello::cpu_time`] is set.
    SampleTimed(u64),
    /// Drop the prepared case.
    Finish,
    /// Exit.
    Quit,
}

/// What the worker answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// Done (prepare passed verification; finish).
    Ok,
    /// The case refuses to run here, with the reason.
    Skipped(String),
    /// The case failed in a phase, with the reason.
    Failed {
        /// `prepare`, `verify`, `warm_up`, `measure`.
        phase: String,
        /// What went wrong.
        reason: String,
    },
    /// Warm-up done: the last batch's time per iteration, ns.
    PerIter(f64),
    /// A sample's elapsed nanoseconds.
    Nanos(f64),
    /// A sample's elapsed nanoseconds and the CPU time its timing thread
    /// ran meanwhile, where the platform reports it: what tells a sample
    /// that waited for the scheduler's tick from work (`harness::screen`).
    Timed {
        /// Elapsed nanoseconds.
        nanos: f64,
        /// The timing thread's CPU nanoseconds over the same sample.
        cpu_ns: Option<f64>,
    },
}

/// Resolves the plan both sides run from the plan options.
pub(crate) fn resolve_plan(p: &WorkerPlan) -> Result<Resolved> {
    let loaded = p.selection.config.as_deref().map(config::load).transpose()?;
    let cli = CliOverrides {
        suites: p.selection.suites.clone(),
        filter: Filter {
            pattern: p.selection.filter.clone(),
            exact: p.selection.exact,
            skip: p.selection.skip.clone(),
        },
        harness: p.timing.settings(),
        quick: p.selection.quick,
        threads: p.timing.threads.as_ref().map(crate::plan::ThreadCounts::max),
        thread_sweep: p.timing.threads.as_ref().map(crate::plan::ThreadCounts::sweep).unwrap_or_default(),
        rounds: p.timing.rounds,
        shuffle: false,
        shard: None,
        devices: crate::backend::parse_list(&p.selection.devices)?,
        model: None,
        model_name: None,
    };
    config::resolve(loaded.as_ref(), &cli)
}

/// The command-line words that give a worker the same plan.
pub(crate) fn plan_args(p: &WorkerPlan) -> Vec<String> {
    let mut a = Vec::new();
    for s in &p.selection.suites {
        a.extend(["--suite".into(), s.clone()]);
    }
    if p.selection.exact {
        a.push("--exact".into());
    }
    if let Some(s) = &p.selection.skip {
        a.extend(["--skip".into(), s.clone()]);
    }
    if let Some(c) = &p.selection.config {
        a.extend(["--config".into(), c.display().to_string()]);
    }
    if p.selection.quick {
        a.push("--quick".into());
    }
    for d in &p.selection.devices {
        a.extend(["--device".into(), d.clone()]);
    }
    a.extend(p.timing.to_args());
    if let Some(f) = &p.selection.filter {
        a.extend(["--".into(), f.clone()]);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;

    fn parse(words: &[&str]) -> Cli {
        Cli::try_parse_from(words).unwrap_or_else(|e| panic!("{words:?}: {e}"))
    }

    #[test]
    fn a_worker_gets_the_plan_and_timing_it_was_given() {
        let ab = parse(&[
            "tfbench",
            "ab",
            "--base",
            "a",
            "--head",
            "b",
            "--suite",
            "tensor",
            "--skip",
            "bmm",
            "--sample-size",
            "7",
            "--warm-up-time",
            "0.1",
            "--measurement-time",
            "0.2",
            "--max-time",
            "1.5",
            "--rounds",
            "3",
            "-j",
            "2",
            "--seed",
            "9",
            "--quick",
            "unary",
        ]);
        let Command::Ab(a) = ab.command else { panic!("not ab") };
        let words = plan_args(&a.plan);
        let mut argv = vec!["tfbench".to_string(), "ab-worker".to_string()];
        argv.extend(words);
        let Command::AbWorker(w) = parse(&argv.iter().map(String::as_str).collect::<Vec<_>>()).command else {
            panic!("not ab-worker")
        };
        // Everything that shapes the plan or its timing arrives unchanged.
        assert_eq!(format!("{:?}", w.plan.timing), format!("{:?}", a.plan.timing));
        assert_eq!(format!("{:?}", w.plan.selection), format!("{:?}", a.plan.selection));
        assert_eq!(a.plan.timing.sample_size, Some(7));
        assert_eq!(a.plan.timing.rounds, Some(3));
    }

    #[test]
    fn older_workers_are_never_asked_to_skip_verification() {
        // A greeting from a build before `verify_once` existed.
        let old = r#"{"protocol":1,"schema_version":3,"build":"tfbench 0.1.0 (abc)","cases":[["s/b","s"]],"settings":{},"rounds":2,"injected":null}"#;
        let h: Hello = serde_json::from_str(old).unwrap();
        assert!(!h.verify_once, "absent means the worker verifies on every prepare");
        let new = Hello { verify_once: true, ..h };
        let back: Hello = serde_json::from_str(&serde_json::to_string(&new).unwrap()).unwrap();
        assert!(back.verify_once);
        // The request is its own variant, so an older worker could never
        // mistake it for a plain prepare.
        let r = serde_json::to_string(&Request::PrepareVerified("s/b".into())).unwrap();
        assert_eq!(r, r#"{"prepare_verified":"s/b"}"#);
    }

    #[test]
    fn older_workers_are_asked_for_plain_samples_and_their_replies_still_read() {
        let old = r#"{"protocol":1,"schema_version":3,"build":"tfbench 0.1.0 (abc)","cases":[],"settings":{},"rounds":2,"injected":null,"verify_once":true}"#;
        let h: Hello = serde_json::from_str(old).unwrap();
        assert!(!h.cpu_time, "absent means the worker knows only `sample`");
        let r = serde_json::to_string(&Request::SampleTimed(7)).unwrap();
        assert_eq!(r, r#"{"sample_timed":7}"#);
        let timed: Reply = serde_json::from_str(r#"{"timed":{"nanos":5.0,"cpu_ns":null}}"#).unwrap();
        assert!(matches!(timed, Reply::Timed { nanos, cpu_ns: None } if nanos == 5.0));
        let plain: Reply = serde_json::from_str(r#"{"nanos":5.0}"#).unwrap();
        assert!(matches!(plain, Reply::Nanos(n) if n == 5.0));
    }
}
