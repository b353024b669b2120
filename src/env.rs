//! Description of the machine and toolchain. STUB: being written.

use serde::{Deserialize, Serialize};

/// The machine, OS and build a run happened on.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct Environment {
    /// CPU model name.
    pub cpu_model: String,
}

impl Environment {
    /// Reads the environment of this process.
    pub fn gather() -> Self {
        Self::default()
    }
}
