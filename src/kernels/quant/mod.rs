//! Quantization kernels shared by the quantization and inference suites.
//!
//! The API is small on purpose:
//!
//! - [`actq`]: the int8 decode kernels' activation quantization, llama.cpp's
//!   rules bit for bit (Q8_0, Q8_1, Q8_K: the weight format's `vec_dot_type`).
//! - [`int8`]: INT8 symmetric / asymmetric, per-tensor / per-channel
//!   quantize and dequantize, and per-token activation quantization.
//! - [`blocks`]: llama.cpp block formats Q8_0, Q4_0 and Q4_1 (32 values per
//!   block with an f16 scale, Q4_1 with an f16 minimum), 4-bit packing.
//! - [`kquant`]: llama.cpp's Q4_K (super-blocks of 256, 6-bit sub-block
//!   scales and minimums, 4.5 bits per weight).
//! - [`q6k`]: llama.cpp's Q6_K (super-blocks of 256, 16 signed 8-bit
//!   sub-block scales, 6-bit codes; 6.5625 bits per weight) with its int8
//!   activation dot on AVX-512 VNNI.
//! - [`w4a8`]: 4-bit weights times int8 activations (llama.cpp's Q4 x Q8
//!   dot) on AVX-512 VNNI, the decode kernels of Q4_0 / Q4_1 / Q4_K.
//! - [`halfs`]: f32 to and from f16 / bf16 slices.
//! - [`ternary`]: BitNet b1.58 weights (absmean scale, values in {-1, 0, 1}),
//!   2-bit bit-plane packing for compute and 5-trits-per-byte for storage.
//! - [`avx2`]: the AVX2 + FMA decode kernels (int8 and f32 activations,
//!   ternary) that CPUs without AVX-512 VNNI run.
//! - [`dispatch`]: which implementation each kernel runs per ISA level
//!   (`tfbench sysinfo --kernels`).
//! - [`igemm`]: int8 x int8 -> i32 GEMM on AVX-512 VNNI, AVX-VNNI, AVX2 or
//!   portable code, chosen at run time ([`Int8Path::detect`]).
//! - [`linear`]: [`QMatrix`], a `[out, in]` weight matrix in any
//!   [`WeightFormat`], with `y = x W^T` for decode (fused dequantize-and-dot)
//!   and prefill (dequantized tiles through the f32 GEMM) shapes; and
//!   [`DynamicLinear`], which quantizes activations per token on every call.
//!
//! Every kernel with a SIMD path has a portable twin, and the unit tests
//! check the two against each other and against naive references. The bulk
//! quantizers and block decoders have AVX-512 twins in `avx512`, chosen at
//! run time, that give the same codes bit for bit.

pub mod actq;
#[cfg(target_arch = "x86_64")]
pub mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
pub mod blocks;
pub mod dispatch;
pub mod halfs;
pub mod igemm;
pub mod int8;
pub mod kquant;
pub mod lanes;
pub mod linear;
pub mod q6k;
pub mod ternary;
pub mod w4a8;
pub mod w8a8;

pub use dispatch::DotIsa;
pub use igemm::{I8Weights, Int8Path, gemm_i8};
pub use linear::{DynamicLinear, QMatrix, WeightFormat, ggml_row_bytes};
use rayon::prelude::*;

/// The features the AVX-512 paths are compiled for.
pub const AVX512: [crate::isa::Feature; 5] = {
    use crate::isa::Feature::*;
    [Avx512f, Avx512bw, Avx512vl, F16c, Fma]
};

/// The features the AVX2 paths are compiled for ([`avx2`]).
pub const AVX2: [crate::isa::Feature; 4] = {
    use crate::isa::Feature::*;
    [Avx, Avx2, Fma, F16c]
};

/// Whether the AVX2 paths can run here (the CPU has them and
/// `TFBENCH_MAX_ISA` allows them).
pub fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::isa::has_all(&AVX2)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the AVX-512 paths (F, BW, VL) can run here (the CPU has them and
/// `TFBENCH_MAX_ISA` allows them): the weight-only kernels use them when
/// present, else their portable versions.
pub fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::isa::has_all(&AVX512)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Outputs at least this long (16 MiB of f32) are written by [`stream_fill`]
/// with non-temporal stores; shorter ones are likely to be read again soon.
pub const STREAM_MIN: usize = 1 << 22;

/// Values per cache-resident tile of [`stream_fill`] (8 KiB: in L1).
pub const STREAM_TILE: usize = 2048;

/// Fills `out` in parallel tasks of `task` values (rounded to whole tiles):
/// `fill(offset, tile)` computes the values `offset..offset + tile.len()`
/// into an L1-resident tile (offsets are multiples of [`STREAM_TILE`]),
/// which is then copied to `out` with non-temporal stores when `out` has at
/// least [`STREAM_MIN`] values and the CPU has AVX-512. A bulk dequantizer's
/// output is far larger than the caches, and ordinary stores would first read
/// every destination line (read-for-ownership): 4 extra bytes of traffic per
/// value written, more than the codes themselves.
pub fn stream_fill(out: &mut [f32], task: usize, fill: impl Fn(usize, &mut [f32]) + Sync) {
    let task = task.max(STREAM_TILE) / STREAM_TILE * STREAM_TILE;
    let nt = out.len() >= STREAM_MIN && has_avx512();
    out.par_chunks_mut(task).enumerate().for_each(|(t, o)| {
        if !nt {
            for (i, o) in o.chunks_mut(STREAM_TILE).enumerate() {
                fill(t * task + i * STREAM_TILE, o);
            }
            return;
        }
        let mut tile = [0.0f32; STREAM_TILE];
        for (i, o) in o.chunks_mut(STREAM_TILE).enumerate() {
            let buf = &mut tile[..o.len()];
            fill(t * task + i * STREAM_TILE, buf);
            #[cfg(target_arch = "x86_64")]
            // SAFETY: nt implies has_avx512(); buf and o have the same length.
            unsafe {
                stream_copy(buf, o)
            };
            #[cfg(not(target_arch = "x86_64"))]
            o.copy_from_slice(buf);
        }
        #[cfg(target_arch = "x86_64")]
        // SAFETY: sfence has no preconditions; it orders the streaming stores
        // before the task's completion is published to other threads.
        unsafe {
            std::arch::x86_64::_mm_sfence()
        };
    });
}

/// `dst = src` with 64-byte non-temporal stores (unaligned edges plain).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn stream_copy(src: &[f32], dst: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = dst.len().min(src.len());
    let head = ((16 - (dst.as_ptr() as usize / 4) % 16) % 16).min(n);
    dst[..head].copy_from_slice(&src[..head]);
    let mut i = head;
    while i + 16 <= n {
        // SAFETY: i + 16 <= n, and dst + i is 64-byte aligned (f32s are 4-aligned,
        // head advanced to the next multiple of 16 values).
        unsafe { _mm512_stream_ps(dst.as_mut_ptr().add(i), _mm512_loadu_ps(src.as_ptr().add(i))) };
        i += 16;
    }
    dst[i..n].copy_from_slice(&src[i..n]);
}

/// Rounds to nearest, ties to even (the quantizers' rounding), for |x| < 2^22 (all quantizer inputs
/// are clamped far below that first). A float trick rather than
/// `round_ties_even` so the baseline x86-64 build vectorises it instead of
/// calling libm.
#[inline(always)]
pub fn rne(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23
    (x + MAGIC) - MAGIC
}

/// `x` limited to `[lo, hi]`, with NaN mapped to `lo` (maxnum semantics),
/// unlike `f32::clamp`, which propagates NaN into the codes.
#[inline(always)]
#[allow(clippy::manual_clamp)]
pub fn bound(x: f32, lo: f32, hi: f32) -> f32 {
    x.max(lo).min(hi)
}

/// `x` clamped to `[lo, hi]` and truncated to an integer. `max`/`min`
/// (maxnum semantics) also turn NaN into `lo`, so the value is always in
/// range and the unchecked conversion is sound; Rust's saturating `as i32`
/// would be scalarised by LLVM (a `vpinsrd` per element), several times slower.
#[inline(always)]
pub fn clamp_to_i32(x: f32, lo: f32, hi: f32) -> i32 {
    debug_assert!(lo >= i32::MIN as f32 && hi <= i32::MAX as f32 && lo <= hi);
    let v = bound(x, lo, hi);
    // SAFETY: v is finite and within [lo, hi], inside the i32 range.
    unsafe { v.to_int_unchecked::<i32>() }
}

#[cfg(test)]
mod tests {
    #[test]
    fn stream_fill_writes_every_value_at_any_alignment() {
        for (len, skip) in [(super::STREAM_MIN + 37, 1usize), (5000, 3), (super::STREAM_MIN, 0)] {
            let mut v = vec![0.0f32; len + skip];
            super::stream_fill(&mut v[skip..], 1 << 16, |off, t| {
                for (i, o) in t.iter_mut().enumerate() {
                    *o = (off + i) as f32;
                }
            });
            assert!(v[skip..].iter().enumerate().all(|(i, &x)| x == i as f32), "len {len} skip {skip}");
        }
    }

    #[test]
    fn rne_matches_round_ties_even() {
        for i in -4000..4000 {
            let x = i as f32 * 0.25 + 0.001 * (i % 3) as f32;
            assert_eq!(super::rne(x), x.round_ties_even(), "{x}");
        }
        assert_eq!(super::rne(2.5), 2.0);
        assert_eq!(super::rne(-3.5), -4.0);
    }

    #[test]
    fn clamp_to_i32_saturates_truncates_and_maps_nan_to_lo() {
        assert_eq!(super::clamp_to_i32(f32::NAN, -127.0, 127.0), -127);
        assert_eq!(super::clamp_to_i32(1e30, -127.0, 127.0), 127);
        assert_eq!(super::clamp_to_i32(-3.9, -127.0, 127.0), -3);
        assert_eq!(super::clamp_to_i32(15.7, 0.0, 15.0), 15);
    }
}
