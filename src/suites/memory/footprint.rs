//! Model footprints: parameter bytes per dtype and KV-cache bytes by batch
//! and context for the shared model catalogue, checked two ways: the
//! parameter count against closed-form formulas per architecture, and (for
//! models that fit) the computed bytes against what the counting allocator
//! sees when every tensor is really allocated and touched (the resident-set
//! growth is reported beside it). Models too big to allocate here are
//! computed only, and the verification says so.

use crate::alloc as counting;
use crate::model::config::{Arch, ModelConfig};
use crate::plan::Case;
use crate::suites::common::choice;
use crate::suites::{Throughput, Verification, Workload};
use crate::workload::Metric;
use anyhow::{Context, Result, ensure};
use std::alloc::Layout;

/// Dtypes and their storage bytes per parameter (q4_0: 32 weights in 16
/// bytes of nibbles plus an f16 scale, 18 bytes per block).
pub(crate) const DTYPES: &[(&str, f64)] =
    &[("f32", 4.0), ("f16", 2.0), ("bf16", 2.0), ("int8", 1.0), ("q4_0", 18.0 / 32.0)];

/// Largest footprint allocated for real (bigger ones are computed only).
pub(crate) const REAL_LIMIT: u64 = 512 << 20;

/// Parameters from the architecture's formula, independent of the tensor list.
pub(crate) fn closed_form_params(m: &ModelConfig) -> u64 {
    let (l, h, f, v, p) =
        (m.layers as u64, m.hidden as u64, m.ffn as u64, m.vocab as u64, m.max_positions as u64);
    let kv = (m.kv_heads * m.head_dim()) as u64;
    match m.arch {
        // Embeddings + LN; per layer: QKVO with biases, FFN with biases, two LNs; pooler.
        Arch::Bert => {
            v * h
                + p * h
                + m.type_vocab as u64 * h
                + 2 * h
                + l * (4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h)
                + h * h
                + h
        }
        // Tied LM head; final LN.
        Arch::Gpt2 => v * h + p * h + l * (4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h) + 2 * h,
        // No biases; Q,O are h x h, K,V are kv x h; SwiGLU has three matrices; untied head.
        Arch::Llama => v * h + l * (2 * h * h + 2 * kv * h + 3 * h * f + 2 * h) + h + v * h,
    }
}

struct Footprint {
    model: ModelConfig,
    dtype: (&'static str, f64),
    batch: usize,
    context: usize,
    /// Sizes of every tensor allocated for real (weights, then K and V per layer).
    sizes: Vec<usize>,
    blocks: Vec<(*mut u8, Layout)>,
    computed: u64,
    real: bool,
    measured_peak: Option<u64>,
    rss_delta: Option<u64>,
}

// SAFETY: the raw blocks are owned by this workload alone (and empty between calls).
unsafe impl Send for Footprint {}

pub(crate) fn prepare(case: &Case) -> Result<Box<dyn Workload>> {
    let model = ModelConfig::preset(&case.str("model")?)?;
    let names: Vec<&str> = DTYPES.iter().map(|d| d.0).collect();
    let name = choice(case, "dtype", &names)?;
    let dtype = DTYPES.iter().copied().find(|d| d.0 == name).context("dtype")?;
    let (batch, context) = (case.usize("batch")?, case.usize("context")?);
    ensure!(batch > 0 && context > 0, "case {}: `batch` and `context` must be positive", case.id);
    // KV cache in the weights' dtype, but at least one byte per element
    // (nobody keeps a 4-bit cache here).
    let kv_elem = dtype.1.max(1.0) as usize;
    let mut sizes: Vec<usize> =
        model.weights().iter().map(|w| (w.numel() as f64 * dtype.1).ceil() as usize).collect();
    let per_kv = batch * model.kv_heads * context * model.head_dim() * kv_elem;
    sizes.extend(std::iter::repeat_n(per_kv, 2 * model.layers));
    let computed =
        (model.weight_bytes(dtype.1).ceil() as u64).max(1) + model.kv_cache_bytes(batch, context, kv_elem);
    let real = computed <= REAL_LIMIT;
    let n = sizes.len();
    Ok(Box::new(Footprint {
        model,
        dtype,
        batch,
        context,
        sizes,
        blocks: Vec::with_capacity(n),
        computed,
        real,
        measured_peak: None,
        rss_delta: None,
    }))
}

fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

impl Footprint {
    fn alloc_all(&mut self, touch: bool) -> Result<()> {
        for &size in &self.sizes {
            let layout = Layout::from_size_align(size.max(1), 64)?;
            // SAFETY: non-zero size.
            let p = unsafe { std::alloc::alloc(layout) };
            if p.is_null() {
                self.free_all();
                anyhow::bail!("could not allocate {size} B");
            }
            if touch {
                for off in (0..size).step_by(4096) {
                    // SAFETY: `off < size`, inside the block.
                    unsafe { p.add(off).write_volatile(1) };
                }
            }
            self.blocks.push((p, layout));
        }
        Ok(())
    }
    fn free_all(&mut self) {
        for (p, layout) in self.blocks.drain(..) {
            // SAFETY: allocated by `alloc_all` with this layout.
            unsafe { std::alloc::dealloc(p, layout) };
        }
    }
}

impl Drop for Footprint {
    fn drop(&mut self) {
        self.free_all();
    }
}

impl Workload for Footprint {
    fn verify(&mut self) -> Result<Verification> {
        let m = &self.model;
        let (formula, listed) = (closed_form_params(m), m.param_count());
        ensure!(
            formula == listed,
            "{}: the tensor list has {listed} parameters, the closed form {formula}",
            m.name
        );
        let kv_formula = 2 * (m.layers * self.batch * self.context * m.kv_heads * m.head_dim()) as u64;
        ensure!(
            m.kv_cache_bytes(self.batch, self.context, 1) == kv_formula,
            "KV cache: catalogue {} B per byte-element, formula {kv_formula}",
            m.kv_cache_bytes(self.batch, self.context, 1)
        );
        let listed_bytes: u64 = self.sizes.iter().map(|&s| s as u64).sum();
        // Per-tensor rounding (q4_0 blocks) may add a byte per tensor.
        ensure!(
            listed_bytes.abs_diff(self.computed) <= self.sizes.len() as u64,
            "tensor sizes sum to {listed_bytes} B, footprint says {}",
            self.computed
        );
        if !self.real {
            return Ok(Verification::pass(format!(
                "{} parameters = closed form; KV = 2*layers*batch*context*kv_width; computed only: {:.1} GiB is over the {} MiB limit for real allocation",
                listed,
                self.computed as f64 / (1u64 << 30) as f64,
                REAL_LIMIT >> 20
            )));
        }
        let rss0 = rss_bytes();
        let live0 = counting::reset_peak();
        self.alloc_all(true)?;
        let peak = counting::peak().saturating_sub(live0) as u64;
        let rss1 = rss_bytes();
        self.free_all();
        let mut detail = format!("{} tensors allocated and touched", self.sizes.len());
        if counting::is_installed() {
            ensure!(peak == listed_bytes, "counting allocator peak {peak} B, computed {listed_bytes} B");
            self.measured_peak = Some(peak);
            detail += &format!("; counted peak = computed = {peak} B");
        }
        // The resident set is reported, not checked: memory freed by earlier
        // cases stays resident in the allocator and is reused without growing it.
        if let (Some(a), Some(b)) = (rss0, rss1) {
            self.rss_delta = Some(b.saturating_sub(a));
        }
        Ok(Verification {
            passed: true,
            reference: "closed-form parameter and KV formulas; the counting allocator's peak".into(),
            max_error: None,
            detail,
        })
    }
    fn throughput(&self) -> Vec<Throughput> {
        if self.real {
            vec![Throughput::items(self.sizes.len() as f64), Throughput::bytes(self.computed as f64)]
        } else {
            vec![Throughput::items(1.0)]
        }
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            if self.real {
                // Load-time cost of a model's storage: every tensor allocated, then freed.
                self.alloc_all(false)?;
                self.free_all();
            } else {
                let m = std::hint::black_box(&self.model);
                std::hint::black_box(
                    m.weight_bytes(self.dtype.1) + m.kv_cache_bytes(self.batch, self.context, 2) as f64,
                );
            }
        }
        Ok(())
    }
    fn metrics(&mut self) -> Vec<Metric> {
        let m = &self.model;
        let mut out = vec![
            Metric::new("params", m.param_count() as f64, ""),
            Metric::new("footprint_bytes", self.computed as f64, "B"),
            Metric::new("allocated_for_real", if self.real { 1.0 } else { 0.0 }, ""),
        ];
        for (name, b) in DTYPES {
            out.push(Metric::new(format!("weight_bytes_{name}"), m.weight_bytes(*b), "B"));
        }
        for batch in [1, 8] {
            let mut ctxs = vec![512, 2048, m.max_positions];
            ctxs.dedup();
            ctxs.sort_unstable();
            ctxs.dedup();
            for ctx in ctxs {
                out.push(Metric::new(
                    format!("kv_f16_bytes_b{batch}_ctx{ctx}"),
                    m.kv_cache_bytes(batch, ctx, 2) as f64,
                    "B",
                ));
            }
        }
        if let Some(p) = self.measured_peak {
            out.push(Metric::new("measured_peak_bytes", p as f64, "B"));
        }
        if let Some(r) = self.rss_delta {
            out.push(Metric::new("measured_rss_delta_bytes", r as f64, "B"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_forms_match_the_catalogue_and_published_counts() {
        for name in crate::model::config::PRESETS {
            let m = ModelConfig::preset(name).unwrap();
            assert_eq!(closed_form_params(&m), m.param_count(), "{name}");
        }
        let gpt2 = ModelConfig::preset("gpt2").unwrap();
        assert_eq!(closed_form_params(&gpt2), 124_439_808);
        // LLaMA-7B: 6.74e9 parameters, 13.5 GB in f16, 256 MiB... per 512 tokens of f16 KV.
        let l7 = ModelConfig::preset("llama-7b").unwrap();
        assert_eq!(l7.weight_bytes(2.0), 2.0 * 6_738_415_616.0);
        assert_eq!(l7.kv_cache_bytes(1, 512, 2), 256 << 20);
    }

    #[test]
    fn tiny_model_allocates_exactly_what_is_computed() {
        let mut p = std::collections::BTreeMap::new();
        use crate::plan::ParamValue;
        p.insert("model".into(), ParamValue::Str("bert-tiny".into()));
        p.insert("dtype".into(), ParamValue::Str("q4_0".into()));
        p.insert("batch".into(), ParamValue::Int(2));
        p.insert("context".into(), ParamValue::Int(64));
        let mut w = prepare(&Case::new("memory", "footprint", p)).unwrap();
        assert!(w.verify().unwrap().passed);
        w.run(2).unwrap();
        let m = w.metrics();
        assert!(m.iter().any(|m| m.name == "allocated_for_real" && m.value == 1.0));
        let mut p = std::collections::BTreeMap::new();
        p.insert("model".into(), ParamValue::Str("llama-13b".into()));
        p.insert("dtype".into(), ParamValue::Str("f32".into()));
        p.insert("batch".into(), ParamValue::Int(1));
        p.insert("context".into(), ParamValue::Int(512));
        let mut w = prepare(&Case::new("memory", "footprint", p)).unwrap();
        let v = w.verify().unwrap();
        assert!(v.passed && v.reference.contains("computed only"), "{}", v.reference);
    }
}
