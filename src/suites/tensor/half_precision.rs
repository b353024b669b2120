//! Half precision (f16, bf16): bulk conversions and an elementwise add
//! computed in f32 and stored back, through the shared converters of
//! [`crate::kernels::quant::halfs`] (AVX-512, else AVX2 + F16C, else the
//! `half` crate's slice conversions; bit for bit as `half`, under the ISA
//! cap). `half`'s own bf16 slice conversion is a scalar loop on every CPU,
//! which left `f32_to_bf16` and the bf16 add scalar on AVX2.

use super::{CHUNK, PAR_MIN, choice, elements};
use crate::kernels::quant::halfs;
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use crate::util;
use anyhow::Result;
use half::{bf16, f16};
use rayon::prelude::*;

pub(super) const CONVERSIONS: &[&str] = &["f32_to_f16", "f16_to_f32", "f32_to_bf16", "bf16_to_f32"];

/// Applies `f` to matching `CHUNK`s of `dst` and `src`, in parallel when large.
fn chunked<D: Send, S: Sync>(dst: &mut [D], src: &[S], f: impl Fn(&mut [D], &[S]) + Sync) {
    assert_eq!(dst.len(), src.len());
    if dst.len() < PAR_MIN {
        f(dst, src);
    } else {
        dst.par_chunks_mut(CHUNK).zip(src.par_chunks(CHUNK)).for_each(|(d, s)| f(d, s));
    }
}

/// f32 -> f16 (round to nearest even).
pub(crate) fn to_f16(dst: &mut [f16], src: &[f32]) {
    chunked(dst, src, |d, s| halfs::f32_to_f16(s, d));
}

/// f32 -> bf16 (round to nearest even).
pub(crate) fn to_bf16(dst: &mut [bf16], src: &[f32]) {
    chunked(dst, src, |d, s| halfs::f32_to_bf16(s, d));
}

/// f16 -> f32 (exact).
pub(crate) fn from_f16(dst: &mut [f32], src: &[f16]) {
    chunked(dst, src, |d, s| halfs::f16_to_f32(s, d));
}

/// bf16 -> f32 (exact).
pub(crate) fn from_bf16(dst: &mut [f32], src: &[bf16]) {
    chunked(dst, src, |d, s| halfs::bf16_to_f32(s, d));
}

/// A half type the add widens and narrows with the shared converters.
pub(crate) trait Half: Copy + Send + Sync {
    /// `out[i] = h[i]` as f32.
    fn widen(h: &[Self], out: &mut [f32]);
    /// `out[i] = x[i]` rounded to nearest even.
    fn narrow(x: &[f32], out: &mut [Self]);
}

impl Half for f16 {
    fn widen(h: &[Self], out: &mut [f32]) {
        halfs::f16_to_f32(h, out)
    }
    fn narrow(x: &[f32], out: &mut [Self]) {
        halfs::f32_to_f16(x, out)
    }
}

impl Half for bf16 {
    fn widen(h: &[Self], out: &mut [f32]) {
        halfs::bf16_to_f32(h, out)
    }
    fn narrow(x: &[f32], out: &mut [Self]) {
        halfs::f32_to_bf16(x, out)
    }
}

/// Elements converted to f32 per step of the half add (stack buffers).
const STEP: usize = 512;

/// `out = a + b` for half types: each `STEP` of both inputs widened to f32
/// with the slice converters, added in f32, and rounded back (nearest even).
fn add_serial<T: Half>(out: &mut [T], a: &[T], b: &[T]) {
    let (mut fa, mut fb) = ([0.0f32; STEP], [0.0f32; STEP]);
    for ((o, a), b) in out.chunks_mut(STEP).zip(a.chunks(STEP)).zip(b.chunks(STEP)) {
        let n = o.len();
        T::widen(a, &mut fa[..n]);
        T::widen(b, &mut fb[..n]);
        fa[..n].iter_mut().zip(&fb[..n]).for_each(|(x, &y)| *x += y);
        T::narrow(&fa[..n], o);
    }
}

/// Half-precision `out = a + b`, parallel over `CHUNK`s when large.
pub(crate) fn add<T: Half>(out: &mut [T], a: &[T], b: &[T]) {
    assert!(a.len() == out.len() && b.len() == out.len(), "half add: length mismatch");
    if out.len() < PAR_MIN {
        add_serial(out, a, b);
    } else {
        out.par_chunks_mut(CHUNK)
            .zip(a.par_chunks(CHUNK))
            .zip(b.par_chunks(CHUNK))
            .for_each(|((o, a), b)| add_serial(o, a, b));
    }
}

/// Naive decoding of f16 bits (sign, 5-bit exponent, 10-bit mantissa) into f64.
pub(crate) fn f16_bits_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let e = ((bits >> 10) & 0x1f) as i32;
    let m = (bits & 0x3ff) as f64;
    sign * match e {
        0 => m * 2f64.powi(-24),
        31 if m == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        _ => (1.0 + m / 1024.0) * 2f64.powi(e - 15),
    }
}

/// Hand-picked f16 rounding cases `(input, expected bits)`: exact ties round to
/// the even neighbour, including at overflow and in the subnormal range.
pub(crate) const F16_TIES: &[(f32, u16)] = &[
    (1.0 + 1.0 / 2048.0, 0x3c00),         // tie between 1 and 1+2^-10 -> 1 (even)
    (1.0 + 3.0 / 2048.0, 0x3c02),         // tie between 1+2^-10 and 1+2^-9 -> even mantissa 2
    (-(1.0 + 1.0 / 2048.0), 0xbc00),      // sign preserved
    (2049.0, 0x6800),                     // tie between 2048 and 2050 -> 2048
    (2051.0, 0x6802),                     // tie between 2050 and 2052 -> 2052
    (65504.0, 0x7bff),                    // largest finite
    (65519.99, 0x7bff),                   // just below the overflow tie
    (65520.0, 0x7c00),                    // tie between 65504 and 65536 -> inf
    (5.960_464_5e-8 / 2.0, 0x0000),       // half the smallest subnormal -> 0
    (3.0 * 5.960_464_5e-8 / 2.0, 0x0002), // 1.5 ulp subnormal -> 2 ulp (even)
    (f32::INFINITY, 0x7c00),
    (0.1, 0x2e66),
];

/// Hand-picked bf16 rounding cases `(input, expected bits)`.
pub(crate) const BF16_TIES: &[(f32, u16)] = &[
    (1.0 + 1.0 / 256.0, 0x3f80),    // tie -> 1 (even)
    (1.0 + 3.0 / 256.0, 0x3f82),    // tie -> even mantissa 2
    (-(1.0 + 1.0 / 256.0), 0xbf80), // sign preserved
    (1.0 + 1.5 / 256.0, 0x3f81),    // above the tie -> up
    (f32::MAX, 0x7f80),             // rounds past the largest finite bf16 -> inf
    (f32::INFINITY, 0x7f80),
    (0.1, 0x3dcd),
];

/// Runs `convert` on the hand-picked ties and compares with the expected bits.
fn check_ties(cases: &[(f32, u16)], convert: impl Fn(&[f32]) -> Vec<u16>) -> Option<String> {
    let input: Vec<f32> = cases.iter().map(|c| c.0).collect();
    let got = convert(&input);
    cases
        .iter()
        .zip(got)
        .find(|(c, g)| c.1 != *g)
        .map(|(c, g)| format!("{} -> {g:#06x}, expected {:#06x}", c.0, c.1))
}

/// Compares bit patterns; the first mismatch fails.
fn compare_bits(reference: &str, got: &[u16], want: &[u16], extra: Option<String>) -> Verification {
    let bad = got.iter().zip(want).position(|(g, w)| g != w);
    let (passed, detail) = match (bad, extra) {
        (Some(i), _) => (false, format!("value {i}: got bits {:#06x}, reference {:#06x}", got[i], want[i])),
        (None, Some(e)) => (false, format!("hand-picked tie: {e}")),
        (None, None) => (true, format!("{} values bit-identical; hand-picked ties round to even", got.len())),
    };
    Verification { passed, reference: reference.into(), max_error: None, detail }
}

enum Convert {
    ToF16(Vec<f32>, Vec<f16>),
    FromF16(Vec<f16>, Vec<f32>),
    ToBf16(Vec<f32>, Vec<bf16>),
    FromBf16(Vec<bf16>, Vec<f32>),
}

pub(crate) fn prepare_convert(case: &Case) -> Result<Box<dyn Workload>> {
    let op = choice(case, "op", CONVERSIONS)?;
    let n = elements(case)?;
    // Scaled normal data: spans f16 subnormals through values in the thousands.
    let x: Vec<f32> = util::randn(n, super::seed(case)).into_iter().map(|v| 8.0 * v).collect();
    Ok(Box::new(match op {
        "f32_to_f16" => Convert::ToF16(x, vec![f16::NAN; n]),
        "f16_to_f32" => Convert::FromF16(x.iter().map(|&v| f16::from_f32(v)).collect(), vec![f32::NAN; n]),
        "f32_to_bf16" => Convert::ToBf16(x, vec![bf16::NAN; n]),
        _ => Convert::FromBf16(x.iter().map(|&v| bf16::from_f32(v)).collect(), vec![f32::NAN; n]),
    }))
}

impl Convert {
    fn once(&mut self) {
        match self {
            Self::ToF16(s, d) => to_f16(d, s),
            Self::FromF16(s, d) => from_f16(d, s),
            Self::ToBf16(s, d) => to_bf16(d, s),
            Self::FromBf16(s, d) => from_bf16(d, s),
        }
    }
    fn len(&self) -> usize {
        match self {
            Self::ToF16(s, _) | Self::ToBf16(s, _) => s.len(),
            Self::FromF16(s, _) => s.len(),
            Self::FromBf16(s, _) => s.len(),
        }
    }
}

impl Workload for Convert {
    fn verify(&mut self) -> Result<Verification> {
        match self {
            Self::ToF16(_, d) => d.fill(f16::NAN),
            Self::ToBf16(_, d) => d.fill(bf16::NAN),
            Self::FromF16(_, d) | Self::FromBf16(_, d) => d.fill(f32::NAN),
        }
        self.once();
        Ok(match self {
            Self::ToF16(s, d) => {
                let want: Vec<u16> = s.iter().map(|&v| f16::from_f32(v).to_bits()).collect();
                let got: Vec<u16> = d.iter().map(|v| v.to_bits()).collect();
                let ties = check_ties(F16_TIES, |x| {
                    let mut o = vec![f16::ZERO; x.len()];
                    to_f16(&mut o, x);
                    o.iter().map(|v| v.to_bits()).collect()
                });
                compare_bits("per-element f16::from_f32 and hand-picked ties", &got, &want, ties)
            }
            Self::ToBf16(s, d) => {
                let want: Vec<u16> = s.iter().map(|&v| bf16::from_f32(v).to_bits()).collect();
                let got: Vec<u16> = d.iter().map(|v| v.to_bits()).collect();
                let ties = check_ties(BF16_TIES, |x| {
                    let mut o = vec![bf16::ZERO; x.len()];
                    to_bf16(&mut o, x);
                    o.iter().map(|v| v.to_bits()).collect()
                });
                compare_bits("per-element bf16::from_f32 and hand-picked ties", &got, &want, ties)
            }
            Self::FromF16(s, d) => {
                let want: Vec<f32> = s.iter().map(|v| f16_bits_to_f64(v.to_bits()) as f32).collect();
                Verification::compare("naive decoding of the f16 bit fields (exact)", d, &want, 0.0, 0.0)
            }
            Self::FromBf16(s, d) => {
                let want: Vec<f32> = s.iter().map(|v| f32::from_bits((v.to_bits() as u32) << 16)).collect();
                Verification::compare("bf16 bits as the top half of an f32 (exact)", d, &want, 0.0, 0.0)
            }
        })
    }

    fn throughput(&self) -> Vec<Throughput> {
        let n = self.len() as f64;
        vec![Throughput::elements(n), Throughput::bytes(6.0 * n)]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.once();
            std::hint::black_box(&mut *self);
        }
        Ok(())
    }
}

enum HalfAdd {
    F16 { a: Vec<f16>, b: Vec<f16>, out: Vec<f16> },
    Bf16 { a: Vec<bf16>, b: Vec<bf16>, out: Vec<bf16> },
}

/// Valid `dtype` values of `half_add`.
pub(super) const HALF_DTYPES: &[&str] = &["f16", "bf16"];

pub(crate) fn prepare_add(case: &Case) -> Result<Box<dyn Workload>> {
    let dtype = choice(case, "dtype", HALF_DTYPES)?;
    let n = elements(case)?;
    let seed = super::seed(case);
    let (x, y) = (util::randn(n, seed), util::randn(n, seed ^ 1));
    Ok(Box::new(if dtype == "f16" {
        let h = |v: Vec<f32>| v.into_iter().map(|v| f16::from_f32(4.0 * v)).collect::<Vec<_>>();
        HalfAdd::F16 { a: h(x), b: h(y), out: vec![f16::NAN; n] }
    } else {
        let h = |v: Vec<f32>| v.into_iter().map(|v| bf16::from_f32(4.0 * v)).collect::<Vec<_>>();
        HalfAdd::Bf16 { a: h(x), b: h(y), out: vec![bf16::NAN; n] }
    }))
}

impl HalfAdd {
    fn once(&mut self) {
        match self {
            Self::F16 { a, b, out } => add(out, a, b),
            Self::Bf16 { a, b, out } => add(out, a, b),
        }
    }
}

impl Workload for HalfAdd {
    fn verify(&mut self) -> Result<Verification> {
        match self {
            Self::F16 { out, .. } => out.fill(f16::NAN),
            Self::Bf16 { out, .. } => out.fill(bf16::NAN),
        }
        self.once();
        let reference = "exact f64 sum rounded once to the half type (from_f64), bit-identical";
        Ok(match self {
            Self::F16 { a, b, out } => {
                let want: Vec<u16> = a
                    .iter()
                    .zip(b.iter())
                    .map(|(x, y)| f16::from_f64(x.to_f64() + y.to_f64()).to_bits())
                    .collect();
                let got: Vec<u16> = out.iter().map(|v| v.to_bits()).collect();
                compare_bits(reference, &got, &want, None)
            }
            Self::Bf16 { a, b, out } => {
                let want: Vec<u16> = a
                    .iter()
                    .zip(b.iter())
                    .map(|(x, y)| bf16::from_f64(x.to_f64() + y.to_f64()).to_bits())
                    .collect();
                let got: Vec<u16> = out.iter().map(|v| v.to_bits()).collect();
                compare_bits(reference, &got, &want, None)
            }
        })
    }

    fn throughput(&self) -> Vec<Throughput> {
        let n = match self {
            Self::F16 { out, .. } => out.len(),
            Self::Bf16 { out, .. } => out.len(),
        } as f64;
        // Two 2-byte reads and one 2-byte write per element.
        vec![Throughput::flops(n), Throughput::elements(n), Throughput::bytes(6.0 * n)]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.once();
            std::hint::black_box(&mut *self);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_match_scalar_and_naive_references_serial_and_parallel() {
        conversions_match();
    }

    /// The same and the half add at every ISA cap (the AVX2 converters at
    /// the AVX2 cap on a CPU with AVX2, `half`'s at the scalar cap).
    #[test]
    fn conversions_and_add_match_under_every_isa_cap() {
        for level in [crate::isa::IsaLevel::Scalar, crate::isa::IsaLevel::Avx2] {
            crate::isa::with_cap(level, || {
                conversions_match();
                half_add_matches();
            });
        }
    }

    fn conversions_match() {
        for n in [37 * 53, PAR_MIN + 1001] {
            let mut x: Vec<f32> = util::randn(n, 1).into_iter().map(|v| 8.0 * v).collect();
            x[..4].copy_from_slice(&[1e-7, -3e-6, 70000.0, f32::NEG_INFINITY]);
            let mut h = vec![f16::NAN; n];
            to_f16(&mut h, &x);
            let mut b = vec![bf16::NAN; n];
            to_bf16(&mut b, &x);
            let mut back = vec![f32::NAN; n];
            from_f16(&mut back, &h);
            for i in 0..n {
                assert_eq!(h[i].to_bits(), f16::from_f32(x[i]).to_bits(), "f16 {}", x[i]);
                assert_eq!(b[i].to_bits(), bf16::from_f32(x[i]).to_bits(), "bf16 {}", x[i]);
                assert_eq!(back[i] as f64, f16_bits_to_f64(h[i].to_bits()));
            }
            from_bf16(&mut back, &b);
            for i in 0..n {
                assert_eq!(back[i].to_bits(), (b[i].to_bits() as u32) << 16);
            }
        }
    }

    #[test]
    fn ties_round_to_nearest_even() {
        let f = check_ties(F16_TIES, |x| {
            let mut o = vec![f16::ZERO; x.len()];
            to_f16(&mut o, x);
            o.iter().map(|v| v.to_bits()).collect()
        });
        assert_eq!(f, None);
        let b = check_ties(BF16_TIES, |x| {
            let mut o = vec![bf16::ZERO; x.len()];
            to_bf16(&mut o, x);
            o.iter().map(|v| v.to_bits()).collect()
        });
        assert_eq!(b, None);
        // A truncating converter would fail the table.
        let trunc = check_ties(BF16_TIES, |x| x.iter().map(|v| (v.to_bits() >> 16) as u16).collect());
        assert!(trunc.is_some());
    }

    #[test]
    fn half_add_matches_f64_reference_and_detects_errors() {
        half_add_matches();
        let got = [0x3c00u16, 0x3c01];
        assert!(!compare_bits("t", &got, &[0x3c00, 0x3c02], None).passed);
    }

    fn half_add_matches() {
        for n in [1, 37 * 53, PAR_MIN + 7] {
            let a: Vec<f16> = util::randn(n, 2).into_iter().map(|v| f16::from_f32(4.0 * v)).collect();
            let b: Vec<f16> = util::randn(n, 3).into_iter().map(|v| f16::from_f32(4.0 * v)).collect();
            let mut out = vec![f16::NAN; n];
            add(&mut out, &a, &b);
            let mut w = HalfAdd::F16 { a, b, out };
            assert!(w.verify().unwrap().passed);
            let ab: Vec<bf16> = util::randn(n, 4).into_iter().map(bf16::from_f32).collect();
            let bb: Vec<bf16> = util::randn(n, 5).into_iter().map(bf16::from_f32).collect();
            let mut w = HalfAdd::Bf16 { out: vec![bf16::NAN; n], a: ab, b: bb };
            assert!(w.verify().unwrap().passed);
        }
    }
}
