//! The nn suite: neural-network layers beyond the transformer's own, on the
//! CPU, each verified against an f64 reference before it is timed.
//!
//! | benchmark   | file           | what                                                     |
//! |-------------|----------------|----------------------------------------------------------|
//! | `conv`      | `conv.rs`      | 1-D/2-D/3-D convolution, im2col + GEMM, direct, Winograd  |
//! | `pool`, `adaptive_pool` | `conv.rs` | max, average and adaptive-average pooling     |
//! | `norm`      | `norm.rs`      | batch norm (inference, training), group and instance norm |
//! | `rnn`       | `rnn.rs`       | RNN, LSTM and GRU layers over a sequence, forward         |
//! | `attention` | `attention.rs` | materialised scores vs tiled online softmax, causal or not |
//!
//! The kernels live in [`crate::kernels::nn`]; this suite only draws the
//! inputs, checks the results and times the calls.

use crate::kernels::nn::pool::parse_pool;
use crate::plan::{Case, ParamValue};
use crate::suites::{ParamRule, Suite, Verification, Workload};
use anyhow::{Result, bail};

mod attention;
mod conv;
mod norm;
mod rnn;

/// Convolutions, pooling, channel norms, recurrent layers and attention.
pub struct NnSuite;

/// Benchmarks of `suites/nn.toml`, in file order, with what prepares each.
const BENCHMARKS: crate::suites::Benchmarks = &[
    ("conv", conv::prepare_conv),
    ("pool", conv::prepare_pool),
    ("adaptive_pool", conv::prepare_pool),
    ("norm", norm::prepare),
    ("rnn", rnn::prepare),
    ("attention", attention::prepare),
];

impl Suite for NnSuite {
    fn name(&self) -> &'static str {
        "nn"
    }
    fn describe(&self) -> &'static str {
        "Neural-network layers: 1-3D convolution (im2col+GEMM vs direct vs Winograd, ResNet-50/MobileNetV2/audio/video \
         shapes), pooling, batch/group/instance norm, RNN/LSTM/GRU, materialised vs flash attention"
    }
    fn spec_toml(&self) -> &'static str {
        include_str!("../../../suites/nn.toml")
    }
    fn benchmarks(&self) -> Vec<&'static str> {
        crate::suites::names(BENCHMARKS)
    }
    fn param_rule(&self, benchmark: &str, key: &str) -> Option<ParamRule> {
        Some(match (benchmark, key) {
            ("conv", "layer") => ParamRule::Check(check_layer),
            ("conv", "algo") => ParamRule::OneOf(conv::ALGOS),
            ("conv", "layout") => ParamRule::OneOf(conv::LAYOUTS),
            ("pool", "op") => ParamRule::OneOf(conv::POOL_OPS),
            ("pool" | "adaptive_pool", "shape") => ParamRule::Check(check_pool),
            ("norm", "kind") => ParamRule::OneOf(norm::KINDS),
            ("norm", "shape") => ParamRule::Shape("NxCxHxW"),
            ("rnn", "cell") => ParamRule::OneOf(rnn::CELLS),
            ("rnn", "hidden" | "batch" | "seq") => ParamRule::POSITIVE,
            ("attention", "algo") => ParamRule::OneOf(attention::ALGOS),
            ("attention", "mask") => ParamRule::OneOf(attention::MASKS),
            ("attention", "seq" | "heads") => ParamRule::POSITIVE,
            (_, "threads") => ParamRule::Threads,
            _ => return None,
        })
    }
    fn check_case(&self, case: &Case) -> Result<(), (&'static str, String)> {
        match (case.benchmark.as_str(), case.params.get("algo"), case.params.get("layer")) {
            ("conv", Some(algo), Some(layer)) => {
                conv::check_algo(&algo.to_string(), &layer.to_string()).map_err(|e| ("algo", e))
            }
            _ => Ok(()),
        }
    }
    fn prepare(&self, case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
        crate::suites::dispatch(self.name(), BENCHMARKS, case, ctx)
    }
}

/// A conv `layer`: a preset's name or a shape `parse_conv` accepts.
fn check_layer(v: &ParamValue) -> Result<(), String> {
    conv::layer_geom(&v.to_string()).map(|_| ())
}

/// A pool `shape` as `parse_pool` accepts it.
fn check_pool(v: &ParamValue) -> Result<(), String> {
    parse_pool(&v.to_string()).map(|_| ())
}

/// A reproducible seed derived from the case id.
pub(crate) fn seed(case: &Case) -> u64 {
    crate::suites::common::seed(case)
}

/// The string parameter `key`, which must be one of `valid`.
pub(crate) fn choice<'a>(case: &Case, key: &str, valid: &[&'a str]) -> Result<&'a str> {
    crate::suites::common::choice(case, key, valid)
}

/// The positive integer parameter `key`.
pub(crate) fn positive(case: &Case, key: &str) -> Result<usize> {
    match case.usize(key)? {
        0 => bail!("case {}: `{key}` must be positive", case.id),
        n => Ok(n),
    }
}

/// Refuses (as skipped, before anything is allocated) a case whose buffers
/// would not fit in the memory available now, with room for the rest.
pub(crate) fn ensure_memory(what: &str, bytes: f64) -> Result<()> {
    // Beyond any machine (or NaN from absurd sizes): refused even where
    // the available memory cannot be read.
    if bytes.is_nan() || bytes >= 1e14 {
        return Err(crate::suites::skip(format!(
            "{what} needs {:.3e} bytes, more than any machine has",
            bytes
        )));
    }
    match crate::util::mem_available().map(|b| b as f64) {
        Some(avail) if bytes > 0.8 * avail => Err(crate::suites::skip(format!(
            "{what} needs {:.2} GB, only {:.2} GB of memory available",
            bytes / 1e9,
            avail / 1e9
        ))),
        _ => Ok(()),
    }
}

/// Up to `count` distinct indices below `n`, always the first and the last,
/// the rest drawn from `seed`; sorted.
pub(crate) fn sample(n: usize, count: usize, seed: u64) -> Vec<usize> {
    use rand::RngExt;
    let mut rng = crate::util::rng(seed);
    let mut v = vec![0, n.saturating_sub(1)];
    v.extend((0..count.saturating_sub(2)).map(|_| rng.random_range(0..n.max(1))));
    v.sort_unstable();
    v.dedup();
    v
}

/// Checks `got` against f64 `want` with a per-value bound `atol + rtol *
/// scale[i]` (`scale` defaults to `|want|`); the first miss is named.
pub(crate) fn check(
    reference: String,
    got: &[f32],
    want: &[f64],
    scale: Option<&[f64]>,
    atol: f64,
    rtol: f64,
) -> Verification {
    let mut worst = 0.0f64;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (g as f64 - w).abs();
        let bound = atol + rtol * scale.map_or(w.abs(), |s| s[i]);
        if err.is_nan() || err > bound {
            return Verification {
                passed: false,
                reference,
                max_error: Some(if err.is_nan() { f64::INFINITY } else { err }),
                detail: format!("value {i}: got {g}, reference {w} (bound {bound:e})"),
            };
        }
        worst = worst.max(err);
    }
    if got.len() != want.len() {
        return Verification::check(reference, false, format!("{} values against {}", got.len(), want.len()));
    }
    Verification {
        passed: true,
        reference,
        max_error: Some(worst),
        detail: format!("{} values within {atol:e} + {rtol:e} x scale", got.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{SuiteSpec, expand};
    use std::collections::BTreeMap;

    fn case(bench: &str, params: &[(&str, ParamValue)]) -> Case {
        let p: BTreeMap<String, ParamValue> =
            params.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        Case::new("nn", bench, p)
    }
    fn s(v: &str) -> ParamValue {
        ParamValue::Str(v.into())
    }

    /// Every benchmark's smallest default-like case verifies (tiny shapes,
    /// the same code paths as the published ones).
    #[test]
    fn tiny_cases_of_every_benchmark_verify_and_run() {
        let i = ParamValue::Int;
        let conv = |layer: &str, algo: &str, layout: &str| {
            case("conv", &[("layer", s(layer)), ("algo", s(algo)), ("layout", s(layout)), ("threads", i(2))])
        };
        let cases = [
            conv("2x8x9x9-k8x3x3-p1", "im2col", "nchw"),
            conv("1x6x7x7x7-k6x3x3x3-p1-g6", "direct", "nchw"),
            conv("opbench_short", "direct", "nchw"),
            conv("2x8x9x9-k8x3x3-p1-g2", "im2col", "nhwc"),
            conv("1x6x7x7x7-k6x3x3x3-p1-g6", "direct", "nhwc"),
            conv("2x16x6x6-k8x1x1", "im2col", "nhwc"),
            conv("1x12x6x6-k8x1x1-g4", "im2col", "nhwc"),
            conv("2x8x9x9-k8x3x3-p1", "winograd", "nchw"),
            conv("1x20x10x10-k12x3x3", "winograd", "nhwc"),
            case("pool", &[("op", s("max")), ("shape", s("2x3x12x12-k3-s2-p1")), ("threads", i(2))]),
            case("adaptive_pool", &[("shape", s("2x3x7x7-o1")), ("threads", i(2))]),
            case("pool", &[("op", s("avg")), ("shape", s("1x2x5x6x7-k2")), ("threads", i(2))]),
            case("norm", &[("kind", s("batch_train")), ("shape", s("4x32x6x6")), ("threads", i(2))]),
            case("norm", &[("kind", s("group")), ("shape", s("2x64x5x5")), ("threads", i(2))]),
            case(
                "rnn",
                &[("cell", s("gru")), ("hidden", i(32)), ("batch", i(3)), ("seq", i(7)), ("threads", i(2))],
            ),
            case(
                "attention",
                &[
                    ("algo", s("flash")),
                    ("mask", s("causal")),
                    ("seq", i(130)),
                    ("heads", i(2)),
                    ("threads", i(2)),
                ],
            ),
            case(
                "attention",
                &[
                    ("algo", s("materialised")),
                    ("mask", s("none")),
                    ("seq", i(70)),
                    ("heads", i(2)),
                    ("threads", i(2)),
                ],
            ),
        ];
        for c in cases {
            let mut w =
                crate::suites::prepare_standalone(&NnSuite, &c).unwrap_or_else(|e| panic!("{}: {e:#}", c.id));
            let v = w.verify().unwrap();
            assert!(v.passed, "{}: {}", c.id, v.detail);
            w.run(2).unwrap();
            assert!(w.throughput().iter().all(|t| t.per_iteration > 0.0), "{}", c.id);
        }
    }

    #[test]
    fn impossible_shapes_are_refused_by_the_rules() {
        let rule = |b, k| NnSuite.param_rule(b, k).unwrap();
        let e = rule("conv", "layer").check(&s("1x6x8x8-k4x3x3-g4")).unwrap_err();
        assert!(e.contains("groups 4 must divide"), "{e}");
        let e = rule("conv", "layer").check(&s("1x3x4x4-k8x7x7")).unwrap_err();
        assert!(e.contains("larger than the padded input"), "{e}");
        let e = rule("conv", "layer").check(&s("resnet")).unwrap_err();
        assert!(e.contains("rn50_l3_3x3_b1"), "names the presets: {e}");
        assert!(rule("pool", "shape").check(&s("1x3x4x4-k9")).is_err());
        // Pool op and shape must agree; the group-norm channel count must split.
        let c =
            case("pool", &[("op", s("max")), ("shape", s("1x3x7x7-o1")), ("threads", ParamValue::Int(1))]);
        assert!(
            crate::suites::prepare_standalone(&NnSuite, &c).err().unwrap().to_string().contains("window -k")
        );
        let c = case("adaptive_pool", &[("shape", s("1x3x7x7-k2")), ("threads", ParamValue::Int(1))]);
        let e = crate::suites::prepare_standalone(&NnSuite, &c).err().unwrap().to_string();
        assert!(e.contains("adaptive output size -o"), "{e}");
        // algo=winograd only where F(4x4, 3x3) applies: the plan's case rule,
        // and prepare again.
        let conv = |layer: &str| {
            case(
                "conv",
                &[
                    ("layer", s(layer)),
                    ("algo", s("winograd")),
                    ("layout", s("nchw")),
                    ("threads", ParamValue::Int(1)),
                ],
            )
        };
        let (key, e) = NnSuite.check_case(&conv("rn50_l3_1x1_b1")).unwrap_err();
        assert_eq!(key, "algo");
        assert!(e.contains("layer rn50_l3_1x1_b1") && e.contains("a 1x1 kernel"), "{e}");
        assert!(NnSuite.check_case(&conv("rn50_l3_3x3_b32")).is_ok());
        let e = crate::suites::prepare_standalone(&NnSuite, &conv("1x8x9x9-k8x3x3-s2"))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("stride 2"), "{e}");
        let c =
            case("norm", &[("kind", s("group")), ("shape", s("1x20x4x4")), ("threads", ParamValue::Int(1))]);
        assert!(
            crate::suites::prepare_standalone(&NnSuite, &c).err().unwrap().to_string().contains("32 groups")
        );
    }

    #[test]
    fn every_default_layer_parses() {
        let spec = SuiteSpec::parse("nn", NnSuite.spec_toml()).unwrap();
        let cases: Vec<Case> = spec.benchmarks.iter().flat_map(|b| expand("nn", b)).collect();
        assert!(cases.len() > 20, "{} cases", cases.len());
        // The grids pair every algorithm only with layers it can compute.
        for c in &cases {
            assert!(NnSuite.check_case(c).is_ok(), "{}", c.id);
        }
        assert_eq!(cases.iter().filter(|c| c.id.contains("algo=winograd")).count(), 10);
        for (name, _) in conv::LAYERS {
            assert!(conv::layer_geom(name).is_ok(), "{name}");
        }
    }
}
