//! `tfbench report --html`: one self-contained HTML file.

use super::load_result_set;
use crate::baseline::Store;
use crate::cli::ReportArgs;
use crate::compare::{self, CompareOptions};
use crate::env::Environment;
use crate::history::{self, HistoryStore};
use crate::report::html::{HtmlInput, render};
use anyhow::Result;

/// Writes the report; returns a line saying where.
pub fn report(args: &ReportArgs) -> Result<String> {
    super::check_writable(&args.html, "--html")?;
    let baselines = super::baseline_dir(args.dir.baseline_dir.as_deref(), None);
    let store = Store::new(&baselines);
    let mut loaded = Vec::new();
    for spec in &args.results {
        loaded.push(load_result_set(&store, spec)?);
    }
    let comparison = match (&args.baseline, loaded.first()) {
        (Some(spec), Some((label, new))) => {
            let (base_label, old) = load_result_set(&store, spec)?;
            Some(compare::compare(&base_label, &old, label, new, &CompareOptions::default()))
        }
        _ => None,
    };
    // Trends of the cases shown, from this machine's history when there is one.
    let hdir = super::history_dir(args.history_dir.as_deref(), None, &baselines);
    let h = HistoryStore::new(hdir).load(&Environment::gather().fingerprint())?;
    let shown: std::collections::BTreeSet<&str> =
        loaded.iter().flat_map(|(_, r)| r.cases.iter().map(|c| c.id.as_str())).collect();
    let trends: Vec<_> = history::trends(&h.entries, None)
        .into_iter()
        .filter(|t| shown.contains(t.id.as_str()) && t.points.len() >= 2)
        .collect();
    let input = HtmlInput {
        title: args.title.clone(),
        reports: loaded.iter().map(|(l, r)| (l.clone(), r)).collect(),
        comparison: comparison.as_ref(),
        trends: &trends,
    };
    crate::util::write_atomic(&args.html, render(&input).as_bytes())?;
    Ok(format!("HTML report written to {}\n", args.html.display()))
}
