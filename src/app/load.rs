//! `tfbench load`: a LoadGen scenario against the in-process engine or an
//! OpenAI-compatible server, then the summary (stdout) and the results with
//! every query's log (JSON, `--output`). See docs/serving.md.

use super::Outcome;
use crate::cli::load::LoadArgs;
use anyhow::Result;

/// Runs `tfbench load`.
#[cfg(feature = "models")]
pub fn load(a: &LoadArgs) -> Result<Outcome> {
    imp::load(a)
}

/// Without the model runtime there is no engine and no tokenizer.
#[cfg(not(feature = "models"))]
pub fn load(_: &LoadArgs) -> Result<Outcome> {
    anyhow::bail!("tfbench load: this tfbench was built without the `models` feature (the model runtime)")
}

#[cfg(feature = "models")]
mod imp;
#[cfg(feature = "models")]
mod pressure;
#[cfg(feature = "models")]
mod serve;
#[cfg(feature = "models")]
mod text;
