//! The runtime's low-bit option for on-device decoding: an int8 KV cache
//! (the mobile suite's O3), beside the W8A8 linear layers of `linear.rs`
//! (`DType::W8A8`, its O2), whose model-level tests are here too.
//!
//! An int8 cache stores every key and value vector of one head at one
//! position as int8 codes with one f32 scale (absmax / 127, symmetric):
//! `head_dim + 4` bytes against `4 * head_dim` in f32 (3.8x smaller at a
//! head width of 64). A vector's codes depend on that vector alone, so a
//! token's keys are the same whether it came in a prefill or a decode step,
//! and a cached step still equals a full recompute. Attention reads one
//! layer at a time, dequantized into a layer-sized f32 scratch (the cache's
//! `k` and `v`): the memory held is the codes, the scales and that one layer.
//!
//! Both decode paths take either cache through one layer step (`decode.rs`):
//! [`Model::decode`](super::transformer::Model::decode) and `decode_ragged`
//! (the serving engine's, `tfbench load --kv-cache int8`).

use super::config::ModelConfig;
use super::transformer::scatter_heads;
use super::workspace::KvCache;
use rayon::prelude::*;

/// Values from which (de)quantizing one layer runs in parallel.
const PAR: usize = 1 << 16;

/// An int8 cache's codes and scales, `[layer][batch][kv_heads][capacity]`
/// vectors of `head_dim`.
pub struct Int8Kv {
    k: Vec<i8>,
    v: Vec<i8>,
    k_scale: Vec<f32>,
    v_scale: Vec<f32>,
}

impl Int8Kv {
    /// Bytes of codes and scales.
    pub fn bytes(&self) -> usize {
        self.k.len() + self.v.len() + 4 * (self.k_scale.len() + self.v_scale.len())
    }
}

/// Bytes [`KvCache::new_int8`] allocates: codes, one scale per vector, and
/// one layer's f32 keys and values for attention.
pub fn int8_kv_bytes(cfg: &ModelConfig, batch: usize, capacity: usize) -> u64 {
    let vectors = (cfg.layers * batch * cfg.kv_heads * capacity) as u64;
    let layer = (batch * cfg.kv_heads * capacity * cfg.head_dim()) as u64;
    2 * (vectors * (cfg.head_dim() as u64 + 4) + 4 * layer)
}

/// Quantizes `x` (one vector) into `q`, returning its scale.
fn quantize(x: &[f32], q: &mut [i8]) -> f32 {
    let absmax = x.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
    if absmax == 0.0 || !absmax.is_finite() {
        q.fill(0);
        return if absmax == 0.0 { 0.0 } else { f32::NAN };
    }
    let (scale, inv) = (absmax / 127.0, 127.0 / absmax);
    q.iter_mut().zip(x).for_each(|(q, &v)| *q = (v * inv).round().clamp(-127.0, 127.0) as i8);
    scale
}

/// Writes the new vectors of `src` (token-major `[batch*n x kvh*hd]`) into
/// one layer's codes and scales (head-major) at positions `start..start+n`.
#[allow(clippy::too_many_arguments)]
fn store(
    src: &[f32],
    codes: &mut [i8],
    scales: &mut [f32],
    batch: usize,
    n: usize,
    kvh: usize,
    hd: usize,
    cap: usize,
    start: usize,
) {
    let put = |bh: usize, (codes, scales): (&mut [i8], &mut [f32])| {
        let (b, h) = (bh / kvh, bh % kvh);
        for t in 0..n {
            let from = &src[((b * n + t) * kvh + h) * hd..][..hd];
            scales[start + t] = quantize(from, &mut codes[(start + t) * hd..][..hd]);
        }
    };
    let (codes, scales) = (&mut codes[..batch * kvh * cap * hd], &mut scales[..batch * kvh * cap]);
    if batch * n * kvh * hd >= PAR {
        codes
            .par_chunks_mut(cap * hd)
            .zip(scales.par_chunks_mut(cap))
            .enumerate()
            .for_each(|(i, p)| put(i, p));
    } else {
        codes.chunks_mut(cap * hd).zip(scales.chunks_mut(cap)).enumerate().for_each(|(i, p)| put(i, p));
    }
}

/// Dequantizes positions `0..keys` of every (sequence, head) of one layer
/// into `out` (head-major, `cap` positions per head).
fn load(codes: &[i8], scales: &[f32], out: &mut [f32], keys: usize, hd: usize, cap: usize) {
    let get = |(out, (codes, scales)): (&mut [f32], (&[i8], &[f32]))| {
        for t in 0..keys {
            let s = scales[t];
            out[t * hd..(t + 1) * hd]
                .iter_mut()
                .zip(&codes[t * hd..(t + 1) * hd])
                .for_each(|(o, &q)| *o = q as f32 * s);
        }
    };
    let heads = scales.len() / cap.max(1);
    if heads * keys * hd >= PAR {
        out.par_chunks_mut(cap * hd)
            .zip(codes.par_chunks(cap * hd).zip(scales.par_chunks(cap)))
            .for_each(get);
    } else {
        out.chunks_mut(cap * hd).zip(codes.chunks(cap * hd).zip(scales.chunks(cap))).for_each(get);
    }
}

impl KvCache {
    /// An empty int8 cache for `batch` sequences of up to `capacity`
    /// positions ([`int8_kv_bytes`] of memory).
    pub fn new_int8(cfg: &ModelConfig, batch: usize, capacity: usize) -> Self {
        let vectors = cfg.layers * batch * cfg.kv_heads * capacity;
        let layer = batch * cfg.kv_heads * capacity * cfg.head_dim();
        let codes = vectors * cfg.head_dim();
        Self {
            k: vec![0.0; layer],
            v: vec![0.0; layer],
            batch,
            kv_heads: cfg.kv_heads,
            head_dim: cfg.head_dim(),
            capacity,
            len: 0,
            int8: Some(Int8Kv {
                k: vec![0; codes],
                v: vec![0; codes],
                k_scale: vec![0.0; vectors],
                v_scale: vec![0.0; vectors],
            }),
        }
    }

    /// Whether keys and values are stored as int8.
    pub fn is_int8(&self) -> bool {
        self.int8.is_some()
    }

    /// Stores the `n` new positions per sequence of layer `l` (`k_new`,
    /// `v_new` token-major, as the projections leave them) at `past..`, and
    /// returns layer `l`'s keys and values as attention reads them.
    pub(super) fn store_layer(
        &mut self,
        l: usize,
        k_new: &[f32],
        v_new: &[f32],
        n: usize,
        past: usize,
    ) -> (&[f32], &[f32]) {
        let (b, kvh, hd, cap) = (self.batch, self.kv_heads, self.head_dim, self.capacity);
        let ll = self.layer_len();
        match &mut self.int8 {
            None => {
                let (kc, vc) = (&mut self.k[l * ll..(l + 1) * ll], &mut self.v[l * ll..(l + 1) * ll]);
                scatter_heads(k_new, kc, b, n, kvh, hd, cap, past);
                scatter_heads(v_new, vc, b, n, kvh, hd, cap, past);
                (&self.k[l * ll..(l + 1) * ll], &self.v[l * ll..(l + 1) * ll])
            }
            Some(q) => {
                let (sl, vl) = (ll / hd.max(1), ll);
                let (kq, ks) = (&mut q.k[l * vl..(l + 1) * vl], &mut q.k_scale[l * sl..(l + 1) * sl]);
                store(k_new, kq, ks, b, n, kvh, hd, cap, past);
                let (vq, vs) = (&mut q.v[l * vl..(l + 1) * vl], &mut q.v_scale[l * sl..(l + 1) * sl]);
                store(v_new, vq, vs, b, n, kvh, hd, cap, past);
                load(
                    &q.k[l * vl..(l + 1) * vl],
                    &q.k_scale[l * sl..(l + 1) * sl],
                    &mut self.k,
                    past + n,
                    hd,
                    cap,
                );
                load(
                    &q.v[l * vl..(l + 1) * vl],
                    &q.v_scale[l * sl..(l + 1) * sl],
                    &mut self.v,
                    past + n,
                    hd,
                    cap,
                );
                (&self.k, &self.v)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::linear::{DType, Linear, LinearScratch, Weights};
    use crate::model::transformer::{Model, Workspace, WorkspaceSize};
    use crate::util::randn;

    #[test]
    fn codes_round_trip_within_half_a_step_and_zero_stays_zero() {
        let x = randn(64, 3);
        let mut q = vec![0i8; 64];
        let s = quantize(&x, &mut q);
        let absmax = x.iter().fold(0.0f32, |a, &v| a.max(v.abs()));
        assert!((s - absmax / 127.0).abs() <= 1e-7 * absmax);
        for (&a, &c) in x.iter().zip(&q) {
            assert!((a - c as f32 * s).abs() <= 0.5 * s * 1.0001, "{a} vs {}", c as f32 * s);
        }
        assert!(q.iter().any(|&c| c.abs() == 127));
        assert_eq!(quantize(&[0.0; 8], &mut q[..8]), 0.0);
        assert!(q[..8].iter().all(|&c| c == 0));
    }

    /// The int8 cache's bytes are what it allocates, and under a third of f32's.
    #[test]
    fn int8_cache_bytes_are_planned_and_smaller() {
        let cfg = ModelConfig::preset("llama-tiny").unwrap();
        let c = KvCache::new_int8(&cfg, 2, 40);
        assert_eq!(c.bytes() as u64, int8_kv_bytes(&cfg, 2, 40));
        let f32c = KvCache::new(&cfg, 2, 40);
        assert_eq!(f32c.bytes() as u64, cfg.kv_cache_bytes(2, 40, 4));
        let big = ModelConfig::preset("tinyllama-1.1b").unwrap();
        let (q, f) = (int8_kv_bytes(&big, 1, 2048) as f64, big.kv_cache_bytes(1, 2048, 4) as f64);
        assert!(q < f / 3.0, "{q} vs {f}");
    }

    fn step_logits(model: &Model, cache: &mut KvCache, prompt: &[u32], steps: &[u32]) -> Vec<f32> {
        let v = model.cfg.vocab;
        let mut ws = Workspace::new(
            model,
            WorkspaceSize { batch: 1, tokens: prompt.len(), keys: cache.capacity, threads: 2 },
        );
        let mut all = model.decode(&mut ws, cache, prompt, prompt.len(), true).unwrap();
        for &t in steps {
            model.decode(&mut ws, cache, &[t], 1, false);
            all.extend_from_slice(&ws.logits[..v]);
        }
        all
    }

    fn cosine(a: &[f32], b: &[f32]) -> f64 {
        let (mut d, mut na, mut nb) = (0.0f64, 0.0f64, 0.0f64);
        for (&x, &y) in a.iter().zip(b) {
            (d, na, nb) = (d + x as f64 * y as f64, na + (x as f64).powi(2), nb + (y as f64).powi(2));
        }
        d / (na * nb).sqrt()
    }

    /// The int8 cache against the f32 cache on the same model: close (its
    /// rounding only), and a cached step equals recomputing the sequence.
    #[test]
    fn int8_cache_tracks_the_f32_cache_and_caches_consistently() {
        for name in ["gpt2-tiny", "llama-tiny"] {
            let cfg = ModelConfig::preset(name).unwrap();
            let model = crate::model::weights::random_model(&cfg, DType::F32, 9).unwrap();
            let ids = crate::model::random_ids(12, cfg.vocab, 4);
            let (prompt, steps) = ids.split_at(8);
            let exact = step_logits(&model, &mut KvCache::new(&cfg, 1, 16), prompt, steps);
            let mut c8 = KvCache::new_int8(&cfg, 1, 16);
            let got = step_logits(&model, &mut c8, prompt, steps);
            assert_eq!(c8.len, 12);
            let scale = exact.iter().fold(0.0f32, |m, x| m.max(x.abs()));
            let worst = got.iter().zip(&exact).fold(0.0f32, |w, (a, b)| w.max((a - b).abs()));
            assert!(worst > 0.0 && worst < 0.05 * scale, "{name}: {worst} of {scale}");
            assert!(cosine(&got, &exact) > 0.999, "{name}");
            // The last step, cached, against the whole sequence fed at once.
            let again = step_logits(&model, &mut KvCache::new_int8(&cfg, 1, 16), &ids, &[]);
            let v = cfg.vocab;
            let (last, full) = (&got[got.len() - v..], &again[again.len() - v..]);
            let diff = last.iter().zip(full).fold(0.0f32, |w, (a, b)| w.max((a - b).abs()));
            // The 12th token's logits: its cached step against all 12 fed at once.
            assert!(diff <= 1e-4 * scale.max(1.0), "{name}: cached step vs recompute {diff}");
        }
    }

    /// W8A8 layers: each product is the integer product of the per-row
    /// quantized activations and the stored codes, and a W8A8 model stays
    /// close to the int8 weight-only model of the same codes.
    #[test]
    fn w8a8_linear_is_the_integer_product_and_a_model_stays_close() {
        let (m, k, n) = (3, 64, 20);
        let (x, w, b) = (randn(m * k, 1), randn(n * k, 2), randn(n, 3));
        let lin = Linear {
            out: n,
            inp: k,
            w: Weights::from_f32(w, n, k, DType::W8A8).unwrap(),
            bias: Some(b.clone()),
        };
        let Weights::Dynamic(d) = &lin.w else { panic!("w8a8 is stored as Dynamic") };
        let mut y = vec![0.0; m * n];
        lin.forward(1, &x, m, &mut y, &mut LinearScratch::new(1, m, k, n, false));
        for t in 0..m {
            let row = &x[t * k..(t + 1) * k];
            let mut q = vec![0i8; k];
            let mut s = [0.0f32];
            crate::kernels::quant::int8::quantize_per_token(row, k, &mut q, &mut s);
            for j in 0..n {
                let acc: i32 = (0..k).map(|p| q[p] as i32 * d.weights.data[j * k + p] as i32).sum();
                let want = acc as f32 * (s[0] * d.scales[j]) + b[j];
                assert!((y[t * n + j] - want).abs() <= 1e-5 * (1.0 + want.abs()), "[{t},{j}]");
            }
        }
        assert_eq!(lin.w.to_f32().len(), n * k);
        for name in ["gpt2-tiny", "llama-tiny"] {
            let cfg = ModelConfig::preset(name).unwrap();
            let ids = crate::model::random_ids(6, cfg.vocab, 8);
            let run = |dtype| {
                let model = crate::model::weights::random_model(&cfg, dtype, 3).unwrap();
                step_logits(&model, &mut KvCache::new(&cfg, 1, 8), &ids, &[])
            };
            let (dynamic, weight_only) = (run(DType::W8A8), run(DType::Int8));
            let c = cosine(&dynamic, &weight_only);
            assert!(c > 0.999 && dynamic != weight_only, "{name}: cosine {c}");
        }
    }
}
