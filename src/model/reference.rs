//! An independent forward pass in f64: one sequence, token by token, plain
//! loops, full recompute of attention for every position (no cache, no
//! GEMM, no head-major layout). Verification compares the fast path with it.
//!
//! It reads the same stored weights (widened to f32), so it checks the
//! kernels and the wiring, not the rounding of the storage format.

use super::linear::Linear;
use super::transformer::{Model, Norm};
use crate::model::config::Arch;
use rayon::prelude::*;

fn dense(l: &Linear, x: &[f64], w: &[f32]) -> Vec<f64> {
    (0..l.out)
        .into_par_iter()
        .map(|j| {
            let row = &w[j * l.inp..(j + 1) * l.inp];
            let dot: f64 = row.iter().zip(x).map(|(&a, &b)| a as f64 * b).sum();
            dot + l.bias.as_ref().map_or(0.0, |b| b[j] as f64)
        })
        .collect()
}

fn norm(n: &Norm, x: &[f64], eps: f32) -> Vec<f64> {
    let h = x.len() as f64;
    match &n.b {
        Some(b) => {
            let mean = x.iter().sum::<f64>() / h;
            let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / h;
            let inv = 1.0 / (var + eps as f64).sqrt();
            x.iter().enumerate().map(|(i, v)| (v - mean) * inv * n.w[i] as f64 + b[i] as f64).collect()
        }
        None => {
            let inv = 1.0 / (x.iter().map(|v| v * v).sum::<f64>() / h + eps as f64).sqrt();
            x.iter().enumerate().map(|(i, v)| v * inv * n.w[i] as f64).collect()
        }
    }
}

/// erf by its Maclaurin series (|x| < 4, error below 1e-9), 1 beyond.
pub fn erf64(x: f64) -> f64 {
    if x.abs() >= 4.0 {
        return x.signum();
    }
    let (mut term, mut sum, x2) = (x, x, x * x);
    for n in 1..200 {
        term *= -x2 / n as f64;
        let add = term / (2 * n + 1) as f64;
        sum += add;
        if add.abs() < 1e-17 {
            break;
        }
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

fn rope(x: &mut [f64], heads: usize, hd: usize, pos: usize, theta: f32) {
    for h in 0..heads {
        for i in 0..hd / 2 {
            let a = pos as f64 * (theta as f64).powf(-2.0 * i as f64 / hd as f64);
            let (x0, x1) = (x[h * hd + i], x[h * hd + i + hd / 2]);
            x[h * hd + i] = x0 * a.cos() - x1 * a.sin();
            x[h * hd + i + hd / 2] = x1 * a.cos() + x0 * a.sin();
        }
    }
}

/// The reference output for one sequence: BERT's last hidden states
/// `[seq x hidden]` (with `mask`, 0 = padding key), or a decoder's logits at
/// every position `[seq x vocab]`.
pub fn forward(model: &Model, ids: &[u32], mask: Option<&[u8]>) -> Vec<f64> {
    let cfg = &model.cfg;
    let (h, hd, s, var) = (cfg.hidden, cfg.head_dim(), ids.len(), &cfg.variant);
    let emb_scale = if var.embed_scale != 0.0 { var.embed_scale as f64 } else { 1.0 };
    let group = cfg.heads / cfg.kv_heads;
    let tok = model.tokens.w.to_f32();
    let mut x: Vec<Vec<f64>> = ids
        .iter()
        .enumerate()
        .map(|(t, &id)| {
            (0..h)
                .map(|i| {
                    tok[id as usize * h + i] as f64 * emb_scale
                        + model.positions.as_ref().map_or(0.0, |p| p[t * h + i] as f64)
                        + model.types.as_ref().map_or(0.0, |p| p[i] as f64)
                })
                .collect()
        })
        .collect();
    drop(tok);
    if let Some(n) = &model.emb_norm {
        x = x.iter().map(|r| norm(n, r, cfg.norm_eps)).collect();
    }
    let encoder = cfg.arch == Arch::Bert;
    for (l, blk) in model.blocks.iter().enumerate() {
        let w = |l: &Linear| l.w.to_f32();
        let (wq, wk, wv, wo, wu, wd) = (w(&blk.q), w(&blk.k), w(&blk.v), w(&blk.o), w(&blk.up), w(&blk.down));
        let wg = blk.gate.as_ref().map(w);
        let inp: Vec<Vec<f64>> =
            if encoder { x.clone() } else { x.iter().map(|r| norm(&blk.n1, r, cfg.norm_eps)).collect() };
        let mut q: Vec<Vec<f64>> = inp.iter().map(|r| dense(&blk.q, r, &wq)).collect();
        let mut k: Vec<Vec<f64>> = inp.iter().map(|r| dense(&blk.k, r, &wk)).collect();
        let v: Vec<Vec<f64>> = inp.iter().map(|r| dense(&blk.v, r, &wv)).collect();
        if let Some((qn, kn)) = &blk.qk_norm {
            let heads = |r: &mut Vec<f64>, n: &Norm| {
                *r = r.chunks(hd).flat_map(|c| norm(n, c, cfg.norm_eps)).collect()
            };
            q.iter_mut().for_each(|r| heads(r, qn));
            k.iter_mut().for_each(|r| heads(r, kn));
        }
        let windowed = var.windowed(l);
        if cfg.arch == Arch::Llama {
            let theta =
                if windowed && var.rope_theta_window > 0.0 { var.rope_theta_window } else { cfg.rope_theta };
            for t in 0..s {
                rope(&mut q[t], cfg.heads, hd, t, theta);
                rope(&mut k[t], cfg.kv_heads, hd, t, theta);
            }
        }
        for t in 0..s {
            let mut att = vec![0.0; cfg.q_dim()];
            for head in 0..cfg.heads {
                let kvh = head / group;
                let keys: Vec<usize> = (0..s)
                    .filter(|&j| {
                        if encoder {
                            mask.is_none_or(|m| m[j] != 0)
                        } else {
                            j <= t && (!windowed || t - j < var.window)
                        }
                    })
                    .collect();
                let scores: Vec<f64> = keys
                    .iter()
                    .map(|&j| {
                        (0..hd).map(|d| q[t][head * hd + d] * k[j][kvh * hd + d]).sum::<f64>()
                            / (hd as f64).sqrt()
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::MIN, f64::max);
                let z: f64 = scores.iter().map(|x| (x - m).exp()).sum();
                for (sc, &j) in scores.iter().zip(&keys) {
                    let p = (sc - m).exp() / z;
                    for d in 0..hd {
                        att[head * hd + d] += p * v[j][kvh * hd + d];
                    }
                }
            }
            let mut o = dense(&blk.o, &att, &wo);
            if let Some((post, _)) = &blk.post_norms {
                o = norm(post, &o, cfg.norm_eps);
            }
            x[t].iter_mut().zip(&o).for_each(|(a, b)| *a += b);
        }
        if encoder {
            x = x.iter().map(|r| norm(&blk.n1, r, cfg.norm_eps)).collect();
        }
        for xt in x.iter_mut() {
            let inp = if encoder { xt.clone() } else { norm(&blk.n2, xt, cfg.norm_eps) };
            let up = dense(&blk.up, &inp, &wu);
            let act: Vec<f64> = match (&blk.gate, &wg) {
                (Some(g), Some(wg)) if var.gelu_gate => {
                    dense(g, &inp, wg).iter().zip(&up).map(|(&g, u)| gelu_tanh(g) * u).collect()
                }
                (Some(g), Some(wg)) => {
                    let gate = dense(g, &inp, wg);
                    gate.iter().zip(&up).map(|(g, u)| g / (1.0 + (-g).exp()) * u).collect()
                }
                _ if encoder => up.iter().map(|&u| 0.5 * u * (1.0 + erf64(u / 2f64.sqrt()))).collect(),
                _ => up.iter().map(|&u| gelu_tanh(u)).collect(),
            };
            let mut down = dense(&blk.down, &act, &wd);
            if let Some((_, post)) = &blk.post_norms {
                down = norm(post, &down, cfg.norm_eps);
            }
            xt.iter_mut().zip(&down).for_each(|(a, b)| *a += b);
            if encoder {
                *xt = norm(&blk.n2, xt, cfg.norm_eps);
            }
        }
    }
    if encoder {
        return x.concat();
    }
    let head = model.lm_head.as_ref().unwrap_or(&model.tokens);
    let wh = head.w.to_f32();
    let fnorm = model.final_norm.as_ref().expect("decoders have a final norm");
    let c = var.final_softcap as f64;
    x.iter()
        .flat_map(|r| dense(head, &norm(fnorm, r, cfg.norm_eps), &wh))
        .map(|z| if c > 0.0 { c * (z / c).tanh() } else { z })
        .collect()
}

/// GPT-2's tanh GELU in f64.
fn gelu_tanh(u: f64) -> f64 {
    0.5 * u * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (u + 0.044715 * u.powi(3))).tanh())
}

#[cfg(test)]
mod tests {
    #[test]
    fn erf64_known_values() {
        for (x, e) in
            [(0.5, 0.520_499_877_813_046_5), (1.0, 0.842_700_792_949_714_9), (-2.5, -0.999_593_047_982_555)]
        {
            assert!((super::erf64(x) - e).abs() < 1e-12, "erf({x})");
        }
    }
}
