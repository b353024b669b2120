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
//!
//! This file holds the optimizer state and its vocabulary; the fused step
//! and its per-chunk kernels are in `optimizers/fused.rs`, the unfused
//! operation list in `optimizers/unfused.rs`, the f64 reference and the
//! convex-problem check in `optimizers/reference.rs`.

use crate::kernels::simd_dispatch;
use rayon::prelude::*;

mod fused;
mod reference;
mod unfused;

pub(crate) use fused::{AdamConst, adam_chunk};
pub use reference::{Reference, convex_distance};
pub use unfused::unfused_bytes_per_param;

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
