//! `tfbench compare`: two stored result sets (baselines or files) compared,
//! no running; the gate and the output are shared with `ab`
//! ([`super::emit_comparison`]).

use super::{Outcome, check_machine, check_writable, compare_options, load_run_set};
use crate::baseline::Store;
use crate::cli::CompareArgs;
use crate::compare;
use crate::config::Settings;
use anyhow::{Result, bail};

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
    compare::counts::check(&old, &new).map_err(anyhow::Error::msg)?;
    let c = compare::compare_sets(&old_label, &old, &new_label, &new, &spreads, &opts);
    check_machine(&c, args.gate.strict_machine)?;
    super::emit_comparison(&c, args.format, args.output.as_deref(), &args.gate)
}
