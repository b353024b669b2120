//! Optimizer math in f32 (the timed kernels) and in f64 (the reference).
//!
//! Update rules follow PyTorch's `torch.optim` (same operation order, so a
//! reader can compare line by line): SGD with weight decay, momentum and
//! Nesterov; Adam (L2 weight decay added to the gradient); AdamW (decoupled
//! decay applied to the parameter); Lion (Chen et al. 2023); Adafactor
//! (Shazeer & Stern 2018, factored second moment, no momentum, update
//! clipping d = 1, fixed learning rate).
//!
//! Two forms run the same arithmetic: **fused** makes one pass over
//! parameters, gradients and states per step; **unfused** runs one
//! whole-array pass per operation (like PyTorch's `foreach` path), through a
//! scratch buffer. Each elementwise operation rounds exactly as in the fused
//! loop (Rust never contracts `a * b + c` into an FMA), so both forms give
//! bit-identical results, which the tests check.

use crate::kernels::simd_dispatch;
use rayon::prelude::*;

/// Elements per rayon task: 128 KiB per array, so the four arrays of an Adam
/// chunk stay in a core's L2 while it works on them.
pub const CHUNK: usize = 1 << 15;

/// Adafactor's epsilon1, added to squared gradients before averaging.
const ADAFACTOR_EPS1: f32 = 1e-30;

/// Which optimizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Plain SGD: `p -= lr * g`.
    Sgd,
    /// SGD with (coupled) weight decay: `p -= lr * (g + wd * p)`.
    SgdWd,
    /// SGD with heavy-ball momentum 0.9.
    Momentum,
    /// SGD with Nesterov momentum 0.9.
    Nesterov,
    /// Adam (bias-corrected moments; L2 decay, 0 by default).
    Adam,
    /// AdamW (decoupled weight decay 0.01).
    AdamW,
    /// Lion: sign of an interpolated momentum, one state buffer.
    Lion,
    /// Adafactor: factored second moment (row and column statistics).
    Adafactor,
}

/// Names used by the `optimizer` parameter, in [`Kind::ALL`] order.
pub const NAMES: &[&str] =
    &["sgd", "sgd_wd", "sgd_momentum", "sgd_nesterov", "adam", "adamw", "lion", "adafactor"];

impl Kind {
    /// Every optimizer, in [`NAMES`] order.
    pub const ALL: [Kind; 8] = [
        Kind::Sgd,
        Kind::SgdWd,
        Kind::Momentum,
        Kind::Nesterov,
        Kind::Adam,
        Kind::AdamW,
        Kind::Lion,
        Kind::Adafactor,
    ];

    /// The parameter name of this optimizer.
    pub fn name(self) -> &'static str {
        NAMES[Kind::ALL.iter().position(|&k| k == self).unwrap_or(0)]
    }

    /// Looks an optimizer up by its parameter name.
    pub fn parse(name: &str) -> Option<Kind> {
        NAMES.iter().position(|&n| n == name).map(|i| Kind::ALL[i])
    }

    /// PyTorch's defaults (Lion: the paper's), with weight decay 0.01 where
    /// the optimizer is about decay.
    pub fn default_hyper(self) -> Hyper {
        let base = Hyper { lr: 1e-3, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.0, momentum: 0.0 };
        match self {
            Kind::Sgd => Hyper { lr: 1e-2, ..base },
            Kind::SgdWd => Hyper { lr: 1e-2, weight_decay: 1e-2, ..base },
            Kind::Momentum | Kind::Nesterov => Hyper { lr: 1e-2, momentum: 0.9, ..base },
            Kind::Adam => base,
            Kind::AdamW => Hyper { weight_decay: 1e-2, ..base },
            Kind::Lion => Hyper { lr: 1e-4, beta2: 0.99, weight_decay: 1e-2, ..base },
            Kind::Adafactor => Hyper { lr: 1e-2, ..base },
        }
    }

    /// f32 state values kept per parameter (Adafactor keeps `rows + cols`
    /// per matrix instead, see [`Optimizer::state_bytes`]).
    pub fn state_per_param(self) -> usize {
        match self {
            Kind::Sgd | Kind::SgdWd | Kind::Adafactor => 0,
            Kind::Momentum | Kind::Nesterov | Kind::Lion => 1,
            Kind::Adam | Kind::AdamW => 2,
        }
    }

    /// Bytes the fused step reads plus writes per parameter: parameter and
    /// state read and written, gradient read (Adafactor reads the gradient in
    /// each of its three passes).
    pub fn fused_bytes_per_param(self) -> f64 {
        match self {
            Kind::Adafactor => 20.0,
            k => 12.0 + 8.0 * k.state_per_param() as f64,
        }
    }
}

/// Hyper-parameters (the meaning of each depends on the optimizer).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hyper {
    /// Learning rate.
    pub lr: f32,
    /// First-moment decay (Adam, Lion's interpolation).
    pub beta1: f32,
    /// Second-moment decay (Adam; Lion's momentum decay).
    pub beta2: f32,
    /// Denominator epsilon (Adam).
    pub eps: f32,
    /// Weight decay: coupled (SGD, Adam) or decoupled (AdamW, Lion, Adafactor).
    pub weight_decay: f32,
    /// SGD momentum.
    pub momentum: f32,
}

/// An optimizer with its state for one flat parameter vector.
#[derive(Debug, Clone)]
pub struct Optimizer {
    /// Which update rule.
    pub kind: Kind,
    /// Its hyper-parameters.
    pub hyper: Hyper,
    /// Steps taken so far (bias correction uses it).
    pub step: u64,
    /// First state buffer: momentum / Adam m / Lion m / Adafactor row statistics.
    pub a: Vec<f32>,
    /// Second state buffer: Adam v / Adafactor column statistics.
    pub b: Vec<f32>,
    /// Adafactor's view of the vector as a `rows x cols` matrix.
    pub shape: (usize, usize),
}

/// Adafactor's matrix view of `n` parameters: the divisor of `n` nearest
/// below its square root as the column count (a prime `n` degenerates to one
/// column, i.e. unfactored per-row statistics).
pub fn factored_shape(n: usize) -> (usize, usize) {
    let mut cols = (n as f64).sqrt() as usize;
    while cols > 1 && !n.is_multiple_of(cols) {
        cols -= 1;
    }
    let cols = cols.max(1);
    (n / cols, cols)
}

impl Optimizer {
    /// Zeroed state for `n` parameters.
    pub fn new(kind: Kind, hyper: Hyper, n: usize) -> Self {
        let shape = factored_shape(n);
        let (a, b) = match kind {
            Kind::Adafactor => (vec![0.0; shape.0], vec![0.0; shape.1]),
            k => (
                vec![0.0; n * (k.state_per_param() >= 1) as usize],
                vec![0.0; n * (k.state_per_param() == 2) as usize],
            ),
        };
        Self { kind, hyper, step: 0, a, b, shape }
    }

    /// Bytes of optimizer state held (what the allocator must see).
    pub fn state_bytes(&self) -> usize {
        4 * (self.a.len() + self.b.len())
    }

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

    /// One unfused step: one parallel whole-array pass per operation, with
    /// `tmp` (same length as `p`) as the intermediate. Returns the bytes the
    /// passes read and wrote, per parameter.
    pub fn step_unfused(&mut self, p: &mut [f32], g: &[f32], tmp: &mut [f32]) -> f64 {
        assert!(p.len() == g.len() && tmp.len() == p.len(), "optimizer: buffer lengths differ");
        self.step += 1;
        let h = self.hyper;
        let lr = h.lr;
        let ops: &[Op] = match self.kind {
            Kind::Sgd => &[Op::Axpy(B::P, B::G, -lr)],
            Kind::SgdWd => {
                &[Op::Copy(B::T, B::G), Op::Axpy(B::T, B::P, h.weight_decay), Op::Axpy(B::P, B::T, -lr)]
            }
            Kind::Momentum | Kind::Nesterov => {
                let mut v = vec![Op::Scale(B::A, h.momentum), Op::Axpy(B::A, B::G, 1.0)];
                if self.kind == Kind::Nesterov {
                    v.extend([
                        Op::Copy(B::T, B::G),
                        Op::Axpy(B::T, B::A, h.momentum),
                        Op::Axpy(B::P, B::T, -lr),
                    ]);
                } else {
                    v.push(Op::Axpy(B::P, B::A, -lr));
                }
                return self.run_ops(&v, p, g, tmp);
            }
            Kind::Adam | Kind::AdamW => {
                let c = AdamConst::new(self.kind, h, lr, self.step);
                let v = [
                    Op::Scale(B::P, c.decay),
                    Op::Scale(B::A, c.b1),
                    Op::Axpy(B::A, B::G, c.one_b1),
                    Op::Scale(B::B, c.b2),
                    Op::AddcmulSq(B::B, B::G, c.one_b2),
                    Op::Sqrt(B::T, B::B),
                    Op::Scale(B::T, c.inv_sqrt_bc2),
                    Op::AddScalar(B::T, c.eps),
                    Op::DivInto(B::T, B::A),
                    Op::Axpy(B::P, B::T, -c.step_size),
                ];
                // Adam's L2 term would need a second scratch buffer; only
                // decoupled decay (AdamW) or none (Adam default) is unfused.
                assert!(
                    self.kind == Kind::AdamW || h.weight_decay == 0.0,
                    "unfused Adam supports wd = 0 only"
                );
                return self.run_ops(&v, p, g, tmp);
            }
            Kind::Lion => {
                let c = LionConst::new(h, lr);
                let v = [
                    Op::ScaleInto(B::T, B::A, c.b1),
                    Op::Axpy(B::T, B::G, c.one_b1),
                    Op::Sign(B::T),
                    Op::Scale(B::P, c.decay),
                    Op::Axpy(B::P, B::T, -lr),
                    Op::Scale(B::A, c.b2),
                    Op::Axpy(B::A, B::G, c.one_b2),
                ];
                return self.run_ops(&v, p, g, tmp);
            }
            Kind::Adafactor => panic!("Adafactor has no unfused form"),
        };
        self.run_ops(ops, p, g, tmp)
    }

    fn run_ops(&mut self, ops: &[Op], p: &mut [f32], g: &[f32], tmp: &mut [f32]) -> f64 {
        let mut bytes = 0.0;
        for &op in ops {
            bytes += op.bytes_per_param();
            let (x, y) = pick(op.target(), op.source(), p, g, &mut self.a, &mut self.b, tmp);
            match y {
                Some(y) => x.par_chunks_mut(CHUNK).zip(y.par_chunks(CHUNK)).for_each(|(x, y)| pass(op, x, y)),
                None => x.par_chunks_mut(CHUNK).for_each(|x| pass(op, x, &[])),
            }
        }
        bytes
    }
}

/// Bytes per parameter the unfused form of `kind` reads and writes.
pub fn unfused_bytes_per_param(kind: Kind) -> f64 {
    let n = 64;
    let mut o = Optimizer::new(kind, kind.default_hyper(), n);
    let (mut p, g, mut t) = (vec![0.0f32; n], vec![0.0f32; n], vec![0.0f32; n]);
    o.step_unfused(&mut p, &g, &mut t)
}

/// A buffer an unfused operation reads or writes.
#[allow(clippy::enum_variant_names)] // P, G, A, B, T: the buffers' names
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum B {
    P,
    G,
    A,
    B,
    T,
}

/// One whole-array operation of the unfused form (target first).
#[derive(Debug, Clone, Copy)]
enum Op {
    /// x *= s
    Scale(B, f32),
    /// x = s * y
    ScaleInto(B, B, f32),
    /// x = y
    Copy(B, B),
    /// x += s * y
    Axpy(B, B, f32),
    /// x += s * (y * y)
    AddcmulSq(B, B, f32),
    /// x = sqrt(y)
    Sqrt(B, B),
    /// x += s
    AddScalar(B, f32),
    /// x = y / x
    DivInto(B, B),
    /// x = sign(x) (0 at 0)
    Sign(B),
}

impl Op {
    fn target(self) -> B {
        match self {
            Op::Scale(x, _)
            | Op::ScaleInto(x, _, _)
            | Op::Copy(x, _)
            | Op::Axpy(x, _, _)
            | Op::AddcmulSq(x, _, _)
            | Op::Sqrt(x, _)
            | Op::AddScalar(x, _)
            | Op::DivInto(x, _)
            | Op::Sign(x) => x,
        }
    }
    fn source(self) -> Option<B> {
        match self {
            Op::ScaleInto(_, y, _) | Op::Copy(_, y) | Op::Axpy(_, y, _) | Op::AddcmulSq(_, y, _) => Some(y),
            Op::Sqrt(_, y) | Op::DivInto(_, y) => Some(y),
            Op::Scale(..) | Op::AddScalar(..) | Op::Sign(_) => None,
        }
    }
    /// Reads plus writes per element: the target is written, and read too
    /// unless the operation overwrites it; the source is read.
    fn bytes_per_param(self) -> f64 {
        let reads_target = !matches!(self, Op::ScaleInto(..) | Op::Copy(..) | Op::Sqrt(..));
        4.0 * (1 + reads_target as usize + self.source().is_some() as usize) as f64
    }
}

/// The target (mutable) and source (shared) slices of an operation.
fn pick<'a>(
    x: B,
    y: Option<B>,
    p: &'a mut [f32],
    g: &'a [f32],
    a: &'a mut [f32],
    b: &'a mut [f32],
    t: &'a mut [f32],
) -> (&'a mut [f32], Option<&'a [f32]>) {
    let mut target = None;
    let mut source = None;
    if y == Some(B::G) {
        source = Some(g);
    }
    for (k, s) in [(B::P, p), (B::A, a), (B::B, b), (B::T, t)] {
        if k == x {
            target = Some(s);
        } else if Some(k) == y {
            source = Some(&*s);
        }
    }
    match target {
        Some(t) => (t, source),
        None => panic!("unfused op writes the gradient"),
    }
}

simd_dispatch! {
    /// One unfused operation over one chunk.
    fn pass(op: Op, x: &mut [f32], y: &[f32]) {
        let y = &y[..if y.is_empty() { 0 } else { x.len() }];
        match op {
            Op::Scale(_, s) => x.iter_mut().for_each(|x| *x *= s),
            Op::ScaleInto(_, _, s) => x.iter_mut().zip(y).for_each(|(x, &y)| *x = s * y),
            Op::Copy(..) => x.copy_from_slice(y),
            Op::Axpy(_, _, s) => x.iter_mut().zip(y).for_each(|(x, &y)| *x += s * y),
            Op::AddcmulSq(_, _, s) => x.iter_mut().zip(y).for_each(|(x, &y)| *x += s * (y * y)),
            Op::Sqrt(..) => x.iter_mut().zip(y).for_each(|(x, &y)| *x = y.sqrt()),
            Op::AddScalar(_, s) => x.iter_mut().for_each(|x| *x += s),
            Op::DivInto(..) => x.iter_mut().zip(y).for_each(|(x, &y)| *x = y / *x),
            Op::Sign(_) => x.iter_mut().for_each(|x| *x = sign(*x)),
        }
    }
}

/// `torch.sign`: -1, 0 or 1 (`f32::signum` gives 1 at +0).
#[inline(always)]
fn sign(x: f32) -> f32 {
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
    decay: f32,
    l2: f32,
    b1: f32,
    b2: f32,
    one_b1: f32,
    one_b2: f32,
    step_size: f32,
    inv_sqrt_bc2: f32,
    eps: f32,
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
struct LionConst {
    lr: f32,
    decay: f32,
    b1: f32,
    b2: f32,
    one_b1: f32,
    one_b2: f32,
}

impl LionConst {
    fn new(h: Hyper, lr: f32) -> Self {
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

/// The textbook update rules in f64, one parameter vector at a time, written
/// from the papers' formulas (bias-corrected moments divided explicitly, not
/// PyTorch's folded step size), as the independent reference.
#[derive(Debug, Clone)]
pub struct Reference {
    kind: Kind,
    hyper: Hyper,
    step: u64,
    /// First state (momentum / m / Adafactor rows).
    pub a: Vec<f64>,
    /// Second state (v / Adafactor columns).
    pub b: Vec<f64>,
    shape: (usize, usize),
}

impl Reference {
    /// Zero state for `n` parameters (Adafactor: as a `shape` matrix).
    pub fn new(kind: Kind, hyper: Hyper, n: usize) -> Self {
        let shape = factored_shape(n);
        let (a, b) = if kind == Kind::Adafactor { (shape.0, shape.1) } else { (n, n) };
        Self { kind, hyper, step: 0, a: vec![0.0; a], b: vec![0.0; b], shape }
    }

    /// One step on `p` with gradient `g`, at learning rate `lr`.
    pub fn step(&mut self, p: &mut [f64], g: &[f64], lr: f64) {
        self.step += 1;
        let t = self.step as i32;
        let h = self.hyper;
        let (b1, b2, eps, wd, mu) =
            (h.beta1 as f64, h.beta2 as f64, h.eps as f64, h.weight_decay as f64, h.momentum as f64);
        match self.kind {
            Kind::Sgd | Kind::SgdWd => {
                for (p, g) in p.iter_mut().zip(g) {
                    *p -= lr * (g + wd * *p);
                }
            }
            Kind::Momentum | Kind::Nesterov => {
                for i in 0..p.len() {
                    let d = g[i] + wd * p[i];
                    self.a[i] = mu * self.a[i] + d;
                    let upd = if self.kind == Kind::Nesterov { d + mu * self.a[i] } else { self.a[i] };
                    p[i] -= lr * upd;
                }
            }
            Kind::Adam | Kind::AdamW => {
                for i in 0..p.len() {
                    let mut gi = g[i];
                    if self.kind == Kind::AdamW {
                        p[i] *= 1.0 - lr * wd;
                    } else {
                        gi += wd * p[i];
                    }
                    self.a[i] = b1 * self.a[i] + (1.0 - b1) * gi;
                    self.b[i] = b2 * self.b[i] + (1.0 - b2) * gi * gi;
                    let m_hat = self.a[i] / (1.0 - b1.powi(t));
                    let v_hat = self.b[i] / (1.0 - b2.powi(t));
                    p[i] -= lr * m_hat / (v_hat.sqrt() + eps);
                }
            }
            Kind::Lion => {
                for i in 0..p.len() {
                    let c = b1 * self.a[i] + (1.0 - b1) * g[i];
                    p[i] = p[i] * (1.0 - lr * wd) - lr * if c == 0.0 { 0.0 } else { c.signum() };
                    self.a[i] = b2 * self.a[i] + (1.0 - b2) * g[i];
                }
            }
            Kind::Adafactor => {
                let (rows, cols) = self.shape;
                let beta2t = 1.0 - (self.step as f64).powf(-0.8);
                let eps1 = ADAFACTOR_EPS1 as f64;
                for i in 0..rows {
                    let mean: f64 =
                        g[i * cols..(i + 1) * cols].iter().map(|x| x * x + eps1).sum::<f64>() / cols as f64;
                    self.a[i] = beta2t * self.a[i] + (1.0 - beta2t) * mean;
                }
                for j in 0..cols {
                    let mean: f64 =
                        (0..rows).map(|i| g[i * cols + j].powi(2) + eps1).sum::<f64>() / rows as f64;
                    self.b[j] = beta2t * self.b[j] + (1.0 - beta2t) * mean;
                }
                let mean_r = self.a.iter().sum::<f64>() / rows as f64;
                let u = |i: usize, j: usize| g[i * cols + j] / (self.a[i] * self.b[j] / mean_r).sqrt();
                let mut sq = 0.0;
                for i in 0..rows {
                    for j in 0..cols {
                        sq += u(i, j).powi(2);
                    }
                }
                let rms = (sq / (rows * cols) as f64).sqrt();
                let clip = rms.max(1.0);
                for i in 0..rows {
                    for j in 0..cols {
                        let k = i * cols + j;
                        p[k] = p[k] * (1.0 - lr * wd) - lr * u(i, j) / clip;
                    }
                }
            }
        }
    }
}

/// Runs `steps` steps of `kind` (fused or unfused form) on the convex
/// quadratic `f(x) = sum h_i (x_i - c_i)^2 / 2` (`h` in [0.5, 2], `c` in
/// [-1, 1], `x0 = 0`, 256 values as a 16x16 matrix for Adafactor) with a
/// cosine-annealed learning rate, and returns the largest distance to the
/// known minimiser: `c`, or `h c / (h + wd)` for SGD's coupled weight decay
/// (the other optimizers run without decay here: decoupled decay moves the
/// minimum to a point with no closed form).
pub fn convex_distance(kind: Kind, fused: bool, steps: u64) -> f64 {
    let n = 256;
    let h_diag = crate::util::uniform(n, 0.5, 2.0, 41);
    let c = crate::util::uniform(n, -1.0, 1.0, 42);
    let lr0 = match kind {
        Kind::Sgd | Kind::SgdWd => 0.5,
        Kind::Momentum | Kind::Nesterov => 0.1,
        Kind::Adam | Kind::AdamW | Kind::Adafactor => 0.05,
        Kind::Lion => 0.02,
    };
    let mut hyper = Hyper { lr: lr0, ..kind.default_hyper() };
    if kind != Kind::SgdWd {
        hyper.weight_decay = 0.0;
    }
    let wd = hyper.weight_decay;
    let mut o = Optimizer::new(kind, hyper, n);
    let sched = crate::suites::optim::schedulers::Scheduler::new(
        crate::suites::optim::schedulers::Schedule::Cosine { min: 0.0 },
        lr0 as f64,
        steps,
    );
    let mut x = vec![0.0f32; n];
    let mut g = vec![0.0f32; n];
    let mut t = vec![0.0f32; n];
    for s in 0..steps {
        for i in 0..n {
            g[i] = h_diag[i] * (x[i] - c[i]);
        }
        o.hyper.lr = sched.lr_at(s) as f32;
        if fused {
            o.step_fused(&mut x, &g);
        } else {
            o.step_unfused(&mut x, &g, &mut t);
        }
    }
    (0..n)
        .map(|i| {
            let (h, ci) = (h_diag[i] as f64, c[i] as f64);
            (x[i] as f64 - h * ci / (h + wd as f64)).abs()
        })
        .fold(0.0, f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_f32(kind: Kind, h: Hyper, p0: &[f32], grads: &[Vec<f32>], fused: bool) -> (Vec<f32>, Optimizer) {
        let mut o = Optimizer::new(kind, h, p0.len());
        let mut p = p0.to_vec();
        let mut t = vec![0.0; p.len()];
        for g in grads {
            if fused {
                o.step_fused(&mut p, g);
            } else {
                o.step_unfused(&mut p, g, &mut t);
            }
        }
        (p, o)
    }

    /// Three steps on a scalar with gradients 1, -1, 2 (lr 0.1), values
    /// worked out by hand from each optimizer's formulas.
    #[test]
    fn three_steps_match_hand_computed_values() {
        let grads = [vec![1.0f32], vec![-1.0], vec![2.0]];
        let h = |kind: Kind| Hyper { lr: 0.1, ..kind.default_hyper() };
        // SGD: 1 - 0.1 (1 - 1 + 2) = 0.8.
        // SGD wd 0.01: p1 = 1 - .1(1 + .01) = .899; p2 = .899 - .1(-1 + .00899) = .998101;
        //   p3 = .998101 - .1(2 + .00998101) = .797102899.
        // Momentum 0.9: b = 1, -0.1, 1.91; p = 1 - .1(1 - .1 + 1.91) = 0.719.
        // Nesterov: updates d + .9 b = 1.9, -1.09, 3.719; p = 1 - .1(4.529) = 0.5471.
        // Adam (bias-corrected, eps 1e-8): step 1 m^ = 1, v^ = 1 -> update .1;
        //   step 2: m = .09 - .1 = -.01 -> m^ = -.01/.19; v = .000999 + .001 = .001999 -> v^ = .001999/.001999 = 1
        //   -> update .1 * (-.0526315789) ; step 3: m = -.009 + .2 = .191 -> m^ = .191/.271;
        //   v = .001997001 + .004 = .005997001 -> v^ = .005997001/.002997001 = 2.00100...;
        //   p = 1 - .1 + .00526315789 - .1 * .704797048 / 1.41456...
        // Lion (beta .9/.99, wd .01, lr .1): signs +, -, + ; decay .999 each step:
        //   p1 = .999 - .1 = .899; m1 = .01; c2 = .009 - .1 < 0 -> p2 = .898101 + .1 = .998101;
        //   m2 = .0099 - .01 = -.0001; c3 = -.00009 + .2 > 0 -> p3 = .997102899 - .1 = .897102899.
        let adam3 = {
            let vhat3: f64 = 0.005997001 / (1.0 - 0.999f64.powi(3));
            1.0 - 0.1 + 0.1 * (0.01 / 0.19) - 0.1 * (0.191 / 0.271) / (vhat3.sqrt() + 1e-8)
        };
        let want: [(Kind, f64); 6] = [
            (Kind::Sgd, 0.8),
            (Kind::SgdWd, 0.797102899),
            (Kind::Momentum, 0.719),
            (Kind::Nesterov, 0.5471),
            (Kind::Adam, adam3),
            (Kind::Lion, 0.897102899),
        ];
        for (kind, w) in want {
            for fused in [true, false] {
                let (p, _) = run_f32(kind, h(kind), &[1.0], &grads, fused);
                assert!((p[0] as f64 - w).abs() < 2e-6, "{kind:?} fused={fused}: {} vs {w}", p[0]);
            }
        }
        // AdamW = Adam's steps on a parameter shrunk by (1 - lr wd) first.
        let (p, _) = run_f32(Kind::AdamW, h(Kind::AdamW), &[1.0], &grads, true);
        let mut q = 1.0f64;
        for adam_update in [-0.1, 0.1 * (0.01 / 0.19), adam3 - (1.0 - 0.1 + 0.1 * (0.01 / 0.19))] {
            q = q * (1.0 - 0.1 * 0.01) + adam_update;
        }
        assert!((p[0] as f64 - q).abs() < 2e-6, "AdamW {} vs {q}", p[0]);
    }

    #[test]
    fn fused_and_unfused_are_bit_identical_and_match_the_f64_reference() {
        let n = 3 * CHUNK + 77;
        let p0 = crate::util::randn(n, 1);
        let grads: Vec<Vec<f32>> = (0..3).map(|s| crate::util::randn(n, 10 + s)).collect();
        for kind in Kind::ALL {
            let h = kind.default_hyper();
            let (pf, of) = run_f32(kind, h, &p0, &grads, true);
            if kind != Kind::Adafactor {
                let (pu, ou) = run_f32(kind, h, &p0, &grads, false);
                assert!(pf.iter().zip(&pu).all(|(a, b)| a.to_bits() == b.to_bits()), "{kind:?}");
                assert_eq!(of.a, ou.a, "{kind:?}");
            }
            let mut r = Reference::new(kind, h, n);
            let mut p: Vec<f64> = p0.iter().map(|&x| x as f64).collect();
            for g in &grads {
                let g: Vec<f64> = g.iter().map(|&x| x as f64).collect();
                r.step(&mut p, &g, h.lr as f64);
            }
            let worst = pf.iter().zip(&p).map(|(&a, &b)| (a as f64 - b).abs()).fold(0.0, f64::max);
            assert!(worst < 1e-5, "{kind:?}: {worst}");
        }
    }

    #[test]
    fn a_few_hundred_steps_reach_the_known_minimum() {
        for kind in Kind::ALL {
            let d = convex_distance(kind, true, 400);
            assert!(d < 1e-2, "{kind:?}: {d}");
            if kind != Kind::Adafactor {
                assert_eq!(d, convex_distance(kind, false, 400), "{kind:?}");
            }
        }
    }

    #[test]
    fn state_sizes_and_factored_shapes() {
        assert_eq!(factored_shape(1_000_000), (1000, 1000));
        assert_eq!(factored_shape(10_000_000), (3200, 3125));
        assert_eq!(factored_shape(7), (7, 1));
        for kind in Kind::ALL {
            let o = Optimizer::new(kind, kind.default_hyper(), 1_000_000);
            let want = if kind == Kind::Adafactor { 8000 } else { 4_000_000 * kind.state_per_param() };
            assert_eq!(o.state_bytes(), want, "{kind:?}");
            assert_eq!(Kind::parse(kind.name()), Some(kind));
        }
        assert_eq!(
            unfused_bytes_per_param(Kind::AdamW),
            8.0 + 8.0 + 12.0 + 8.0 + 12.0 + 8.0 + 8.0 + 8.0 + 12.0 + 12.0
        );
    }
}
