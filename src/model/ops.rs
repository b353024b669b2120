//! Inference building blocks over whole activations: LayerNorm, RMSNorm,
//! GELU (erf and tanh forms), SwiGLU, rotary embeddings and attention. The
//! per-row and per-element math is the shared kernel library's
//! ([`crate::kernels::norm`], [`crate::kernels::softmax`],
//! [`crate::kernels::activation`]), the same code the tensor suite times.
//! Each has a naive f64 reference in the tests below.
//!
//! Row-wise kernels take a flat `[rows x width]` slice and run in parallel
//! over rows once there are enough of them; decode steps (one row) stay on
//! the calling thread, where a fork/join would cost more than the work.

use crate::kernels::activation::{gelu_erf_f32, gelu_f32, silu_f32};
use crate::kernels::norm::{layer_norm_row_inplace, rms_norm_row_inplace};
use crate::kernels::softmax::masked_softmax_row;
use crate::kernels::{Layout, SendPtr, matmul, simd_dispatch};
use rayon::prelude::*;

/// Rows at or above this count are processed in parallel.
const PAR_ROWS: usize = 16;

fn rows_mut(x: &mut [f32], width: usize, f: impl Fn(usize, &mut [f32]) + Sync + Send) {
    if x.len() / width.max(1) >= PAR_ROWS {
        x.par_chunks_mut(width).enumerate().for_each(|(i, r)| f(i, r));
    } else {
        x.chunks_mut(width).enumerate().for_each(|(i, r)| f(i, r));
    }
}

/// In-place LayerNorm over rows of `w.len()` values: `(x - mean) / sqrt(var + eps) * w + b`.
pub fn layer_norm(x: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    rows_mut(x, w.len(), |_, r| layer_norm_row_inplace(r, w, b, eps));
}

/// `x += y`, elementwise (residual and embedding sums).
pub fn add_into(x: &mut [f32], y: &[f32]) {
    x.iter_mut().zip(y).for_each(|(a, &b)| *a += b);
}

/// `out = LayerNorm(x)` (pre-norm decoders keep the residual stream in `x`).
pub fn layer_norm_into(x: &[f32], out: &mut [f32], w: &[f32], b: &[f32], eps: f32) {
    out.copy_from_slice(x);
    layer_norm(out, w, b, eps);
}

/// `out = x / sqrt(mean(x^2) + eps) * w` per row (LLaMA's RMSNorm).
pub fn rms_norm_into(x: &[f32], out: &mut [f32], w: &[f32], eps: f32) {
    out.copy_from_slice(x);
    rms_norm(out, w, eps);
}

/// RMSNorm in place over rows of `w.len()` values (per attention head for
/// the QK norms of qwen3 and gemma3).
pub fn rms_norm(x: &mut [f32], w: &[f32], eps: f32) {
    rows_mut(x, w.len(), |_, r| rms_norm_row_inplace(r, w, eps));
}

simd_dispatch! {
    fn gelu_erf_row(r: &mut [f32]) {
        r.iter_mut().for_each(|v| *v = gelu_erf_f32(*v));
    }
}

simd_dispatch! {
    fn gelu_tanh_row(r: &mut [f32]) {
        r.iter_mut().for_each(|v| *v = gelu_f32(*v));
    }
}

simd_dispatch! {
    fn swiglu_row(g: &mut [f32], u: &[f32]) {
        g.iter_mut().zip(u).for_each(|(g, &u)| *g = silu_f32(*g) * u);
    }
}

simd_dispatch! {
    fn geglu_row(g: &mut [f32], u: &[f32]) {
        g.iter_mut().zip(u).for_each(|(g, &u)| *g = gelu_f32(*g) * u);
    }
}

/// GeGLU (Gemma's gated FFN): `gate = gelu_tanh(gate) * up`, in place in `gate`.
pub fn geglu(gate: &mut [f32], up: &[f32], width: usize) {
    if gate.len() / width.max(1) >= PAR_ROWS {
        gate.par_chunks_mut(width).zip(up.par_chunks(width)).for_each(|(g, u)| geglu_row(g, u));
    } else {
        geglu_row(gate, up);
    }
}

/// BERT's exact GELU, `x * Phi(x)`, in place.
pub fn gelu_erf(x: &mut [f32], width: usize) {
    rows_mut(x, width, |_, r| gelu_erf_row(r));
}

/// GPT-2's tanh GELU, `0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))`, in place.
pub fn gelu_tanh(x: &mut [f32], width: usize) {
    rows_mut(x, width, |_, r| gelu_tanh_row(r));
}

/// SwiGLU: `gate = silu(gate) * up`, in place in `gate`.
pub fn swiglu(gate: &mut [f32], up: &[f32], width: usize) {
    if gate.len() / width.max(1) >= PAR_ROWS {
        gate.par_chunks_mut(width).zip(up.par_chunks(width)).for_each(|(g, u)| swiglu_row(g, u));
    } else {
        swiglu_row(gate, up);
    }
}

/// Precomputed cos/sin for rotary embeddings: `[positions x head_dim/2]`.
pub struct Rope {
    half: usize,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

impl Rope {
    /// Tables for `positions` positions of a `head_dim`-wide head with base `theta`.
    pub fn new(positions: usize, head_dim: usize, theta: f32) -> Self {
        let half = head_dim / 2;
        let mut cos = vec![0.0; positions * half];
        let mut sin = vec![0.0; positions * half];
        for p in 0..positions {
            for i in 0..half {
                // f64 angles: at position 4000 an f32 product loses ~3 digits.
                let inv = (theta as f64).powf(-2.0 * i as f64 / head_dim as f64);
                let a = p as f64 * inv;
                cos[p * half + i] = a.cos() as f32;
                sin[p * half + i] = a.sin() as f32;
            }
        }
        Self { half, cos, sin }
    }

    /// Rotates every head of each row of `x` (`[rows x heads*head_dim]`,
    /// row `r` at position `pos(r)`), pairing element `i` with `i + head_dim/2`
    /// as LLaMA's Hugging Face weights expect.
    pub fn apply(&self, x: &mut [f32], width: usize, pos: impl Fn(usize) -> usize + Sync + Send) {
        let (half, hd) = (self.half, 2 * self.half);
        rows_mut(x, width, |r, row| {
            let p = pos(r);
            let (c, s) = (&self.cos[p * half..(p + 1) * half], &self.sin[p * half..(p + 1) * half]);
            rope_row(row, hd, c, s);
        });
    }

    /// The `cos` and `sin` tables, `[positions x head_dim/2]` each (the
    /// GPU model uploads these very values, so both rotate alike).
    pub fn tables(&self) -> (&[f32], &[f32]) {
        (&self.cos, &self.sin)
    }

    /// Bytes held by the tables.
    pub fn bytes(&self) -> usize {
        (self.cos.len() + self.sin.len()) * 4
    }
}

simd_dispatch! {
    /// Rotates every `hd`-wide head of one row by the angles of `cos`/`sin`.
    fn rope_row(row: &mut [f32], hd: usize, cos: &[f32], sin: &[f32]) {
        for head in row.chunks_mut(hd) {
            let (a, b) = head.split_at_mut(hd / 2);
            for (((x0, x1), &c), &s) in a.iter_mut().zip(b.iter_mut()).zip(cos).zip(sin) {
                let (u, v) = (*x0, *x1);
                *x0 = u * c - v * s;
                *x1 = v * c + u * s;
            }
        }
    }
}

/// Shape of one attention call.
#[derive(Debug, Clone, Copy)]
pub struct AttnShape {
    /// Sequences.
    pub batch: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads (divides `heads`).
    pub kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// New (query) positions per sequence.
    pub queries: usize,
    /// Key positions per sequence (cached plus new).
    pub keys: usize,
    /// Positions the K/V buffers hold per head (row stride between heads).
    pub capacity: usize,
    /// Causal: query `i` sees keys `0..=keys-queries+i`; else all keys.
    pub causal: bool,
    /// Sliding window (causal only): query at position `p` sees keys
    /// `p - window + 1 ..= p`, as llama.cpp's standard SWA; 0: no window.
    pub window: usize,
}

/// Per-thread scratch of [`attention`], allocated once so the timed loop
/// does not allocate.
pub struct AttnScratch {
    slots: Vec<Vec<f32>>,
}

impl AttnScratch {
    /// Scratch for `threads` workers and calls up to `queries x keys` per head.
    pub fn new(threads: usize, queries: usize, keys: usize, head_dim: usize) -> Self {
        Self::with_slots(threads, Self::slot_len(queries, keys, head_dim))
    }

    fn with_slots(threads: usize, len: usize) -> Self {
        Self { slots: (0..threads.max(1)).map(|_| vec![0.0; len]).collect() }
    }

    /// f32 values per slot: Q, scores, output.
    pub fn slot_len(queries: usize, keys: usize, head_dim: usize) -> usize {
        queries * head_dim * 2 + queries * keys
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.slots.iter().map(|s| s.len() * 4).sum()
    }
}

/// Scaled dot-product attention for every (sequence, head), in parallel over
/// them, each head's `Q K^T` and `P V` as single-threaded GEMMs (never a
/// threaded GEMM inside the parallel loop).
///
/// * `q`: `[batch*queries x heads*head_dim]`, token-major (a projection's output).
/// * `k`, `v`: head-major `[batch][kv_heads][capacity][head_dim]`, first `keys` rows valid.
/// * `key_mask`: `[batch*keys]`, 0 masks a key (padding), or `None`.
/// * `out`: `[batch*queries x heads*head_dim]`.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    s: AttnShape,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    key_mask: Option<&[u8]>,
    out: &mut [f32],
    scratch: &mut AttnScratch,
) {
    let (hd, width) = (s.head_dim, s.heads * s.head_dim);
    assert_eq!(q.len(), s.batch * s.queries * width, "attention: q shape");
    assert_eq!(out.len(), q.len(), "attention: out shape");
    assert!(k.len() >= s.batch * s.kv_heads * s.capacity * hd && s.keys <= s.capacity);
    let need = AttnScratch::slot_len(s.queries, s.keys, hd);
    if scratch.slots.iter().any(|sl| sl.len() < need) {
        // Only reached when a caller outgrows what it sized; correct, just not allocation-free.
        *scratch = AttnScratch::with_slots(scratch.slots.len(), need);
    }
    let tasks = s.batch * s.heads;
    let workers = scratch.slots.len().min(tasks).max(1);
    let per = tasks.div_ceil(workers);
    let group = s.heads / s.kv_heads;
    let scale = 1.0 / (hd as f32).sqrt();
    let out_ptr = SendPtr(out.as_mut_ptr());
    let run = |w: usize, slot: &mut Vec<f32>| {
        let (qh, rest) = slot.split_at_mut(s.queries * hd);
        let (sc, rest) = rest.split_at_mut(s.queries * s.keys);
        let oh = &mut rest[..s.queries * hd];
        for t in w * per..((w + 1) * per).min(tasks) {
            let (b, h) = (t / s.heads, t % s.heads);
            let kvh = h / group;
            for i in 0..s.queries {
                let src = &q[(b * s.queries + i) * width + h * hd..][..hd];
                qh[i * hd..(i + 1) * hd].iter_mut().zip(src).for_each(|(d, &x)| *d = x * scale);
            }
            let base = (b * s.kv_heads + kvh) * s.capacity * hd;
            let kh = &k[base..base + s.keys * hd];
            let vh = &v[base..base + s.keys * hd];
            head_matmul((s.queries, hd, s.keys), qh, kh, Layout::NxK, sc);
            let past = s.keys - s.queries;
            let mask = key_mask.map_or(&[][..], |m| &m[b * s.keys..(b + 1) * s.keys]);
            for i in 0..s.queries {
                let visible = if s.causal { past + i + 1 } else { s.keys };
                let row = &mut sc[i * s.keys..(i + 1) * s.keys];
                if s.window > 0 && visible > s.window {
                    row[..visible - s.window].fill(f32::NEG_INFINITY);
                }
                masked_softmax_row(row, mask, visible);
            }
            head_matmul((s.queries, s.keys, hd), sc, vh, Layout::KxN, oh);
            for i in 0..s.queries {
                let off = (b * s.queries + i) * width + h * hd;
                // SAFETY: task t = (b, h) writes only columns h*hd..(h+1)*hd of
                // sequence b's rows; tasks are disjoint, and `out` outlives the loop.
                let dst = unsafe { std::slice::from_raw_parts_mut(out_ptr.get().add(off), hd) };
                dst.copy_from_slice(&oh[i * hd..(i + 1) * hd]);
            }
        }
    };
    if workers == 1 {
        run(0, &mut scratch.slots[0]);
    } else {
        scratch.slots[..workers].par_iter_mut().enumerate().for_each(|(w, slot)| run(w, slot));
    }
}

/// One head's single-threaded product: tfbench's kernel where AVX-512 runs
/// (its packing buffers are per thread and reused), else the `gemm` crate,
/// which allocates a 32 KiB buffer per call at these shapes (hundreds of
/// allocations per BERT forward).
fn head_matmul(dims: (usize, usize, usize), a: &[f32], b: &[f32], layout: Layout, c: &mut [f32]) {
    if !crate::kernels::sgemm::matmul_into(1, dims, a, b, layout, c, false) {
        matmul(1, dims, a, b, layout, c);
    }
}

/// Naive f64 references for the tests (and nothing else).
#[cfg(test)]
pub(crate) mod naive {
    /// Attention for one sequence and head, textbook loops in f64.
    pub fn attention_head(
        q: &[f64],
        k: &[f64],
        v: &[f64],
        hd: usize,
        causal_past: Option<usize>,
        window: usize,
    ) -> Vec<f64> {
        let (nq, nk) = (q.len() / hd, k.len() / hd);
        let mut out = vec![0.0; nq * hd];
        for i in 0..nq {
            let vis = causal_past.map_or(nk, |p| p + i + 1);
            let first = if window > 0 { vis.saturating_sub(window) } else { 0 };
            let sc: Vec<f64> = (first..vis)
                .map(|j| (0..hd).map(|d| q[i * hd + d] * k[j * hd + d]).sum::<f64>() / (hd as f64).sqrt())
                .collect();
            let m = sc.iter().cloned().fold(f64::MIN, f64::max);
            let e: Vec<f64> = sc.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for j in first..vis {
                for d in 0..hd {
                    out[i * hd + d] += e[j - first] / z * v[j * hd + d];
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::randn;

    fn close(got: &[f32], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len());
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            assert!((g as f64 - w).abs() <= tol * (1.0 + w.abs()), "entry {i}: {g} vs {w}");
        }
    }

    #[test]
    fn layer_norm_and_rms_norm_match_f64() {
        let (rows, h) = (20, 37);
        let x = randn(rows * h, 1);
        let w = randn(h, 2);
        let b = randn(h, 3);
        let mut got = vec![0.0; x.len()];
        layer_norm_into(&x, &mut got, &w, &b, 1e-5);
        let mut want = vec![0.0; x.len()];
        let mut want_rms = vec![0.0; x.len()];
        for r in 0..rows {
            let row: Vec<f64> = x[r * h..(r + 1) * h].iter().map(|&v| v as f64).collect();
            let mean = row.iter().sum::<f64>() / h as f64;
            let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / h as f64;
            let ms = row.iter().map(|v| v * v).sum::<f64>() / h as f64;
            for i in 0..h {
                want[r * h + i] = (row[i] - mean) / (var + 1e-5).sqrt() * w[i] as f64 + b[i] as f64;
                want_rms[r * h + i] = row[i] / (ms + 1e-5).sqrt() * w[i] as f64;
            }
        }
        close(&got, &want, 1e-5);
        rms_norm_into(&x, &mut got, &w, 1e-5);
        close(&got, &want_rms, 1e-5);
    }

    #[test]
    fn gelus_and_swiglu_match_closed_forms() {
        // erf's tabulated values: kernels::activation::tests::erf_at_tabulated_values.
        let x: Vec<f32> = (-60..=60).map(|i| i as f32 / 10.0).collect();
        let mut a = x.clone();
        gelu_erf(&mut a, x.len());
        let mut t = x.clone();
        gelu_tanh(&mut t, x.len());
        for (i, &v) in x.iter().enumerate() {
            let v64 = v as f64;
            // Phi through the complementary series-free identity: erf via f64 integration.
            let phi = 0.5 * (1.0 + crate::kernels::activation::erf64(v64 / 2f64.sqrt()));
            assert!((a[i] as f64 - v64 * phi).abs() < 1e-6 * (1.0 + v64.abs()), "gelu_erf({v})");
            let th = 0.5
                * v64
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v64 + 0.044715 * v64.powi(3))).tanh());
            assert!((t[i] as f64 - th).abs() < 1e-6 * (1.0 + v64.abs()), "gelu_tanh({v})");
        }
        let g = randn(40, 4);
        let u = randn(40, 5);
        let mut out = g.clone();
        swiglu(&mut out, &u, 20);
        for i in 0..40 {
            let (g, u) = (g[i] as f64, u[i] as f64);
            assert!((out[i] as f64 - g / (1.0 + (-g).exp()) * u).abs() < 1e-6);
        }
    }

    #[test]
    fn rope_rotates_pairs_by_position_angle_and_keeps_norms() {
        let (hd, heads, rows) = (8, 2, 5);
        let rope = Rope::new(64, hd, 10000.0);
        let x = randn(rows * heads * hd, 6);
        let mut y = x.clone();
        rope.apply(&mut y, heads * hd, |r| 3 + r * 7);
        for r in 0..rows {
            let p = (3 + r * 7) as f64;
            for h in 0..heads {
                let o = r * heads * hd + h * hd;
                for i in 0..hd / 2 {
                    let th = p * 10000f64.powf(-2.0 * i as f64 / hd as f64);
                    let (a, b) = (x[o + i] as f64, x[o + i + hd / 2] as f64);
                    assert!((y[o + i] as f64 - (a * th.cos() - b * th.sin())).abs() < 1e-5);
                    assert!((y[o + i + hd / 2] as f64 - (b * th.cos() + a * th.sin())).abs() < 1e-5);
                }
            }
        }
        // Position 0 is the identity.
        let mut z = x.clone();
        rope.apply(&mut z, heads * hd, |_| 0);
        assert_eq!(z, x);
    }

    fn head_major(x: &[f32], batch: usize, n: usize, heads: usize, hd: usize) -> Vec<f32> {
        let mut out = vec![0.0; x.len()];
        for b in 0..batch {
            for t in 0..n {
                for h in 0..heads {
                    for d in 0..hd {
                        out[((b * heads + h) * n + t) * hd + d] = x[(b * n + t) * heads * hd + h * hd + d];
                    }
                }
            }
        }
        out
    }

    #[test]
    fn attention_matches_naive_with_gqa_causal_past_and_padding() {
        let (batch, heads, kvh, hd, nq, nk) = (2, 4, 2, 8, 3, 7);
        let q = randn(batch * nq * heads * hd, 7);
        let kt = randn(batch * nk * kvh * hd, 8);
        let vt = randn(batch * nk * kvh * hd, 9);
        let (k, v) = (head_major(&kt, batch, nk, kvh, hd), head_major(&vt, batch, nk, kvh, hd));
        // A sliding window of 3 keys: the first query (position 4) sees keys 2..=4.
        for (causal, window) in [(true, 0), (false, 0), (true, 3)] {
            let s = AttnShape {
                batch,
                heads,
                kv_heads: kvh,
                head_dim: hd,
                queries: nq,
                keys: nk,
                capacity: nk,
                causal,
                window,
            };
            for threads in [1, 3] {
                let mut out = vec![f32::NAN; q.len()];
                attention(s, &q, &k, &v, None, &mut out, &mut AttnScratch::new(threads, nq, nk, hd));
                for b in 0..batch {
                    for h in 0..heads {
                        let g = h / (heads / kvh);
                        let pick = |x: &[f32], n: usize, w: usize, hh: usize| -> Vec<f64> {
                            (0..n)
                                .flat_map(|t| (0..hd).map(move |d| (t, d)))
                                .map(|(t, d)| x[(b * n + t) * w + hh * hd + d] as f64)
                                .collect()
                        };
                        let want = naive::attention_head(
                            &pick(&q, nq, heads * hd, h),
                            &pick(&kt, nk, kvh * hd, g),
                            &pick(&vt, nk, kvh * hd, g),
                            hd,
                            causal.then_some(nk - nq),
                            window,
                        );
                        let got: Vec<f32> = pick(&out, nq, heads * hd, h).iter().map(|&x| x as f32).collect();
                        close(&got, &want, 1e-5);
                    }
                }
            }
        }
        // A padding mask equals dropping the masked keys.
        let mask: Vec<u8> = (0..batch * nk).map(|i| u8::from(i % nk < 5)).collect();
        let s = AttnShape {
            batch,
            heads,
            kv_heads: kvh,
            head_dim: hd,
            queries: nq,
            keys: nk,
            capacity: nk,
            causal: false,
            window: 0,
        };
        let mut masked = vec![0.0; q.len()];
        attention(s, &q, &k, &v, Some(&mask), &mut masked, &mut AttnScratch::new(2, nq, nk, hd));
        let (qr, kr, vr) = (&q, &kt, &vt);
        for b in 0..batch {
            for h in 0..heads {
                let g = h / 2;
                let take = |x: &[f32], n: usize, w: usize, hh: usize| -> Vec<f64> {
                    (0..n)
                        .flat_map(|t| (0..hd).map(move |d| (t, d)))
                        .map(|(t, d)| x[(b * n + t) * w + hh * hd + d] as f64)
                        .collect()
                };
                // Only the first 5 keys of each sequence are unmasked.
                let kk: Vec<f64> = take(kr, nk, kvh * hd, g)[..5 * hd].to_vec();
                let vv: Vec<f64> = take(vr, nk, kvh * hd, g)[..5 * hd].to_vec();
                let want = naive::attention_head(&take(qr, nq, heads * hd, h), &kk, &vv, hd, None, 0);
                let got: Vec<f32> = take(&masked, nq, heads * hd, h).iter().map(|&x| x as f32).collect();
                close(&got, &want, 1e-5);
            }
        }
    }

    #[test]
    fn causal_mask_makes_position_i_independent_of_later_tokens() {
        let (heads, hd, n) = (2, 4, 6);
        let q = randn(n * heads * hd, 10);
        let k = randn(n * heads * hd, 11);
        let mut v = randn(n * heads * hd, 12);
        let s = AttnShape {
            batch: 1,
            heads,
            kv_heads: heads,
            head_dim: hd,
            queries: n,
            keys: n,
            capacity: n,
            causal: true,
            window: 0,
        };
        let mut scratch = AttnScratch::new(2, n, n, hd);
        let mut a = vec![0.0; q.len()];
        attention(
            s,
            &q,
            &head_major(&k, 1, n, heads, hd),
            &head_major(&v, 1, n, heads, hd),
            None,
            &mut a,
            &mut scratch,
        );
        // Change the values of the last two positions only.
        for x in &mut v[4 * heads * hd..] {
            *x += 10.0;
        }
        let mut b = vec![0.0; q.len()];
        attention(
            s,
            &q,
            &head_major(&k, 1, n, heads, hd),
            &head_major(&v, 1, n, heads, hd),
            None,
            &mut b,
            &mut scratch,
        );
        assert_eq!(a[..4 * heads * hd], b[..4 * heads * hd], "positions 0..4 must not see 4..6");
        assert_ne!(a[4 * heads * hd..], b[4 * heads * hd..]);
    }
}
