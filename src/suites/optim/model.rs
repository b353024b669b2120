//! The two trained models, a stack of layers over one flat parameter
//! vector (so the optimizer step is one fused pass): an MLP with GELU, and
//! pre-LayerNorm transformer blocks. Forward, backward, gradient
//! accumulation over micro-batches and per-layer activation checkpointing.

use super::nn::{self, AttnShape, AttnStash};
use std::ops::Range;

/// Which model.
#[derive(Debug, Clone)]
pub(crate) enum Arch {
    /// Linear layers `dims[i] -> dims[i+1]`, GELU between them.
    Mlp { dims: Vec<usize> },
    /// `layers` blocks of width `d`, `heads` heads, FFN width `ffn`, over
    /// sequences of `seq` tokens.
    Block { d: usize, heads: usize, ffn: usize, seq: usize, layers: usize },
}

/// What one layer's backward needs from its forward.
enum Stash {
    Mlp { z: Option<Vec<f32>> },
    Block(Box<BlockStash>),
}

struct BlockStash {
    xn1: Vec<f32>,
    st1: Vec<f32>,
    att: AttnStash,
    merged: Vec<f32>,
    h: Vec<f32>,
    xn2: Vec<f32>,
    st2: Vec<f32>,
    z1: Vec<f32>,
    g1: Vec<f32>,
}

/// A model with its parameters and gradients.
pub(crate) struct Model {
    pub(crate) arch: Arch,
    pub(crate) params: Vec<f32>,
    pub(crate) grads: Vec<f32>,
    /// Per layer, the ranges of its tensors in `params`.
    layers: Vec<Vec<Range<usize>>>,
    threads: usize,
}

/// Mutable slices for sorted, disjoint `ranges` of `buf`.
fn split_mut<'a>(mut buf: &'a mut [f32], ranges: &[Range<usize>]) -> Vec<&'a mut [f32]> {
    let mut out = Vec::with_capacity(ranges.len());
    let mut at = 0;
    for r in ranges {
        let (_, rest) = std::mem::take(&mut buf).split_at_mut(r.start - at);
        let (mine, rest) = rest.split_at_mut(r.len());
        out.push(mine);
        buf = rest;
        at = r.end;
    }
    out
}

impl Model {
    /// A model with seeded weights (scaled by 1/sqrt(fan-in)), small random
    /// biases and LayerNorm parameters near (1, 0).
    pub(crate) fn new(arch: Arch, seed: u64, threads: usize) -> Self {
        // (numel, init scale, offset) per tensor, per layer.
        let mut specs: Vec<Vec<(usize, f32, f32)>> = Vec::new();
        match &arch {
            Arch::Mlp { dims } => {
                for w in dims.windows(2) {
                    specs.push(vec![(w[0] * w[1], 1.0 / (w[0] as f32).sqrt(), 0.0), (w[1], 0.02, 0.0)]);
                }
            }
            &Arch::Block { d, ffn, layers, .. } => {
                let s = 1.0 / (d as f32).sqrt();
                for _ in 0..layers {
                    specs.push(vec![
                        (d, 0.05, 1.0),
                        (d, 0.02, 0.0),
                        (3 * d * d, s, 0.0),
                        (3 * d, 0.02, 0.0),
                        (d * d, s, 0.0),
                        (d, 0.02, 0.0),
                        (d, 0.05, 1.0),
                        (d, 0.02, 0.0),
                        (ffn * d, s, 0.0),
                        (ffn, 0.02, 0.0),
                        (d * ffn, 1.0 / (ffn as f32).sqrt(), 0.0),
                        (d, 0.02, 0.0),
                    ]);
                }
            }
        }
        let total: usize = specs.iter().flatten().map(|s| s.0).sum();
        let mut params = crate::util::randn(total, seed);
        let mut layers = Vec::new();
        let mut at = 0;
        for layer in &specs {
            let mut ranges = Vec::new();
            for &(n, scale, offset) in layer {
                params[at..at + n].iter_mut().for_each(|x| *x = *x * scale + offset);
                ranges.push(at..at + n);
                at += n;
            }
            layers.push(ranges);
        }
        Self { arch, grads: vec![0.0; total], params, layers, threads }
    }

    /// Width of the model's input and output rows.
    pub(crate) fn width(&self) -> (usize, usize) {
        match &self.arch {
            Arch::Mlp { dims } => (dims[0], dims[dims.len() - 1]),
            &Arch::Block { d, .. } => (d, d),
        }
    }

    /// Rows of activations for `batch` (tokens for the block).
    pub(crate) fn rows(&self, batch: usize) -> usize {
        match &self.arch {
            Arch::Mlp { .. } => batch,
            &Arch::Block { seq, .. } => batch * seq,
        }
    }

    fn attn(&self, rows: usize) -> AttnShape {
        match self.arch {
            Arch::Block { d, heads, seq, .. } => {
                AttnShape { batch: rows / seq, seq, heads, head_dim: d / heads }
            }
            Arch::Mlp { .. } => unreachable!("attention of an MLP"),
        }
    }

    /// Forward FLOPs for `rows` rows (matmuls and attention products).
    pub(crate) fn forward_flops(&self, rows: usize) -> f64 {
        match &self.arch {
            Arch::Mlp { dims } => dims.windows(2).map(|w| 2.0 * (rows * w[0] * w[1]) as f64).sum(),
            &Arch::Block { d, ffn, layers, .. } => {
                let per = 2.0 * rows as f64 * (4 * d * d + 2 * d * ffn) as f64 + self.attn(rows).flops();
                per * layers as f64
            }
        }
    }

    /// Floats layer `l`'s stash holds for `rows` rows.
    fn stash_floats(&self, l: usize, rows: usize) -> usize {
        match &self.arch {
            Arch::Mlp { dims } => {
                if l + 2 < dims.len() {
                    rows * dims[l + 1]
                } else {
                    0
                }
            }
            &Arch::Block { d, ffn, .. } => rows * (5 * d + 4 + 2 * ffn) + self.attn(rows).stash_floats(),
        }
    }

    /// Bytes of activations a step must hold at once for `rows` rows:
    /// every layer's output and stash (store), or every layer's output plus
    /// one recomputed stash (recompute).
    pub(crate) fn activation_bytes(&self, rows: usize, recompute: bool) -> usize {
        let n = self.layers.len();
        let outputs: usize = match &self.arch {
            Arch::Mlp { dims } => dims[1..].iter().map(|&w| rows * w).sum(),
            &Arch::Block { d, .. } => n * rows * d,
        };
        let stashes: Vec<usize> = (0..n).map(|l| self.stash_floats(l, rows)).collect();
        let held = if recompute { stashes.iter().copied().max().unwrap_or(0) } else { stashes.iter().sum() };
        4 * (outputs + held)
    }

    fn layer_fwd(&self, l: usize, x: &[f32], rows: usize) -> (Vec<f32>, Stash) {
        let t = self.threads;
        let p = |i: usize| &self.params[self.layers[l][i].clone()];
        match &self.arch {
            Arch::Mlp { dims } => {
                let z = nn::linear_fwd(t, x, rows, p(0), p(1));
                if l + 2 < dims.len() {
                    (nn::gelu_fwd(&z), Stash::Mlp { z: Some(z) })
                } else {
                    (z, Stash::Mlp { z: None })
                }
            }
            Arch::Block { .. } => {
                let (xn1, st1) = nn::layernorm_fwd(x, p(0), p(1));
                let qkv = nn::linear_fwd(t, &xn1, rows, p(2), p(3));
                let (merged, att) = nn::attention_fwd(self.attn(rows), &qkv);
                drop(qkv);
                let mut h = nn::linear_fwd(t, &merged, rows, p(4), p(5));
                h.iter_mut().zip(x).for_each(|(h, &x)| *h += x);
                let (xn2, st2) = nn::layernorm_fwd(&h, p(6), p(7));
                let z1 = nn::linear_fwd(t, &xn2, rows, p(8), p(9));
                let g1 = nn::gelu_fwd(&z1);
                let mut y = nn::linear_fwd(t, &g1, rows, p(10), p(11));
                y.iter_mut().zip(&h).for_each(|(y, &h)| *y += h);
                (y, Stash::Block(Box::new(BlockStash { xn1, st1, att, merged, h, xn2, st2, z1, g1 })))
            }
        }
    }

    fn layer_bwd(&mut self, l: usize, x: &[f32], st: Stash, dy: Vec<f32>, rows: usize) -> Vec<f32> {
        let t = self.threads;
        let attn = if matches!(self.arch, Arch::Block { .. }) { Some(self.attn(rows)) } else { None };
        let ranges = &self.layers[l];
        let params = &self.params;
        let p = |i: usize| &params[ranges[i].clone()];
        let mut g = split_mut(&mut self.grads, ranges);
        match st {
            Stash::Mlp { z } => {
                let dz = match z {
                    Some(z) => nn::gelu_bwd(&z, &dy),
                    None => dy,
                };
                let (dw, rest) = g.split_at_mut(1);
                nn::linear_bwd(t, x, &dz, rows, p(0), dw[0], rest[0])
            }
            Stash::Block(s) => {
                let s = *s;
                let [dln1g, dln1b, dwqkv, dbqkv, dwo, dbo, dln2g, dln2b, dw1, db1, dw2, db2] = &mut g[..]
                else {
                    unreachable!("a block has 12 tensors")
                };
                let dg1 = nn::linear_bwd(t, &s.g1, &dy, rows, p(10), dw2, db2);
                let dz1 = nn::gelu_bwd(&s.z1, &dg1);
                drop(dg1);
                let dxn2 = nn::linear_bwd(t, &s.xn2, &dz1, rows, p(8), dw1, db1);
                drop(dz1);
                let mut dh = nn::layernorm_bwd(&s.h, &dxn2, &s.st2, p(6), dln2g, dln2b);
                dh.iter_mut().zip(&dy).for_each(|(a, &b)| *a += b);
                drop(dy);
                let dmerged = nn::linear_bwd(t, &s.merged, &dh, rows, p(4), dwo, dbo);
                let dqkv = nn::attention_bwd(attn.unwrap_or_else(|| unreachable!()), &s.att, &dmerged);
                drop(dmerged);
                let dxn1 = nn::linear_bwd(t, &s.xn1, &dqkv, rows, p(2), dwqkv, dbqkv);
                drop(dqkv);
                let mut dx = nn::layernorm_bwd(x, &dxn1, &s.st1, p(0), dln1g, dln1b);
                dx.iter_mut().zip(&dh).for_each(|(a, &b)| *a += b);
                dx
            }
        }
    }

    /// The loss `sum (y - target)^2 / (2 * norm)` of a forward pass (f64 sum).
    pub(crate) fn loss(&self, x: &[f32], target: &[f32], rows: usize, norm: f64) -> f64 {
        let mut act = x.to_vec();
        for l in 0..self.layers.len() {
            act = self.layer_fwd(l, &act, rows).0;
        }
        act.iter().zip(target).map(|(&y, &t)| (y as f64 - t as f64).powi(2)).sum::<f64>() / (2.0 * norm)
    }

    /// Forward and backward of one micro-batch, adding its gradient (of the
    /// loss normalised by `norm` values) into `grads`; returns its loss.
    pub(crate) fn forward_backward(
        &mut self,
        x: &[f32],
        target: &[f32],
        rows: usize,
        norm: f64,
        recompute: bool,
    ) -> f64 {
        let n = self.layers.len();
        let mut acts: Vec<Vec<f32>> = Vec::with_capacity(n);
        let mut stashes = Vec::with_capacity(n);
        for l in 0..n {
            let input = if l == 0 { x } else { &acts[l - 1] };
            let (y, st) = self.layer_fwd(l, input, rows);
            if !recompute {
                stashes.push(st);
            }
            acts.push(y);
        }
        let out = acts.pop().unwrap_or_default();
        let inv = (1.0 / norm) as f32;
        let mut loss = 0.0f64;
        let mut dy = vec![0.0f32; out.len()];
        for ((d, &y), &t) in dy.iter_mut().zip(&out).zip(target) {
            loss += (y as f64 - t as f64).powi(2);
            *d = (y - t) * inv;
        }
        drop(out);
        for l in (0..n).rev() {
            let input: &[f32] = if l == 0 { x } else { &acts[l - 1] };
            let st = match stashes.pop() {
                Some(st) if !recompute => st,
                _ => self.layer_fwd(l, input, rows).1,
            };
            // Detach the input from `acts` so `self` can be borrowed mutably.
            let owned;
            let input: &[f32] = if l == 0 {
                x
            } else {
                owned = acts.pop().unwrap_or_default();
                &owned
            };
            dy = self.layer_bwd(l, input, st, dy, rows);
        }
        loss / (2.0 * norm)
    }

    /// Zeroes the gradients, then accumulates `micro` equal micro-batches of
    /// the `rows` rows of `x`; returns the batch loss.
    pub(crate) fn accumulate(
        &mut self,
        x: &[f32],
        target: &[f32],
        rows: usize,
        micro: usize,
        recompute: bool,
    ) -> f64 {
        self.grads.iter_mut().for_each(|g| *g = 0.0);
        let (din, dout) = self.width();
        let mrows = rows / micro;
        let norm = (rows * dout) as f64;
        let mut loss = 0.0;
        for k in 0..micro {
            let xs = &x[k * mrows * din..(k + 1) * mrows * din];
            let ts = &target[k * mrows * dout..(k + 1) * mrows * dout];
            loss += self.forward_backward(xs, ts, mrows, norm, recompute);
        }
        loss
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny(arch: &str) -> (Model, Vec<f32>, Vec<f32>, usize) {
        let arch = match arch {
            "mlp" => Arch::Mlp { dims: vec![6, 10, 8, 5] },
            _ => Arch::Block { d: 8, heads: 2, ffn: 12, seq: 5, layers: 2 },
        };
        let m = Model::new(arch, 7, 1);
        let rows = m.rows(3);
        let (din, dout) = m.width();
        (m, crate::util::randn(rows * din, 8), crate::util::randn(rows * dout, 9), rows)
    }

    /// Every parameter tensor's gradient against a central finite difference
    /// along a random direction within that tensor, and a few single entries.
    #[test]
    fn gradients_match_finite_differences() {
        for arch in ["mlp", "block"] {
            let (mut m, x, t, rows) = tiny(arch);
            let norm = (rows * m.width().1) as f64;
            m.grads.iter_mut().for_each(|g| *g = 0.0);
            m.forward_backward(&x, &t, rows, norm, false);
            let ranges: Vec<Range<usize>> = m.layers.iter().flatten().cloned().collect();
            for (ti, r) in ranges.iter().enumerate() {
                let dir = crate::util::randn(r.len(), 100 + ti as u64);
                let analytic: f64 =
                    m.grads[r.clone()].iter().zip(&dir).map(|(&g, &d)| g as f64 * d as f64).sum();
                let h = 2e-3f32;
                let base = m.params.clone();
                let mut at = |sign: f32| {
                    m.params[r.clone()].iter_mut().zip(&dir).for_each(|(p, &d)| *p += sign * h * d);
                    let l = m.loss(&x, &t, rows, norm);
                    m.params.copy_from_slice(&base);
                    l
                };
                let numeric = (at(1.0) - at(-1.0)) / (2.0 * h as f64);
                let err = (analytic - numeric).abs();
                assert!(
                    err <= 2e-3 * analytic.abs().max(numeric.abs()) + 1e-5,
                    "{arch} tensor {ti}: {analytic} vs {numeric}"
                );
                // One entry of the tensor, alone.
                let i = r.start + r.len() / 2;
                let mut at1 = |sign: f32| {
                    m.params[i] += sign * h;
                    let l = m.loss(&x, &t, rows, norm);
                    m.params.copy_from_slice(&base);
                    l
                };
                let numeric1 = (at1(1.0) - at1(-1.0)) / (2.0 * h as f64);
                let g1 = m.grads[i] as f64;
                // One entry moves the f32 loss by little: f32 rounding of the
                // forward limits this check to about 1%.
                assert!(
                    (g1 - numeric1).abs() <= 1e-2 * g1.abs().max(numeric1.abs()) + 1e-4,
                    "{arch} entry {i}: {g1} vs {numeric1}"
                );
            }
        }
    }

    #[test]
    fn recompute_is_bit_identical_and_accumulation_matches_one_batch() {
        for arch in ["mlp", "block"] {
            let (mut m, x, t, rows) = tiny(arch);
            let l1 = m.accumulate(&x, &t, rows, 1, false);
            let g1 = m.grads.clone();
            let l2 = m.accumulate(&x, &t, rows, 1, true);
            assert_eq!(l1, l2);
            assert!(g1.iter().zip(&m.grads).all(|(a, b)| a.to_bits() == b.to_bits()), "{arch}");
            let l3 = m.accumulate(&x, &t, rows, 3, false);
            assert!((l1 - l3).abs() < 1e-5 * l1.abs().max(1.0), "{l1} vs {l3}");
            for (a, b) in g1.iter().zip(&m.grads) {
                assert!((a - b).abs() <= 1e-6 + 1e-4 * a.abs(), "{arch}: {a} vs {b}");
            }
        }
    }
}
