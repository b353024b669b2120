//! `tfbench baseline list|show|delete` (`tfbench compare` has a file of its
//! own, `compare.rs`).

use crate::baseline::Store;
use crate::cli::{BaselineAction, BaselineArgs};
use anyhow::Result;

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
