//! `tfbench list`.

use super::resolve;
use crate::cli::{ListArgs, ListFormat};
use crate::config::PartialSettings;
use crate::plan;
use anyhow::Result;
use serde::Serialize;

#[derive(Serialize)]
struct ListedCase {
    id: String,
    params: std::collections::BTreeMap<String, plan::ParamValue>,
}

#[derive(Serialize)]
struct ListedBenchmark {
    name: String,
    description: String,
    cases: Vec<ListedCase>,
}

#[derive(Serialize)]
struct ListedSuite {
    name: String,
    description: String,
    benchmarks: Vec<ListedBenchmark>,
}

/// `tfbench list`: suites, benchmarks and the cases a run would expand to.
pub fn list(args: &ListArgs) -> Result<String> {
    let (plan, _) = resolve(&args.selection, PartialSettings::default(), None)?;
    let mut suites = Vec::new();
    for s in &plan.suites {
        let spec = &plan.specs[s.name()];
        let benchmarks: Vec<ListedBenchmark> = spec
            .benchmarks
            .iter()
            .map(|b| ListedBenchmark {
                name: b.name.clone(),
                description: b.description.clone(),
                cases: plan
                    .cases
                    .iter()
                    .filter(|c| c.suite == s.name() && c.benchmark == b.name)
                    .map(|c| ListedCase { id: c.id.clone(), params: c.params.clone() })
                    .collect(),
            })
            .filter(|b| !b.cases.is_empty())
            .collect();
        // Like benchmarks above: a suite the filter leaves empty is not listed.
        if !benchmarks.is_empty() {
            suites.push(ListedSuite { name: s.name().into(), description: s.describe().into(), benchmarks });
        }
    }
    match args.format {
        ListFormat::Json => Ok(serde_json::to_string_pretty(
            &serde_json::json!({ "suites": suites, "cases": plan.cases.len() }),
        )? + "\n"),
        ListFormat::Table => {
            // Plain indented text: descriptions are prose and wrap; ids stay
            // one per line so `tfbench list | grep` works.
            let mut out = String::new();
            for s in &suites {
                let n: usize = s.benchmarks.iter().map(|b| b.cases.len()).sum();
                out.push_str(&format!(
                    "{} ({n} cases): {}
",
                    s.name, s.description
                ));
                for b in &s.benchmarks {
                    out.push_str(&format!("\n  {} ({} cases)\n", b.name, b.cases.len()));
                    for line in wrap(&b.description, 92) {
                        out.push_str(&format!("      {line}\n"));
                    }
                    for c in &b.cases {
                        out.push_str(&format!("    {}\n", c.id));
                    }
                }
                out.push('\n');
            }
            out.push_str(&format!("{} case(s) in {} suite(s)\n", plan.cases.len(), suites.len()));
            Ok(out)
        }
    }
}

/// Greedy word wrap at `width` columns.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}
