//! `tfbench baseline list|show|delete` and `tfbench compare`.

use super::{Outcome, check_machine, check_writable, compare_options, load_run_set};
use crate::baseline::Store;
use crate::cli::{BaselineAction, BaselineArgs, CompareArgs};
use crate::compare;
use crate::config::Settings;
use anyhow::{Result, bail};

/// `tfbench baseline ...`: returns the text to print.
pub fn baseline(args: &BaselineArgs) -> Result<String> {
    let store = Store::new(super::baseline_dir(args.dir.baseline_dir.as_deref(), None));
    match &args.action {
        BaselineAction::List => {
            let infos = store.list()?;
            if infos.is_empty() {
                return Ok(format!("no baselines in {}\n", store.dir().display()));
            }
            let mut t = comfy_table::Table::new();
            t.load_style(comfy_table::presets::UTF8_FULL_CONDENSED)
                .set_content_arrangement(comfy_table::ContentArrangement::Disabled)
                .force_no_tty()
                .set_header(["name", "saved at", "machine", "fingerprint", "cases", "failed", "problem"]);
            for i in &infos {
                t.add_row([
                    i.name.clone(),
                    i.saved_at.clone(),
                    i.cpu_model.clone(),
                    i.fingerprint.clone(),
                    i.cases.to_string(),
                    i.failed.to_string(),
                    i.problem.clone().unwrap_or_default(),
                ]);
            }
            Ok(format!("{t}\n"))
        }
        BaselineAction::Show { name } => {
            let b = store.load(name)?;
            let env = &b.report.environment;
            let mut out = format!(
                "baseline `{}` saved {} ({})\nmachine: {} (fingerprint {}), tfbench {}, git {}\n\n",
                b.name,
                b.saved_at,
                store.path_of(name)?.display(),
                env.cpu_model,
                b.machine_fingerprint,
                b.report.tfbench_version,
                env.git_revision,
            );
            out.push_str(&crate::report::table::render(&b.report));
            Ok(out)
        }
        BaselineAction::Delete { name } => {
            store.delete(name)?;
            Ok(format!("deleted baseline `{name}` from {}\n", store.dir().display()))
        }
    }
}

/// `tfbench compare`: two stored result sets, no running.
pub fn compare(args: &CompareArgs) -> Result<Outcome> {
    let store = Store::new(super::baseline_dir(args.dir.baseline_dir.as_deref(), None));
    let (old_label, old) = load_run_set(&store, &args.baseline)?;
    let (new_label, new) = match &args.against {
        Some(spec) => load_run_set(&store, spec)?,
        None => {
            // The newest other readable baseline: "what changed since NAME".
            let mut infos: Vec<_> = store
                .list()?
                .into_iter()
                .filter(|i| i.problem.is_none() && i.name != args.baseline)
                .collect();
            infos.sort_by(|a, b| a.saved_at.cmp(&b.saved_at));
            let Some(newest) = infos.pop() else {
                bail!(
                    "nothing to compare `{}` against: give --against NAME|FILE (no other baseline is saved)",
                    args.baseline
                );
            };
            eprintln!("comparing against the newest other baseline, `{}`", newest.name);
            load_run_set(&store, &newest.name)?
        }
    };
    if let Some(p) = &args.output {
        check_writable(p, "--output")?;
    }
    let d = Settings::default();
    let opts = compare_options(&args.gate, d.confidence_level, d.seed)?;
    let baselines = super::baseline_dir(args.dir.baseline_dir.as_deref(), None);
    let spreads =
        super::spreads_for(&super::history_dir(args.history_dir.as_deref(), None, &baselines), &new);
    let c = compare::compare_sets(&old_label, &old, &new_label, &new, &spreads, &opts);
    check_machine(&c, args.gate.strict_machine)?;
    super::emit_comparison(&c, args.format, args.output.as_deref(), &args.gate)
}
