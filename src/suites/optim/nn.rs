//! Layers with hand-written backward passes: linear, GELU, LayerNorm and
//! causal multi-head attention, on row-major f32 activations.
//!
//! Forward functions allocate their outputs (as a framework's tape does), so
//! the allocator's peak during a step measures the activations a training
//! step holds. Backward functions add into parameter gradients, which is
//! what gradient accumulation relies on.

use crate::kernels::activation::{gelu_f32, gelu_grad_f32};
use crate::kernels::norm::layer_norm_row;
use crate::kernels::softmax::softmax_row_inplace;
use crate::kernels::{Layout, matmul, matmul_into};
use rayon::prelude::*;

/// `rows x cols` transposed into a new `cols x rows` buffer.
fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut t = vec![0.0f32; x.len()];
    for (r, row) in x.chunks_exact(cols).enumerate() {
        for (c, &v) in row.iter().enumerate() {
            t[c * rows + r] = v;
        }
    }
    t
}

/// `y[rows x dout] = x W^T + b` with `W` stored `[dout x din]`.
pub(crate) fn linear_fwd(t: usize, x: &[f32], rows: usize, w: &[f32], b: &[f32]) -> Vec<f32> {
    let (dout, din) = (b.len(), w.len() / b.len());
    let mut y = vec![0.0f32; rows * dout];
    for row in y.chunks_exact_mut(dout) {
        row.copy_from_slice(b);
    }
    matmul_into(t, (rows, din, dout), x, w, Layout::NxK, &mut y, true);
    y
}

/// Backward of [`linear_fwd`]: `dW += dy^T x`, `db += column sums of dy`;
/// returns `dx = dy W`.
pub(crate) fn linear_bwd(
    t: usize,
    x: &[f32],
    dy: &[f32],
    rows: usize,
    w: &[f32],
    dw: &mut [f32],
    db: &mut [f32],
) -> Vec<f32> {
    let (dout, din) = (db.len(), w.len() / db.len());
    // gemm multiplies A * op(B) only: dW needs dy^T as the left operand.
    let dyt = transpose(dy, rows, dout);
    matmul_into(t, (dout, rows, din), &dyt, x, Layout::KxN, dw, true);
    drop(dyt);
    for row in dy.chunks_exact(dout) {
        db.iter_mut().zip(row).for_each(|(d, &g)| *d += g);
    }
    let mut dx = vec![0.0f32; rows * din];
    matmul(t, (rows, dout, din), dy, w, Layout::KxN, &mut dx);
    dx
}

/// GELU, tanh approximation (GPT-2's), the kernel library's
/// vectorisable form (the same function the tensor suite and GPT-2 run).
pub(crate) fn gelu_fwd(z: &[f32]) -> Vec<f32> {
    z.par_iter().map(|&x| gelu_f32(x)).collect()
}

/// Backward of [`gelu_fwd`] given its input `z`.
pub(crate) fn gelu_bwd(z: &[f32], dy: &[f32]) -> Vec<f32> {
    z.par_iter().zip(dy).map(|(&x, &d)| d * gelu_grad_f32(x)).collect()
}

/// LayerNorm over rows of width `gamma.len()` (eps 1e-5), the kernel
/// library's row kernel; returns the output and each row's mean and
/// reciprocal standard deviation.
pub(crate) fn layernorm_fwd(x: &[f32], gamma: &[f32], beta: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let d = gamma.len();
    let rows = x.len() / d;
    let mut y = vec![0.0f32; x.len()];
    let mut stats = vec![0.0f32; 2 * rows];
    y.par_chunks_mut(d).zip(x.par_chunks(d)).zip(stats.par_chunks_mut(2)).for_each(|((y, x), st)| {
        (st[0], st[1]) = layer_norm_row(y, x, gamma, beta, 1e-5);
    });
    (y, stats)
}

/// Backward of [`layernorm_fwd`]: adds into `dgamma`, `dbeta`; returns dx.
pub(crate) fn layernorm_bwd(
    x: &[f32],
    dy: &[f32],
    stats: &[f32],
    gamma: &[f32],
    dgamma: &mut [f32],
    dbeta: &mut [f32],
) -> Vec<f32> {
    let d = gamma.len();
    let mut dx = vec![0.0f32; x.len()];
    for ((dx, (x, dy)), st) in
        dx.chunks_exact_mut(d).zip(x.chunks_exact(d).zip(dy.chunks_exact(d))).zip(stats.chunks_exact(2))
    {
        let (mean, rstd) = (st[0], st[1]);
        let mut sum_g = 0.0f32;
        let mut sum_gx = 0.0f32;
        for i in 0..d {
            let xhat = (x[i] - mean) * rstd;
            let g = dy[i] * gamma[i];
            dgamma[i] += dy[i] * xhat;
            dbeta[i] += dy[i];
            sum_g += g;
            sum_gx += g * xhat;
        }
        let inv_d = 1.0 / d as f32;
        for i in 0..d {
            let xhat = (x[i] - mean) * rstd;
            dx[i] = rstd * (dy[i] * gamma[i] - inv_d * sum_g - xhat * inv_d * sum_gx);
        }
    }
    dx
}

/// Shape of causal self-attention: `batch` sequences of `seq` tokens,
/// `heads` heads of `head_dim`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttnShape {
    pub(crate) batch: usize,
    pub(crate) seq: usize,
    pub(crate) heads: usize,
    pub(crate) head_dim: usize,
}

/// What attention's backward needs: per-head Q, K, V and probabilities.
pub(crate) struct AttnStash {
    pub(crate) q: Vec<f32>,
    pub(crate) k: Vec<f32>,
    pub(crate) v: Vec<f32>,
    pub(crate) p: Vec<f32>,
}

impl AttnShape {
    fn d(&self) -> usize {
        self.heads * self.head_dim
    }
    /// Floats the stash holds.
    pub(crate) fn stash_floats(&self) -> usize {
        let bh = self.batch * self.heads;
        bh * (3 * self.seq * self.head_dim + self.seq * self.seq)
    }
    /// FLOPs of the forward (two T x T x hd products per head, mask ignored).
    pub(crate) fn flops(&self) -> f64 {
        4.0 * (self.batch * self.heads * self.seq * self.seq * self.head_dim) as f64
    }
}

/// Causal attention over `qkv [B*T x 3D]` (Q, K, V concatenated per row);
/// returns the merged heads `[B*T x D]` and the stash.
pub(crate) fn attention_fwd(s: AttnShape, qkv: &[f32]) -> (Vec<f32>, AttnStash) {
    let (t, hd, d) = (s.seq, s.head_dim, s.d());
    let bh = s.batch * s.heads;
    let split = |which: usize| {
        let mut out = vec![0.0f32; bh * t * hd];
        out.par_chunks_mut(t * hd).enumerate().for_each(|(i, o)| {
            let (b, h) = (i / s.heads, i % s.heads);
            for r in 0..t {
                let src = (b * t + r) * 3 * d + which * d + h * hd;
                o[r * hd..(r + 1) * hd].copy_from_slice(&qkv[src..src + hd]);
            }
        });
        out
    };
    let (q, k, v) = (split(0), split(1), split(2));
    let mut p = vec![0.0f32; bh * t * t];
    let mut o = vec![0.0f32; bh * t * hd];
    let scale = 1.0 / (hd as f32).sqrt();
    p.par_chunks_mut(t * t).zip(o.par_chunks_mut(t * hd)).enumerate().for_each(|(i, (p, o))| {
        let r = i * t * hd..(i + 1) * t * hd;
        matmul(1, (t, hd, t), &q[r.clone()], &k[r.clone()], Layout::NxK, p);
        for (row, pr) in p.chunks_exact_mut(t).enumerate() {
            // Causal: row `row` sees keys 0..=row; the rest get probability 0.
            pr[..=row].iter_mut().for_each(|x| *x *= scale);
            softmax_row_inplace(&mut pr[..=row]);
            pr[row + 1..].fill(0.0);
        }
        matmul(1, (t, t, hd), p, &v[r], Layout::KxN, o);
    });
    let mut merged = vec![0.0f32; s.batch * t * d];
    merge_heads(s, &o, &mut merged);
    (merged, AttnStash { q, k, v, p })
}

/// `[B, H, T, hd]` into `[B*T, D]`.
fn merge_heads(s: AttnShape, o: &[f32], merged: &mut [f32]) {
    let (t, hd, d) = (s.seq, s.head_dim, s.d());
    merged.par_chunks_mut(t * d).enumerate().for_each(|(b, m)| {
        for h in 0..s.heads {
            for r in 0..t {
                let src = ((b * s.heads + h) * t + r) * hd;
                m[r * d + h * hd..r * d + (h + 1) * hd].copy_from_slice(&o[src..src + hd]);
            }
        }
    });
}

/// Backward of [`attention_fwd`]: from `dmerged [B*T x D]` to `dqkv [B*T x 3D]`.
pub(crate) fn attention_bwd(s: AttnShape, st: &AttnStash, dmerged: &[f32]) -> Vec<f32> {
    let (t, hd, d) = (s.seq, s.head_dim, s.d());
    let bh = s.batch * s.heads;
    let scale = 1.0 / (hd as f32).sqrt();
    let mut dq = vec![0.0f32; bh * t * hd];
    let mut dk = vec![0.0f32; bh * t * hd];
    let mut dv = vec![0.0f32; bh * t * hd];
    dq.par_chunks_mut(t * hd)
        .zip(dk.par_chunks_mut(t * hd))
        .zip(dv.par_chunks_mut(t * hd))
        .enumerate()
        .for_each(|(i, ((dq, dk), dv))| {
            let (b, h) = (i / s.heads, i % s.heads);
            let r = i * t * hd..(i + 1) * t * hd;
            let p = &st.p[i * t * t..(i + 1) * t * t];
            let mut dout = vec![0.0f32; t * hd];
            for row in 0..t {
                let src = (b * t + row) * d + h * hd;
                dout[row * hd..(row + 1) * hd].copy_from_slice(&dmerged[src..src + hd]);
            }
            // dV = P^T dO ; dP = dO V^T
            let pt = transpose(p, t, t);
            matmul(1, (t, t, hd), &pt, &dout, Layout::KxN, dv);
            let mut ds = vec![0.0f32; t * t];
            matmul(1, (t, hd, t), &dout, &st.v[r.clone()], Layout::NxK, &mut ds);
            // Softmax backward, then the 1/sqrt(hd) of the scores.
            for (prow, dsrow) in p.chunks_exact(t).zip(ds.chunks_exact_mut(t)) {
                let dot: f32 = prow.iter().zip(dsrow.iter()).map(|(a, b)| a * b).sum();
                dsrow.iter_mut().zip(prow).for_each(|(x, &pp)| *x = pp * (*x - dot) * scale);
            }
            matmul(1, (t, t, hd), &ds, &st.k[r.clone()], Layout::KxN, dq);
            let dst = transpose(&ds, t, t);
            matmul(1, (t, t, hd), &dst, &st.q[r], Layout::KxN, dk);
        });
    let mut dqkv = vec![0.0f32; s.batch * t * 3 * d];
    for (which, src) in [(0, &dq), (1, &dk), (2, &dv)] {
        for i in 0..bh {
            let (b, h) = (i / s.heads, i % s.heads);
            for row in 0..t {
                let dst = (b * t + row) * 3 * d + which * d + h * hd;
                dqkv[dst..dst + hd].copy_from_slice(&src[(i * t + row) * hd..(i * t + row + 1) * hd]);
            }
        }
    }
    dqkv
}
