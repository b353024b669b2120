//! Per-format decode kernels of [`super::QMatrix`]: the dot product of one
//! weight row (f32, f16, bf16, int8, Q8_0, Q4_0/Q4_1, Q4_K, Q6_K) with one token,
//! dequantizing in registers. `QMatrix::dot_row` picks between the AVX-512
//! and the portable twin of each.

use super::*;

/// Portable decode kernels: plain loops with independent accumulators,
/// compiled per ISA level so AVX2-only machines still get vector code.
pub(super) mod portable {
    use super::*;
    use crate::kernels::simd_dispatch;

    simd_dispatch! {
        pub fn dot_f32(w: &[f32], x: &[f32]) -> f32 {
            let mut acc = [0.0f32; 16];
            for (w, x) in w.chunks_exact(16).zip(x.chunks_exact(16)) {
                for i in 0..16 {
                    acc[i] = w[i].mul_add(x[i], acc[i]);
                }
            }
            let tail = w.len() - w.len() % 16;
            let t: f32 = w[tail..].iter().zip(&x[tail..]).map(|(a, b)| a * b).sum();
            acc.iter().sum::<f32>() + t
        }
    }

    simd_dispatch! {
        pub fn dot_i8(w: &[i8], x: &[f32]) -> f32 {
            let mut acc = [0.0f32; 16];
            for (w, x) in w.chunks_exact(16).zip(x.chunks_exact(16)) {
                for i in 0..16 {
                    acc[i] = (w[i] as f32).mul_add(x[i], acc[i]);
                }
            }
            let tail = w.len() - w.len() % 16;
            let t: f32 = w[tail..].iter().zip(&x[tail..]).map(|(&a, b)| a as f32 * b).sum();
            acc.iter().sum::<f32>() + t
        }
    }

    /// Q4_K row `r` on f32 activations: each super-block dequantized on the
    /// stack, then the f32 dot.
    pub fn dot_q4k(t: &Q4KTensor, r: usize, x: &[f32]) -> f32 {
        let per = t.cols / QK_K;
        let mut buf = [0.0f32; QK_K];
        let mut s = 0.0;
        for (i, x) in x.chunks_exact(QK_K).enumerate() {
            t.dequantize_range(r * per + i, r * per + i + 1, &mut buf);
            s += dot_f32(&buf, x);
        }
        s
    }

    /// Q6_K row `r` on f32 activations, as [`dot_q4k`].
    pub fn dot_q6k(t: &Q6KTensor, r: usize, x: &[f32]) -> f32 {
        let per = t.cols / QK_K;
        let mut buf = [0.0f32; QK_K];
        let mut s = 0.0;
        for (i, x) in x.chunks_exact(QK_K).enumerate() {
            t.dequantize_range(r * per + i, r * per + i + 1, &mut buf);
            s += dot_f32(&buf, x);
        }
        s
    }

    /// f16 / bf16 rows, widened 256 values at a time on the stack.
    pub fn dot_half<T>(w: &[T], x: &[f32]) -> f32
    where
        [T]: HalfFloatSliceExt,
    {
        let mut buf = [0.0f32; 256];
        let mut s = 0.0;
        for (w, x) in w.chunks(256).zip(x.chunks(256)) {
            w.convert_to_f32_slice(&mut buf[..w.len()]);
            s += dot_f32(&buf[..w.len()], x);
        }
        s
    }

    simd_dispatch! {
        pub fn dot_blocks(f: BlockFormat, d: &[f16], m: &[f16], q: &[u8], x: &[f32], xsums: &[f32]) -> f32 {
            let cb = f.code_bytes();
            let mut total = 0.0f32;
            for (b, (q, x)) in q.chunks_exact(cb).zip(x.chunks_exact(QK)).enumerate() {
                let s = d[b].to_f32();
                let mut acc = [0.0f32; 16];
                match f {
                    BlockFormat::Q8_0 => {
                        for i in 0..16 {
                            acc[i] = (q[i] as i8 as f32).mul_add(x[i], (q[i + 16] as i8 as f32) * x[i + 16]);
                        }
                    }
                    _ => {
                        for i in 0..16 {
                            acc[i] = ((q[i] & 15) as f32).mul_add(x[i], ((q[i] >> 4) as f32) * x[i + 16]);
                        }
                    }
                }
                let dot: f32 = acc.iter().sum();
                // Codes are stored unsigned: Q4_0 subtracts 8 steps, Q4_1 adds its minimum.
                total += match f {
                    BlockFormat::Q8_0 => s * dot,
                    BlockFormat::Q4_0 => s * (dot - 8.0 * xsums[b]),
                    BlockFormat::Q4_1 => s * dot + m[b].to_f32() * xsums[b],
                };
            }
            total
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod avx512 {
    use super::{QK, bf16, f16};
    use std::arch::x86_64::*;

    #[inline]
    #[target_feature(enable = "avx512f")]
    fn hsum(v: __m512) -> f32 {
        _mm512_reduce_add_ps(v)
    }

    /// Widens up to 16 f16 scales to f32 on the stack.
    #[inline]
    #[target_feature(enable = "avx512f,f16c")]
    unsafe fn scales16(d: &[f16], out: &mut [f32; 16]) {
        let mut tmp = [0u16; 16];
        for (t, v) in tmp.iter_mut().zip(d) {
            *t = v.to_bits();
        }
        // SAFETY: tmp and out hold 16 values each.
        unsafe {
            _mm512_storeu_ps(out.as_mut_ptr(), _mm512_cvtph_ps(_mm256_loadu_si256(tmp.as_ptr().cast())))
        };
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
    pub unsafe fn dot_f32(w: &[f32], x: &[f32]) -> f32 {
        let k = w.len();
        let mut acc = [_mm512_setzero_ps(); 4];
        let main = k - k % 64;
        let (pw, px) = (w.as_ptr(), x.as_ptr());
        let mut i = 0;
        while i < main {
            for (u, a) in acc.iter_mut().enumerate() {
                // SAFETY: i + 64 <= k.
                unsafe {
                    *a = _mm512_fmadd_ps(
                        _mm512_loadu_ps(pw.add(i + 16 * u)),
                        _mm512_loadu_ps(px.add(i + 16 * u)),
                        *a,
                    )
                };
            }
            i += 64;
        }
        let tail: f32 = w[main..].iter().zip(&x[main..]).map(|(a, b)| a * b).sum();
        hsum(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]))) + tail
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
    pub unsafe fn dot_f16(w: &[f16], x: &[f32]) -> f32 {
        let k = w.len();
        let mut acc = [_mm512_setzero_ps(); 4];
        let main = k - k % 64;
        let (pw, px) = (w.as_ptr().cast::<u8>(), x.as_ptr());
        let mut i = 0;
        while i < main {
            for (u, a) in acc.iter_mut().enumerate() {
                // SAFETY: i + 64 <= k; 16 halves are 32 bytes.
                unsafe {
                    let wv = _mm512_cvtph_ps(_mm256_loadu_si256(pw.add(2 * (i + 16 * u)).cast()));
                    *a = _mm512_fmadd_ps(wv, _mm512_loadu_ps(px.add(i + 16 * u)), *a);
                }
            }
            i += 64;
        }
        let tail: f32 = w[main..].iter().zip(&x[main..]).map(|(a, b)| a.to_f32() * b).sum();
        hsum(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]))) + tail
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
    pub unsafe fn dot_bf16(w: &[bf16], x: &[f32]) -> f32 {
        let k = w.len();
        let mut acc = [_mm512_setzero_ps(); 4];
        let main = k - k % 64;
        let (pw, px) = (w.as_ptr().cast::<u8>(), x.as_ptr());
        let mut i = 0;
        while i < main {
            for (u, a) in acc.iter_mut().enumerate() {
                // SAFETY: i + 64 <= k; bf16 is the high half of an f32.
                unsafe {
                    let bits = _mm512_cvtepu16_epi32(_mm256_loadu_si256(pw.add(2 * (i + 16 * u)).cast()));
                    let wv = _mm512_castsi512_ps(_mm512_slli_epi32(bits, 16));
                    *a = _mm512_fmadd_ps(wv, _mm512_loadu_ps(px.add(i + 16 * u)), *a);
                }
            }
            i += 64;
        }
        let tail: f32 = w[main..].iter().zip(&x[main..]).map(|(a, b)| a.to_f32() * b).sum();
        hsum(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]))) + tail
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
    pub unsafe fn dot_i8(w: &[i8], x: &[f32]) -> f32 {
        let k = w.len();
        let mut acc = [_mm512_setzero_ps(); 4];
        let main = k - k % 64;
        let (pw, px) = (w.as_ptr(), x.as_ptr());
        let mut i = 0;
        while i < main {
            for (u, a) in acc.iter_mut().enumerate() {
                // SAFETY: i + 64 <= k.
                unsafe {
                    let wv =
                        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(pw.add(i + 16 * u).cast())));
                    *a = _mm512_fmadd_ps(wv, _mm512_loadu_ps(px.add(i + 16 * u)), *a);
                }
            }
            i += 64;
        }
        let tail: f32 = w[main..].iter().zip(&x[main..]).map(|(&a, b)| a as f32 * b).sum();
        hsum(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]))) + tail
    }

    #[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
    pub unsafe fn dot_q8_0(d: &[f16], qs: &[u8], x: &[f32]) -> f32 {
        let mut acc = [_mm512_setzero_ps(); 2];
        let mut ds = [0.0f32; 16];
        for (g, dg) in d.chunks(16).enumerate() {
            // SAFETY: dg holds at most 16 scales.
            unsafe { scales16(dg, &mut ds) };
            for (j, &s) in ds.iter().enumerate().take(dg.len()) {
                let b = g * 16 + j;
                // SAFETY: block b has 32 codes and 32 values of x.
                unsafe {
                    let q = qs.as_ptr().add(b * QK);
                    let xp = x.as_ptr().add(b * QK);
                    let w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q.cast())));
                    let w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(q.add(16).cast())));
                    let dot = _mm512_fmadd_ps(
                        w1,
                        _mm512_loadu_ps(xp.add(16)),
                        _mm512_mul_ps(w0, _mm512_loadu_ps(xp)),
                    );
                    acc[j & 1] = _mm512_fmadd_ps(dot, _mm512_set1_ps(s), acc[j & 1]);
                }
            }
        }
        hsum(_mm512_add_ps(acc[0], acc[1]))
    }

    /// Q4_0 (`mins = None`) and Q4_1 rows: codes dotted unsigned, then the
    /// offset term (`-8 d` or `min`) times each block's sum of x.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,fma,f16c")]
    pub unsafe fn dot_q4(d: &[f16], mins: Option<&[f16]>, qs: &[u8], x: &[f32], xsums: &[f32]) -> f32 {
        let low = _mm512_set1_epi32(15);
        let mut acc = [_mm512_setzero_ps(); 2];
        let mut ds = [0.0f32; 16];
        let mut ms = [0.0f32; 16];
        let mut corr = _mm512_setzero_ps();
        for (g, dg) in d.chunks(16).enumerate() {
            // SAFETY: at most 16 scales / minimums per group.
            unsafe { scales16(dg, &mut ds) };
            let n = dg.len();
            let xs = &xsums[g * 16..g * 16 + n];
            let mask: __mmask16 = if n == 16 { !0 } else { (1u16 << n) - 1 };
            // SAFETY: masked lanes are not read.
            let xsv = unsafe { _mm512_maskz_loadu_ps(mask, xs.as_ptr()) };
            let off = match mins {
                Some(m) => {
                    // SAFETY: as above.
                    unsafe { scales16(&m[g * 16..g * 16 + n], &mut ms) };
                    // SAFETY: ms holds 16 values.
                    unsafe { _mm512_maskz_loadu_ps(mask, ms.as_ptr()) }
                }
                // SAFETY: ds holds 16 values.
                None => {
                    _mm512_mul_ps(unsafe { _mm512_maskz_loadu_ps(mask, ds.as_ptr()) }, _mm512_set1_ps(-8.0))
                }
            };
            corr = _mm512_fmadd_ps(off, xsv, corr);
            for (j, &s) in ds.iter().enumerate().take(n) {
                let b = g * 16 + j;
                // SAFETY: block b has 16 code bytes and 32 values of x.
                unsafe {
                    let v = _mm512_cvtepu8_epi32(_mm_loadu_si128(qs.as_ptr().add(b * QK / 2).cast()));
                    let lo = _mm512_cvtepi32_ps(_mm512_and_si512(v, low));
                    let hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
                    let xp = x.as_ptr().add(b * QK);
                    let dot = _mm512_fmadd_ps(
                        hi,
                        _mm512_loadu_ps(xp.add(16)),
                        _mm512_mul_ps(lo, _mm512_loadu_ps(xp)),
                    );
                    acc[j & 1] = _mm512_fmadd_ps(dot, _mm512_set1_ps(s), acc[j & 1]);
                }
            }
        }
        hsum(_mm512_add_ps(acc[0], acc[1])) + hsum(corr)
    }
}
