//! `tfbench history`: trends of this machine's recorded runs.

use crate::cli::{HistoryArgs, ListFormat};
use crate::env::Environment;
use crate::history::{self, HistoryStore};
use anyhow::Result;

/// Returns the text to print.
pub fn history(args: &HistoryArgs) -> Result<String> {
    let dir = super::history_dir(args.history_dir.as_deref(), None, std::path::Path::new("baselines"));
    let store = HistoryStore::new(&dir);
    let machine = args.machine.clone().unwrap_or_else(|| Environment::gather().fingerprint());
    let filter = args
        .filter
        .as_deref()
        .map(|f| regex::Regex::new(f).map_err(|e| anyhow::anyhow!("invalid filter regex `{f}`:\n{e}")))
        .transpose()?;
    let h = store.load(&machine)?;
    for w in &h.warnings {
        eprintln!("warning: {w}");
    }
    if h.entries.is_empty() {
        let others = store.machines().unwrap_or_default();
        let hint = if others.is_empty() {
            String::new()
        } else {
            format!("; machines with history: {}", others.join(", "))
        };
        eprintln!(
            "no recorded runs for machine {machine} in {}{hint} (record runs with `tfbench run --history`)",
            dir.display()
        );
    }
    // Filtering first spares change-point detection on cases not shown.
    let trends = history::trends(&h.entries, filter.as_ref());
    match args.format {
        ListFormat::Table => Ok(history::render_table(&trends)),
        ListFormat::Json => history::render_json(&trends),
    }
}
