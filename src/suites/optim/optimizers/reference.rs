//! The f64 reference optimizers and the convex-problem check that every
//! step workload runs before timing.

use super::*;

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
