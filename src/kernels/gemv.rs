//! `c[n] = B[n x k] a[k]` for one activation row against `[out, in]`
//! weights: the decode step of a language model. `gemm` handles `m == 1`
//! poorly for wide outputs (an LM head of 50257 rows reaches a fraction of
//! memory bandwidth), so [`super::matmul`] routes that shape here: parallel
//! over blocks of output rows, each a dot product streaming one weight row.

use rayon::prelude::*;

/// Output rows per parallel task: enough work to amortise a rayon steal.
const ROWS_PER_TASK: usize = 64;

/// Below this many weights the call stays on the caller's thread.
const PAR_MIN: usize = 1 << 15;

#[inline(always)]
fn dot_body(a: &[f32], b: &[f32]) -> f32 {
    // 32 independent accumulators: two AVX-512 FMA chains per cycle with
    // room to hide their latency.
    let mut acc = [0.0f32; 32];
    let (ac, bc) = (a.chunks_exact(32), b.chunks_exact(32));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for i in 0..32 {
            acc[i] = x[i].mul_add(y[i], acc[i]);
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in ar.iter().zip(br) {
        tail = x.mul_add(*y, tail);
    }
    acc.iter().sum::<f32>() + tail
}

/// Dot product of equal-length slices, compiled for AVX-512 / AVX2+FMA and
/// picked at run time (the crate targets baseline x86-64).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe fn v4(a: &[f32], b: &[f32]) -> f32 {
            dot_body(a, b)
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn v3(a: &[f32], b: &[f32]) -> f32 {
            dot_body(a, b)
        }
        use crate::isa::Feature::{Avx2, Avx512f, Fma};
        if crate::isa::has_all(&[Avx512f, Avx2, Fma]) {
            // SAFETY: the CPU supports every feature v4 was compiled for.
            return unsafe { v4(a, b) };
        }
        if crate::isa::has_all(&[Avx2, Fma]) {
            // SAFETY: as above for v3.
            return unsafe { v3(a, b) };
        }
    }
    dot_body(a, b)
}

/// `c (+)= B a` with `B` `[n x k]` row-major, on up to `threads` threads of
/// the current rayon pool.
pub fn gemv_nxk(threads: usize, k: usize, n: usize, a: &[f32], b: &[f32], c: &mut [f32], accumulate: bool) {
    let row = |j: usize, out: &mut f32| {
        let d = dot(a, &b[j * k..(j + 1) * k]);
        *out = if accumulate { *out + d } else { d };
    };
    if threads > 1 && n * k >= PAR_MIN {
        c.par_chunks_mut(ROWS_PER_TASK)
            .enumerate()
            .for_each(|(t, cs)| cs.iter_mut().enumerate().for_each(|(i, o)| row(t * ROWS_PER_TASK + i, o)));
    } else {
        c.iter_mut().enumerate().for_each(|(j, o)| row(j, o));
    }
}
