//! V8 through Node.js: a child process running `node_driver.js`, one JSON
//! request and reply per line, bulk bytes through files in a private
//! temporary folder. Calls are timed inside the driver too (`exec_ns`), so
//! the pipe's round trip can be told apart from the module's work.

use super::runtime::{Arg, Instance, Phases, Ret, WasmRuntime, check_range, pages_for};
use anyhow::{Context as _, Result, anyhow, bail};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The driver's source, run with `node -e`.
const DRIVER: &str = include_str!("node_driver.js");

/// `node --version` (e.g. `v20.20.2`), or why Node.js cannot be used.
pub fn node_version() -> Result<String, String> {
    static VERSION: OnceLock<Result<String, String>> = OnceLock::new();
    VERSION
        .get_or_init(|| match Command::new("node").arg("--version").stdin(Stdio::null()).output() {
            Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).trim().to_string()),
            Ok(o) => Err(format!("`node --version` failed ({})", o.status)),
            Err(e) => Err(format!("`node` is not on the PATH ({e})")),
        })
        .clone()
}

/// A module instantiated in a Node.js child process.
pub struct NodeInstance {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    dir: PathBuf,
    phases: Phases,
    /// Exported functions whose result is an f32 (V8 hands back a plain
    /// number either way: 12.0 and 12 look alike).
    f32_results: Vec<String>,
    /// Nanoseconds the last `call` took inside the driver.
    last_exec_ns: f64,
}

impl NodeInstance {
    /// Starts the driver and loads `wasm` into it.
    pub fn load(wasm: &[u8]) -> Result<Self> {
        let f32_results = f32_exports(wasm)?;
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tfbench-wasm-node-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let stderr =
            std::fs::File::create(dir.join("stderr")).context("creating the driver's stderr file")?;
        let mut child = Command::new("node")
            .arg("-e")
            .arg(DRIVER)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .context("starting node")?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            bail!("node started without pipes");
        };
        let mut me = Self {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            dir,
            phases: Phases::default(),
            f32_results,
            last_exec_ns: 0.0,
        };
        let path = me.dir.join("module.wasm");
        std::fs::write(&path, wasm).context("writing the module for node")?;
        let r = me.request(json!({"op": "load", "path": path}))?;
        me.phases =
            Phases { compile_ns: number(&r, "compile_ns")?, instantiate_ns: number(&r, "instantiate_ns")? };
        Ok(me)
    }

    /// Sends one request and reads its reply; `{"error": ...}` becomes an
    /// error carrying V8's message.
    fn request(&mut self, req: Value) -> Result<Value> {
        let line = serde_json::to_string(&req)?;
        let sent = writeln!(self.stdin, "{line}").and_then(|_| self.stdin.flush());
        let mut reply = String::new();
        let got = sent.and_then(|_| self.stdout.read_line(&mut reply));
        if !matches!(got, Ok(n) if n > 0) {
            let status =
                self.child.try_wait().ok().flatten().map_or("running".to_string(), |s| s.to_string());
            let err = std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default();
            bail!("node stopped answering ({status}): {}", err.trim());
        }
        let v: Value =
            serde_json::from_str(&reply).with_context(|| format!("node's reply `{}`", reply.trim()))?;
        if let Some(e) = v.get("error") {
            bail!("node (V8): {}", e.as_str().unwrap_or("error"));
        }
        Ok(v)
    }

    fn scratch(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// The exported functions of `wasm` that return an f32, read by wasmi's
/// parser (which also refuses an invalid module before node starts).
fn f32_exports(wasm: &[u8]) -> Result<Vec<String>> {
    let mut config = wasmi::Config::default();
    config.wasm_simd(true);
    let module = wasmi::Module::new(&wasmi::Engine::new(&config), wasm)
        .map_err(|e| anyhow!("the module is not valid WebAssembly: {e}"))?;
    Ok(module
        .exports()
        .filter(|e| e.ty().func().is_some_and(|f| f.results().first() == Some(&wasmi::ValType::F32)))
        .map(|e| e.name().to_string())
        .collect())
}

fn number(v: &Value, key: &str) -> Result<f64> {
    v.get(key).and_then(Value::as_f64).with_context(|| format!("node's reply has no number `{key}`: {v}"))
}

impl Instance for NodeInstance {
    fn runtime(&self) -> WasmRuntime {
        WasmRuntime::Node
    }
    fn phases(&self) -> Phases {
        self.phases
    }
    fn memory_bytes(&mut self) -> Result<usize> {
        Ok(number(&self.request(json!({"op": "size"}))?, "bytes")? as usize)
    }
    fn ensure_memory(&mut self, bytes: usize) -> Result<()> {
        pages_for(bytes)?;
        self.request(json!({"op": "ensure", "bytes": bytes})).map(|_| ())
    }
    fn write(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        check_range(offset, data.len(), self.memory_bytes()?)?;
        let path = self.scratch("in.bin");
        std::fs::write(&path, data).context("writing data for node")?;
        self.request(json!({"op": "write", "offset": offset, "path": path})).map(|_| ())
    }
    fn read(&mut self, offset: usize, len: usize) -> Result<Vec<u8>> {
        check_range(offset, len, self.memory_bytes()?)?;
        let path = self.scratch("out.bin");
        self.request(json!({"op": "read", "offset": offset, "len": len, "path": path}))?;
        std::fs::read(&path).context("reading node's output")
    }
    fn call(&mut self, name: &str, args: &[Arg], iters: u64) -> Result<Ret> {
        let args: Vec<Value> = args
            .iter()
            .map(|a| match *a {
                Arg::I32(v) => json!(v),
                Arg::F32(v) => json!(v as f64),
            })
            .collect();
        let r = self
            .request(json!({"op": "call", "fn": name, "args": args, "iters": iters.max(1)}))
            .map_err(|e| anyhow!("`{name}`: {e}"))?;
        self.last_exec_ns = number(&r, "exec_ns")?;
        // V8 hands an f32 result back as the double of the same value
        // (exact), an i32 as an integer.
        Ok(match r.get("result") {
            None | Some(Value::Null) => Ret::None,
            Some(Value::Number(n)) if self.f32_results.iter().any(|f| f == name) => {
                Ret::F32(n.as_f64().unwrap_or(f64::NAN) as f32)
            }
            Some(Value::Number(n)) => Ret::I32(n.as_i64().unwrap_or(0) as i32),
            // NaN and infinities are not JSON: the driver sends null for
            // them only in an f32's place, which the arm above cannot see.
            Some(other) => bail!("`{name}` returned {other}"),
        })
    }
    fn reset(&mut self) -> Result<()> {
        self.request(json!({"op": "reset"})).map(|_| ())
    }
    fn last_exec_ns(&self) -> Option<f64> {
        Some(self.last_exec_ns)
    }
    fn copy_loop(&mut self, offset: usize, data: &[u8], into: bool, iters: u64) -> Result<()> {
        check_range(offset, data.len(), self.memory_bytes()?)?;
        let path = self.scratch("copy.bin");
        std::fs::write(&path, data).context("writing data for node")?;
        let req = json!({"op": "copy", "offset": offset, "path": path, "into": into, "iters": iters.max(1)});
        self.request(req).map(|_| ())
    }
}

impl Drop for NodeInstance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
