//! The sci suite: scientific kernels, each verified against an f64
//! reference before it is timed.
//!
//! | benchmark        | file        | what                                                  |
//! |------------------|-------------|-------------------------------------------------------|
//! | `fft`            | `fft.rs`    | complex and real FFTs, 1-D/2-D/3-D, via rustfft/realfft |
//! | `fft_plan`       | `fft.rs`    | making a 1-D plan (fresh planners)                     |
//! | `sparse_convert` | `sparse.rs` | COO to CSR and CSR to CSC, own kernels vs sprs         |
//! | `spmv`, `spmm`   | `sparse.rs` | sparse times dense vector / 64 columns, own vs sprs    |
//!
//! The kernels live in [`crate::kernels::fft`] and [`crate::kernels::sparse`].

use crate::plan::Case;
use crate::suites::{ParamRule, Suite, Workload};
use anyhow::Result;

mod fft;
mod sparse;

/// FFTs and sparse matrices.
pub struct SciSuite;

/// Benchmarks of `suites/sci.toml`, in file order, with what prepares each.
const BENCHMARKS: crate::suites::Benchmarks = &[
    ("fft", fft::prepare),
    ("fft_plan", |c, _| fft::prepare_plan(c)),
    ("sparse_convert", sparse::prepare_convert),
    ("spmv", |c, x| sparse::prepare_product(c, x, 1)),
    ("spmm", |c, x| sparse::prepare_product(c, x, sparse::SPMM_COLS)),
];

impl Suite for SciSuite {
    fn name(&self) -> &'static str {
        "sci"
    }
    fn describe(&self) -> &'static str {
        "Scientific kernels: complex/real FFT 1-3D (rustfft, realfft; benchFFT FLOP counts) and plan \
         making; sparse CSR/CSC/COO conversion, SpMV and SpMM, own parallel kernel vs sprs"
    }
    fn spec_toml(&self) -> &'static str {
        include_str!("../../../suites/sci.toml")
    }
    fn benchmarks(&self) -> Vec<&'static str> {
        crate::suites::names(BENCHMARKS)
    }
    fn param_rule(&self, benchmark: &str, key: &str) -> Option<ParamRule> {
        Some(match (benchmark, key) {
            (_, "kind") => ParamRule::OneOf(fft::KINDS),
            ("fft", "shape") => ParamRule::Check(check_fft_shape),
            ("fft_plan" | "fft", "size") => ParamRule::Check(check_fft_size),
            ("fft", "algo") => ParamRule::OneOf(fft::ALGOS),
            (_, "impl") => ParamRule::OneOf(sparse::IMPLS),
            (_, "op") => ParamRule::OneOf(sparse::CONVERSIONS),
            (_, "pattern") => ParamRule::OneOf(crate::kernels::sparse::PATTERNS),
            (_, "density") => ParamRule::Check(sparse::check_density),
            (_, "n") => ParamRule::Int { min: 1, max: 1 << 31 },
            (_, "threads") => ParamRule::Threads,
            _ => return None,
        })
    }
    fn prepare(&self, case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
        crate::suites::dispatch(self.name(), BENCHMARKS, case, ctx)
    }
}

/// An FFT shape: 1 to 3 positive extents joined by `x` (a bare length is
/// an integer parameter).
fn check_fft_shape(v: &crate::plan::ParamValue) -> Result<(), String> {
    match crate::plan::parse_shape(&v.to_string()) {
        Ok(d)
            if !d.is_empty()
                && d.len() <= 3
                && !matches!(v, crate::plan::ParamValue::Bool(_) | crate::plan::ParamValue::Float(_)) =>
        {
            Ok(())
        }
        _ => Err("must be 1 to 3 positive extents joined by x, e.g. 1048576 or 1024x1024".into()),
    }
}

/// A 1-D transform length.
fn check_fft_size(v: &crate::plan::ParamValue) -> Result<(), String> {
    match v {
        crate::plan::ParamValue::Int(n) if *n >= 1 && *n <= 1 << 28 => Ok(()),
        _ => Err("must be a transform length from 1 to 2^28".into()),
    }
}

/// A reproducible seed derived from the case id.
pub(crate) fn seed(case: &Case) -> u64 {
    crate::suites::common::seed(case)
}

/// The string parameter `key`, which must be one of `valid`.
pub(crate) fn choice<'a>(case: &Case, key: &str, valid: &[&'a str]) -> Result<&'a str> {
    crate::suites::common::choice(case, key, valid)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::ParamValue;
    use std::collections::BTreeMap;

    fn case(bench: &str, params: &[(&str, ParamValue)]) -> Case {
        let p: BTreeMap<String, ParamValue> =
            params.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        Case::new("sci", bench, p)
    }
    fn s(v: &str) -> ParamValue {
        ParamValue::Str(v.into())
    }

    #[test]
    fn tiny_cases_of_every_benchmark_verify_and_run() {
        let (i, f) = (ParamValue::Int, ParamValue::Float);
        let mut cases = Vec::new();
        // Full-DFT sizes and Parseval/bin/round-trip sizes, 1-D to 3-D.
        for shape in [s("1000"), s("12x20"), s("4x6x5"), i(8192), i(3 * 4096), s("96x96"), s("16x20x18")] {
            for kind in ["c2c", "r2c"] {
                cases.push(case("fft", &[("kind", s(kind)), ("shape", shape.clone()), ("threads", i(2))]));
            }
        }
        // Both algorithms pinned, on a power of two and on 3 x 2^12.
        for size in [1 << 14, 3 << 12] {
            for algo in ["rustfft", "four_step"] {
                cases.push(case(
                    "fft",
                    &[("kind", s("c2c")), ("size", i(size)), ("algo", s(algo)), ("threads", i(2))],
                ));
            }
        }
        cases.push(case("fft_plan", &[("kind", s("c2c")), ("size", i(1009))]));
        cases.push(case("fft_plan", &[("kind", s("r2c")), ("size", i(6144))]));
        for pattern in ["random", "banded", "powerlaw"] {
            let m = |b: &str, extra: (&str, ParamValue)| {
                case(
                    b,
                    &[("pattern", s(pattern)), ("density", f(0.02)), ("n", i(500)), ("threads", i(2)), extra],
                )
            };
            for imp in ["own", "sprs"] {
                cases.push(m("spmv", ("impl", s(imp))));
                cases.push(m("spmm", ("impl", s(imp))));
                for op in ["coo_to_csr", "csr_to_csc"] {
                    cases.push(case(
                        "sparse_convert",
                        &[
                            ("op", s(op)),
                            ("impl", s(imp)),
                            ("pattern", s(pattern)),
                            ("density", f(0.02)),
                            ("n", i(500)),
                        ],
                    ));
                }
            }
        }
        for c in cases {
            let mut w = crate::suites::prepare_standalone(&SciSuite, &c)
                .unwrap_or_else(|e| panic!("{}: {e:#}", c.id));
            let v = w.verify().unwrap();
            assert!(v.passed, "{}: {} {}", c.id, v.reference, v.detail);
            w.run(2).unwrap();
        }
    }

    #[test]
    fn densities_outside_zero_one_and_bad_shapes_are_refused() {
        let rule = |b, k| SciSuite.param_rule(b, k).unwrap();
        for bad in
            [ParamValue::Float(0.0), ParamValue::Float(1.5), ParamValue::Int(2), ParamValue::Float(-0.1)]
        {
            assert!(rule("spmv", "density").check(&bad).unwrap_err().contains("(0, 1]"), "{bad}");
        }
        assert!(rule("spmv", "density").check(&ParamValue::Float(0.001)).is_ok());
        assert!(rule("fft", "shape").check(&s("2x3x4x5")).is_err());
        assert!(rule("fft", "shape").check(&ParamValue::Int(1024)).is_ok());
        assert!(rule("fft_plan", "size").check(&s("1024")).is_err());
    }
}
