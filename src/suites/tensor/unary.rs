//! Unary elementwise kernels and the vectorisable f32 math they use.
//!
//! `exp`, `ln` and `tanh` are branch-free Cephes-style approximations written
//! so the compiler can vectorise them (std's versions are scalar libm calls).
//! Their accuracy against f64 `std` is checked by the tests below and by every
//! `verify` (relative 1e-5 or better, see [`tolerance`]).

use super::{CHUNK, PAR_MIN, choice, elements};
use crate::kernels::simd_dispatch;
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use crate::util;
use anyhow::Result;
use rayon::prelude::*;

pub(super) const OPS: &[&str] = &["relu", "sigmoid", "tanh", "exp", "log", "sqrt", "gelu"];

/// A unary elementwise operation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum UnOp {
    Relu,
    Sigmoid,
    Tanh,
    Exp,
    Log,
    Sqrt,
    Gelu,
}

const ALL: [UnOp; 7] = [UnOp::Relu, UnOp::Sigmoid, UnOp::Tanh, UnOp::Exp, UnOp::Log, UnOp::Sqrt, UnOp::Gelu];

/// `sqrt(2 / pi)`, the GELU tanh-approximation constant.
const GELU_C: f32 = 0.797_884_6;

/// `e^x`: round-to-nearest range reduction `x = n ln2 + r` (Cody-Waite split
/// of ln2), a degree-6 polynomial on `|r| <= ln2/2`, and `2^n` applied as two
/// exponent-field factors so results overflow to inf and underflow gradually
/// to 0 like the true function. NaN propagates.
#[inline(always)]
pub(crate) fn exp_f32(x: f32) -> f32 {
    let xc = x.clamp(-104.0, 89.0); // NaN-free below: clamp on NaN keeps NaN, handled at the end.
    let xc = if xc.is_nan() { 0.0 } else { xc };
    // Round to nearest via the 1.5 * 2^23 trick (valid for |v| < 2^22).
    let v = xc * std::f32::consts::LOG2_E;
    let n = (v + 12_582_912.0) - 12_582_912.0;
    let r = xc - n * 0.693_359_4 - n * -2.121_944_4e-4;
    let r2 = r * r;
    let p = ((((1.987_569_1e-4 * r + 1.398_2e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 5e-1;
    let y = p * r2 + r + 1.0;
    // SAFETY: n is an integer-valued float in [-150, 129], well inside i32.
    let ni: i32 = unsafe { n.to_int_unchecked() };
    let h = ni >> 1;
    let s1 = f32::from_bits(((h + 127) as u32) << 23);
    let s2 = f32::from_bits(((ni - h + 127) as u32) << 23);
    let e = y * s1 * s2;
    if x.is_nan() { x } else { e }
}

/// Natural logarithm: split `x = m 2^e` with `m` in `[sqrt(1/2), sqrt(2))`,
/// a degree-9 polynomial in `m - 1`, exact handling of 0 (-inf), negatives
/// and NaN (NaN), +inf (+inf) and subnormals (rescaled by 2^23).
#[inline(always)]
pub(crate) fn ln_f32(x: f32) -> f32 {
    let sub = x < f32::MIN_POSITIVE;
    let xs = if sub { x * 8_388_608.0 } else { x };
    let bits = xs.to_bits();
    let mut e = ((bits >> 23) & 0xff) as i32 - 126 - if sub { 23 } else { 0 };
    let mut m = f32::from_bits((bits & 0x007f_ffff) | 0x3f00_0000); // [0.5, 1)
    let small = m < std::f32::consts::FRAC_1_SQRT_2;
    e -= small as i32;
    m = if small { m + m - 1.0 } else { m - 1.0 };
    let ef = e as f32;
    let z = m * m;
    let mut y = ((((((((7.037_683_6e-2 * m - 1.151_461e-1) * m + 1.167_699_9e-1) * m - 1.242_014_1e-1)
        * m
        + 1.424_932_3e-1)
        * m
        - 1.666_805_8e-1)
        * m
        + 2.000_071_4e-1)
        * m
        - 2.499_999_4e-1)
        * m
        + 3.333_333e-1)
        * m
        * z;
    y += -2.121_944_4e-4 * ef;
    y += -0.5 * z;
    let r = m + y + 0.693_359_4 * ef;
    if x == 0.0 {
        f32::NEG_INFINITY
    } else if x == f32::INFINITY {
        x
    } else if x > 0.0 {
        r
    } else {
        f32::NAN
    }
}

/// Hyperbolic tangent: odd polynomial for `|x| < 0.625`, otherwise
/// `1 - 2 / (e^{2|x|} + 1)` with the sign of `x`.
#[inline(always)]
pub(crate) fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    let z = x * x;
    let poly = ((((-5.704_988_7e-3 * z + 2.063_909e-2) * z - 5.373_971_6e-2) * z + 1.333_144_2e-1) * z
        - 3.333_328e-1)
        * z
        * x
        + x;
    let big = (1.0 - 2.0 / (exp_f32(2.0 * a) + 1.0)).copysign(x);
    if a < 0.625 { poly } else { big }
}

/// Logistic sigmoid `1 / (1 + e^-x)`.
#[inline(always)]
pub(crate) fn sigmoid_f32(x: f32) -> f32 {
    1.0 / (1.0 + exp_f32(-x))
}

/// GELU, tanh approximation (GPT-2): `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`,
/// evaluated as the identical `x * sigmoid(2u)`, which is cheaper and keeps
/// relative accuracy for negative `x`.
#[inline(always)]
pub(crate) fn gelu_f32(x: f32) -> f32 {
    let u = GELU_C * (x + 0.044_715 * x * x * x);
    let g = x / (1.0 + exp_f32(-2.0 * u));
    if x == f32::NEG_INFINITY { -0.0 } else { g }
}

simd_dispatch! {
    /// `out[i] = op(x[i])` over equal-length slices (serial).
    pub(crate) fn unary_serial(op: UnOp, out: &mut [f32], x: &[f32]) {
        let x = &x[..out.len()];
        let it = out.iter_mut().zip(x);
        match op {
            UnOp::Relu => it.for_each(|(o, &v)| *o = if v > 0.0 { v } else { 0.0 }),
            UnOp::Sigmoid => it.for_each(|(o, &v)| *o = sigmoid_f32(v)),
            UnOp::Tanh => it.for_each(|(o, &v)| *o = tanh_f32(v)),
            UnOp::Exp => it.for_each(|(o, &v)| *o = exp_f32(v)),
            UnOp::Log => it.for_each(|(o, &v)| *o = ln_f32(v)),
            UnOp::Sqrt => it.for_each(|(o, &v)| *o = v.sqrt()),
            UnOp::Gelu => it.for_each(|(o, &v)| *o = gelu_f32(v)),
        }
    }
}

/// `out = op(x)`, split into `CHUNK`-element rayon tasks when large.
pub(crate) fn unary(op: UnOp, out: &mut [f32], x: &[f32]) {
    assert_eq!(out.len(), x.len(), "unary: length mismatch");
    if out.len() < PAR_MIN {
        unary_serial(op, out, x);
    } else {
        out.par_chunks_mut(CHUNK).zip(x.par_chunks(CHUNK)).for_each(|(o, x)| unary_serial(op, o, x));
    }
}

/// The f64 reference for `op`, from `std` (GELU in its tanh form).
pub(crate) fn reference_f64(op: UnOp, x: f64) -> f64 {
    match op {
        UnOp::Relu => x.max(0.0),
        UnOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        UnOp::Tanh => x.tanh(),
        UnOp::Exp => x.exp(),
        UnOp::Log => x.ln(),
        UnOp::Sqrt => x.sqrt(),
        UnOp::Gelu => {
            0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
        }
    }
}

/// `(atol, rtol)` against the f64 reference rounded to f32. relu and sqrt are
/// exact (sqrt is correctly rounded in IEEE arithmetic); the approximations
/// stay within relative 1e-5 plus an absolute floor near zero or in the
/// subnormal range.
pub(crate) fn tolerance(op: UnOp) -> (f64, f64) {
    match op {
        UnOp::Relu | UnOp::Sqrt => (0.0, 0.0),
        UnOp::Exp => (1e-44, 1e-5),
        UnOp::Log | UnOp::Tanh | UnOp::Sigmoid => (1e-7, 1e-5),
        UnOp::Gelu => (1e-6, 1e-5),
    }
}

/// Benchmark inputs for `op`: normal for relu, uniform on [-10, 10] for the
/// saturating functions, positive for log and sqrt.
fn inputs(op: UnOp, n: usize, seed: u64) -> Vec<f32> {
    match op {
        UnOp::Relu => util::randn(n, seed),
        UnOp::Log | UnOp::Sqrt => util::uniform(n, 1e-3, 100.0, seed),
        _ => util::uniform(n, -10.0, 10.0, seed),
    }
}

struct Unary {
    op: UnOp,
    x: Vec<f32>,
    out: Vec<f32>,
}

pub(crate) fn prepare(case: &Case) -> Result<Box<dyn Workload>> {
    let name = choice(case, "op", OPS)?;
    let op = ALL[OPS.iter().position(|o| *o == name).unwrap_or(0)];
    let n = elements(case)?;
    Ok(Box::new(Unary { op, x: inputs(op, n, super::seed(case)), out: vec![f32::NAN; n] }))
}

/// Checks `out == op(x)` against the f64 reference within [`tolerance`].
fn check(op: UnOp, x: &[f32], out: &[f32]) -> Verification {
    use rayon::prelude::*;
    let want: Vec<f32> = x.par_iter().map(|&v| reference_f64(op, v as f64) as f32).collect();
    let (atol, rtol) = tolerance(op);
    Verification::compare(format!("f64 std {op:?} over all inputs"), out, &want, atol, rtol)
}

impl Workload for Unary {
    fn verify(&mut self) -> Result<Verification> {
        self.out.fill(f32::NAN);
        unary(self.op, &mut self.out, &self.x);
        Ok(check(self.op, &self.x, &self.out))
    }

    fn throughput(&self) -> Vec<Throughput> {
        let n = self.x.len() as f64;
        vec![Throughput::elements(n), Throughput::bytes(8.0 * n)]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            unary(self.op, &mut self.out, &self.x);
            std::hint::black_box(&mut self.out);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dense sweep over the interesting range plus special values.
    fn sweep(lo: f32, hi: f32, n: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..n).map(|i| lo + (hi - lo) * i as f32 / (n - 1) as f32).collect();
        v.extend([0.0, -0.0, 1e-30, -1e-30, 1e-8, -1e-8, 0.624, 0.626, -0.625, 1.0, -1.0]);
        v
    }

    #[test]
    fn approximations_match_f64_std_over_wide_sweeps() {
        for op in ALL {
            let x = match op {
                UnOp::Log | UnOp::Sqrt => {
                    let mut v: Vec<f32> =
                        (0..200_001).map(|i| 10f32.powf(-37.0 + 75.0 * i as f32 / 2e5)).collect();
                    v.extend([1.0, 0.999_999_9, 1.000_000_1, 1e-40, 3e-45, f32::MAX, f32::MIN_POSITIVE]);
                    v
                }
                UnOp::Exp => sweep(-110.0, 89.0, 400_001),
                _ => sweep(-60.0, 60.0, 400_001),
            };
            let mut out = vec![f32::NAN; x.len()];
            unary(op, &mut out, &x);
            let v = check(op, &x, &out);
            assert!(v.passed, "{op:?}: {} (max error {:?})", v.detail, v.max_error);
        }
    }

    #[test]
    fn special_values() {
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(89.0), f32::INFINITY);
        assert_eq!(exp_f32(0.0), 1.0);
        assert!(exp_f32(f32::NAN).is_nan());
        assert!((exp_f32(88.7) as f64 / 88.7f64.exp() - 1.0).abs() < 1e-5);
        assert_eq!(ln_f32(0.0), f32::NEG_INFINITY);
        assert_eq!(ln_f32(1.0), 0.0);
        assert_eq!(ln_f32(f32::INFINITY), f32::INFINITY);
        assert!(ln_f32(-1.0).is_nan() && ln_f32(f32::NAN).is_nan());
        assert_eq!(tanh_f32(f32::INFINITY), 1.0);
        assert_eq!(tanh_f32(f32::NEG_INFINITY), -1.0);
        assert!(tanh_f32(f32::NAN).is_nan());
        assert_eq!(sigmoid_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(sigmoid_f32(f32::INFINITY), 1.0);
        assert_eq!(gelu_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(gelu_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(gelu_f32(0.0), 0.0);
    }

    #[test]
    fn parallel_path_agrees_with_serial_on_odd_length() {
        let n = PAR_MIN + 12_345;
        let x = util::uniform(n, -10.0, 10.0, 5);
        for op in ALL {
            let mut par = vec![f32::NAN; n];
            unary(op, &mut par, &x);
            let mut ser = vec![f32::NAN; n];
            unary_serial(op, &mut ser, &x);
            assert_eq!(
                par.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                ser.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn a_perturbed_result_fails_verification() {
        let x = util::uniform(37 * 53, -10.0, 10.0, 6);
        let mut out = vec![0.0; x.len()];
        unary(UnOp::Exp, &mut out, &x);
        assert!(check(UnOp::Exp, &x, &out).passed);
        out[1000] *= 1.0 + 1e-4;
        assert!(!check(UnOp::Exp, &x, &out).passed);
    }
}
