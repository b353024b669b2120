//! The quantization suite: speed and accuracy of INT8, Q8_0/Q4_0/Q4_1,
//! ternary (BitNet b1.58), f16 and bf16 in the same result row.
//!
//! | benchmark    | file           | what                                                    |
//! |--------------|----------------|---------------------------------------------------------|
//! | `quantize`   | `codec.rs`     | f32 -> format, per format, 1 thread and all             |
//! | `dequantize` | `codec.rs`     | format -> f32                                           |
//! | `calibrate`  | `calibrate.rs` | min-max, 99.9th percentile, MSE-optimal clipping        |
//! | `linear`     | `linear.rs`    | weight-only quantized layers beside the f32 GEMM / GEMV |
//! | `dynamic`    | `linear.rs`    | W8A8 layer quantizing activations per call              |
//! | `int8_gemm`  | `linear.rs`    | int8 x int8 -> i32 per instruction path (VNNI, AVX2, scalar) |
//! | `model`      | `model.rs`     | quantize every matrix of a catalogue model, streaming   |
//! | `mixed`      | `mixed.rs`     | f16/bf16 storage with f32 arithmetic                    |
//!
//! The kernels live in [`crate::kernels::quant`] (the inference suite uses
//! them too); this folder holds the workloads, their reference checks and the
//! accuracy figures (`data.rs`).

use crate::plan::Case;
use crate::suites::{
    Benchmarks, Limit, ParamRule, Suite, TargetMatch, TargetSpec, ThroughputKind, Workload, dispatch, names,
};
use anyhow::Result;

mod calibrate;
mod codec;
mod data;
mod linear;
mod mixed;
mod model;

pub(crate) use crate::suites::common::{choice, seed, shape2};
pub(crate) use crate::util::mem_available;

/// Quantization speed and accuracy.
pub struct QuantSuite;

/// Benchmarks of `suites/quant.toml`, in file order, with what prepares each.
const BENCHMARKS: Benchmarks = &[
    ("quantize", |c, x| codec::prepare(c, x, false)),
    ("dequantize", |c, x| codec::prepare(c, x, true)),
    ("calibrate", calibrate::prepare),
    ("linear", linear::prepare_linear),
    ("dynamic", linear::prepare_dynamic),
    ("int8_gemm", linear::prepare_int8_gemm),
    ("model", model::prepare),
    ("mixed", mixed::prepare),
];

impl Suite for QuantSuite {
    fn name(&self) -> &'static str {
        "quant"
    }
    fn describe(&self) -> &'static str {
        "Quantization: INT8, Q8_0/Q4_0/Q4_1, ternary, f16/bf16 speed with RMSE/SQNR/cosine in the same row"
    }
    fn spec_toml(&self) -> &'static str {
        include_str!("../../../suites/quant.toml")
    }
    fn benchmarks(&self) -> Vec<&'static str> {
        names(BENCHMARKS)
    }
    fn targets(&self) -> Vec<TargetSpec> {
        // Issue 6: quantize and dequantize at 50% of the probed bandwidth,
        // for every format, not just the fastest one.
        vec![
            TargetSpec {
                name: "every format's quantize, 16M elements, all threads, >= 50% of STREAM triad (f32 read + codes written)",
                case_pattern: r"^quant/quantize/dist=[a-z]+,format=[a-z0-9_]+,shape=4096x4096,threads=all$",
                matching: TargetMatch::Every,
                kind: ThroughputKind::Bytes,
                limit: Limit::TriadAllThreads,
                required: 0.5,
            },
            TargetSpec {
                name: "every format's dequantize, 16M elements, all threads, >= 50% of STREAM triad (codes read + f32 written)",
                case_pattern: r"^quant/dequantize/dist=[a-z]+,format=[a-z0-9_]+,shape=4096x4096,threads=all$",
                matching: TargetMatch::Every,
                kind: ThroughputKind::Bytes,
                limit: Limit::TriadAllThreads,
                required: 0.5,
            },
        ]
    }
    fn param_rule(&self, benchmark: &str, key: &str) -> Option<ParamRule> {
        Some(match (benchmark, key) {
            ("quantize" | "dequantize", "format") => ParamRule::OneOf(codec::FORMATS),
            ("linear", "format") => ParamRule::OneOf(linear::FORMATS),
            ("model", "format") => ParamRule::OneOf(model::FORMATS),
            ("model", "model") => ParamRule::OneOf(crate::model::config::PRESETS),
            ("calibrate", "method") => ParamRule::OneOf(calibrate::METHODS),
            ("mixed", "op") => ParamRule::OneOf(mixed::OPS),
            ("mixed", "dtype") => ParamRule::OneOf(mixed::DTYPES),
            (_, "dist") => ParamRule::OneOf(data::DISTS),
            (_, "path") => ParamRule::Check(|v| crate::suites::params::one_of(v, &linear::path_names())),
            ("quantize" | "dequantize" | "calibrate", "shape") => ParamRule::Shape("ROWSxCOLS"),
            (_, "shape") => ParamRule::Shape("MxKxN"),
            (_, "elements") => ParamRule::POSITIVE,
            (_, "threads") => ParamRule::Threads,
            _ => return None,
        })
    }
    fn prepare(&self, case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
        dispatch(self.name(), BENCHMARKS, case, ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{ParamValue, SuiteSpec, expand, test_case};
    use crate::suites::SkipCase;

    fn spec() -> SuiteSpec {
        SuiteSpec::parse("quant", QuantSuite.spec_toml()).unwrap()
    }

    fn s(v: &str) -> ParamValue {
        ParamValue::Str(v.into())
    }

    /// Every benchmark with every value of its non-size parameters, on small
    /// sizes: prepares, verifies, runs and reports metrics.
    #[test]
    fn every_benchmark_and_choice_verifies_on_small_sizes() {
        small_sizes_verify();
    }

    /// The same under every lower ISA cap, so the AVX2, AVX-512-without-VNNI
    /// and portable kernels are verified on any machine, and the int8 paths
    /// above the cap are skipped with its reason.
    #[test]
    fn every_benchmark_verifies_under_every_isa_cap() {
        use crate::isa::{IsaLevel, with_cap};
        for level in [IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::Avx512] {
            with_cap(level, small_sizes_verify);
        }
    }

    /// The skip reason `case` must carry here (a named int8 path the CPU
    /// lacks or the ISA cap excludes), or `None` when it must run.
    fn expected_skip(case: &Case) -> Option<String> {
        match case.params.get("path") {
            Some(ParamValue::Str(p)) if p != "auto" => crate::kernels::quant::Int8Path::parse(p)
                .expect("a valid path")
                .unavailable()
                .map(|why| format!("path={p}: {why}")),
            _ => None,
        }
    }

    fn small_sizes_verify() {
        let mut spec = spec();
        for b in &mut spec.benchmarks {
            for g in &mut b.grids {
                for (k, v) in g.iter_mut() {
                    match (b.name.as_str(), k.as_str()) {
                        ("linear" | "dynamic" | "int8_gemm", "shape") => {
                            // K = 256 so q4_k (super-blocks of 256) runs too.
                            *v = vec![s("3x256x40"), s("17x256x24")]
                        }
                        ("mixed", "shape") => *v = vec![s("12x64x48")],
                        ("mixed", "elements") => *v = vec![ParamValue::Int(70_001)],
                        (_, "shape") => *v = vec![s("48x256")],
                        ("model", "model") => *v = vec![s("llama-tiny"), s("gpt2-tiny")],
                        ("int8_gemm" | "dynamic", "path") => {
                            *v = ["auto", "avx512_vnni", "avx_vnni", "avx2", "scalar"]
                                .iter()
                                .map(|p| s(p))
                                .collect()
                        }
                        _ => {}
                    }
                }
            }
            for c in expand("quant", b) {
                let expected = expected_skip(&c);
                let mut w = match crate::suites::prepare_standalone(&QuantSuite, &c) {
                    Ok(w) => w,
                    Err(e) => match e.downcast_ref::<SkipCase>() {
                        Some(skip) => {
                            assert_eq!(
                                Some(&skip.0),
                                expected.as_ref(),
                                "{}: skipped for another reason",
                                c.id
                            );
                            eprintln!("SKIPPED {}: {}", c.id, skip.0);
                            continue;
                        }
                        None => panic!("{}: {e:#}", c.id),
                    },
                };
                assert_eq!(expected, None, "{} ran but should be skipped", c.id);
                let v = w.verify().unwrap_or_else(|e| panic!("{}: {e:#}", c.id));
                assert!(v.passed, "{}: {}", c.id, v.detail);
                w.run(2).unwrap();
                let m = w.metrics();
                assert!(m.iter().all(|m| m.value.is_finite()), "{}: {m:?}", c.id);
                if !matches!(b.name.as_str(), "int8_gemm" | "mixed" | "model") {
                    assert!(m.iter().any(|m| m.name == "bits_per_weight"), "{}", c.id);
                }
            }
        }
    }

    #[test]
    fn quantized_linear_is_accurate_and_reports_its_error() {
        let c = test_case(
            "quant",
            "linear",
            &[("format", s("q4_0")), ("shape", s("2x256x64")), ("threads", ParamValue::Int(1))],
        );
        let mut w = crate::suites::prepare_standalone(&QuantSuite, &c).unwrap();
        assert!(w.verify().unwrap().passed);
        let m = w.metrics();
        let get = |n: &str| m.iter().find(|m| m.name == n).unwrap_or_else(|| panic!("{n} missing")).value;
        assert!(get("cosine") > 0.99 && get("cosine") <= 1.0 + 1e-9, "{}", get("cosine"));
        assert!(get("sqnr") > 15.0, "{}", get("sqnr"));
        assert_eq!(get("bits_per_weight"), 4.5);
        assert!(get("speedup_vs_f32") > 0.0);
    }

    #[test]
    fn bad_params_name_the_valid_choices() {
        let err = |c: Case| crate::suites::prepare_standalone(&QuantSuite, &c).err().unwrap().to_string();
        let e = err(test_case("quant", "nope", &[]));
        assert!(e.contains("valid: quantize, dequantize, calibrate"), "{e}");
        let e = err(test_case(
            "quant",
            "quantize",
            &[("format", s("int3")), ("shape", s("8x32")), ("dist", s("normal"))],
        ));
        assert!(e.contains("valid: int8_sym_tensor"), "{e}");
        let e = err(test_case(
            "quant",
            "quantize",
            &[("format", s("q4_0")), ("shape", s("8x32")), ("dist", s("cauchy"))],
        ));
        assert!(e.contains("valid: normal, heavy, outlier"), "{e}");
        let e = err(test_case("quant", "linear", &[("format", s("q4_0")), ("shape", s("1x33x8"))]));
        assert!(e.contains("multiple of 32"), "{e}");
        let e = err(test_case("quant", "linear", &[("format", s("fp8")), ("shape", s("1x32x8"))]));
        assert!(e.contains("valid: f32, f32_gemv, f16"), "{e}");
        let e = err(test_case("quant", "int8_gemm", &[("path", s("amx")), ("shape", s("1x32x8"))]));
        assert!(e.contains("valid: auto, avx512_vnni, avx_vnni, avx2, scalar"), "{e}");
        let e = err(test_case("quant", "model", &[("format", s("q4_0")), ("model", s("gpt5"))]));
        assert!(e.contains("valid models: bert-tiny"), "{e}");
        let e = err(test_case(
            "quant",
            "calibrate",
            &[("method", s("kl")), ("shape", s("8x32")), ("dist", s("normal"))],
        ));
        assert!(e.contains("valid: minmax, percentile, mse"), "{e}");
        let e = err(test_case(
            "quant",
            "mixed",
            &[("op", s("fma")), ("dtype", s("fp8")), ("elements", ParamValue::Int(8))],
        ));
        assert!(e.contains("valid: f16, bf16"), "{e}");
    }
}
