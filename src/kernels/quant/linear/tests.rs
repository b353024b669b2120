//! Tests of the parent module.

use super::*;

/// Deterministic weights and activations in [-1, 1] (shared with
/// the child modules' tests).
pub(super) fn data(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| (((i * 7919 + seed * 104_729) % 2003) as f32 / 1001.0 - 1.0).powi(3)).collect()
}

/// f64 reference: the activations the kernel multiplies (x, or its Q8
/// round trip for the W4A8 kernels) times the dequantized weight, plus
/// Q4_1's f16 block-sum correction.
fn reference(q: &QMatrix, x: &[f32], m: usize) -> (Vec<f32>, Vec<f64>) {
    let w = q.dequantize();
    let corr = q.kernel_correction(x, m);
    let x = &q.kernel_activations(x, m);
    let (k, n) = (q.cols, q.rows);
    let mut want = vec![0.0f32; m * n];
    let mut tol = vec![0.0f64; m * n];
    for t in 0..m {
        for j in 0..n {
            let (mut s, mut a) = (corr[t * n + j], corr[t * n + j].abs());
            for p in 0..k {
                let v = x[t * k + p] as f64 * w[j * k + p] as f64;
                s += v;
                a += v.abs();
            }
            want[t * n + j] = s as f32;
            tol[t * n + j] = 1e-5 * a + 1e-30;
        }
    }
    (want, tol)
}

#[test]
fn every_format_matches_dequantize_then_matmul_on_both_paths() {
    // k = 768: 24 blocks of 32 (the W4A8 kernel's 16-block steps and a
    // tail), 3 super-blocks of 256.
    let (k, n) = (768, 40);
    let w = data(n * k, 1);
    for m in [1, 3, 8, 9, 20] {
        let x = data(m * k, 2 + m);
        for f in WeightFormat::ALL.into_iter().filter(|&f| f != WeightFormat::Ternary) {
            let q = QMatrix::quantize(f, &w, n, k).unwrap();
            let exact = q.clone().with_f32_activations();
            assert_eq!(q.quantizes_activations(m), m <= 8 && act8_format(f));
            let (want, tol) = reference(&exact, &x, m);
            for simd in [true, false] {
                let mut y = vec![f32::NAN; m * n];
                exact.matmul_with(&x, m, &mut y, simd);
                for i in 0..m * n {
                    let err = (y[i] as f64 - want[i] as f64).abs();
                    assert!(err <= tol[i], "{} f32 activations m={m} simd={simd} [{i}]", f.name());
                }
            }
            let (want, tol) = reference(&q, &x, m);
            for simd in [true, false] {
                let mut y = vec![f32::NAN; m * n];
                q.matmul_with(&x, m, &mut y, simd);
                for i in 0..m * n {
                    let err = (y[i] as f64 - want[i] as f64).abs();
                    assert!(err <= tol[i], "{} m={m} simd={simd} [{i}]: {} vs {}", f.name(), y[i], want[i]);
                }
            }
        }
    }
}

#[test]
fn ternary_matmul_is_exact_integer_arithmetic_on_both_paths() {
    let (k, n, m) = (200, 24, 3);
    let w = data(n * k, 5);
    let x = data(m * k, 6);
    let q = QMatrix::quantize(WeightFormat::Ternary, &w, n, k).unwrap();
    let t = q.ternary().unwrap();
    let codes = t.codes();
    let mut xq = vec![0i8; m * k];
    let mut sx = vec![0.0; m];
    int8::quantize_per_token(&x, k, &mut xq, &mut sx);
    for simd in [true, false] {
        let mut y = vec![0.0; m * n];
        q.matmul_with(&x, m, &mut y, simd);
        for tok in 0..m {
            for j in 0..n {
                let acc: i32 = (0..k).map(|p| xq[tok * k + p] as i32 * codes[j * k + p] as i32).sum();
                assert_eq!(y[tok * n + j], acc as f32 * (t.gamma * sx[tok]));
            }
        }
    }
    assert!((q.bits_per_weight() - 2.0 * 256.0 / 200.0).abs() < 0.1);
}

#[test]
fn formats_parse_with_valid_names_and_report_their_bits() {
    assert_eq!(WeightFormat::parse("q4_0").unwrap(), WeightFormat::Q4_0);
    let e = WeightFormat::parse("q3_k").unwrap_err().to_string();
    assert!(e.contains("valid: f32, f16, bf16, int8, q8_0, q4_0, q4_1, ternary, q4_k, q6_k"), "{e}");
    let w = data(64 * 64, 9);
    let bits = |f| QMatrix::quantize(f, &w, 64, 64).unwrap().bits_per_weight();
    assert_eq!(bits(WeightFormat::F32), 32.0);
    assert_eq!(bits(WeightFormat::Bf16), 16.0);
    assert_eq!(bits(WeightFormat::Q4_0), 4.5);
    assert!(QMatrix::quantize(WeightFormat::Q4K, &w, 64, 64).is_err(), "q4_k rows are multiples of 256");
    let w = data(8 * 512, 9);
    assert_eq!(QMatrix::quantize(WeightFormat::Q4K, &w, 8, 512).unwrap().bits_per_weight(), 4.5);
    assert_eq!(QMatrix::quantize(WeightFormat::Q6K, &w, 8, 512).unwrap().bits_per_weight(), 6.5625);
    assert_eq!(bits(WeightFormat::Int8), 8.0 + 32.0 / 64.0);
    assert!(QMatrix::quantize(WeightFormat::Q4_0, &w[..63 * 64], 63, 64).is_ok());
    assert!(QMatrix::quantize(WeightFormat::Q8_0, &w[..40], 2, 20).is_err());
}

/// `matmul_many` on a mix of int8-decode formats (one quantization per
/// activation rule, one parallel loop) and on a mix with an f32 part (one
/// `matmul` each) gives every matrix its own product, under every ISA cap.
#[test]
fn matmul_many_matches_each_product_under_every_isa_cap() {
    use crate::isa::{IsaLevel, with_cap};
    let k = 512;
    let formats =
        [WeightFormat::Q4K, WeightFormat::Q6K, WeightFormat::Q4_1, WeightFormat::Q8_0, WeightFormat::Q4_0];
    let qs: Vec<QMatrix> = formats
        .iter()
        .enumerate()
        .map(|(i, &f)| QMatrix::quantize(f, &data((17 + 3 * i) * k, 5 + i), 17 + 3 * i, k).unwrap())
        .collect();
    let f32_part = QMatrix::quantize(WeightFormat::F32, &data(9 * k, 3), 9, k).unwrap();
    for level in IsaLevel::ALL {
        with_cap(level, || {
            for m in [1, 3] {
                let x = data(m * k, 40 + m);
                for with_f32 in [false, true] {
                    let mats: Vec<&QMatrix> = qs.iter().chain(with_f32.then_some(&f32_part)).collect();
                    let mut ys: Vec<Vec<f32>> = mats.iter().map(|q| vec![f32::NAN; m * q.rows]).collect();
                    {
                        let mut parts: Vec<(&QMatrix, &mut [f32])> =
                            mats.iter().zip(ys.iter_mut()).map(|(q, y)| (*q, &mut y[..])).collect();
                        QMatrix::matmul_many(&mut parts, &x, m);
                    }
                    for (q, y) in mats.iter().zip(&ys) {
                        let (want, tol) = reference(q, &x, m);
                        for i in 0..y.len() {
                            let err = (f64::from(y[i]) - f64::from(want[i])).abs();
                            assert!(
                                err <= tol[i],
                                "{} m={m} f32 part {with_f32} at {level:?} [{i}]: {} vs {}",
                                q.format().name(),
                                y[i],
                                want[i]
                            );
                        }
                    }
                }
            }
        });
    }
}
