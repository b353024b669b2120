//! `wasm_memory`: linear-memory patterns in the case's runtime, with the
//! module `memory` of src/backend/wasm/kernels.

use crate::backend::Device;
use crate::backend::wasm::{self, Arg, Instance, PAGE, Ret, WASM32_MAX_BYTES};
use crate::plan::Case;
use crate::suites::{Metric, Throughput, Verification, Workload};
use anyhow::{Result, bail};

/// The `pattern` parameter's values.
pub const PATTERNS: &[&str] = &["grow", "copy_in", "copy_out", "bump", "freelist", "ceiling"];

/// Memory the grow pattern may reach before the instance is made afresh.
const GROW_LIMIT_PAGES: i64 = 16384;
/// Where the allocators' arena starts.
const ARENA: usize = 64;

/// A memory pattern prepared in its runtime.
pub struct WasmMemory {
    inst: Box<dyn Instance>,
    pattern: String,
    /// Pages per grow, bytes per copy, steps per allocator pattern.
    size: usize,
    data: Vec<u8>,
    pages: i64,
    resets: u64,
    allocs: i32,
}

/// Prepares `wasm_memory` on the case's WebAssembly device.
pub fn prepare(case: &Case) -> Result<Box<dyn Workload>> {
    let Device::Wasm(rt) = case.device else {
        bail!("case {}: wasm_memory runs on a wasm device (--device wasm:wasmi|wasmtime|node)", case.id)
    };
    let pattern = case.str("pattern")?;
    if !PATTERNS.contains(&pattern.as_str()) {
        bail!("case {}: unknown pattern `{pattern}`; valid: {}", case.id, PATTERNS.join(", "));
    }
    let size = match pattern.as_str() {
        "grow" => case.usize("pages")?,
        "copy_in" | "copy_out" => case.usize("bytes")?,
        "bump" | "freelist" => case.usize("steps")?,
        _ => 1,
    };
    if size == 0 || (pattern == "grow" && size as i64 > GROW_LIMIT_PAGES) {
        bail!("case {}: its size must be positive (and at most {GROW_LIMIT_PAGES} pages to grow)", case.id);
    }
    if matches!(pattern.as_str(), "bump" | "freelist") && size > 1 << 20 {
        bail!("case {}: at most 1048576 steps (the arena must fit linear memory)", case.id);
    }
    let text = wasm::source("memory").ok_or_else(|| anyhow::anyhow!("no memory kernel module"))?;
    let mut inst = wasm::load(rt, &wasm::assemble(text)?)?;
    let data: Vec<u8> =
        (0..if pattern.starts_with("copy") { size } else { 0 }).map(|i| (i * 131 % 251) as u8).collect();
    match pattern.as_str() {
        "copy_in" | "copy_out" => {
            inst.ensure_memory(size)?;
            inst.write(0, &data)?;
        }
        // The log of the checking pass lies past the largest arena: every
        // step allocates at most 1024 bytes and an 8-byte header.
        "bump" | "freelist" => inst.ensure_memory(log_at(size) + 16 * size)?,
        _ => {}
    }
    Ok(Box::new(WasmMemory { inst, pattern, size, data, pages: 1, resets: 0, allocs: 0 }))
}

fn log_at(steps: usize) -> usize {
    (ARENA + 1024 + 1032 * steps).next_multiple_of(PAGE)
}

impl WasmMemory {
    fn kind(&self) -> i32 {
        i32::from(self.pattern == "freelist")
    }

    fn grow_once(&mut self) -> Result<()> {
        if self.pages + self.size as i64 > GROW_LIMIT_PAGES {
            self.inst.reset()?;
            self.pages = 1;
            self.resets += 1;
        }
        let old = self.inst.call("grow", &[Arg::I32(self.size as i32)], 1)?.i32()?;
        if old as i64 != self.pages {
            bail!("memory.grow({}) returned {old}, expected the old size {} pages", self.size, self.pages);
        }
        self.pages += self.size as i64;
        Ok(())
    }

    /// Runs the allocator pattern once with a log and replays it: every
    /// block 8-byte aligned, inside the arena, disjoint from the live ones.
    fn check_allocator(&mut self) -> Result<Verification> {
        let (steps, log) = (self.size, log_at(self.size));
        let args = [self.kind(), ARENA as i32, steps as i32, 7, log as i32].map(Arg::I32);
        let allocs = self.inst.call("pattern", &args, 1)?.i32()?;
        let raw = self.inst.read(log, 16 * steps)?;
        let word =
            |c: &[u8], i: usize| i32::from_le_bytes([c[4 * i], c[4 * i + 1], c[4 * i + 2], c[4 * i + 3]]);
        let mut live: Vec<Option<(usize, usize)>> = vec![None; 64];
        let mut seen = 0;
        for (step, c) in raw.chunks_exact(16).enumerate() {
            let (op, slot, p, size) =
                (word(c, 0), word(c, 1) as usize, word(c, 2) as usize, word(c, 3) as usize);
            if slot >= 64 {
                return Ok(Verification::check("log replay", false, format!("step {step}: slot {slot}")));
            }
            if op == 1 {
                seen += 1;
                let overlaps = live.iter().flatten().any(|&(q, qs)| p < q + qs && q < p + size);
                if p % 8 != 0 || p < ARENA + 1024 || p + size > log || overlaps {
                    let why =
                        format!("step {step}: block {p}+{size} misaligned, outside the arena or overlapping");
                    return Ok(Verification::check("log replay", false, why));
                }
                live[slot] = Some((p, size));
            } else if live[slot].take() != Some((p, size)) {
                return Ok(Verification::check(
                    "log replay",
                    false,
                    format!("step {step}: freed an unknown block"),
                ));
            }
        }
        self.allocs = allocs;
        Ok(Verification::check(
            "replay of the module's allocation log in Rust",
            seen == allocs,
            format!(
                "{allocs} allocations over {steps} steps: aligned, inside the arena, never overlapping; tags checked in the module"
            ),
        ))
    }

    fn check_ceiling(&mut self) -> Result<Verification> {
        let before = self.inst.call("size", &[], 1)?;
        let refused = self.inst.call("grow", &[Arg::I32(65536)], 1)?;
        let after = self.inst.call("size", &[], 1)?;
        let host =
            self.inst.ensure_memory(WASM32_MAX_BYTES + 1).err().map(|e| e.to_string()).unwrap_or_default();
        let big = wasm::assemble("(module (memory (export \"memory\") 65537))")?;
        let declared = wasm::load(self.inst.runtime(), &big).err().map(|e| e.to_string()).unwrap_or_default();
        let ok = refused == Ret::I32(-1) && before == after && host.contains("4 GiB") && !declared.is_empty();
        Ok(Verification::check(
            "wasm32's 4 GiB ceiling",
            ok,
            format!(
                "memory.grow(65536 pages) = {refused:?}, size {before:?} -> {after:?}; host: {host}; a module declaring 65537 pages: {declared}"
            ),
        ))
    }
}

impl Workload for WasmMemory {
    fn verify(&mut self) -> Result<Verification> {
        match self.pattern.as_str() {
            "grow" => {
                self.grow_once()?;
                let size = self.inst.call("size", &[], 1)?.i32()?;
                let bytes = self.inst.memory_bytes()?;
                let ok = size as i64 == self.pages && bytes == self.pages as usize * PAGE;
                Ok(Verification::check(
                    "memory.size after memory.grow",
                    ok,
                    format!("{size} pages, {bytes} bytes"),
                ))
            }
            "copy_in" => {
                self.inst.write(0, &vec![0u8; self.size])?;
                self.inst.copy_loop(0, &self.data, true, 1)?;
                let back = self.inst.read(0, self.size)?;
                Ok(Verification::check(
                    "the bytes read back",
                    back == self.data,
                    format!("{} bytes", self.size),
                ))
            }
            "copy_out" => {
                // Reading out must not change memory, and reads what was written.
                self.inst.copy_loop(0, &self.data, false, 1)?;
                let back = self.inst.read(0, self.size)?;
                Ok(Verification::check(
                    "the bytes in memory",
                    back == self.data,
                    format!("{} bytes", self.size),
                ))
            }
            "bump" | "freelist" => self.check_allocator(),
            _ => self.check_ceiling(),
        }
    }
    fn throughput(&self) -> Vec<Throughput> {
        match self.pattern.as_str() {
            "grow" => vec![Throughput::bytes((self.size * PAGE) as f64)],
            "copy_in" | "copy_out" => vec![Throughput::bytes(self.size as f64)],
            "bump" | "freelist" => vec![Throughput::items(self.size as f64)],
            _ => vec![Throughput::items(1.0)],
        }
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        match self.pattern.as_str() {
            "grow" => (0..iters).try_for_each(|_| self.grow_once()),
            "copy_in" | "copy_out" => self.inst.copy_loop(0, &self.data, self.pattern == "copy_in", iters),
            "bump" | "freelist" => {
                let args = [self.kind(), ARENA as i32, self.size as i32, 7, 0].map(Arg::I32);
                self.inst.call("pattern", &args, iters).map(|_| ())
            }
            _ => match self.inst.call("grow", &[Arg::I32(65536)], iters)? {
                Ret::I32(-1) => Ok(()),
                other => bail!("memory.grow past 4 GiB returned {other:?}, not -1"),
            },
        }
    }
    fn metrics(&mut self) -> Vec<Metric> {
        let ph = self.inst.phases();
        let mut m = vec![
            Metric::new("compile_ns", ph.compile_ns, "ns"),
            Metric::new("instantiate_ns", ph.instantiate_ns, "ns"),
        ];
        if self.pattern == "grow" {
            m.push(Metric::new("reinstantiations", self.resets as f64, ""));
        }
        if matches!(self.pattern.as_str(), "bump" | "freelist") {
            m.push(Metric::new("allocations_per_iteration", self.allocs as f64, ""));
            if let Ok(Ret::I32(used)) = self.inst.call("arena_used", &[], 1) {
                m.push(Metric::new("arena_bytes", used as f64, "B"));
            }
        }
        m
    }
}
