//! The execution layer: every device tfbench runs cases on, written once.
//!
//! A [`Device`] names where a case runs (part of every
//! [`crate::plan::Case`]); a [`Backend`] is what that kind of device can do,
//! implemented once per kind in a folder of its own:
//!
//! | folder | backend | what it provides |
//! |---|---|---|
//! | `cpu/` | [`cpu::CpuBackend`] | the execution context that owns the CPU's threads ([`cpu::Context`]); the CPU's roof is the probe (`crate::probe`) |
//! | `cuda/` | `cuda::CudaBackend` (feature `cuda`) | driver, contexts, NVRTC, cuBLAS, kernels, the GPU workload harness, its probe; `cuda/tensor/`: the tensor work of [`ops`] on a GPU |
//! | `wasm/` | [`wasm::WasmBackend`] | WebAssembly runtimes (wasmi, wasmtime with feature `wasmtime`, Node.js's V8), kernels in WebAssembly text, compile/instantiate/execute phases |
//! | `webgpu/` | [`webgpu::WebGpuBackend`] | WebGPU adapters through wgpu (feature `webgpu`; lavapipe counts, labelled CPU-emulated), kernels in WGSL, compile/upload/execute phases |
//! | `ops.rs` | (every backend) | the words for tensor work: [`ops::TensorWork`] (op, host inputs, work counts, the suite's check) and [`ops::TensorOps`], what a backend implements to run it |
//!
//! Suites describe a benchmark once (parameters, inputs, work counts,
//! reference) and never name a device's API: device-specific work (an NVRTC
//! kernel, a cuBLAS GEMM) lives with its backend. The tensor suite hands a
//! case off the CPU to [`ops::realise`], which asks the case's backend.
//!
//! ## Adding a device
//! 1. a variant of [`Device`] and [`DeviceKind`] (`device.rs`), with its
//!    spelling in [`Device::parse`];
//! 2. a folder here with a type implementing [`Backend`] (availability and
//!    the skip reason when absent, the environment record, `sysinfo` lines,
//!    its probe), and its line in [`registry`];
//! 3. its workloads implement [`crate::workload::Workload`], waiting for the
//!    device in `sync` and giving their roof in `roof`;
//! 4. the benchmarks that run on it list the kind in
//!    [`crate::suites::Suite::devices`];
//! 5. to run the tensor suite's work, implement [`ops::TensorOps`] for the
//!    backend type and return it from [`Backend::tensor_ops`] (an op it
//!    lacks is a skip, [`ops::lacks`]).

pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
mod device;
pub mod ops;
pub mod wasm;
pub mod webgpu;

pub use device::{CHOICES, CPU_ONLY, Device, DeviceKind, WasmRuntime, parse_list};

/// What one kind of device provides to the harness, `run` and `sysinfo`.
pub trait Backend: Sync {
    /// The kind of device this backend runs.
    fn kind(&self) -> DeviceKind;
    /// Whether `device` (of this kind) can run cases here; `Err` is the skip
    /// reason, naming the device ("cuda:3 does not exist: 1 GPU").
    fn availability(&self, device: Device) -> Result<(), String>;
    /// How `devices` (of this kind, used by a run) are recorded in its
    /// results; devices that cannot be described are left out.
    fn environment(&self, _devices: &[Device]) -> Vec<crate::env::GpuEnvironment> {
        Vec::new()
    }
    /// What `sysinfo` shows of this backend: table lines and a JSON value
    /// (`None` for a backend that shows nothing beyond the machine).
    fn describe(&self) -> Option<(Vec<String>, serde_json::Value)> {
        None
    }
    /// Measures and caches the limits of every device of this kind
    /// (`sysinfo --probe`), logging to stderr. The CPU's probe is the
    /// machine's own (`crate::probe`), run by `sysinfo` itself.
    fn probe(&self) -> anyhow::Result<()> {
        Ok(())
    }
    /// The tensor work this backend realises from a suite's description
    /// ([`ops`]); `None` for a backend that offers none (the CPU runs the
    /// suites' own workloads).
    fn tensor_ops(&self) -> Option<&dyn ops::TensorOps> {
        None
    }
}

/// Every backend, in the order `sysinfo` shows them.
pub fn registry() -> &'static [&'static dyn Backend] {
    static BACKENDS: &[&dyn Backend] = &[
        &cpu::CpuBackend,
        #[cfg(feature = "cuda")]
        &cuda::CudaBackend,
        #[cfg(not(feature = "cuda"))]
        &Unbuilt(DeviceKind::Cuda),
        &wasm::WasmBackend,
        &webgpu::WebGpuBackend,
    ];
    BACKENDS
}

/// The backend of `kind`.
pub fn of(kind: DeviceKind) -> &'static dyn Backend {
    registry().iter().copied().find(|b| b.kind() == kind).unwrap_or(&Unbuilt(DeviceKind::Cpu))
}

/// The devices among `devices` that each backend records with a run's
/// results ([`Backend::environment`]).
pub fn environment(devices: &[Device]) -> Vec<crate::env::GpuEnvironment> {
    let mut used: Vec<Device> = devices.to_vec();
    used.sort_unstable();
    used.dedup();
    registry()
        .iter()
        .flat_map(|b| {
            let mine: Vec<Device> = used.iter().copied().filter(|d| d.kind() == b.kind()).collect();
            if mine.is_empty() { Vec::new() } else { b.environment(&mine) }
        })
        .collect()
}

/// A kind of device this build has no backend for: every case on it is
/// skipped with that reason.
struct Unbuilt(DeviceKind);

impl Backend for Unbuilt {
    fn kind(&self) -> DeviceKind {
        self.0
    }
    fn availability(&self, device: Device) -> Result<(), String> {
        Err(match self.0 {
            DeviceKind::Wasm => format!("{device}: this tfbench was not built with a WebAssembly runtime"),
            DeviceKind::Cuda => format!("{device}: this tfbench was built without the `cuda` feature"),
            _ => format!("{device}: this tfbench was not built with its backend"),
        })
    }
}
