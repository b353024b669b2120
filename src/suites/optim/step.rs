//! `optimizer_step`: one optimizer step over a flat f32 parameter vector,
//! fused or unfused, on one thread or all; `state_memory`: the optimizer
//! state each optimizer allocates, measured by the counting allocator.

use super::install;
use super::optimizers::{self, Kind, NAMES, Optimizer, Reference};
use crate::backend::cpu::Context;
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use crate::util;
use crate::workload::Metric;
use anyhow::{Result, bail};

/// Values checked against the f64 reference after three steps (evenly
/// spaced, plus the last element).
const SAMPLES: usize = 4096;

/// Steps of the convex check run inside `verify`.
const CONVEX_STEPS: u64 = 300;

fn kind_of(case: &Case) -> Result<Kind> {
    let name = super::choice(case, "optimizer", NAMES)?;
    Kind::parse(name).ok_or_else(|| anyhow::anyhow!("unknown optimizer {name}"))
}

struct StepWorkload {
    kind: Kind,
    fused: bool,
    p: Vec<f32>,
    g: Vec<f32>,
    tmp: Vec<f32>,
    opt: Optimizer,
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
    state_bytes_measured: Option<usize>,
}

/// Prepares an `optimizer_step` case (`optimizer`, `form`, `params`, `threads`).
pub(crate) fn prepare_step(case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    Ok(Box::new(build_step(case, ctx)?))
}

/// Valid `form` values of `optimizer_step`.
pub(super) const FORMS: &[&str] = &["fused", "unfused"];

fn build_step(case: &Case, ctx: &Context) -> Result<StepWorkload> {
    let kind = kind_of(case)?;
    let fused = super::choice(case, "form", FORMS)? == "fused";
    if !fused && kind == Kind::Adafactor {
        bail!(
            "case {}: adafactor has no unfused form (its passes are reductions); valid form: fused",
            case.id
        );
    }
    let n = super::positive(case, "params")?;
    let (pool, _) = (ctx.pool(), ctx.threads());
    let arrays = 2 + kind.state_per_param() + (!fused) as usize;
    super::ensure_memory(4.0 * n as f64 * arrays as f64)?;
    let seed = super::seed(case);
    let p = util::randn(n, seed);
    // Gradients a few orders below the weights, as in training.
    let mut g = util::randn(n, seed ^ 1);
    g.iter_mut().for_each(|x| *x *= 1e-2);
    let tmp = if fused { Vec::new() } else { vec![0.0; n] };
    let (opt, measured) = super::live_delta(|| Optimizer::new(kind, kind.default_hyper(), n));
    Ok(StepWorkload { kind, fused, p, g, tmp, opt, pool, state_bytes_measured: measured })
}

impl StepWorkload {
    fn step(&mut self) {
        let Self { fused, p, g, tmp, opt, pool, .. } = self;
        install(pool.as_deref(), || {
            if *fused {
                opt.step_fused(p, g);
            } else {
                opt.step_unfused(p, g, tmp);
            }
        });
    }

    /// The bytes the optimizer state must occupy.
    fn expected_state_bytes(&self) -> usize {
        match self.kind {
            Kind::Adafactor => 4 * (self.opt.shape.0 + self.opt.shape.1),
            k => 4 * k.state_per_param() * self.p.len(),
        }
    }
}

/// Checks the state bytes the allocator saw against the expectation.
fn check_state_bytes(measured: Option<usize>, expected: usize) -> Result<String> {
    match measured {
        Some(m) if !super::bytes_match(m, expected) => {
            bail!("optimizer state took {m} bytes by the allocator, expected {expected}")
        }
        Some(m) => Ok(format!("state {m} B measured, {expected} B expected")),
        None => Ok("allocator not installed: state size checked by length only".into()),
    }
}

impl Workload for StepWorkload {
    fn verify(&mut self) -> Result<Verification> {
        let n = self.p.len();
        let state_note = check_state_bytes(self.state_bytes_measured, self.expected_state_bytes())?;
        let convex = optimizers::convex_distance(self.kind, self.fused, CONVEX_STEPS);
        if convex > 1e-2 {
            return Ok(Verification {
                passed: false,
                reference: "known minimum of a convex quadratic".into(),
                max_error: Some(convex),
                detail: format!("{CONVEX_STEPS} steps ended {convex:e} from the minimiser"),
            });
        }
        let h = self.opt.hyper;
        let to64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
        // Adafactor's statistics span whole rows and columns: its reference
        // runs on the full vector; the elementwise rules on a sample.
        let idx: Vec<usize> = if self.kind == Kind::Adafactor || n <= SAMPLES {
            (0..n).collect()
        } else {
            (0..SAMPLES).map(|k| k * (n / SAMPLES)).chain([n - 1]).collect()
        };
        let mut p_ref: Vec<f64> = idx.iter().map(|&i| self.p[i] as f64).collect();
        let g_ref: Vec<f64> = idx.iter().map(|&i| self.g[i] as f64).collect();
        let mut reference = Reference::new(self.kind, h, idx.len());
        if self.kind == Kind::Adafactor {
            p_ref = to64(&self.p);
            reference = Reference::new(self.kind, h, n);
        }
        for _ in 0..3 {
            self.step();
            reference.step(&mut p_ref, &g_ref, h.lr as f64);
        }
        let got: Vec<f32> = idx.iter().map(|&i| self.p[i]).collect();
        let want: Vec<f32> = p_ref.iter().map(|&x| x as f32).collect();
        let mut v = Verification::compare(
            format!(
                "three steps of the f64 textbook rule ({} values), then {CONVEX_STEPS} steps to a known minimum",
                idx.len()
            ),
            &got,
            &want,
            1e-6,
            1e-5,
        );
        // The moments too, where the rule keeps them per parameter.
        if v.passed && self.kind.state_per_param() >= 1 {
            let got_a: Vec<f32> = idx.iter().map(|&i| self.opt.a[i]).collect();
            let want_a: Vec<f32> = reference.a.iter().map(|&x| x as f32).collect();
            let va = Verification::compare("first moment", &got_a, &want_a, 1e-9, 1e-5);
            if !va.passed {
                return Ok(va);
            }
        }
        v.detail = format!("{}; convex distance {convex:.1e}; {state_note}", v.detail);
        Ok(v)
    }

    fn throughput(&self) -> Vec<Throughput> {
        let n = self.p.len() as f64;
        let per = if self.fused {
            self.kind.fused_bytes_per_param()
        } else {
            optimizers::unfused_bytes_per_param(self.kind)
        };
        vec![Throughput::elements(n), Throughput::bytes(per * n)]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.step();
        }
        std::hint::black_box(&self.p);
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        let n = self.p.len() as f64;
        let mut m = Vec::new();
        if let Some(b) = self.state_bytes_measured {
            m.push(Metric::new("state_bytes_per_param", b as f64 / n, "B"));
        }
        m
    }
}

/// Parameters of the `state_memory` first-step workload.
struct MemoryWorkload {
    kind: Kind,
    p: Vec<f32>,
    g: Vec<f32>,
    measured: Option<(usize, usize)>,
}

/// Prepares a `state_memory` case (`optimizer`, `params`).
pub(crate) fn prepare_memory(case: &Case) -> Result<Box<dyn Workload>> {
    let kind = kind_of(case)?;
    let n = super::positive(case, "params")?;
    super::ensure_memory(4.0 * n as f64 * (2 + kind.state_per_param()) as f64)?;
    let seed = super::seed(case);
    Ok(Box::new(MemoryWorkload {
        kind,
        p: util::randn(n, seed),
        g: util::randn(n, seed ^ 1),
        measured: None,
    }))
}

impl MemoryWorkload {
    /// A fresh optimizer and its first step: what a training run pays once.
    fn first_step(&mut self) -> Optimizer {
        let mut o = Optimizer::new(self.kind, self.kind.default_hyper(), self.p.len());
        o.step_fused(&mut self.p, &self.g);
        o
    }
}

impl Workload for MemoryWorkload {
    fn verify(&mut self) -> Result<Verification> {
        let n = self.p.len();
        let ((opt, peak), live) = super::live_delta(|| super::peak_during(|| self.first_step()));
        let expected = opt.state_bytes();
        let want = match self.kind {
            Kind::Adafactor => {
                let (r, c) = optimizers::factored_shape(n);
                4 * (r + c)
            }
            k => 4 * k.state_per_param() * n,
        };
        if expected != want {
            bail!("{:?} holds {expected} state bytes, expected {want}", self.kind);
        }
        let note = check_state_bytes(live, want)?;
        self.measured = live.zip(peak);
        drop(opt);
        Ok(Verification {
            passed: true,
            reference: "state bytes computed from the update rule (4 B per f32 state value)".into(),
            max_error: Some(0.0),
            detail: note,
        })
    }

    fn throughput(&self) -> Vec<Throughput> {
        vec![Throughput::elements(self.p.len() as f64)]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            std::hint::black_box(self.first_step());
        }
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        let n = self.p.len() as f64;
        let state_per_param = 4.0 * self.kind.state_per_param() as f64;
        let mut m = Vec::new();
        if let Some((live, peak)) = self.measured {
            m.push(Metric::new("state_bytes", live as f64, "B"));
            m.push(Metric::new("state_bytes_per_param", live as f64 / n, "B"));
            m.push(Metric::new("first_step_peak_bytes_per_param", peak as f64 / n, "B"));
            // Weights + gradients + state: what one f32 parameter costs in training.
            m.push(Metric::new("train_bytes_per_param", 8.0 + live as f64 / n, "B"));
        }
        m.push(Metric::new("expected_state_bytes_per_param", state_per_param, "B"));
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{ParamValue, test_case};

    #[test]
    fn every_optimizer_and_form_verifies_and_runs() {
        every_optimizer_and_form();
    }

    /// The same under every lower ISA cap: the optimizers' `simd_dispatch!`
    /// loops then run their AVX2 and baseline builds, checked by the same
    /// references.
    #[test]
    fn every_optimizer_verifies_under_every_isa_cap() {
        for level in [crate::isa::IsaLevel::Scalar, crate::isa::IsaLevel::Avx2] {
            crate::isa::with_cap(level, every_optimizer_and_form);
        }
    }

    fn every_optimizer_and_form() {
        for name in NAMES {
            for form in ["fused", "unfused"] {
                if *name == "adafactor" && form == "unfused" {
                    continue;
                }
                for threads in [ParamValue::Int(1), ParamValue::Str("all".into())] {
                    let c = test_case(
                        "optim",
                        "optimizer_step",
                        &[
                            ("optimizer", ParamValue::Str(name.to_string())),
                            ("form", ParamValue::Str(form.into())),
                            ("params", ParamValue::Int(100_003)),
                            ("threads", threads),
                        ],
                    );
                    let mut w = prepare_step(&c, &crate::suites::test_context(&c)).unwrap();
                    let v = w.verify().unwrap();
                    assert!(v.passed, "{}: {}", c.id, v.detail);
                    w.run(2).unwrap();
                }
            }
            let c = test_case(
                "optim",
                "state_memory",
                &[("optimizer", ParamValue::Str(name.to_string())), ("params", ParamValue::Int(10_000))],
            );
            let mut w = prepare_memory(&c).unwrap();
            assert!(w.verify().unwrap().passed);
            w.run(1).unwrap();
        }
    }

    #[test]
    fn a_wrong_update_fails_verification() {
        let c = test_case(
            "optim",
            "optimizer_step",
            &[
                ("optimizer", ParamValue::Str("adamw".into())),
                ("form", ParamValue::Str("fused".into())),
                ("params", ParamValue::Int(10_000)),
                ("threads", ParamValue::Int(1)),
            ],
        );
        let mut w = build_step(&c, &Context::run()).unwrap();
        // Corrupt one moment the reference sample will see.
        w.opt.a[5000] = 1.0;
        assert!(!w.verify().unwrap().passed);
        let bad = test_case(
            "optim",
            "optimizer_step",
            &[
                ("optimizer", ParamValue::Str("adafactor".into())),
                ("form", ParamValue::Str("unfused".into())),
                ("params", ParamValue::Int(10)),
                ("threads", ParamValue::Int(1)),
            ],
        );
        assert!(
            prepare_step(&bad, &crate::suites::test_context(&bad))
                .err()
                .unwrap()
                .to_string()
                .contains("valid form: fused")
        );
    }
}
