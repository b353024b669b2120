//! The `gguf` benchmark for an encoder file (`bert`): llama-bench's `load`
//! and `ppN` (one forward pass over N prompt tokens, no KV cache, as
//! llama-bench's prompt processing of an embedding model). `tgN`, `pgN,M`
//! and a depth generate or keep a cache, which an encoder does not: those
//! cases are skipped with the reason.
//!
//! Verified before timing like the decoders (`model_file.rs`): the last hidden
//! states against the independent f64 forward (`crate::model::reference`) on the same
//! stored weights, then the int8-activation path against the exact one.

use super::model_file::FileCase;
use crate::model::source::gguf::FileInfo;
use crate::model::source::{Source, reload};
use crate::model::transformer::{Model, Workspace, WorkspaceSize};
use crate::suites::model_cases::Test;
use crate::suites::{Throughput, Verification, Workload};
use crate::workload::Metric;
use anyhow::{Result, bail};
use std::path::PathBuf;
use std::time::Instant;

/// Prompt ids of the check: spread over the vocabulary, 8 positions.
fn check_ids(vocab: usize) -> Vec<u32> {
    crate::model::random_ids(8, vocab, 0x5eed)
}

/// Last hidden states of `ids` through the fast path.
fn hidden(model: &Model, ids: &[u32]) -> Vec<f32> {
    let n = ids.len();
    let size =
        WorkspaceSize { batch: 1, tokens: n, keys: n, threads: crate::backend::cpu::current_threads() };
    let mut ws = Workspace::new(model, size);
    model.encode(&mut ws, ids, &vec![1u8; n], 1, n);
    ws.hidden(n, model.cfg.hidden).to_vec()
}

/// The checks of the module doc for an encoder; the verification and its metrics.
pub fn verify_encoder(model: &mut Model) -> Result<(Verification, Vec<Metric>)> {
    let ids = check_ids(model.cfg.vocab);
    model.set_int8_activations(false);
    let exact = hidden(model, &ids);
    let want: Vec<f32> =
        crate::model::reference::forward(model, &ids, None).iter().map(|&x| x as f32).collect();
    let scale = want.iter().fold(0.0f32, |a, &x| a.max(x.abs())) as f64;
    // f32 against f64 through every layer: relative 1e-3 of the hidden
    // states' range (a wiring error is orders larger).
    let mut v = Verification::compare(
        "f64 reference on the file's dequantized weights: last hidden states of 8 positions",
        &exact,
        &want,
        1e-3 * scale,
        1e-3,
    )
    .into_result()?;
    model.set_int8_activations(true);
    let fast = hidden(model, &ids);
    let worst = fast.iter().zip(&exact).fold(0.0f64, |w, (a, b)| w.max((a - b).abs() as f64));
    // Int8 activations per block of 32 perturb each value by about 1/254 of
    // the block maxima times the weights, renormalised by every LayerNorm: a
    // few percent of the largest hidden value.
    let tol = 0.05 * scale;
    if worst > tol {
        bail!("int8-activation path vs exact: max |hidden diff| {worst:.3e} > tolerance {tol:.3e}");
    }
    v.detail = format!(
        "{}; int8-activation path vs exact: max |hidden diff| {worst:.3e} (tol {tol:.3e} = 5% of max |hidden|)",
        v.detail
    );
    Ok((v, vec![Metric::new("w8a8_vs_exact_max_hidden_diff", worst, "")]))
}

/// A `gguf` case of an encoder file.
struct EncoderCase {
    path: PathBuf,
    info: FileInfo,
    test: Test,
    state: Option<(Model, Workspace)>,
    prompt: Vec<u32>,
    note: String,
    steps: Vec<f64>,
    load_ns: f64,
    extra: Vec<Metric>,
}

/// Builds the case `model_file.rs` handed over (its header already checked).
pub(super) fn prepare(
    path: PathBuf,
    src: Source,
    info: FileInfo,
    test: Test,
    depth: usize,
    threads: usize,
) -> Result<Box<dyn Workload>> {
    let (np, ng) = test.lengths();
    if ng > 0 || depth > 0 {
        return Err(crate::suites::skip(format!(
            "{} is an encoder (`bert`): it generates no tokens and keeps no KV cache, so tgN, pgN,M and d > 0 do not apply; ppN and load run",
            info.name
        )));
    }
    if np > info.cfg.max_positions {
        return Err(crate::suites::skip(format!(
            "pp{np} exceeds {}'s {} positions",
            info.name, info.cfg.max_positions
        )));
    }
    let (prompt, note) = super::model_file_tokenize::prompt(&src, &info, np.max(1))?;
    let t = Instant::now();
    let model = src.load(&info, np.max(1))?;
    let load_ns = t.elapsed().as_nanos() as f64;
    drop(src);
    let state = (test != Test::Load).then(|| {
        let size = WorkspaceSize { batch: 1, tokens: np, keys: np, threads };
        let ws = Workspace::new(&model, size);
        (model, ws)
    });
    let steps = Vec::with_capacity(1 << 16);
    Ok(Box::new(EncoderCase { path, info, test, state, prompt, note, steps, load_ns, extra: Vec::new() }))
}

impl Workload for EncoderCase {
    fn verify(&mut self) -> Result<Verification> {
        let (mut v, m) = match &mut self.state {
            Some((model, _)) => verify_encoder(model)?,
            None => verify_encoder(&mut reload(&self.path, &self.info, 8)?)?,
        };
        self.extra = m;
        if self.state.is_some() {
            v.detail = format!("{}; {}", v.detail, self.note);
        }
        Ok(v)
    }

    fn throughput(&self) -> Vec<Throughput> {
        match self.test {
            Test::Pp(n) => vec![Throughput::tokens(n as f64)],
            _ => vec![Throughput::bytes(self.info.bytes as f64)],
        }
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        let n = self.test.lengths().0;
        let mask = vec![1u8; n];
        for _ in 0..iters {
            let Some((model, ws)) = &mut self.state else {
                std::hint::black_box(reload(&self.path, &self.info, 8)?);
                continue;
            };
            let t = Instant::now();
            model.encode(ws, &self.prompt[..n], &mask, 1, n);
            if self.steps.len() < self.steps.capacity() {
                self.steps.push(t.elapsed().as_nanos() as f64 / n as f64);
            }
            std::hint::black_box(ws.hidden(n, model.cfg.hidden)[0]);
        }
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        let mut m = FileCase::model_metrics(&self.info, self.load_ns);
        super::model_file::step_percentiles("per_prompt_token", &self.steps, &mut m);
        m.extend(self.extra.iter().cloned());
        m
    }
}
