//! The tensor suite. STUB: being written.

use crate::plan::Case;
use crate::suites::{Suite, Workload};
use anyhow::Result;

/// Core tensor operations on the CPU.
pub struct TensorSuite;

impl Suite for TensorSuite {
    fn name(&self) -> &'static str {
        "tensor"
    }
    fn describe(&self) -> &'static str {
        "Core tensor operations: creation, elementwise, reductions, manipulation, matmul, f16/bf16"
    }
    fn spec_toml(&self) -> &'static str {
        include_str!("../../../suites/tensor.toml")
    }
    fn prepare(&self, case: &Case) -> Result<Box<dyn Workload>> {
        anyhow::bail!("{}: not yet implemented", case.id)
    }
}
