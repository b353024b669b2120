//! The WebAssembly backend: kernels written in WebAssembly text (readable
//! sources under `kernels/`, assembled at run time by the `wat` crate, since
//! the `wasm32` Rust target cannot be fetched here) run in real runtimes:
//!
//! | device | runtime | how |
//! |---|---|---|
//! | `wasm:wasmi` (plain `wasm`) | wasmi, a pure-Rust interpreter | in process, always built |
//! | `wasm:wasmtime` | wasmtime (Cranelift, optimising) | in process, with the `wasmtime` Cargo feature |
//! | `wasm:node` | V8 through Node.js | a child process running `node_driver.js`, when `node` is on the PATH |
//!
//! As bytecodealliance's sightglass does, loading is split into phases
//! ([`Phases`]: compile, instantiate) that workloads report beside the
//! execute time. A module that fails to assemble or validate, or traps
//! (out-of-bounds access, `unreachable`), is an error carrying the
//! runtime's message, never a panic.

mod kernels;
mod node;
mod runtime;
mod wasmi_rt;
#[cfg(feature = "wasmtime")]
mod wasmtime_rt;

pub use kernels::{KERNELS, Kernel, assemble, source};
pub use runtime::{Arg, Instance, PAGE, Phases, Ret, WASM32_MAX_BYTES, WasmRuntime, load};

use super::{Backend, Device, DeviceKind};

/// The WebAssembly runtimes.
pub struct WasmBackend;

impl Backend for WasmBackend {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Wasm
    }
    fn availability(&self, device: Device) -> Result<(), String> {
        match device {
            Device::Wasm(rt) => rt.availability().map_err(|why| format!("{device}: {why}")),
            other => Err(format!("{other} is not a WebAssembly device")),
        }
    }
    fn describe(&self) -> Option<(Vec<String>, serde_json::Value)> {
        let mut lines = Vec::new();
        let mut json = serde_json::Map::new();
        for rt in WasmRuntime::ALL {
            let (line, value) = match (rt.availability(), rt.version()) {
                (Ok(()), v) => (
                    format!("wasm:{}: available ({v})", rt.name()),
                    serde_json::json!({"available": true, "version": v}),
                ),
                (Err(why), _) => (
                    format!("wasm:{}: unavailable: {why}", rt.name()),
                    serde_json::json!({"available": false, "reason": why}),
                ),
            };
            lines.push(line);
            json.insert(rt.name().to_string(), value);
        }
        Some((lines, serde_json::Value::Object(json)))
    }
}

#[cfg(test)]
mod tests;
