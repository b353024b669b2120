//! Several Q4_0 / Q4_1 rows against one token's int8 activations at once:
//! the decode step's matrix-vector product. [`super::w4a8::dot_row`] runs
//! one row at a time, so every row reloads the token's activations and ends
//! on its own chain of dependent multiply-adds and a horizontal sum; here
//! [`ROWS`] rows share each activation load and their independent chains
//! overlap. The arithmetic per row is the same as `dot_row`'s (the same
//! integer dots, scales and block sums), so results agree with it to f32
//! rounding of the accumulation order.

use super::w4a8::{Q4Row, Q8Acts};

/// Rows per call.
pub const ROWS: usize = 4;

/// `out[i] = rows[i] . x^` for the single token of `a` (layout `Quad`), with
/// AVX-512 VNNI (the caller checked [`super::Int8Path::Avx512Vnni`] and
/// AVX-512 F/BW/VL, F16C and FMA). Returns `false`, computing nothing, for a
/// row that is not Q4_0 or Q4_1 (all rows must share one format) or an `a`
/// with more than one token; the caller then takes the per-row kernel.
pub fn dot_rows(rows: &[Q4Row; ROWS], a: &Q8Acts, out: &mut [f32; ROWS]) -> bool {
    if a.m != 1 || a.layout != super::w4a8::ActLayout::Quad {
        return false;
    }
    let same = |f: fn(&Q4Row) -> bool| rows.iter().all(f);
    let q4_0 = same(|r| matches!(r, Q4Row::Q4_0 { .. }));
    let q4_1 = same(|r| matches!(r, Q4Row::Q4_1 { .. }));
    if !(q4_0 || q4_1) {
        return false;
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the caller checked the features; every row holds k / 32
        // blocks as `a` holds k values.
        unsafe { vnni512::dot_rows(rows, a, out) };
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = out;
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni512 {
    use super::{Q4Row, Q8Acts, ROWS};
    use crate::kernels::quant::w4a8::vnni512::QUAD_IDX;
    use half::f16;
    use std::arch::x86_64::*;

    fn parts<'a>(r: &Q4Row<'a>) -> (&'a [f16], Option<&'a [f16]>, &'a [u8]) {
        match *r {
            Q4Row::Q4_0 { d, qs } => (d, None, qs),
            Q4Row::Q4_1 { d, m, qs } => (d, Some(m), qs),
            Q4Row::Q4K { .. } => unreachable!("checked by dot_rows"),
        }
    }

    /// As `w4a8`'s `dot_q4` for one token, over [`ROWS`] rows at once:
    /// groups of 16 blocks, the last one masked (see `dot_q4` for why the
    /// masked loads are in bounds).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
    pub unsafe fn dot_rows(rows: &[Q4Row; ROWS], a: &Q8Acts, out: &mut [f32; ROWS]) {
        let nb = a.k / 32;
        let nib = _mm512_set1_epi8(15);
        let p: [_; ROWS] = std::array::from_fn(|i| parts(&rows[i]));
        // SAFETY (all loads): group g covers blocks 16g..16g+r, r = min(16,
        // nb - 16g); lanes past r and code bytes past 16r are masked off, and
        // quad q is read only when 4q < r, inside the activations' stride.
        let idx: [__m512i; 4] =
            std::array::from_fn(|q| unsafe { _mm512_loadu_si512(QUAD_IDX[q].as_ptr().cast()) });
        let mut acc = [_mm512_setzero_ps(); ROWS];
        let mut corr = [_mm512_setzero_ps(); ROWS];
        for g in 0..nb.div_ceil(16) {
            let r = (nb - 16 * g).min(16);
            let lanes: __mmask16 = if r == 16 { !0 } else { (1u16 << r) - 1 };
            let (ad, asum) = unsafe {
                (
                    _mm512_maskz_loadu_ps(lanes, a.d.as_ptr().add(16 * g)),
                    _mm512_maskz_loadu_ps(lanes, a.s.as_ptr().add(16 * g)),
                )
            };
            let mut sc = [_mm512_setzero_ps(); ROWS];
            for i in 0..ROWS {
                let (d, mins, _) = p[i];
                let dw = _mm512_cvtph_ps(unsafe {
                    _mm256_maskz_loadu_epi16(lanes, d.as_ptr().add(16 * g).cast())
                });
                let off = match mins {
                    Some(mn) => _mm512_cvtph_ps(unsafe {
                        _mm256_maskz_loadu_epi16(lanes, mn.as_ptr().add(16 * g).cast())
                    }),
                    None => _mm512_mul_ps(dw, _mm512_set1_ps(-8.0)),
                };
                sc[i] = _mm512_mul_ps(dw, ad);
                corr[i] = _mm512_fmadd_ps(off, asum, corr[i]);
            }
            for (q, idx) in idx.iter().enumerate().take(r.div_ceil(4)) {
                let valid = (16 * r).saturating_sub(64 * q).min(64);
                let bytes: __mmask64 = if valid == 64 { !0 } else { (1u64 << valid) - 1 };
                let pa = unsafe { a.qs.as_ptr().add((4 * g + q) * 128) };
                let (alo, ahi) =
                    unsafe { (_mm512_loadu_si512(pa.cast()), _mm512_loadu_si512(pa.add(64).cast())) };
                for i in 0..ROWS {
                    let qs = p[i].2;
                    let v =
                        unsafe { _mm512_maskz_loadu_epi8(bytes, qs.as_ptr().add(256 * g + 64 * q).cast()) };
                    let lo = _mm512_and_si512(v, nib);
                    let hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
                    let dot =
                        _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, alo), hi, ahi);
                    acc[i] =
                        _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(*idx, sc[i]), acc[i]);
                }
            }
        }
        for i in 0..ROWS {
            out[i] = _mm512_reduce_add_ps(_mm512_add_ps(acc[i], corr[i]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::quant::Int8Path;
    use crate::kernels::quant::blocks::{BlockFormat, BlockTensor};
    use crate::kernels::quant::w4a8::{ActLayout, dot_row};

    /// Against the per-row kernel (itself checked against an f64 sum of the
    /// dequantized product) on block counts 1, 2, 17, 18, 24 and 48.
    #[test]
    fn four_rows_equal_four_single_rows() {
        if !(Int8Path::Avx512Vnni.available() && crate::kernels::quant::has_avx512()) {
            eprintln!("skipped: no AVX-512 VNNI on this CPU (the caller then never takes this kernel)");
            return;
        }
        for k in [32, 64, 544, 576, 768, 1536] {
            for f in [BlockFormat::Q4_0, BlockFormat::Q4_1] {
                let w: Vec<f32> = (0..ROWS * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 31.0).collect();
                let x: Vec<f32> = (0..k).map(|i| ((i * 53 % 89) as f32 - 44.0) / 17.0).collect();
                let mut t = BlockTensor::zeros(f, ROWS, k).unwrap();
                t.quantize_from(&w);
                let a = Q8Acts::new(&x, 1, k, ActLayout::Quad);
                let nb = k / 32;
                let row = |r: usize| {
                    let (d, qs) = (&t.scales[r * nb..(r + 1) * nb], &t.qs[r * nb * 16..(r + 1) * nb * 16]);
                    match f {
                        BlockFormat::Q4_1 => Q4Row::Q4_1 { d, m: &t.mins[r * nb..(r + 1) * nb], qs },
                        _ => Q4Row::Q4_0 { d, qs },
                    }
                };
                let rows: [Q4Row; ROWS] = std::array::from_fn(row);
                let mut got = [f32::NAN; ROWS];
                assert!(dot_rows(&rows, &a, &mut got));
                for (r, &g) in got.iter().enumerate() {
                    let mut want = [0.0f32];
                    dot_row(row(r), &a, true, &mut want);
                    assert!(
                        (g - want[0]).abs() <= 1e-5 * want[0].abs().max(1.0),
                        "{f:?} k={k} row {r}: {g} vs {}",
                        want[0]
                    );
                }
            }
        }
    }
}
