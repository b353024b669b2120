//! The f32-activation AVX2 kernels against f64 references (the int8
//! activation ones are checked through `w4a8`, `w8a8` and `q6k`'s
//! `dot_row` tests, which run every path this CPU has, and through
//! `QMatrix` under every ISA cap in `linear/act.rs`).

use super::fdot;
use crate::kernels::quant::blocks::{BlockFormat, BlockTensor, QK};
use crate::util::randn;
use half::{bf16, f16};

/// Whether this CPU (under the cap) runs the AVX2 kernels; the tests say
/// so and check nothing SIMD when it does not.
fn avx2() -> bool {
    let ok = crate::kernels::quant::has_avx2();
    if !ok {
        eprintln!("skipped: this CPU (or TFBENCH_MAX_ISA) has no AVX2, FMA and F16C");
    }
    ok
}

/// `got` within f32 summation error of the f64 sum of `terms`.
fn close(got: f32, terms: impl Iterator<Item = f64>, what: &str) {
    let (mut s, mut abs, mut n) = (0.0f64, 0.0f64, 0usize);
    for t in terms {
        s += t;
        abs += t.abs();
        n += 1;
    }
    let tol = (n as f64 + 8.0) * f64::from(f32::EPSILON) * abs + 1e-30;
    assert!((f64::from(got) - s).abs() <= tol, "{what}: {got} vs {s} (tol {tol:e})");
}

#[test]
fn float_rows_match_f64_dot_products() {
    if !avx2() {
        return;
    }
    for k in [0usize, 1, 7, 31, 32, 33, 96, 577, 1000] {
        let (w, x) = (randn(k, 3 + k as u64), randn(k, 5 + k as u64));
        let h: Vec<f16> = w.iter().map(|&v| f16::from_f32(v)).collect();
        let b: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
        let q: Vec<i8> = w.iter().map(|&v| (v * 40.0).round().clamp(-128.0, 127.0) as i8).collect();
        let pair = |a: f32, b: &f32| f64::from(a) * f64::from(*b);
        // SAFETY: avx2() checked the features.
        unsafe {
            close(fdot::dot_f32(&w, &x), w.iter().zip(&x).map(|(a, b)| pair(*a, b)), &format!("f32 k={k}"));
            close(
                fdot::dot_f16(&h, &x),
                h.iter().zip(&x).map(|(a, b)| pair(a.to_f32(), b)),
                &format!("f16 k={k}"),
            );
            close(
                fdot::dot_bf16(&b, &x),
                b.iter().zip(&x).map(|(a, b)| pair(a.to_f32(), b)),
                &format!("bf16 k={k}"),
            );
            close(
                fdot::dot_i8(&q, &x),
                q.iter().zip(&x).map(|(a, b)| pair(f32::from(*a), b)),
                &format!("i8 k={k}"),
            );
        }
    }
}

#[test]
fn block_rows_match_their_dequantized_weights() {
    if !avx2() {
        return;
    }
    // Block counts 1, 7, 8, 9, 18 (SmolLM2's 576) and 31: every tail of a group of 8.
    for nb in [1usize, 7, 8, 9, 18, 31] {
        let k = nb * QK;
        let x = randn(k, 11 + nb as u64);
        let xsums: Vec<f32> = x.chunks(QK).map(|c| c.iter().sum()).collect();
        for f in [BlockFormat::Q8_0, BlockFormat::Q4_0, BlockFormat::Q4_1] {
            let mut t = BlockTensor::zeros(f, 1, k).unwrap();
            t.quantize_from(&randn(k, 17 + nb as u64));
            let mut deq = vec![0.0f32; k];
            t.dequantize_into(&mut deq);
            // SAFETY: avx2() checked the features; the row holds nb blocks.
            let got = unsafe {
                match f {
                    BlockFormat::Q8_0 => fdot::dot_q8_0(&t.scales, &t.qs, &x),
                    BlockFormat::Q4_0 => fdot::dot_q4(&t.scales, None, &t.qs, &x, &xsums),
                    BlockFormat::Q4_1 => fdot::dot_q4(&t.scales, Some(&t.mins), &t.qs, &x, &xsums),
                }
            };
            // The offset terms (-8 d, the minimum) multiply x's block sums
            // apart from the codes, so the bound counts both parts.
            let off: Vec<f64> = (0..k)
                .map(|i| match f {
                    BlockFormat::Q8_0 => 0.0,
                    BlockFormat::Q4_0 => 8.0 * f64::from(t.scales[i / QK].to_f32()),
                    BlockFormat::Q4_1 => f64::from(t.mins[i / QK].to_f32()),
                })
                .collect();
            let terms = (0..k).flat_map(|i| {
                let (w, xv) = (f64::from(deq[i]), f64::from(x[i]));
                [(w - off[i]) * xv, off[i] * xv]
            });
            close(got, terms, &format!("{f:?} nb={nb}"));
        }
    }
}

#[test]
fn ternary_dot_is_exact_at_every_length() {
    if !avx2() {
        return;
    }
    for words in [1usize, 3, 255, 256, 257, 600] {
        let plus: Vec<u64> = (0..words as u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect();
        let minus: Vec<u64> = plus
            .iter()
            .enumerate()
            .map(|(i, &p)| !p & (i as u64).wrapping_mul(0xdead_beef_1234_5679))
            .collect();
        let x: Vec<i16> = (0..words * 64).map(|i| (i as i16 % 255) - 127).collect();
        let want = crate::kernels::quant::ternary::dot_portable(&plus, &minus, &x);
        // SAFETY: avx2() checked the features.
        assert_eq!(unsafe { super::ternary_dot(&plus, &minus, &x) }, want, "{words} words");
    }
}
