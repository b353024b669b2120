//! `tfbench merge`: joins the results of shards (`run --shard I/N`) into one
//! report, as if one machine had run the whole plan.

use crate::results::RunReport;
use anyhow::{Result, bail};
use std::collections::BTreeMap;

/// A merged report and what the merge had to say about its inputs.
#[derive(Debug)]
pub struct Merged {
    /// The joined report.
    pub report: RunReport,
    /// Remarks such as inputs from different machines.
    pub warnings: Vec<String>,
}

/// Merges labelled reports (label = file name, for messages). Cases keep the
/// order of the inputs; a case id in two inputs is an error naming both.
/// Wall time is the longest input's (shards run side by side); targets are
/// re-evaluated over all cases against the first input's machine limits.
pub fn merge(inputs: Vec<(String, RunReport)>) -> Result<Merged> {
    let mut it = inputs.into_iter();
    let Some((first_label, mut out)) = it.next() else { bail!("merge needs at least one results file") };
    let mut warnings = Vec::new();
    let mut seen: BTreeMap<String, String> =
        out.cases.iter().map(|c| (c.id.clone(), first_label.clone())).collect();
    let fingerprint = out.environment.fingerprint();
    for (label, r) in it {
        if r.environment.fingerprint() != fingerprint {
            warnings.push(format!(
                "{label} comes from another machine ({}) than {first_label} ({}); merged results mix machines",
                r.environment.cpu_model, out.environment.cpu_model
            ));
        }
        if r.harness.settings != out.harness.settings {
            warnings.push(format!("{label} was run with other harness settings than {first_label}"));
        }
        for c in r.cases {
            if let Some(prev) = seen.insert(c.id.clone(), label.clone()) {
                bail!("case {} is in both {prev} and {label}; shards must not overlap", c.id);
            }
            out.cases.push(c);
        }
        out.wall_time_secs = out.wall_time_secs.max(r.wall_time_secs);
        if r.started_at < out.started_at {
            out.started_at = r.started_at;
        }
    }
    let mut specs = Vec::new();
    let mut suites: Vec<&str> = out.cases.iter().map(|c| c.suite.as_str()).collect();
    suites.sort();
    suites.dedup();
    for s in suites {
        if let Some(suite) = crate::suites::find(s) {
            specs.extend(suite.targets());
        }
    }
    out.targets = crate::analysis::evaluate_targets(&specs, &out.cases, out.machine_limits.as_ref());
    Ok(Merged { report: out, warnings })
}
