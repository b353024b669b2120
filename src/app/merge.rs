//! `tfbench merge`: shard results into one results file.

use crate::cli::MergeArgs;
use anyhow::Result;

/// Merges and writes; returns a line saying what was written.
pub fn merge(args: &MergeArgs) -> Result<String> {
    super::check_writable(&args.output, "--output")?;
    let mut inputs = Vec::new();
    for p in &args.inputs {
        inputs.push((p.display().to_string(), crate::baseline::load_results(p)?));
    }
    let merged = crate::merge::merge(inputs)?;
    for w in &merged.warnings {
        eprintln!("warning: {w}");
    }
    let text = crate::report::render(crate::report::Format::Json, &merged.report)?;
    crate::util::write_atomic(&args.output, text.as_bytes())?;
    Ok(format!(
        "merged {} file(s), {} case(s), into {}\n",
        args.inputs.len(),
        merged.report.cases.len(),
        args.output.display()
    ))
}
