//! The fused step: one pass over parameters, gradients and states per
//! step, in parallel `CHUNK`s, each chunk one vectorised kernel per rule.

use super::*;

impl Optimizer {
    /// One fused step at the configured learning rate.
    pub fn step_fused(&mut self, p: &mut [f32], g: &[f32]) {
        let lr = self.hyper.lr;
        self.step_fused_lr(p, g, lr);
    }

    /// One fused step at learning rate `lr` (a scheduler's value), parallel
    /// over `CHUNK`-element tasks on the current rayon pool.
    pub fn step_fused_lr(&mut self, p: &mut [f32], g: &[f32], lr: f32) {
        assert_eq!(p.len(), g.len(), "optimizer: parameter and gradient lengths differ");
        self.step += 1;
        let h = self.hyper;
        match self.kind {
            Kind::Sgd | Kind::SgdWd => {
                let c = SgdConst { lr, wd: h.weight_decay, mu: 0.0, nesterov: false };
                p.par_chunks_mut(CHUNK).zip(g.par_chunks(CHUNK)).for_each(|(p, g)| sgd_chunk(p, g, c));
            }
            Kind::Momentum | Kind::Nesterov => {
                let c = SgdConst {
                    lr,
                    wd: h.weight_decay,
                    mu: h.momentum,
                    nesterov: self.kind == Kind::Nesterov,
                };
                p.par_chunks_mut(CHUNK)
                    .zip(g.par_chunks(CHUNK))
                    .zip(self.a.par_chunks_mut(CHUNK))
                    .for_each(|((p, g), b)| momentum_chunk(p, g, b, c));
            }
            Kind::Adam | Kind::AdamW => {
                let c = AdamConst::new(self.kind, h, lr, self.step);
                p.par_chunks_mut(CHUNK)
                    .zip(g.par_chunks(CHUNK))
                    .zip(self.a.par_chunks_mut(CHUNK))
                    .zip(self.b.par_chunks_mut(CHUNK))
                    .for_each(|(((p, g), m), v)| adam_chunk(p, g, m, v, c));
            }
            Kind::Lion => {
                let c = LionConst::new(h, lr);
                p.par_chunks_mut(CHUNK)
                    .zip(g.par_chunks(CHUNK))
                    .zip(self.a.par_chunks_mut(CHUNK))
                    .for_each(|((p, g), m)| lion_chunk(p, g, m, c));
            }
            Kind::Adafactor => self.adafactor(p, g, lr),
        }
    }

    /// Adafactor: pass 1 gathers row and column means of `g^2 + eps1`,
    /// pass 2 the RMS of the unclipped update, pass 3 applies it.
    fn adafactor(&mut self, p: &mut [f32], g: &[f32], lr: f32) {
        let (rows, cols) = self.shape;
        let t = self.step as f64;
        let beta2t = (1.0 - t.powf(-0.8)) as f32;
        let rows_per_task = (CHUNK / cols).max(1);
        let task = rows_per_task * cols;
        let row_sq: Vec<f32> = g.par_chunks(cols).map(sum_sq).collect();
        let col_sq = g
            .par_chunks(task)
            .map(|blk| {
                let mut acc = vec![0.0f32; cols];
                blk.chunks_exact(cols).for_each(|row| add_sq(&mut acc, row));
                acc
            })
            .reduce(
                || vec![0.0f32; cols],
                |mut x, y| {
                    x.iter_mut().zip(&y).for_each(|(x, y)| *x += y);
                    x
                },
            );
        for (r, s) in self.a.iter_mut().zip(&row_sq) {
            *r = beta2t * *r + (1.0 - beta2t) * (s / cols as f32 + ADAFACTOR_EPS1);
        }
        for (c, s) in self.b.iter_mut().zip(&col_sq) {
            *c = beta2t * *c + (1.0 - beta2t) * (s / rows as f32 + ADAFACTOR_EPS1);
        }
        let mean_r = (self.a.iter().map(|&x| x as f64).sum::<f64>() / rows as f64) as f32;
        let rinv: Vec<f32> = self.a.iter().map(|&r| 1.0 / (r / mean_r).sqrt()).collect();
        let cinv: Vec<f32> = self.b.iter().map(|&c| 1.0 / c.sqrt()).collect();
        let sum_u2: f64 = g
            .par_chunks(cols)
            .zip(rinv.par_iter())
            .map(|(row, &ri)| sum_sq_scaled(row, &cinv, ri) as f64)
            .sum();
        let rms = (sum_u2 / (rows * cols) as f64).sqrt() as f32;
        let scale = lr / rms.max(1.0);
        let decay = 1.0 - lr * self.hyper.weight_decay;
        p.par_chunks_mut(cols)
            .zip(g.par_chunks(cols))
            .zip(rinv.par_iter())
            .for_each(|((p, g), &ri)| adafactor_row(p, g, &cinv, ri, scale, decay));
    }
}

/// `torch.sign`: -1, 0 or 1 (`f32::signum` gives 1 at +0).
#[inline(always)]
pub(super) fn sign(x: f32) -> f32 {
    (x > 0.0) as i32 as f32 - (x < 0.0) as i32 as f32
}

#[derive(Debug, Clone, Copy)]
struct SgdConst {
    lr: f32,
    wd: f32,
    mu: f32,
    nesterov: bool,
}

simd_dispatch! {
    fn sgd_chunk(p: &mut [f32], g: &[f32], c: SgdConst) {
        p.iter_mut().zip(g).for_each(|(p, &g)| {
            let d = g + c.wd * *p;
            *p += -c.lr * d;
        });
    }
}

simd_dispatch! {
    fn momentum_chunk(p: &mut [f32], g: &[f32], buf: &mut [f32], c: SgdConst) {
        let n = p.len();
        let (g, buf) = (&g[..n], &mut buf[..n]);
        if c.nesterov {
            p.iter_mut().zip(g).zip(buf).for_each(|((p, &g), b)| {
                let d = g + c.wd * *p;
                *b = c.mu * *b + d;
                *p += -c.lr * (d + c.mu * *b);
            });
        } else {
            p.iter_mut().zip(g).zip(buf).for_each(|((p, &g), b)| {
                let d = g + c.wd * *p;
                *b = c.mu * *b + d;
                *p += -c.lr * *b;
            });
        }
    }
}

/// Per-step scalars of Adam/AdamW (PyTorch's `_single_tensor_adam` form).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdamConst {
    pub(super) decay: f32,
    pub(super) l2: f32,
    pub(super) b1: f32,
    pub(super) b2: f32,
    pub(super) one_b1: f32,
    pub(super) one_b2: f32,
    pub(super) step_size: f32,
    pub(super) inv_sqrt_bc2: f32,
    pub(super) eps: f32,
}

impl AdamConst {
    /// The scalars of step number `step` (from 1).
    pub(crate) fn new(kind: Kind, h: Hyper, lr: f32, step: u64) -> Self {
        let bc1 = 1.0 - (h.beta1 as f64).powi(step as i32);
        let bc2 = 1.0 - (h.beta2 as f64).powi(step as i32);
        let decoupled = kind == Kind::AdamW;
        Self {
            decay: if decoupled { 1.0 - lr * h.weight_decay } else { 1.0 },
            l2: if decoupled { 0.0 } else { h.weight_decay },
            b1: h.beta1,
            b2: h.beta2,
            one_b1: 1.0 - h.beta1,
            one_b2: 1.0 - h.beta2,
            step_size: (lr as f64 / bc1) as f32,
            inv_sqrt_bc2: (1.0 / bc2.sqrt()) as f32,
            eps: h.eps,
        }
    }
}

simd_dispatch! {
    /// Fused Adam/AdamW over one chunk (serial).
    pub(crate) fn adam_chunk(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], c: AdamConst) {
        let n = p.len();
        let (g, m, v) = (&g[..n], &mut m[..n], &mut v[..n]);
        p.iter_mut().zip(g).zip(m).zip(v).for_each(|(((p, &g), m), v)| {
            let g = g + c.l2 * *p;
            let pd = *p * c.decay;
            *m = c.b1 * *m + c.one_b1 * g;
            *v = c.b2 * *v + c.one_b2 * (g * g);
            let denom = v.sqrt() * c.inv_sqrt_bc2 + c.eps;
            *p = pd + -c.step_size * (*m / denom);
        });
    }
}

#[derive(Debug, Clone, Copy)]
pub(super) struct LionConst {
    pub(super) lr: f32,
    pub(super) decay: f32,
    pub(super) b1: f32,
    pub(super) b2: f32,
    pub(super) one_b1: f32,
    pub(super) one_b2: f32,
}

impl LionConst {
    pub(super) fn new(h: Hyper, lr: f32) -> Self {
        Self {
            lr,
            decay: 1.0 - lr * h.weight_decay,
            b1: h.beta1,
            b2: h.beta2,
            one_b1: 1.0 - h.beta1,
            one_b2: 1.0 - h.beta2,
        }
    }
}

simd_dispatch! {
    fn lion_chunk(p: &mut [f32], g: &[f32], m: &mut [f32], c: LionConst) {
        let n = p.len();
        let (g, m) = (&g[..n], &mut m[..n]);
        p.iter_mut().zip(g).zip(m).for_each(|((p, &g), m)| {
            let u = sign(c.b1 * *m + c.one_b1 * g);
            *p = *p * c.decay + -c.lr * u;
            *m = c.b2 * *m + c.one_b2 * g;
        });
    }
}

simd_dispatch! {
    /// Sum of squares with 16 independent lanes (vectorisable).
    fn sum_sq(x: &[f32]) -> f32 {
        let mut acc = [0.0f32; 16];
        let chunks = x.chunks_exact(16);
        let tail: f32 = chunks.remainder().iter().map(|v| v * v).sum();
        for ch in chunks {
            for l in 0..16 {
                acc[l] += ch[l] * ch[l];
            }
        }
        acc.iter().sum::<f32>() + tail
    }
}

simd_dispatch! {
    fn add_sq(acc: &mut [f32], row: &[f32]) {
        acc.iter_mut().zip(row).for_each(|(a, &x)| *a += x * x);
    }
}

simd_dispatch! {
    /// Sum over a row of `(g * ri * cinv)^2`.
    fn sum_sq_scaled(row: &[f32], cinv: &[f32], ri: f32) -> f32 {
        let mut acc = [0.0f32; 16];
        let n = row.len() / 16 * 16;
        for (ch, ci) in row[..n].chunks_exact(16).zip(cinv[..n].chunks_exact(16)) {
            for l in 0..16 {
                let u = ch[l] * ri * ci[l];
                acc[l] += u * u;
            }
        }
        let tail: f32 = row[n..].iter().zip(&cinv[n..]).map(|(&g, &c)| (g * ri * c) * (g * ri * c)).sum();
        acc.iter().sum::<f32>() + tail
    }
}

simd_dispatch! {
    fn adafactor_row(p: &mut [f32], g: &[f32], cinv: &[f32], ri: f32, scale: f32, decay: f32) {
        let n = p.len();
        let (g, cinv) = (&g[..n], &cinv[..n]);
        p.iter_mut().zip(g).zip(cinv).for_each(|((p, &g), &c)| *p = *p * decay + -scale * (g * ri * c));
    }
}
