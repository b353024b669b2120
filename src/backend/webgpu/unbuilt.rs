//! Without the `webgpu` feature: no adapter can be listed and no
//! [`Program`] made, each refusal saying why. The API is the feature's, so
//! the suites build the same either way.

use super::{AdapterInfo, Op, Phases};
use anyhow::{Result, bail};
use std::time::Duration;

/// Why nothing runs on a WebGPU device in this build.
pub(super) const UNBUILT: &str =
    "this tfbench was built without the `webgpu` feature (cargo build --release --features webgpu)";

/// No adapters: the build has no wgpu.
pub(super) fn adapter_infos() -> Result<Vec<AdapterInfo>, String> {
    Err(UNBUILT.into())
}

/// A kernel ready to dispatch; in this build none can exist (the value is
/// uninhabited), so every method but [`Program::load`] is unreachable.
pub struct Program(std::convert::Infallible);

impl Program {
    /// Refused: the build lacks the `webgpu` feature.
    pub fn load(adapter: u32, _op: Op, _inputs: &[&[f32]]) -> Result<Program> {
        bail!("webgpu:{adapter}: {UNBUILT}")
    }
    /// Dispatches the kernel `iters` times (never reached in this build).
    pub fn dispatch(&mut self, _iters: u64) -> Result<()> {
        match self.0 {}
    }
    /// The output buffer's floats (never reached in this build).
    pub fn read_output(&mut self) -> Result<Vec<f32>> {
        match self.0 {}
    }
    /// How long compiling and uploading took (never reached in this build).
    pub fn phases(&self) -> Phases {
        match self.0 {}
    }
    /// The adapter it runs on (never reached in this build).
    pub fn adapter(&self) -> &AdapterInfo {
        match self.0 {}
    }
    /// The longest one wait for the device may take (never reached).
    pub fn set_time_limit(&mut self, _limit: Duration) {
        match self.0 {}
    }
}
