//! placeholder
use crate::plan::Case;
use crate::suites::Workload;
pub(crate) fn prepare(case: &Case) -> anyhow::Result<Box<dyn Workload>> { anyhow::bail!("{} not yet", case.id) }
