//! The AVX2 kernels against f64 `std` references (the tensor suite's
//! tolerances) and the scalar functions' special values; they run wherever
//! the CPU has AVX2 and FMA, whatever the cap above that.

use super::*;
use crate::isa::{IsaLevel, with_cap};

/// Whether the kernels can run here (said so when not).
fn avx2() -> bool {
    let ok = crate::isa::has_all(&crate::kernels::simd::V3);
    if !ok {
        eprintln!("skipped: this CPU (or TFBENCH_MAX_ISA) has no AVX2, FMA and F16C");
    }
    ok
}

/// The f64 reference and `(atol, rtol)` of each op.
fn reference(op: VOp) -> (fn(f64) -> f64, f64, f64) {
    match op {
        VOp::Exp => (f64::exp, 1e-44, 1e-5),
        VOp::Ln => (f64::ln, 1e-7, 1e-5),
        VOp::Tanh => (f64::tanh, 1e-7, 1e-5),
        VOp::Sigmoid => (|v| 1.0 / (1.0 + (-v).exp()), 1e-7, 1e-5),
        VOp::Gelu => (
            |v| 0.5 * v * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v * v * v)).tanh()),
            1e-6,
            1e-5,
        ),
    }
}

fn sweep(lo: f32, hi: f32, n: usize) -> Vec<f32> {
    (0..n).map(|i| lo + (hi - lo) * i as f32 / (n - 1) as f32).collect()
}

#[test]
fn each_kernel_matches_f64_std_over_a_sweep() {
    if !avx2() {
        return;
    }
    for op in VOp::ALL {
        let x = match op {
            // Down to subnormal inputs (rescaled) and up to f32::MAX.
            VOp::Ln => {
                let mut v: Vec<f32> =
                    (0..200_001).map(|i| 10f32.powf(-37.0 + 75.0 * i as f32 / 2e5)).collect();
                v.extend([1e-40, 3e-45, f32::MAX, f32::MIN_POSITIVE, 1.0, 0.999_999_9, 1.000_000_1]);
                v
            }
            // Through gradual underflow and into overflow.
            VOp::Exp => sweep(-110.0, 89.0, 200_001),
            _ => sweep(-60.0, 60.0, 200_001),
        };
        let mut out = vec![f32::NAN; x.len()];
        assert!(map_avx2(op, &mut out, &x));
        let (f, atol, rtol) = reference(op);
        for (&v, &g) in x.iter().zip(&out) {
            let w = f(f64::from(v)) as f32 as f64;
            let g = f64::from(g);
            assert!(g == w || (g - w).abs() <= atol + rtol * w.abs(), "{op:?}({v}): {g} vs {w}");
        }
    }
}

#[test]
fn special_values_are_the_scalar_functions() {
    if !avx2() {
        return;
    }
    let x = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        89.0,
        -104.0,
        -200.0,
        200.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        0.624,
        0.626,
    ];
    for op in VOp::ALL {
        // Every value once in a vector lane (the tail is the scalar function itself).
        let xs: Vec<f32> = x.iter().copied().cycle().take(x.len() * 8).collect();
        let mut out = vec![0.0; xs.len()];
        assert!(map_avx2(op, &mut out, &xs));
        for (&v, &g) in xs.iter().zip(&out) {
            let want = op.scalar()(v);
            let same = (g.is_nan() && want.is_nan())
                || (g == want && g.is_sign_negative() == want.is_sign_negative())
                || (v.is_finite() && {
                    // Finite inputs: the FMAs may round differently from the
                    // scalar function; both meet the reference.
                    let (f, atol, rtol) = reference(op);
                    let w = f(f64::from(v)) as f32 as f64;
                    f64::from(g) == w || (f64::from(g) - w).abs() <= atol + rtol * w.abs()
                });
            assert!(same, "{op:?}({v}): {g} vs scalar {want}");
        }
    }
}

#[test]
fn every_length_has_its_tail_mapped() {
    if !avx2() {
        return;
    }
    for n in [0usize, 1, 7, 8, 9, 15, 16, 17, 100] {
        let x = sweep(0.1, 5.0, n.max(2))[..n].to_vec();
        for op in VOp::ALL {
            let mut out = vec![f32::NAN; n];
            assert!(map_avx2(op, &mut out, &x));
            let (f, atol, rtol) = reference(op);
            for (&v, &g) in x.iter().zip(&out) {
                let w = f(f64::from(v)) as f32 as f64;
                assert!((f64::from(g) - w).abs() <= atol + rtol * w.abs(), "{op:?} n={n} ({v}): {g} vs {w}");
            }
        }
    }
}

/// `map` takes the AVX2 kernels exactly when the cap allows AVX2 and not
/// AVX-512 (the AVX-512 build of the plain loops is the faster one there).
#[test]
fn the_avx2_path_follows_the_cap() {
    let (x, mut out) = (vec![1.0f32; 16], vec![0.0f32; 16]);
    with_cap(IsaLevel::Scalar, || assert!(!map(VOp::Exp, &mut out, &x) && !avx2_path()));
    let v3 = with_cap(IsaLevel::Avx2, || crate::isa::has_all(&crate::kernels::simd::V3));
    with_cap(IsaLevel::Avx2, || assert_eq!(map(VOp::Exp, &mut out, &x), v3));
    let v4 = crate::isa::has_all(&crate::kernels::simd::V4);
    if v4 {
        assert!(!avx2_path(), "AVX-512 runs its own build of the loop");
    }
}
