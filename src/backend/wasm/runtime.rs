//! The runtimes and the one interface every runtime's instance offers.

use anyhow::{Result, bail};

/// Bytes in one WebAssembly page.
pub const PAGE: usize = 65536;

/// The most linear memory a wasm32 module can address: 65536 pages, 4 GiB.
pub const WASM32_MAX_BYTES: usize = 65536 * PAGE;

/// A WebAssembly runtime, as `--device wasm:NAME` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum WasmRuntime {
    /// wasmi: a pure-Rust interpreter, always built in (the default: it is
    /// there in every build, so plain `wasm` means the same everywhere).
    #[default]
    Wasmi,
    /// wasmtime with Cranelift, an optimising compiler (Cargo feature
    /// `wasmtime`).
    Wasmtime,
    /// V8 through Node.js, a child process (`node` on the PATH).
    Node,
}

impl WasmRuntime {
    /// Every runtime, in the order `sysinfo` shows them.
    pub const ALL: [WasmRuntime; 3] = [Self::Wasmi, Self::Wasmtime, Self::Node];

    /// The name after `wasm:`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Wasmi => "wasmi",
            Self::Wasmtime => "wasmtime",
            Self::Node => "node",
        }
    }

    /// The runtime called `s` (lowercase), if any.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.name() == s)
    }

    /// Whether this runtime can run modules here; `Err` is why not.
    pub fn availability(self) -> Result<(), String> {
        match self {
            Self::Wasmi => Ok(()),
            Self::Wasmtime if cfg!(feature = "wasmtime") => Ok(()),
            Self::Wasmtime => {
                Err("built without the wasmtime feature (cargo build --features wasmtime)".into())
            }
            Self::Node => super::node::node_version().map(|_| ()),
        }
    }

    /// The runtime's version, for `sysinfo` and results.
    pub fn version(self) -> String {
        match self {
            Self::Wasmi => "wasmi 2.0 (interpreter)".into(),
            Self::Wasmtime => "wasmtime (Cranelift)".into(),
            Self::Node => super::node::node_version().map_or_else(|e| e, |v| format!("node {v} (V8)")),
        }
    }
}

/// An argument of an exported function.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg {
    /// A 32-bit integer (also every pointer: a byte offset into memory).
    I32(i32),
    /// A 32-bit float.
    F32(f32),
}

/// What an exported function returned.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Ret {
    /// No result.
    None,
    /// A 32-bit integer.
    I32(i32),
    /// A 32-bit float.
    F32(f32),
}

impl Ret {
    /// The integer result, or an error naming what came back.
    pub fn i32(self) -> Result<i32> {
        match self {
            Ret::I32(v) => Ok(v),
            other => bail!("expected an i32 result, got {other:?}"),
        }
    }
    /// The float result, or an error naming what came back.
    pub fn f32(self) -> Result<f32> {
        match self {
            Ret::F32(v) => Ok(v),
            other => bail!("expected an f32 result, got {other:?}"),
        }
    }
}

/// How long loading a module took, phase by phase (sightglass's split).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Phases {
    /// Validating and compiling (or, for an interpreter, translating) the
    /// module, in nanoseconds.
    pub compile_ns: f64,
    /// Instantiating it (memory, globals, exports), in nanoseconds.
    pub instantiate_ns: f64,
}

/// One instantiated module with an exported memory named `memory`.
pub trait Instance: Send {
    /// The runtime it runs in.
    fn runtime(&self) -> WasmRuntime;
    /// How long loading it took.
    fn phases(&self) -> Phases;
    /// Bytes of linear memory now.
    fn memory_bytes(&mut self) -> Result<usize>;
    /// Grows linear memory (from the host) to hold at least `bytes`; an
    /// error beyond 4 GiB or when the runtime refuses.
    fn ensure_memory(&mut self, bytes: usize) -> Result<()>;
    /// Copies `data` into linear memory at `offset`.
    fn write(&mut self, offset: usize, data: &[u8]) -> Result<()>;
    /// Copies `len` bytes out of linear memory from `offset`.
    fn read(&mut self, offset: usize, len: usize) -> Result<Vec<u8>>;
    /// Calls export `name` `iters` times (at least once) with `args`, back
    /// to back, and returns the last result; a trap is an error with the
    /// runtime's message.
    fn call(&mut self, name: &str, args: &[Arg], iters: u64) -> Result<Ret>;
    /// Copies `data` into linear memory at `offset` (`into` true) or the
    /// same number of bytes out of it (false), `iters` times: a tensor
    /// crossing the host/module boundary the way this runtime's embedder
    /// does it (Rust slices in process; a JavaScript `Uint8Array` for Node).
    fn copy_loop(&mut self, offset: usize, data: &[u8], into: bool, iters: u64) -> Result<()>;
    /// Instantiates the module again from its compiled form: fresh memory
    /// (one page) and globals, nothing compiled again.
    fn reset(&mut self) -> Result<()>;
    /// Nanoseconds the last [`Instance::call`] took inside the runtime, where
    /// that differs from the caller's clock (Node.js: without the pipe's
    /// round trip); `None` in process.
    fn last_exec_ns(&self) -> Option<f64> {
        None
    }
}

/// Assembled `wasm` bytes loaded into `runtime`: compiled, instantiated,
/// its phases timed. An invalid module is an error with the runtime's
/// message.
pub fn load(runtime: WasmRuntime, wasm: &[u8]) -> Result<Box<dyn Instance>> {
    if let Err(why) = runtime.availability() {
        bail!("wasm:{}: {why}", runtime.name());
    }
    match runtime {
        WasmRuntime::Wasmi => Ok(Box::new(super::wasmi_rt::WasmiInstance::load(wasm)?)),
        WasmRuntime::Node => Ok(Box::new(super::node::NodeInstance::load(wasm)?)),
        #[cfg(feature = "wasmtime")]
        WasmRuntime::Wasmtime => Ok(Box::new(super::wasmtime_rt::WasmtimeInstance::load(wasm)?)),
        #[cfg(not(feature = "wasmtime"))]
        WasmRuntime::Wasmtime => unreachable!("availability refused it above"),
    }
}

/// Checks that `offset..offset + len` lies in `memory` bytes, naming both.
pub(super) fn check_range(offset: usize, len: usize, memory: usize) -> Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= memory => Ok(()),
        _ => bail!(
            "bytes {offset}..{} lie outside linear memory of {memory} bytes",
            offset.saturating_add(len)
        ),
    }
}

/// Pages needed to hold `bytes`, refused beyond wasm32's 4 GiB.
pub(super) fn pages_for(bytes: usize) -> Result<u64> {
    if bytes > WASM32_MAX_BYTES {
        bail!(
            "{bytes} bytes exceed wasm32's linear memory ceiling of {WASM32_MAX_BYTES} bytes (65536 pages of 64 KiB, 4 GiB)"
        );
    }
    Ok(bytes.div_ceil(PAGE) as u64)
}
