//! The unfused step: one whole-array pass per operation (PyTorch's
//! `foreach` path), through a scratch buffer, rounding exactly as the fused
//! kernels do.

use super::fused::{LionConst, sign};
use super::*;

impl Optimizer {
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
