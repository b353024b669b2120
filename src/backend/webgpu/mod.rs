//! The WebGPU backend: compute kernels written in WGSL (readable sources
//! under `kernels/`) run through `wgpu` on device `webgpu:N`, with the Cargo
//! feature `webgpu` (off by default: wgpu and naga are a heavy build).
//!
//! | file | what |
//! |---|---|
//! | `kernels.rs` | [`Op`]: each kernel's WGSL, buffers, uniform and grid (always built) |
//! | `adapter.rs` | (feature) wgpu's instance, the adapters in order, a device per adapter |
//! | `program.rs` | (feature) [`Program`]: a kernel compiled, its buffers uploaded, dispatched and read back |
//! | `unbuilt.rs` | (no feature) the same API, every call refused with the reason |
//!
//! Adapters are the ones wgpu's Vulkan backend lists (the backend wgpu
//! offers on Linux; its GL backend is left out of the build), ordered real
//! GPUs first (discrete, integrated, virtual, other) and CPU-emulated ones
//! last, so `webgpu` (= `webgpu:0`) is the best there is. A CPU-emulated
//! adapter (Mesa's lavapipe, from Debian's `mesa-vulkan-drivers`) runs the
//! kernels on the host CPU through LLVM: its figures measure that CPU, and
//! the environment record and `sysinfo` label it `CPU-emulated`.
//!
//! Timing: buffers are uploaded once when a case is prepared; each timed
//! iteration records one dispatch, submits it and waits for the device to
//! finish ([`Program::dispatch`]), so the time is the device's, never an
//! asynchronous launch. Shader compilation (module + pipeline) and the
//! upload are reported as phases of their own ([`Phases`]).

#[cfg(feature = "webgpu")]
mod adapter;
mod kernels;
#[cfg(feature = "webgpu")]
mod program;
#[cfg(not(feature = "webgpu"))]
mod unbuilt;

#[cfg(feature = "webgpu")]
use adapter as source;
#[cfg(feature = "webgpu")]
pub use program::Program;
#[cfg(not(feature = "webgpu"))]
use unbuilt as source;
#[cfg(not(feature = "webgpu"))]
pub use unbuilt::Program;

pub use kernels::{MAX_GROUPS_PER_DIM, OPS, Op};

use super::{Backend, Device, DeviceKind};
use serde::Serialize;

/// What tfbench shows and records of one adapter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AdapterInfo {
    /// Its place in the list: the `N` of `webgpu:N`.
    pub index: u32,
    /// The adapter's name (`NVIDIA H100 80GB HBM3`, `llvmpipe (LLVM 15.0.6, 256 bits)`).
    pub name: String,
    /// The graphics API wgpu drives it through (`Vulkan`).
    pub backend: String,
    /// `discrete GPU`, `integrated GPU`, `virtual GPU`, `CPU-emulated` or `other`.
    pub device_type: String,
    /// The driver and its version, as the adapter reports them.
    pub driver: String,
    /// True for a CPU-emulated adapter (lavapipe): its figures are the CPU's.
    pub emulated: bool,
}

impl AdapterInfo {
    /// `webgpu:N: NAME (BACKEND, TYPE; DRIVER)`, for `sysinfo` and skip reasons.
    pub fn line(&self) -> String {
        let driver = if self.driver.is_empty() { String::new() } else { format!("; {}", self.driver) };
        format!("webgpu:{}: {} ({}, {}{driver})", self.index, self.name, self.backend, self.device_type)
    }
}

/// Why there is no adapter at all: the fix, named.
pub const NO_ADAPTER: &str = "no WebGPU adapter found: wgpu's Vulkan backend lists none with compute shaders \
     (install a Vulkan driver; Debian's mesa-vulkan-drivers gives lavapipe, a CPU-emulated adapter)";

/// The adapters this machine offers, in `webgpu:N` order; `Err` says why
/// none can be listed (the build lacks the feature).
pub fn adapters() -> Result<Vec<AdapterInfo>, String> {
    source::adapter_infos()
}

/// The adapter behind `webgpu:N`, or why cases cannot run on it (the skip
/// reason, naming the device).
pub fn adapter(n: u32) -> Result<AdapterInfo, String> {
    let device = Device::WebGpu(n);
    let list = adapters().map_err(|why| format!("{device}: {why}"))?;
    if list.is_empty() {
        return Err(format!("{device}: {NO_ADAPTER}"));
    }
    list.iter().find(|a| a.index == n).cloned().ok_or_else(|| {
        let names: Vec<String> = list.iter().map(AdapterInfo::line).collect();
        format!("{device} does not exist: {} adapter(s): {}", list.len(), names.join("; "))
    })
}

/// How long making a [`Program`] took, phase by phase.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Phases {
    /// Creating the shader module (WGSL parsed and validated by naga) and
    /// the compute pipeline (translated and compiled by the driver), in
    /// nanoseconds. Drivers keep shader caches of their own, so a second
    /// run may compile faster.
    pub compile_ns: f64,
    /// Creating the buffers and copying the inputs to the device, waited
    /// for, in nanoseconds.
    pub upload_ns: f64,
}

/// WebGPU adapters through wgpu: the [`Backend`] of `webgpu:N` devices.
pub struct WebGpuBackend;

impl Backend for WebGpuBackend {
    fn kind(&self) -> DeviceKind {
        DeviceKind::WebGpu
    }
    fn availability(&self, device: Device) -> Result<(), String> {
        match device {
            Device::WebGpu(n) => adapter(n).map(|_| ()),
            other => Err(format!("{other} is not a WebGPU device")),
        }
    }
    fn environment(&self, devices: &[Device]) -> Vec<crate::env::GpuEnvironment> {
        devices
            .iter()
            .filter_map(|d| match d {
                Device::WebGpu(n) => adapter(*n).ok(),
                _ => None,
            })
            .map(|a| crate::env::GpuEnvironment {
                device: format!("webgpu:{}", a.index),
                name: a.name,
                api: Some(format!("WebGPU through wgpu, {}", a.backend)),
                device_type: Some(if a.emulated {
                    "CPU-emulated: runs on the host CPU".into()
                } else {
                    a.device_type
                }),
                ..Default::default()
            })
            .collect()
    }
    fn describe(&self) -> Option<(Vec<String>, serde_json::Value)> {
        Some(match adapters() {
            Ok(list) if list.is_empty() => (
                vec![format!("webgpu: unavailable: {NO_ADAPTER}")],
                serde_json::json!({"available": false, "reason": NO_ADAPTER}),
            ),
            Ok(list) => (
                list.iter().map(AdapterInfo::line).collect(),
                serde_json::json!({"available": true, "adapters": list}),
            ),
            Err(why) => (
                vec![format!("webgpu: unavailable: {why}")],
                serde_json::json!({"available": false, "reason": why}),
            ),
        })
    }
}

#[cfg(test)]
mod tests;
