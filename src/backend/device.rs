//! Where a case runs: the device seam.
//!
//! A [`Device`] is part of every [`crate::plan::Case`]: the plan is
//! suites x benchmarks x parameter grids x devices. A benchmark declares
//! the devices it can run on ([`crate::suites::Suite::devices`], CPU only by
//! default); `run --device` and `list --device` choose among them. A case on
//! a device other than the CPU carries `device=...` in its id, so results
//! and baselines of two devices never mix, and CPU ids stay as they were.
//!
//! A device tfbench was not built for, or that this machine lacks, is not an
//! error of the plan: its cases are listed and then skipped at run time with
//! the reason ([`Device::availability`], answered by the device's
//! [`super::Backend`]). Adding a device: see the steps in [`super`].

use anyhow::{Result, bail};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

pub use super::wasm::WasmRuntime;

/// A device a case runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Device {
    /// The host CPU, with the execution context of [`super::cpu`].
    #[default]
    Cpu,
    /// NVIDIA GPU number N through CUDA.
    Cuda(u32),
    /// A WebAssembly runtime: embedded in the process (wasmi, wasmtime) or
    /// a child process (Node.js's V8).
    Wasm(WasmRuntime),
    /// WebGPU adapter number N through `wgpu` (feature `webgpu`): adapters
    /// in the order [`super::webgpu`] lists them, real GPUs before
    /// CPU-emulated ones (lavapipe), so `webgpu` (= `webgpu:0`) is the best.
    WebGpu(u32),
}

/// The spellings `--device` accepts, for error messages.
pub const CHOICES: &str = "cpu, cuda, cuda:N, wasm, wasm:wasmi, wasm:wasmtime, wasm:node, webgpu, webgpu:N";

impl Device {
    /// Parses `cpu`, `cuda` (GPU 0), `cuda:N`, `wasm` (the default runtime,
    /// [`WasmRuntime::default`]), `wasm:RUNTIME`, `webgpu` (adapter 0) or
    /// `webgpu:N`; the error names the choices.
    pub fn parse(s: &str) -> Result<Device> {
        let t = s.trim().to_ascii_lowercase();
        match t.as_str() {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            "wasm" => Ok(Device::Wasm(WasmRuntime::default())),
            "webgpu" => Ok(Device::WebGpu(0)),
            _ => {
                if let Some(rt) = t.strip_prefix("wasm:").and_then(WasmRuntime::parse) {
                    return Ok(Device::Wasm(rt));
                }
                if let Some(Ok(n)) = t.strip_prefix("webgpu:").map(str::parse::<u32>) {
                    return Ok(Device::WebGpu(n));
                }
                match t.strip_prefix("cuda:").map(str::parse::<u32>) {
                    Some(Ok(n)) => Ok(Device::Cuda(n)),
                    _ => bail!("unknown device `{s}`; valid: {CHOICES}"),
                }
            }
        }
    }

    /// The kind, ignoring the index: what a benchmark declares.
    pub fn kind(self) -> DeviceKind {
        match self {
            Device::Cpu => DeviceKind::Cpu,
            Device::Cuda(_) => DeviceKind::Cuda,
            Device::Wasm(_) => DeviceKind::Wasm,
            Device::WebGpu(_) => DeviceKind::WebGpu,
        }
    }

    /// Whether cases can run on this device here: `Err` says why not (the
    /// skip reason), as its backend answers ([`super::Backend::availability`]):
    /// CUDA asks the driver (no libcuda, no device, no such device);
    /// WebAssembly whether its runtime is built in (wasmtime) or on the PATH
    /// (node); WebGPU whether the `webgpu` feature is built and wgpu finds
    /// the adapter.
    pub fn availability(self) -> Result<(), String> {
        super::of(self.kind()).availability(self)
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
            Device::Wasm(rt) => write!(f, "wasm:{}", rt.name()),
            Device::WebGpu(n) => write!(f, "webgpu:{n}"),
        }
    }
}

impl Serialize for Device {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Device {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Device::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A kind of device, as benchmarks declare them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceKind {
    /// The host CPU.
    Cpu,
    /// NVIDIA GPUs through CUDA.
    Cuda,
    /// A WebAssembly runtime.
    Wasm,
    /// A WebGPU adapter through `wgpu`.
    WebGpu,
}

/// Benchmarks that run on the CPU only (the default of `Suite::devices`).
pub const CPU_ONLY: &[DeviceKind] = &[DeviceKind::Cpu];

/// The devices to run on (`--device`, repeatable; CPU when none is given).
pub fn parse_list(list: &[String]) -> Result<Vec<Device>> {
    if list.is_empty() {
        return Ok(vec![Device::Cpu]);
    }
    let mut out = Vec::new();
    for item in list.iter().flat_map(|s| s.split(',')) {
        let d = Device::parse(item)?;
        if !out.contains(&d) {
            out.push(d);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_display_and_errors() {
        for (s, d) in [
            ("cpu", Device::Cpu),
            ("CUDA", Device::Cuda(0)),
            ("cuda:3", Device::Cuda(3)),
            ("wasm", Device::Wasm(WasmRuntime::default())),
            ("wasm:node", Device::Wasm(WasmRuntime::Node)),
            ("WASM:wasmtime", Device::Wasm(WasmRuntime::Wasmtime)),
            ("webgpu", Device::WebGpu(0)),
            ("WebGPU:2", Device::WebGpu(2)),
        ] {
            assert_eq!(Device::parse(s).unwrap(), d);
            assert_eq!(Device::parse(&d.to_string()).unwrap(), d, "round trip");
        }
        let e = Device::parse("tpu").unwrap_err().to_string();
        assert!(e.contains("unknown device `tpu`") && e.contains(CHOICES), "{e}");
        assert!(Device::parse("cuda:x").is_err());
        for bad in ["webgpu:", "webgpu:-1", "webgpu:x", "wgpu"] {
            let e = Device::parse(bad).unwrap_err().to_string();
            assert!(e.contains("webgpu:N"), "{bad}: {e}");
        }
        assert_eq!(Device::WebGpu(1).to_string(), "webgpu:1");
        assert_eq!(Device::WebGpu(1).kind(), DeviceKind::WebGpu);
        let e = Device::parse("wasm:v8").unwrap_err().to_string();
        assert!(e.contains("wasm:node") && e.contains("wasm:wasmi"), "{e}");
        assert_eq!(Device::Wasm(WasmRuntime::Wasmi).to_string(), "wasm:wasmi");
        assert_eq!(parse_list(&[]).unwrap(), [Device::Cpu]);
        assert_eq!(parse_list(&["cpu,cuda:1".into(), "cpu".into()]).unwrap(), [Device::Cpu, Device::Cuda(1)]);
        let j = serde_json::to_string(&Device::Cuda(2)).unwrap();
        assert_eq!(j, "\"cuda:2\"");
        assert_eq!(serde_json::from_str::<Device>(&j).unwrap(), Device::Cuda(2));
    }

    #[test]
    fn availability_asks_the_backend_and_names_the_device() {
        assert!(Device::Cpu.availability().is_ok());
        // CUDA: whatever this machine has, the device's answer is the
        // driver layer's, and a refusal names the device.
        for n in [0, 7] {
            let a = Device::Cuda(n).availability();
            #[cfg(feature = "cuda")]
            assert_eq!(a, crate::backend::cuda::availability(n));
            #[cfg(not(feature = "cuda"))]
            assert!(a.as_ref().unwrap_err().contains("without the `cuda` feature"), "{a:?}");
            if let Err(why) = a {
                assert!(why.contains(&format!("cuda:{n}")), "{why}");
            }
        }
        // wasmi is pure Rust and always built in; wasmtime only with its
        // feature, and a refusal says which.
        assert!(Device::Wasm(WasmRuntime::Wasmi).availability().is_ok());
        if !cfg!(feature = "wasmtime") {
            let why = Device::Wasm(WasmRuntime::Wasmtime).availability().unwrap_err();
            assert!(why.contains("wasm:wasmtime") && why.contains("wasmtime feature"), "{why}");
        }
        // WebGPU: without its feature every adapter is refused saying so;
        // with it, wgpu's answer (webgpu::tests checks what it says).
        for n in [0, 9] {
            let a = Device::WebGpu(n).availability();
            if !cfg!(feature = "webgpu") {
                let why = a.as_ref().unwrap_err();
                assert!(why.contains(&format!("webgpu:{n}")) && why.contains("`webgpu` feature"), "{why}");
            } else if let Err(why) = a {
                assert!(why.starts_with(&format!("webgpu:{n}")), "{why}");
            }
        }
    }
}
