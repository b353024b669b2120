//! The AVX-512 kernels against their portable twins, bit for bit.

use super::super::kquant::{QK_K, QS_BYTES, SCALE_BYTES};
use super::super::{blocks, has_avx512, int8, kquant, ternary};
use super::*;
use half::bf16;

/// Deterministic values: heavy-tailed, with exact zeros, ties of `step`
/// (k + 1/2 steps), the extremes `±max` and repeated magnitudes.
fn values(n: usize, seed: u64, step: f32, max: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 40) as f32 / (1u64 << 24) as f32; // [0, 1)
            let sign = if s & 1 == 0 { 1.0 } else { -1.0 };
            match s % 7 {
                0 => 0.0,
                1 => sign * (((s >> 8) % 64) as f32 + 0.5) * step,
                2 if i % 3 == 0 => sign * max,
                _ => sign * max * u * u * u,
            }
        })
        .collect()
}

fn avx512() -> bool {
    if !has_avx512() {
        eprintln!("skipped: this CPU has no AVX-512 (F, BW, VL), so only the portable kernels run here");
    }
    has_avx512()
}

#[test]
fn min_max_and_int8_codes_equal_the_portable_kernels() {
    if !avx512() {
        return;
    }
    for (n, seed) in [(0, 1), (1, 2), (15, 3), (16, 4), (63, 5), (64, 6), (1000, 7), (4097, 8)] {
        let mut x = values(n, seed, 1.0, 127.0);
        // SAFETY (here and below): avx512() checked every feature the kernels need.
        assert_eq!(unsafe { min_max(&x) }, int8::min_max_portable(&x), "n {n}");
        if n > 3 {
            x[n / 2] = f32::NAN; // skipped by min/max, lowest code when quantized
            x[n / 3] = f32::INFINITY;
            x[1] = -1e30;
        }
        assert_eq!(unsafe { min_max(&x) }, int8::min_max_portable(&x), "n {n} with NaN");
        // scale 1: the ties k + 1/2 are exact; then a scale that is not.
        for (p, lo, hi) in [
            (int8::QParams { scale: 1.0, zero_point: 0 }, -127, 127),
            (int8::QParams { scale: 1.0, zero_point: -3 }, -128, 127),
            (int8::QParams { scale: 0.37, zero_point: 17 }, -128, 127),
        ] {
            let (mut a, mut b) = (vec![0i8; n], vec![1i8; n]);
            unsafe { quantize_int8(&x, 1.0 / p.scale, p.zero_point, lo, hi, &mut a) };
            int8::quantize_with_portable(&x, p, lo, hi, &mut b);
            assert_eq!(a, b, "n {n} {p:?}");
        }
    }
}

#[test]
fn block_codes_and_decoding_equal_the_portable_kernels() {
    if !avx512() {
        return;
    }
    for f in [BlockFormat::Q8_0, BlockFormat::Q4_0, BlockFormat::Q4_1] {
        // max 127 makes the Q8_0 scale 1 (exact ties); 8 and 15 do the same for Q4_0 / Q4_1.
        for (nb, seed, max) in [(1, 11, 127.0), (7, 12, 8.0), (17, 15, 8.0), (64, 13, 15.0), (300, 14, 0.02)]
        {
            let mut x = values(nb * QK, seed, max / 64.0, max);
            x[QK / 2] = -max; // a ±max tie inside one Q4_0 block
            x[QK / 2 + 1] = max;
            if nb > 2 {
                x[QK..2 * QK].fill(0.0); // an all-zero block
            }
            if nb > 20 {
                // A tie in a later lane of the second group of 16 blocks.
                (x[19 * QK + 3], x[19 * QK + 30]) = (max, -max);
            }
            let run = |simd: bool| {
                let (mut d, mut m, mut q) =
                    (vec![f16::ZERO; nb], vec![f16::ZERO; nb], vec![0u8; nb * f.code_bytes()]);
                let mm = if f == BlockFormat::Q4_1 { &mut m[..] } else { &mut [][..] };
                if simd {
                    unsafe { quantize_blocks(f, &x, &mut d, mm, &mut q) };
                } else {
                    blocks::quantize_blocks_portable(f, &x, &mut d, mm, &mut q);
                }
                (d, m, q)
            };
            let (a, b) = (run(true), run(false));
            assert_eq!(a, b, "{f:?} nb {nb}");
            let (d, m, q) = a;
            let (mut ya, mut yb) = (vec![0.0f32; nb * QK], vec![1.0f32; nb * QK]);
            let mm = if f == BlockFormat::Q4_1 { &m[..] } else { &[][..] };
            unsafe { dequantize_blocks(f, &d, mm, &q, &mut ya) };
            blocks::dequantize_blocks_portable(f, &d, mm, &q, &mut yb);
            assert!(ya.iter().zip(&yb).all(|(a, b)| a.to_bits() == b.to_bits()), "{f:?} nb {nb} decode");
        }
    }
}

#[test]
fn block_codes_treat_nan_and_infinity_like_the_portable_kernels() {
    if !avx512() {
        return;
    }
    let mut x = values(4 * QK, 21, 0.01, 1.0);
    x[3] = f32::NAN;
    x[QK + 4] = f32::INFINITY;
    x[2 * QK + 5] = f32::NEG_INFINITY;
    x[3 * QK..].fill(f32::NAN);
    for f in [BlockFormat::Q8_0, BlockFormat::Q4_0, BlockFormat::Q4_1] {
        let (mut da, mut ma, mut qa) =
            (vec![f16::ZERO; 4], vec![f16::ZERO; 4], vec![0u8; 4 * f.code_bytes()]);
        let (mut db, mut mb, mut qb) = (da.clone(), ma.clone(), qa.clone());
        let q41 = f == BlockFormat::Q4_1;
        unsafe { quantize_blocks(f, &x, &mut da, if q41 { &mut ma[..] } else { &mut [] }, &mut qa) };
        blocks::quantize_blocks_portable(f, &x, &mut db, if q41 { &mut mb[..] } else { &mut [] }, &mut qb);
        let bits = |v: &[f16]| v.iter().map(|h| h.to_bits()).collect::<Vec<_>>();
        assert_eq!((bits(&da), bits(&ma), &qa), (bits(&db), bits(&mb), &qb), "{f:?}");
    }
}

#[test]
fn q4k_codes_equal_the_portable_kernel() {
    if !avx512() {
        return;
    }
    for (nb, seed, max) in [(1, 31, 1.0), (2, 34, 8.0), (9, 32, 0.02), (40, 33, 15.0)] {
        let mut x = values(nb * QK_K, seed, max / 64.0, max);
        x[..QK].iter_mut().for_each(|v| *v = v.abs()); // a sub-block whose minimum is pinned at 0
        x[QK..2 * QK].fill(0.5); // a constant one
        if nb > 1 {
            x[QK_K..2 * QK_K].fill(0.0); // an all-zero super-block
        }
        if nb > 2 {
            // NaN, infinities and an all-NaN sub-block in one super-block.
            (x[2 * QK_K + 3], x[2 * QK_K + 40], x[2 * QK_K + 70]) =
                (f32::NAN, f32::INFINITY, f32::NEG_INFINITY);
            x[2 * QK_K + 96..2 * QK_K + 128].fill(f32::NAN);
            x[3 * QK_K + 10] = f32::NAN;
        }
        let run = |simd: bool| {
            let (mut d, mut dm) = (vec![f16::ZERO; nb], vec![f16::ZERO; nb]);
            let (mut s, mut q) = (vec![0u8; nb * SCALE_BYTES], vec![0u8; nb * QS_BYTES]);
            if simd {
                unsafe { quantize_q4k(&x, &mut d, &mut dm, &mut s, &mut q) };
            } else {
                kquant::quantize_blocks_portable(&x, &mut d, &mut dm, &mut s, &mut q);
            }
            (
                d.iter().map(|h| h.to_bits()).collect::<Vec<_>>(),
                dm.iter().map(|h| h.to_bits()).collect::<Vec<_>>(),
                s,
                q,
            )
        };
        assert_eq!(run(true), run(false), "nb {nb}");
    }
}

#[test]
fn ternary_planes_equal_the_portable_kernel() {
    if !avx512() {
        return;
    }
    for (cols, seed) in [(1, 41), (17, 42), (64, 43), (100, 44), (4096, 45)] {
        // inv 2 and steps of 1/2: the tie values (k + 1/2) / 2 include ±0.5 exactly.
        let mut x = values(cols, seed, 0.5, 1.0);
        if cols > 5 {
            (x[0], x[1], x[2], x[3], x[4]) = (0.25, -0.25, f32::NAN, f32::INFINITY, -0.0);
        }
        let words = cols.div_ceil(64);
        let (mut pa, mut ma) = (vec![0u64; words], vec![0u64; words]);
        let (mut pb, mut mb) = (vec![9u64; words], vec![9u64; words]);
        unsafe { ternary_planes(&x, 2.0, &mut pa, &mut ma) };
        ternary::planes_portable(&x, 2.0, &mut pb, &mut mb);
        assert_eq!((pa, ma), (pb, mb), "cols {cols}");
    }
}

#[test]
fn ternary_decoding_equals_the_portable_kernel() {
    if !avx512() {
        return;
    }
    let (rows, cols) = (3, 150);
    let codes: Vec<i8> = (0..rows * cols).map(|i| ((i * 7 + i / 11) % 3) as i8 - 1).collect();
    let t = ternary::TernaryMatrix::from_codes(&codes, rows, cols, 0.37);
    for (off, len) in [(0, rows * cols), (5, 100), (149, 2), (63, 65), (200, 250)] {
        let (mut a, mut b) = (vec![9.0f32; len], vec![7.0f32; len]);
        // SAFETY: avx512() checked every feature the kernel needs.
        unsafe { ternary_decode(&t.plus, &t.minus, t.words, cols, t.gamma, off, &mut a) };
        ternary::decode_range_portable(&t.plus, &t.minus, t.words, cols, t.gamma, off, &mut b);
        assert!(a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits()), "off {off} len {len}");
        // And against the codes themselves, across row ends.
        let naive = (0..len).map(|i| codes[off + i] as f32 * t.gamma);
        assert!(a.iter().zip(naive).all(|(x, y)| x.to_bits() == y.to_bits()), "off {off} len {len}");
    }
}

#[test]
fn half_conversions_equal_the_half_crate() {
    if !avx512() {
        return;
    }
    // Every exponent and sign with random mantissas, ties of both kinds
    // for each format, subnormals, infinities and NaNs; a ragged length.
    let mut bits: Vec<u32> =
        (0..4099u32).map(|i| i.wrapping_mul(2_654_435_761).rotate_left(i % 32)).collect();
    bits.extend([0, 0x8000_0000, 1, 0x8000_0001, 0x7F80_0000, 0xFF80_0000, 0x7FC0_0001, 0xFF80_0001]);
    bits.extend([0x3F80_8000, 0x3F81_8000, 0x3F80_1000, 0x3F80_3000, 0x0000_8000, 0x0001_8000, 0x7F7F_FFFF]);
    let x: Vec<f32> = bits.iter().map(|&b| f32::from_bits(b)).collect();
    let (mut h, mut b) = (vec![f16::ZERO; x.len()], vec![bf16::ZERO; x.len()]);
    // SAFETY (both blocks): avx512() checked every feature the kernels need.
    unsafe { (to_f16(&x, &mut h), to_bf16(&x, &mut b)) };
    for (i, &v) in x.iter().enumerate() {
        assert_eq!(h[i].to_bits(), f16::from_f32(v).to_bits(), "f16 of {:#x}", bits[i]);
        assert_eq!(b[i].to_bits(), bf16::from_f32(v).to_bits(), "bf16 of {:#x}", bits[i]);
    }
    let (mut yh, mut yb) = (vec![0.0f32; x.len()], vec![0.0f32; x.len()]);
    unsafe { (from_f16(&h, &mut yh), from_bf16(&b, &mut yb)) };
    for i in 0..x.len() {
        assert_eq!(yh[i].to_bits(), h[i].to_f32().to_bits(), "f16 {:#x} back", h[i].to_bits());
        assert_eq!(yb[i].to_bits(), b[i].to_f32().to_bits(), "bf16 {:#x} back", b[i].to_bits());
    }
}

#[test]
fn reduce16_gives_each_vectors_min_and_max() {
    if !avx512() {
        return;
    }
    let x = values(256, 51, 0.5, 100.0);
    // SAFETY: avx512() checked every feature the kernels need; x holds 16 x 16 values.
    let v: [__m512; 16] = std::array::from_fn(|j| unsafe { _mm512_loadu_ps(x.as_ptr().add(16 * j)) });
    let pairs = |min: bool| -> [__m512; 8] {
        std::array::from_fn(|k| unsafe {
            if min {
                blockq::fold_pair::<true>(v[2 * k], v[2 * k + 1])
            } else {
                blockq::fold_pair::<false>(v[2 * k], v[2 * k + 1])
            }
        })
    };
    let (mut mn, mut mx) = ([0.0f32; 16], [0.0f32; 16]);
    unsafe {
        _mm512_storeu_ps(mn.as_mut_ptr(), blockq::reduce16::<true>(&pairs(true)));
        _mm512_storeu_ps(mx.as_mut_ptr(), blockq::reduce16::<false>(&pairs(false)));
    }
    for j in 0..16 {
        let lanes = &x[16 * j..16 * j + 16];
        assert_eq!(mn[j], lanes.iter().copied().fold(f32::INFINITY, f32::min), "min {j}");
        assert_eq!(mx[j], lanes.iter().copied().fold(f32::NEG_INFINITY, f32::max), "max {j}");
    }
}
