//! f32 to and from f16 / bf16 on AVX2 + F16C, 8 values per step, bit for
//! bit what the `half` crate gives (the f16 conversions are the F16C
//! instructions `half` uses; the bf16 rounding repeats `half`'s integer
//! rule: round half to even on the dropped 16 bits, NaN kept quiet).

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use std::arch::x86_64::*;

/// f32 to f16, to nearest even.
///
/// # Panics
/// When the lengths differ.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn to_f16(x: &[f32], out: &mut [f16]) {
    assert_eq!(x.len(), out.len(), "to_f16: length mismatch");
    let main = x.len() - x.len() % 8;
    for (c, o) in x[..main].chunks_exact(8).zip(out[..main].chunks_exact_mut(8)) {
        // SAFETY: c and o hold 8 values each.
        unsafe {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(c.as_ptr()));
            _mm_storeu_si128(o.as_mut_ptr().cast(), h);
        }
    }
    out[main..].convert_from_f32_slice(&x[main..]);
}

/// f16 to f32 (exact).
///
/// # Panics
/// When the lengths differ.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn from_f16(h: &[f16], out: &mut [f32]) {
    assert_eq!(h.len(), out.len(), "from_f16: length mismatch");
    let main = h.len() - h.len() % 8;
    for (c, o) in h[..main].chunks_exact(8).zip(out[..main].chunks_exact_mut(8)) {
        // SAFETY: c and o hold 8 values each.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), _mm256_cvtph_ps(_mm_loadu_si128(c.as_ptr().cast()))) };
    }
    h[main..].convert_to_f32_slice(&mut out[main..]);
}

/// f32 to bf16: `x >> 16`, plus one when the dropped half is above a half
/// step or exactly half with an odd result; NaN keeps its top bits with the
/// quiet bit set.
///
/// # Panics
/// When the lengths differ.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn to_bf16(x: &[f32], out: &mut [bf16]) {
    assert_eq!(x.len(), out.len(), "to_bf16: length mismatch");
    let set = _mm256_set1_epi32;
    let zero = _mm256_setzero_si256();
    let main = x.len() - x.len() % 8;
    for (c, o) in x[..main].chunks_exact(8).zip(out[..main].chunks_exact_mut(8)) {
        // SAFETY: c holds 8 values.
        let b = unsafe { _mm256_loadu_si256(c.as_ptr().cast()) };
        let top = _mm256_srli_epi32::<16>(b);
        // Round up when bit 15 is set and any of bits 0-14 or 16 is.
        let half_clear = _mm256_cmpeq_epi32(_mm256_and_si256(b, set(0x8000)), zero);
        let rest_clear = _mm256_cmpeq_epi32(_mm256_and_si256(b, set(0x1_7FFF)), zero);
        let up = _mm256_andnot_si256(_mm256_or_si256(half_clear, rest_clear), set(-1));
        let v = _mm256_sub_epi32(top, up);
        let nan = _mm256_cmpgt_epi32(_mm256_and_si256(b, set(0x7FFF_FFFF)), set(0x7F80_0000));
        let v = _mm256_blendv_epi8(v, _mm256_or_si256(top, set(0x40)), nan);
        // Every value fits 16 bits (a carry out of 0xFFFF would need a NaN input).
        let p = _mm256_permute4x64_epi64::<0b1000>(_mm256_packus_epi32(v, v));
        // SAFETY: o holds 8 values (16 bytes).
        unsafe { _mm_storeu_si128(o.as_mut_ptr().cast(), _mm256_castsi256_si128(p)) };
    }
    out[main..].convert_from_f32_slice(&x[main..]);
}

/// bf16 to f32 (exact: the bits moved to the top half).
///
/// # Panics
/// When the lengths differ.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn from_bf16(h: &[bf16], out: &mut [f32]) {
    assert_eq!(h.len(), out.len(), "from_bf16: length mismatch");
    let main = h.len() - h.len() % 8;
    for (c, o) in h[..main].chunks_exact(8).zip(out[..main].chunks_exact_mut(8)) {
        // SAFETY: c and o hold 8 values each.
        unsafe {
            let w = _mm256_cvtepu16_epi32(_mm_loadu_si128(c.as_ptr().cast()));
            _mm256_storeu_ps(o.as_mut_ptr(), _mm256_castsi256_ps(_mm256_slli_epi32::<16>(w)));
        }
    }
    h[main..].convert_to_f32_slice(&mut out[main..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every conversion, bit for bit against `half`, on special values
    /// (zeros, infinities, NaNs, subnormals, rounding ties) and on a sweep
    /// of bit patterns, at lengths with every tail.
    #[test]
    fn conversions_equal_half_bit_for_bit() {
        if !crate::kernels::quant::has_avx2() {
            eprintln!("skipped: this CPU (or TFBENCH_MAX_ISA) has no AVX2, FMA and F16C");
            return;
        }
        let mut bits: Vec<u32> = vec![
            0,
            0x8000_0000,
            0x7F80_0000,
            0xFF80_0000,
            0x7FC0_0000,
            0x7F80_0001,
            0xFFFF_FFFF,
            0x0000_0001,
            0x3F80_8000,
            0x3F81_8000,
            0x3F80_8001,
            0x7F7F_FFFF,
            0x477F_F000,
            0x3880_0000,
            0x3300_0000,
        ];
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            bits.push((s >> 32) as u32);
        }
        for len in [bits.len(), 7, 8, 9, 17] {
            let x: Vec<f32> = bits[..len].iter().map(|&b| f32::from_bits(b)).collect();
            let (mut h, mut hw) = (vec![f16::ZERO; len], vec![f16::ZERO; len]);
            let (mut b, mut bw) = (vec![bf16::ZERO; len], vec![bf16::ZERO; len]);
            // SAFETY: has_avx2() checked the features.
            unsafe { to_f16(&x, &mut h) };
            hw.convert_from_f32_slice(&x);
            assert!(h.iter().zip(&hw).all(|(a, b)| a.to_bits() == b.to_bits()), "to_f16 len {len}");
            // SAFETY: as above.
            unsafe { to_bf16(&x, &mut b) };
            bw.convert_from_f32_slice(&x);
            for (i, (a, w)) in b.iter().zip(&bw).enumerate() {
                assert_eq!(a.to_bits(), w.to_bits(), "to_bf16 of {:#010x}", bits[i]);
            }
            let (mut y, mut yw) = (vec![0.0f32; len], vec![0.0f32; len]);
            // SAFETY: as above.
            unsafe { from_f16(&h, &mut y) };
            h.convert_to_f32_slice(&mut yw);
            assert!(y.iter().zip(&yw).all(|(a, b)| a.to_bits() == b.to_bits()), "from_f16 len {len}");
            // SAFETY: as above.
            unsafe { from_bf16(&b, &mut y) };
            b.convert_to_f32_slice(&mut yw);
            assert!(y.iter().zip(&yw).all(|(a, b)| a.to_bits() == b.to_bits()), "from_bf16 len {len}");
        }
    }
}
