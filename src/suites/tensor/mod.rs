//! The tensor suite: core tensor operations on the CPU and on CUDA GPUs.
//!
//! Benchmarks (see `suites/tensor.toml` for grids and how work is counted):
//!
//! | benchmark      | file                 | ops / params                                        |
//! |----------------|----------------------|-----------------------------------------------------|
//! | `creation`     | `creation.rs`        | zeros, ones, randn                                  |
//! | `binary`       | `elementwise.rs`     | add, sub, mul, div, broadcast_add                   |
//! | `unary`        | `unary.rs`           | relu, sigmoid, tanh, exp, log, sqrt, gelu           |
//! | `reduction`    | `reduction.rs`       | sum, mean, max, argmax, softmax, layernorm          |
//! | `transpose`, `reshape`, `slice`, `concat` | `manipulation.rs` | materialised copies and views |
//! | `matmul`, `bmm`| `matmul.rs`          | matrixmultiply / gemm / tfbench, 1 or all threads   |
//! | `half_convert`, `half_add` | `half_precision.rs` | f16 / bf16 via `kernels::quant::halfs`   |
//! | `gpu_gemm`, `gpu_bmm`, `transfer`, `launch` | `gpu_only.rs` | CUDA only (cuBLAS, copies, launches) |
//!
//! creation, binary, unary and reduction also run on `cuda:N`
//! ([`Suite::devices`]): the same cases with `device=cuda:N`. For a case
//! off the CPU, each benchmark's file describes its work once
//! (`describe`: inputs, work counts, the check against its reference) in
//! the words of [`crate::backend::ops`], and the case's backend realises it
//! ([`crate::backend::ops::realise`]; CUDA's is `backend/cuda/tensor/`, on
//! tfbench's NVRTC kernels and cuBLAS). No device code lives here.
//!
//! Every workload verifies its own kernel (the code path `run` times) against
//! an independent naive reference from `reference.rs`.
//!
//! Elementwise kernels are written as plain zips over equal-length slices so
//! they auto-vectorise; the compute-heavy ones are compiled three times
//! (AVX-512, AVX2+FMA, baseline) and picked at run time by [`simd_dispatch`],
//! since the crate itself is built for baseline x86-64.

use crate::backend::ops::{self, Output, TensorWork};
use crate::backend::{Device, DeviceKind};
use crate::plan::Case;
use crate::suites::{
    Limit, ParamRule, Suite, TargetMatch, TargetSpec, ThroughputKind, Verification, Workload, skip,
};
use anyhow::{Result, bail};
use gpu_only::GPU_ONLY;

mod creation;
#[cfg(test)]
mod device_tests;
mod elementwise;
mod gpu_only;
mod half_precision;
mod manipulation;
mod matmul;
mod reduction;
mod reference;
mod unary;

/// Core tensor operations on the CPU and on CUDA GPUs.
pub struct TensorSuite;

/// Benchmarks of `suites/tensor.toml`, in file order; `prepare` handles each.
pub const BENCHMARKS: &[&str] = &[
    "creation",
    "binary",
    "unary",
    "reduction",
    "transpose",
    "reshape",
    "slice",
    "concat",
    "matmul",
    "bmm",
    "half_convert",
    "half_add",
    "gpu_gemm",
    "gpu_bmm",
    "transfer",
    "launch",
];

/// Benchmarks that run on the CPU and on CUDA GPUs (same grids and ids,
/// `device=cuda:N` added on the GPU).
const CPU_AND_CUDA: &[DeviceKind] = &[DeviceKind::Cpu, DeviceKind::Cuda];
/// Benchmarks of GPU work only ([`GPU_ONLY`]).
const CUDA_ONLY: &[DeviceKind] = &[DeviceKind::Cuda];

impl Suite for TensorSuite {
    fn name(&self) -> &'static str {
        "tensor"
    }
    fn describe(&self) -> &'static str {
        "Core tensor operations: creation, elementwise, reductions, manipulation, matmul, f16/bf16; on CUDA also cuBLAS GEMMs, transfers, launches"
    }
    fn spec_toml(&self) -> &'static str {
        include_str!("../../../suites/tensor.toml")
    }
    fn benchmarks(&self) -> Vec<&'static str> {
        BENCHMARKS.to_vec()
    }
    fn targets(&self) -> Vec<TargetSpec> {
        vec![
            TargetSpec {
                name: "f32 add, 16M elements, >= 75% of STREAM triad (12 bytes/element)",
                case_pattern: r"^tensor/binary/op=add,shape=4096x4096$",
                matching: TargetMatch::Fastest,
                kind: ThroughputKind::Bytes,
                limit: Limit::TriadAllThreads,
                required: 0.75,
            },
            TargetSpec {
                name: "best f32 GEMM at 1024^3 on all threads, >= 80% of peak FMA",
                case_pattern: r"^tensor/matmul/impl=[a-z]+,shape=1024x1024x1024,threads=all$",
                matching: TargetMatch::Fastest,
                kind: ThroughputKind::Flops,
                limit: Limit::PeakFlopsAllCores,
                required: 0.8,
            },
        ]
    }
    fn param_rule(&self, benchmark: &str, key: &str) -> Option<ParamRule> {
        Some(match (benchmark, key) {
            ("creation", "op") => ParamRule::OneOf(creation::OPS),
            ("binary", "op") => ParamRule::OneOf(elementwise::OPS),
            ("unary", "op") => ParamRule::OneOf(unary::OPS),
            ("reduction", "op") => ParamRule::OneOf(reduction::OPS),
            ("half_convert", "op") => ParamRule::OneOf(half_precision::CONVERSIONS),
            ("half_add", "dtype") => ParamRule::OneOf(half_precision::HALF_DTYPES),
            ("gpu_gemm" | "gpu_bmm", "dtype") => ParamRule::OneOf(ops::DTYPES),
            ("gpu_gemm", "shape") => ParamRule::Shape("MxKxN"),
            ("gpu_bmm", "shape") => ParamRule::Shape("BATCHxMxKxN"),
            ("transfer", "direction") => ParamRule::OneOf(ops::DIRECTIONS),
            ("transfer", "memory") => ParamRule::OneOf(ops::MEMORY),
            ("transfer", "bytes") => ParamRule::POSITIVE,
            ("launch", "mode") => ParamRule::OneOf(ops::LAUNCH_MODES),
            ("reshape", "layout") => ParamRule::OneOf(manipulation::LAYOUTS),
            ("slice", "region") => ParamRule::OneOf(manipulation::REGIONS),
            ("concat", "axis") => ParamRule::Int { min: 0, max: 1 },
            ("matmul" | "bmm", "impl") => ParamRule::OneOf(matmul::IMPLS),
            ("matmul", "shape") => ParamRule::Shape("MxKxN"),
            ("bmm", "shape") => ParamRule::Shape("BATCHxMxKxN"),
            (_, "shape") => ParamRule::Shape("ROWSxCOLS"),
            (_, "elements") => ParamRule::POSITIVE,
            (_, "threads") => ParamRule::Threads,
            _ => return None,
        })
    }
    fn devices(&self, benchmark: &str) -> &'static [DeviceKind] {
        match benchmark {
            "creation" | "binary" | "unary" | "reduction" => CPU_AND_CUDA,
            b if GPU_ONLY.contains(&b) => CUDA_ONLY,
            _ => crate::backend::CPU_ONLY,
        }
    }
    fn prepare(&self, case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
        if case.device != Device::Cpu || GPU_ONLY.contains(&case.benchmark.as_str()) {
            return prepare_on_device(case);
        }
        match case.benchmark.as_str() {
            "creation" => creation::prepare(case),
            "binary" => elementwise::prepare(case),
            "unary" => unary::prepare(case),
            "reduction" => reduction::prepare(case),
            "transpose" => manipulation::prepare_transpose(case),
            "reshape" => manipulation::prepare_reshape(case),
            "slice" => manipulation::prepare_slice(case),
            "concat" => manipulation::prepare_concat(case),
            "matmul" => matmul::prepare_matmul(case, ctx),
            "bmm" => matmul::prepare_bmm(case, ctx),
            "half_convert" => half_precision::prepare_convert(case),
            "half_add" => half_precision::prepare_add(case),
            other => bail!("tensor suite has no benchmark `{other}`; valid: {}", BENCHMARKS.join(", ")),
        }
    }
}

/// A case off the CPU: described once (its benchmark's `describe`) and
/// realised by the case's backend; a device that is not there is a skip
/// with its backend's reason, before any input is drawn.
fn prepare_on_device(case: &Case) -> Result<Box<dyn Workload>> {
    if case.device == Device::Cpu {
        bail!("case {}: `{}` runs on CUDA GPUs only (--device cuda)", case.id, case.benchmark);
    }
    crate::backend::of(case.device.kind()).availability(case.device).map_err(skip)?;
    ops::realise(case.device, describe(case)?)
}

/// The case's work in the words of [`crate::backend::ops`].
fn describe(case: &Case) -> Result<TensorWork> {
    match case.benchmark.as_str() {
        "creation" => creation::describe(case),
        "binary" => elementwise::describe(case),
        "unary" => unary::describe(case),
        "reduction" => reduction::describe(case),
        b if GPU_ONLY.contains(&b) => gpu_only::describe(case),
        other => bail!(
            "tensor/{other} runs on the CPU only; on {}: creation, binary, unary, reduction, {}",
            case.device,
            GPU_ONLY.join(", ")
        ),
    }
}

/// `check(values)` of an output that must be values; any other output
/// (a backend answering with the wrong kind) fails the check.
fn on_values(out: Output<'_>, check: impl FnOnce(&[f32]) -> Verification) -> Verification {
    match out {
        Output::Values(v) => check(v),
        other => {
            Verification::check("the output values", false, format!("the device returned {}", other.kind()))
        }
    }
}

/// Slices shorter than this run serially: below ~100K elements rayon's
/// fork/join overhead is comparable to the kernel itself.
pub(crate) const PAR_MIN: usize = 1 << 17;

/// Elements per rayon task for parallel elementwise kernels (256 KiB of f32).
pub(crate) const CHUNK: usize = 1 << 16;

// Parameter helpers and the CPU execution context live in neutral places,
// shared with the other suites.
pub(crate) use super::common::{choice, elements, seed, shape2};
pub(crate) use crate::backend::cpu::install;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::ParamValue;
    use crate::plan::{SuiteSpec, expand};
    use std::collections::BTreeMap;

    fn spec() -> SuiteSpec {
        SuiteSpec::parse("tensor", TensorSuite.spec_toml()).unwrap()
    }

    /// The skip reason `case` must carry on this machine, derived from what
    /// it has (OpenBLAS loadable, tfbench's AVX-512 GEMM usable under the
    /// ISA cap), or `None` when it must run.
    fn expected_skip(case: &Case) -> Option<String> {
        let imp = match case.params.get("impl") {
            Some(ParamValue::Str(s)) => Some(s.as_str()),
            _ => None,
        };
        match imp {
            Some("openblas") => {
                crate::kernels::openblas::load().err().map(|why| format!("impl=openblas: {why}"))
            }
            Some("tfbench") => crate::kernels::sgemm::unavailable_reason()
                .map(|why| format!("impl=tfbench needs AVX2 and FMA (or AVX-512F): {why}")),
            Some(name @ "tfbench-packed") => crate::isa::unavailable(&crate::kernels::sgemm::FEATURES)
                .map(|why| format!("impl={name} needs AVX-512F: {why}")),
            _ => None,
        }
    }

    /// Prepares `case`; `None` (the reason printed) when it is skipped, which
    /// must be exactly for the reason [`expected_skip`] derives, so an
    /// absent OpenBLAS or a CPU without AVX-512 skips instead of failing,
    /// and nothing else does.
    fn prepare_or_skip(case: &Case) -> Option<Box<dyn Workload>> {
        let expected = expected_skip(case);
        match crate::suites::prepare_standalone(&TensorSuite, case) {
            Ok(w) => {
                assert_eq!(expected, None, "{} ran but should be skipped", case.id);
                Some(w)
            }
            Err(e) => match e.downcast_ref::<crate::suites::SkipCase>() {
                Some(skip) => {
                    assert_eq!(Some(&skip.0), expected.as_ref(), "{}: skipped for another reason", case.id);
                    eprintln!("SKIPPED {}: {}", case.id, skip.0);
                    None
                }
                None => panic!("{}: {e:#}", case.id),
            },
        }
    }

    /// Rough size of a case: elements touched, or M*K*N for a matmul.
    fn size(case: &Case) -> usize {
        let mut n = 1usize;
        if let Ok(e) = case.usize("elements") {
            n = n.max(e);
        }
        if let Ok(s) = case.shape("shape") {
            n = n.max(s.iter().product());
        }
        n
    }

    #[test]
    fn every_target_matches_a_default_case_with_that_throughput() {
        for t in TensorSuite.targets() {
            let re = regex::Regex::new(t.case_pattern).unwrap();
            let cases: Vec<Case> = spec()
                .benchmarks
                .iter()
                .flat_map(|b| expand("tensor", b))
                .filter(|c| re.is_match(&c.id))
                .collect();
            assert!(!cases.is_empty(), "{}: no case matches", t.name);
            for c in cases {
                // Same case at a tiny size: the declared kinds do not depend on size.
                let mut params = c.params.clone();
                let tiny = if c.benchmark == "matmul" { "8x8x8" } else { "8x8" };
                params.insert("shape".into(), ParamValue::Str(tiny.into()));
                let Some(w) = prepare_or_skip(&Case::new("tensor", &c.benchmark, params)) else { continue };
                assert!(w.throughput().iter().any(|x| x.kind == t.kind), "{}", c.id);
            }
        }
    }

    #[test]
    fn default_grid_cases_below_size_limit_prepare_and_verify() {
        let mut checked = 0;
        let mut total = 0;
        for b in spec().benchmarks.into_iter().filter(|b| !GPU_ONLY.contains(&b.name.as_str())) {
            for case in expand("tensor", &b) {
                total += 1;
                if size(&case) > 1 << 21 {
                    continue;
                }
                let Some(mut w) = prepare_or_skip(&case) else { continue };
                let v = w.verify().unwrap_or_else(|e| panic!("{}: {e:#}", case.id));
                assert!(v.passed, "{}: {} {}", case.id, v.reference, v.detail);
                assert!(!w.throughput().is_empty(), "{}", case.id);
                w.run(1).unwrap();
                checked += 1;
            }
        }
        assert!(total > 100, "only {total} cases");
        assert!(checked >= 40, "only {checked} of {total} cases were small enough to check");
    }

    /// Every benchmark, with every value of its non-size parameters, on small sizes.
    #[test]
    fn every_benchmark_and_op_prepares_verifies_and_runs_on_small_params() {
        small_params_prepare_verify_and_run();
    }

    /// The same under every lower ISA cap, so the AVX2 and portable
    /// fallbacks (transpose without AVX blocks, the GEMMs without tfbench's
    /// AVX-512 kernel, the f16/bf16 conversions) are verified on any machine;
    /// `impl=tfbench` must then be skipped with the cap's reason.
    #[test]
    fn every_benchmark_verifies_under_every_isa_cap() {
        for level in [crate::isa::IsaLevel::Scalar, crate::isa::IsaLevel::Avx2, crate::isa::IsaLevel::Avx512]
        {
            crate::isa::with_cap(level, small_params_prepare_verify_and_run);
        }
    }

    fn small_params_prepare_verify_and_run() {
        let small: BTreeMap<&str, Vec<ParamValue>> = [
            ("elements", vec![ParamValue::Int(1000), ParamValue::Int(PAR_MIN as i64 + 17)]),
            ("shape", vec![ParamValue::Str("37x53".into()), ParamValue::Str("300x513".into())]),
        ]
        .into_iter()
        .collect();
        let small_mm = vec![ParamValue::Str("7x13x5".into()), ParamValue::Str("65x33x17".into())];
        let small_bmm = vec![ParamValue::Str("3x7x13x5".into())];
        let mut spec = spec();
        spec.benchmarks.retain(|b| !GPU_ONLY.contains(&b.name.as_str()));
        for b in &mut spec.benchmarks {
            for g in &mut b.grids {
                for (k, v) in g.iter_mut() {
                    if b.name == "matmul" && k == "shape" {
                        *v = small_mm.clone();
                    } else if b.name == "bmm" && k == "shape" {
                        *v = small_bmm.clone();
                    } else if let Some(s) = small.get(k.as_str()) {
                        *v = s.clone();
                    }
                }
            }
            for case in expand("tensor", b) {
                let Some(mut w) = prepare_or_skip(&case) else { continue };
                let v = w.verify().unwrap_or_else(|e| panic!("{}: {e:#}", case.id));
                assert!(v.passed, "{}: {} {}", case.id, v.reference, v.detail);
                w.run(2).unwrap();
            }
        }
    }

    /// Not a test: times default-grid cases whose id matches the regex in
    /// `TFBENCH_PROBE` (default: the 16M add) and prints their rates, with a
    /// STREAM-triad-like reference kernel for bandwidth comparison.
    /// `TFBENCH_PROBE=binary cargo test --release --lib tensor::tests::probe -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn probe() {
        use std::time::Instant;
        let time = |f: &mut dyn FnMut(u64), work: f64| {
            let mut iters = 1u64;
            loop {
                let t = Instant::now();
                f(iters);
                if t.elapsed().as_secs_f64() > 0.05 {
                    break;
                }
                iters *= 2;
            }
            let mut best = f64::MAX;
            for _ in 0..7 {
                let t = Instant::now();
                f(iters);
                best = best.min(t.elapsed().as_secs_f64() / iters as f64);
            }
            work / best
        };
        let n = 1 << 24;
        let (a, b) = (crate::util::randn(n, 1), crate::util::randn(n, 2));
        let mut c = vec![0.0f32; n];
        use rayon::prelude::*;
        let triad = time(
            &mut |it| {
                for _ in 0..it {
                    c.par_chunks_mut(CHUNK).zip(a.par_chunks(CHUNK)).zip(b.par_chunks(CHUNK)).for_each(
                        |((c, a), b)| c.iter_mut().zip(a).zip(b).for_each(|((c, &a), &b)| *c = a + 3.0 * b),
                    );
                    std::hint::black_box(&mut c);
                }
            },
            12.0 * n as f64,
        );
        println!("triad-like 16M (12 B/elem): {:.1} GB/s", triad / 1e9);
        let re =
            regex::Regex::new(&std::env::var("TFBENCH_PROBE").unwrap_or("binary/op=add,shape=4096".into()))
                .unwrap();
        for b in spec().benchmarks {
            for case in expand("tensor", &b).into_iter().filter(|c| re.is_match(&c.id)) {
                let mut w = crate::suites::prepare_standalone(&TensorSuite, &case).unwrap();
                assert!(w.verify().unwrap().passed, "{}", case.id);
                let tp = w.throughput();
                let per_sec = time(&mut |it| w.run(it).unwrap(), 1.0);
                let rates: Vec<String> = tp
                    .iter()
                    .map(|t| format!("{:.2} G{}", t.per_iteration * per_sec / 1e9, t.kind.rate_unit()))
                    .collect();
                println!("{}: {}", case.id, rates.join(", "));
            }
        }
    }

    #[test]
    fn binary_unary_and_reduction_cases_copy_themselves_and_every_copy_verifies() {
        let cases: Vec<(&str, Vec<(&str, ParamValue)>)> = vec![
            (
                "binary",
                vec![("op", ParamValue::Str("div".into())), ("shape", ParamValue::Str("64x48".into()))],
            ),
            ("unary", vec![("op", ParamValue::Str("gelu".into())), ("elements", ParamValue::Int(3001))]),
            (
                "reduction",
                vec![("op", ParamValue::Str("layernorm".into())), ("shape", ParamValue::Str("33x70".into()))],
            ),
        ];
        for (bench, params) in cases {
            let p: BTreeMap<String, ParamValue> =
                params.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            let case = Case::new("tensor", bench, p);
            let first = crate::suites::prepare_standalone(&TensorSuite, &case).unwrap();
            let mut copy = first.replicate().unwrap_or_else(|| panic!("{bench} copies itself"));
            assert_eq!(copy.throughput(), first.throughput(), "{bench}");
            let v = copy.verify().unwrap();
            assert!(v.passed, "{bench}: {v:?}");
            copy.run(2).unwrap();
        }
    }

    #[test]
    fn unknown_benchmarks_and_bad_params_name_the_valid_choices() {
        let case = Case::new("tensor", "nope", BTreeMap::new());
        let err = crate::suites::prepare_standalone(&TensorSuite, &case).err().unwrap().to_string();
        assert!(err.contains("valid: creation, binary"), "{err}");
        let mut p = BTreeMap::new();
        p.insert("op".to_string(), ParamValue::Str("cube".into()));
        p.insert("elements".to_string(), ParamValue::Int(10));
        let err = crate::suites::prepare_standalone(&TensorSuite, &Case::new("tensor", "unary", p))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("valid: relu, sigmoid"), "{err}");
        let mut p = BTreeMap::new();
        p.insert("impl".to_string(), ParamValue::Str("blas".into()));
        p.insert("shape".to_string(), ParamValue::Str("2x2x2".into()));
        p.insert("threads".to_string(), ParamValue::Int(1));
        let err = crate::suites::prepare_standalone(&TensorSuite, &Case::new("tensor", "matmul", p))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("valid: matrixmultiply, gemm"), "{err}");
    }
}
