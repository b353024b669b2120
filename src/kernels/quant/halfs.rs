//! f32 to and from f16 / bf16, serially: the AVX-512 kernels when the CPU has
//! them (16 values per instruction), else the AVX2 ones (8), else the `half` crate's slice
//! conversions (F16C 8 at a time where present, else portable). Both give
//! the same bits: the AVX-512 f16 path runs the instruction `half` uses, and
//! the bf16 path repeats `half`'s integer rounding.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

/// `out[i] = x[i]` rounded to f16, to nearest even.
///
/// # Panics
/// When the lengths differ.
pub fn f32_to_f16(x: &[f32], out: &mut [f16]) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx512() {
        // SAFETY: has_avx512() checked every feature the kernel is compiled for.
        return unsafe { super::avx512::to_f16(x, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if super::has_avx2() {
        // SAFETY: has_avx2() checked every feature the kernel is compiled for.
        return unsafe { super::avx2::halfs::to_f16(x, out) };
    }
    out.convert_from_f32_slice(x)
}

/// `out[i] = x[i]` rounded to bf16, to nearest even (NaN stays NaN).
///
/// # Panics
/// When the lengths differ.
pub fn f32_to_bf16(x: &[f32], out: &mut [bf16]) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx512() {
        // SAFETY: has_avx512() checked every feature the kernel is compiled for.
        return unsafe { super::avx512::to_bf16(x, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if super::has_avx2() {
        // SAFETY: has_avx2() checked every feature the kernel is compiled for.
        return unsafe { super::avx2::halfs::to_bf16(x, out) };
    }
    out.convert_from_f32_slice(x)
}

/// `out[i] = h[i]` as f32 (exact).
///
/// # Panics
/// When the lengths differ.
pub fn f16_to_f32(h: &[f16], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx512() {
        // SAFETY: has_avx512() checked every feature the kernel is compiled for.
        return unsafe { super::avx512::from_f16(h, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if super::has_avx2() {
        // SAFETY: has_avx2() checked every feature the kernel is compiled for.
        return unsafe { super::avx2::halfs::from_f16(h, out) };
    }
    h.convert_to_f32_slice(out)
}

/// `out[i] = h[i]` as f32 (exact).
///
/// # Panics
/// When the lengths differ.
pub fn bf16_to_f32(h: &[bf16], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx512() {
        // SAFETY: has_avx512() checked every feature the kernel is compiled for.
        return unsafe { super::avx512::from_bf16(h, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if super::has_avx2() {
        // SAFETY: has_avx2() checked every feature the kernel is compiled for.
        return unsafe { super::avx2::halfs::from_bf16(h, out) };
    }
    h.convert_to_f32_slice(out)
}
