//! Learning-rate schedulers: a closed form per scheduler (`lr_at`) and the
//! incremental, stateful form a training loop calls once per step (`step`,
//! PyTorch's "chainable" recursions). The benchmark times the stateful step;
//! verification holds both against each other and against values worked out
//! by hand at chosen steps.

use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use anyhow::{Result, bail};
use std::f64::consts::PI;

/// Names accepted by the `kind` parameter.
pub const KINDS: &[&str] = &["step", "exponential", "cosine", "warmup_cosine", "warmup_linear", "one_cycle"];

/// A schedule over `total` steps starting from `base` (for one-cycle:
/// `base` is the peak learning rate).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Schedule {
    /// `base * gamma^(t / every)` (integer division).
    Step {
        /// Steps between decays.
        every: u64,
        /// Factor per decay.
        gamma: f64,
    },
    /// `base * gamma^t`.
    Exponential {
        /// Factor per step.
        gamma: f64,
    },
    /// Cosine from `base` at 0 to `min` at `total`.
    Cosine {
        /// Final learning rate.
        min: f64,
    },
    /// Linear from 0 to `base` over `warmup` steps, then cosine to `min` at `total`.
    WarmupCosine {
        /// Warm-up steps.
        warmup: u64,
        /// Final learning rate.
        min: f64,
    },
    /// Linear from 0 to `base` over `warmup` steps, then linear to 0 at `total`.
    WarmupLinear {
        /// Warm-up steps.
        warmup: u64,
    },
    /// PyTorch's `OneCycleLR` (cosine annealing, two phases): from
    /// `base / div` up to `base` at step `pct * total - 1`, then down to
    /// `base / (div * final_div)` at `total - 1`.
    OneCycle {
        /// Fraction of steps spent increasing.
        pct: f64,
        /// Initial divisor (25 in PyTorch).
        div: f64,
        /// Final divisor (1e4 in PyTorch).
        final_div: f64,
    },
}

/// A scheduler: the schedule, its horizon, and the stateful position.
#[derive(Debug, Clone)]
pub struct Scheduler {
    /// The schedule.
    pub schedule: Schedule,
    /// Base (or peak) learning rate.
    pub base: f64,
    /// Horizon in steps.
    pub total: u64,
    t: u64,
    lr: f64,
}

/// Cosine interpolation from `start` (at pct 0) to `end` (at pct 1).
fn cos_anneal(start: f64, end: f64, pct: f64) -> f64 {
    end + (start - end) / 2.0 * (1.0 + (PI * pct).cos())
}

impl Scheduler {
    /// The default schedule of each kind over `total` steps at base 1e-3.
    pub fn by_name(kind: &str, total: u64) -> Option<Self> {
        let schedule = match kind {
            "step" => Schedule::Step { every: total / 3, gamma: 0.1 },
            "exponential" => Schedule::Exponential { gamma: 0.99 },
            "cosine" => Schedule::Cosine { min: 1e-5 },
            "warmup_cosine" => Schedule::WarmupCosine { warmup: total / 10, min: 1e-5 },
            "warmup_linear" => Schedule::WarmupLinear { warmup: total / 10 },
            "one_cycle" => Schedule::OneCycle { pct: 0.3, div: 25.0, final_div: 1e4 },
            _ => return None,
        };
        Some(Self::new(schedule, 1e-3, total))
    }

    /// A scheduler at step 0.
    pub fn new(schedule: Schedule, base: f64, total: u64) -> Self {
        let mut s = Self { schedule, base, total, t: 0, lr: 0.0 };
        s.lr = s.lr_at(0);
        s
    }

    /// The closed form at step `t` (clamped to the horizon).
    pub fn lr_at(&self, t: u64) -> f64 {
        let (b, total) = (self.base, self.total as f64);
        let tf = t.min(self.total) as f64;
        match self.schedule {
            Schedule::Step { every, gamma } => b * gamma.powi((t / every.max(1)) as i32),
            Schedule::Exponential { gamma } => b * gamma.powi(t as i32),
            Schedule::Cosine { min } => cos_anneal(b, min, tf / total),
            Schedule::WarmupCosine { warmup, min } => {
                if t < warmup {
                    b * t as f64 / warmup as f64
                } else {
                    cos_anneal(b, min, (tf - warmup as f64) / (total - warmup as f64))
                }
            }
            Schedule::WarmupLinear { warmup } => {
                if t < warmup {
                    b * t as f64 / warmup as f64
                } else {
                    b * (total - tf) / (total - warmup as f64)
                }
            }
            Schedule::OneCycle { pct, div, final_div } => {
                let initial = b / div;
                let min = initial / final_div;
                let peak_at = (pct * total).floor() - 1.0;
                let tf = t.min(self.total - 1) as f64;
                if tf <= peak_at {
                    cos_anneal(initial, b, tf / peak_at)
                } else {
                    cos_anneal(b, min, (tf - peak_at) / (total - 1.0 - peak_at))
                }
            }
        }
    }

    /// The current learning rate.
    pub fn lr(&self) -> f64 {
        self.lr
    }

    /// Advances one step and returns the new learning rate, updating the
    /// previous value incrementally (multiplications, ratios of cosines,
    /// constant increments) rather than from the closed form.
    pub fn step(&mut self) -> f64 {
        let t = self.t + 1;
        let total = self.total;
        self.lr = match self.schedule {
            Schedule::Step { every, gamma } => {
                if t.is_multiple_of(every.max(1)) {
                    self.lr * gamma
                } else {
                    self.lr
                }
            }
            Schedule::Exponential { gamma } => self.lr * gamma,
            Schedule::Cosine { min } => {
                if t > total {
                    self.lr
                } else {
                    let (c, c0) =
                        ((PI * t as f64 / total as f64).cos(), (PI * (t - 1) as f64 / total as f64).cos());
                    min + (1.0 + c) / (1.0 + c0) * (self.lr - min)
                }
            }
            Schedule::WarmupCosine { warmup, min } => {
                if t <= warmup {
                    self.lr + self.base / warmup as f64
                } else if t > total {
                    self.lr
                } else {
                    let span = (total - warmup) as f64;
                    let (c, c0) = (
                        (PI * (t - warmup) as f64 / span).cos(),
                        (PI * (t - 1 - warmup) as f64 / span).cos(),
                    );
                    min + (1.0 + c) / (1.0 + c0) * (self.lr - min)
                }
            }
            Schedule::WarmupLinear { warmup } => {
                if t <= warmup {
                    self.lr + self.base / warmup as f64
                } else if t > total {
                    self.lr
                } else {
                    self.lr - self.base / (total - warmup) as f64
                }
            }
            // PyTorch's OneCycleLR has no recursion: it evaluates the closed
            // form every step, and so does this.
            Schedule::OneCycle { .. } => self.lr_at(t),
        };
        self.t = t;
        self.lr
    }

    /// Back to step 0.
    pub fn reset(&mut self) {
        self.t = 0;
        self.lr = self.lr_at(0);
    }
}

/// Horizon of the benchmarked schedules.
const TOTAL: u64 = 1000;

/// Values at chosen steps, worked out by hand for the defaults over 1000
/// steps at base 1e-3: (kind, step, learning rate).
pub(crate) fn known_values() -> Vec<(&'static str, u64, f64)> {
    vec![
        ("step", 0, 1e-3),
        ("step", 332, 1e-3),
        ("step", 333, 1e-4),
        ("step", 999, 1e-6),
        ("exponential", 100, 1e-3 * 0.99f64.powi(100)),
        ("cosine", 0, 1e-3),
        ("cosine", 500, (1e-3 + 1e-5) / 2.0),
        ("cosine", 1000, 1e-5),
        // cos(pi/4) = sqrt(2)/2 at a quarter of the horizon.
        ("cosine", 250, 1e-5 + (1e-3 - 1e-5) * (1.0 + 0.5f64.sqrt()) / 2.0),
        ("warmup_cosine", 50, 5e-4),
        ("warmup_cosine", 100, 1e-3),
        ("warmup_cosine", 550, (1e-3 + 1e-5) / 2.0),
        ("warmup_cosine", 1000, 1e-5),
        ("warmup_linear", 25, 2.5e-4),
        ("warmup_linear", 550, 5e-4),
        ("warmup_linear", 1000, 0.0),
        ("one_cycle", 0, 4e-5),
        ("one_cycle", 299, 1e-3),
        ("one_cycle", 999, 4e-9),
        ("one_cycle", 649, (1e-3 + 4e-9) / 2.0),
    ]
}

struct SchedWorkload {
    kind: &'static str,
    sched: Scheduler,
    sink: f64,
}

/// Prepares a `scheduler` case (`kind`).
pub(crate) fn prepare(case: &Case) -> Result<Box<dyn Workload>> {
    let kind = super::choice(case, "kind", KINDS)?;
    let Some(sched) = Scheduler::by_name(kind, TOTAL) else { bail!("unknown scheduler {kind}") };
    Ok(Box::new(SchedWorkload { kind, sched, sink: 0.0 }))
}

impl Workload for SchedWorkload {
    fn verify(&mut self) -> Result<Verification> {
        let mut worst_known = 0.0f64;
        for (kind, t, want) in known_values().into_iter().filter(|k| k.0 == self.kind) {
            let got = self.sched.lr_at(t);
            let err = (got - want).abs();
            worst_known = worst_known.max(err);
            if err > 1e-12 + 1e-9 * want.abs() {
                return Ok(Verification {
                    passed: false,
                    reference: "hand-computed values".into(),
                    max_error: Some(err),
                    detail: format!("{kind} at step {t}: closed form {got}, expected {want}"),
                });
            }
        }
        self.sched.reset();
        let mut worst = 0.0f64;
        for t in 1..=TOTAL + 5 {
            let got = self.sched.step();
            let want = self.sched.lr_at(t);
            let err = (got - want).abs();
            worst = worst.max(err);
            if err > 1e-15 + 1e-9 * want.abs() {
                return Ok(Verification {
                    passed: false,
                    reference: "closed form".into(),
                    max_error: Some(err),
                    detail: format!("{}: stateful step {t} gave {got}, closed form {want}", self.kind),
                });
            }
        }
        self.sched.reset();
        Ok(Verification {
            passed: true,
            reference: "hand-computed values at chosen steps, then the closed form at every step".into(),
            max_error: Some(worst.max(worst_known)),
            detail: format!(
                "stateful recursion within 1e-9 relative of the closed form over {} steps",
                TOTAL + 5
            ),
        })
    }

    fn throughput(&self) -> Vec<Throughput> {
        vec![Throughput::items(1.0)]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            if self.sched.t >= TOTAL {
                self.sched.reset();
            }
            self.sink += std::hint::black_box(self.sched.step());
        }
        std::hint::black_box(self.sink);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_forms_match_hand_values_and_recursions() {
        for kind in KINDS {
            let mut w = prepare(&Case::new(
                "optim",
                "scheduler",
                [("kind".to_string(), crate::plan::ParamValue::Str(kind.to_string()))].into_iter().collect(),
            ))
            .unwrap();
            let v = w.verify().unwrap();
            assert!(v.passed, "{kind}: {}", v.detail);
            w.run(2500).unwrap();
        }
    }

    #[test]
    fn a_wrong_closed_form_fails_verification() {
        let mut w = SchedWorkload {
            kind: "cosine",
            sched: Scheduler::new(Schedule::Cosine { min: 2e-5 }, 1e-3, TOTAL),
            sink: 0.0,
        };
        assert!(!w.verify().unwrap().passed);
    }
}
