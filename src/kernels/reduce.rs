//! Lane-parallel sum and max over a slice, the building blocks of the
//! row kernels ([`super::norm`], [`super::softmax`]) and of the tensor
//! suite's reductions.
//!
//! Every helper is `#[inline(always)]` so it compiles for the target
//! features of the `simd_dispatch!` kernel that calls it; the explicit lane
//! accumulators let the loops vectorise without reassociation flags.

/// Independent accumulators (two AVX-512 or four AVX2 registers).
pub(crate) const LANES: usize = 32;
/// Elements summed lane-wise before the partial sums are combined.
pub(crate) const BLOCK: usize = 4096;

/// Sum of `f(x)` with [`LANES`] accumulators combined by a pairwise tree.
#[inline(always)]
pub(crate) fn lanes_sum_map(x: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for i in 0..LANES {
            acc[i] += f(c[i]);
        }
    }
    finish_lanes(acc, chunks.remainder(), f)
}

/// Adds the tail `rest` (shorter than [`LANES`]) into the first lanes, then
/// combines the lanes by a pairwise tree: the end every lane sum shares, so
/// [`lanes_sum`] and [`lanes_sum_simd`] agree to the bit.
#[inline(always)]
fn finish_lanes(mut acc: [f32; LANES], rest: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    for (a, &v) in acc.iter_mut().zip(rest) {
        *a += f(v);
    }
    let mut w = LANES;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            acc[i] += acc[i + w];
        }
    }
    acc[0]
}

/// [`lanes_sum`] with the lanes held in vector registers explicitly (two
/// AVX-512 or four AVX2 registers), where the CPU has them; the same adds
/// in the same order, so the same bits. Written out because LLVM's
/// vectoriser, left to itself inside tfbench, split the 32 accumulators
/// into 2-wide vectors (16 `vaddps xmm` per 32 values): `sum 4096x4096`
/// ran 1.7-2.5x slower than `max` over the same bytes and scattered by 25%
/// from sample to sample, since compute-bound work shares its core's ports
/// with whatever the sibling hyperthread runs.
pub(crate) fn lanes_sum_simd(x: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::isa::has_all(&[crate::isa::Feature::Avx512f]) {
            // SAFETY: the CPU has AVX-512F (and the ISA cap allows it).
            return unsafe { x86::lanes_sum_avx512(x) };
        }
        if crate::isa::has_all(&[crate::isa::Feature::Avx2]) {
            // SAFETY: the CPU has AVX2 (and the ISA cap allows it).
            return unsafe { x86::lanes_sum_avx2(x) };
        }
    }
    lanes_sum(x)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{LANES, finish_lanes};
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn lanes_sum_avx512(x: &[f32]) -> f32 {
        let (chunks, rest) = x.as_chunks::<LANES>();
        let (mut a, mut b) = (_mm512_setzero_ps(), _mm512_setzero_ps());
        for c in chunks {
            // SAFETY: `c` holds LANES = 32 floats: two unaligned 16-float loads.
            unsafe {
                a = _mm512_add_ps(a, _mm512_loadu_ps(c.as_ptr()));
                b = _mm512_add_ps(b, _mm512_loadu_ps(c.as_ptr().add(16)));
            }
        }
        let mut acc = [0.0f32; LANES];
        // SAFETY: `acc` holds 32 floats: two unaligned 16-float stores.
        unsafe {
            _mm512_storeu_ps(acc.as_mut_ptr(), a);
            _mm512_storeu_ps(acc.as_mut_ptr().add(16), b);
        }
        finish_lanes(acc, rest, |v| v)
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn lanes_sum_avx2(x: &[f32]) -> f32 {
        let (chunks, rest) = x.as_chunks::<LANES>();
        let mut r = [_mm256_setzero_ps(); 4];
        for c in chunks {
            for (k, r) in r.iter_mut().enumerate() {
                // SAFETY: `c` holds 32 floats; k * 8 + 8 <= 32.
                *r = _mm256_add_ps(*r, unsafe { _mm256_loadu_ps(c.as_ptr().add(8 * k)) });
            }
        }
        let mut acc = [0.0f32; LANES];
        for (k, r) in r.iter().enumerate() {
            // SAFETY: `acc` holds 32 floats; k * 8 + 8 <= 32.
            unsafe { _mm256_storeu_ps(acc.as_mut_ptr().add(8 * k), *r) };
        }
        finish_lanes(acc, rest, |v| v)
    }
}

/// Sum of `x` with [`LANES`] accumulators combined by a pairwise tree.
#[inline(always)]
pub(crate) fn lanes_sum(x: &[f32]) -> f32 {
    lanes_sum_map(x, |v| v)
}

/// Sum of `f(x)` over a row of any length: [`BLOCK`]s summed lane-wise,
/// block sums added in order (rows are short enough that this stays
/// within the norms' and softmax's tolerances).
///
/// A plain loop, not `chunks().map(closure).sum()`: that closure is compiled
/// without the caller's target features and was not inlined, so the lane
/// loop ran as baseline SSE (LayerNorm measured 1.2-1.6x slower by `tfbench
/// ab` until this was a loop).
#[inline(always)]
pub(crate) fn row_sum_map(x: &[f32], f: impl Fn(f32) -> f32 + Copy) -> f32 {
    let mut s = 0.0f32;
    for b in x.chunks(BLOCK) {
        s += lanes_sum_map(b, f);
    }
    s
}

/// Largest value (`-inf` when empty); NaNs are skipped rather than
/// propagated, since a strict `>` never selects them.
#[inline(always)]
pub(crate) fn lanes_max(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let mut chunks = x.chunks_exact(LANES);
    for c in &mut chunks {
        for i in 0..LANES {
            acc[i] = if c[i] > acc[i] { c[i] } else { acc[i] };
        }
    }
    let mut m = chunks.remainder().iter().fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m });
    for a in acc {
        m = if a > m { a } else { m };
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_register_lane_sum_gives_the_portable_one_s_bits() {
        let x = crate::util::uniform(5000, -0.5, 1.5, 3);
        for n in [0, 1, 31, 32, 33, 64, 100, 4095, 4096, 5000] {
            let want = lanes_sum(&x[..n]);
            assert_eq!(lanes_sum_simd(&x[..n]).to_bits(), want.to_bits(), "n = {n}");
            #[cfg(target_arch = "x86_64")]
            {
                use crate::isa::{Feature, has_all};
                // Each path this CPU has, whichever the dispatch picks.
                if has_all(&[Feature::Avx512f]) {
                    // SAFETY: checked just above.
                    assert_eq!(
                        unsafe { x86::lanes_sum_avx512(&x[..n]) }.to_bits(),
                        want.to_bits(),
                        "n = {n}"
                    );
                }
                if has_all(&[Feature::Avx2]) {
                    // SAFETY: checked just above.
                    assert_eq!(unsafe { x86::lanes_sum_avx2(&x[..n]) }.to_bits(), want.to_bits(), "n = {n}");
                }
            }
        }
    }

    #[test]
    fn sums_and_max_match_f64_on_odd_lengths() {
        for n in [0, 1, 31, 33, 37 * 53, BLOCK + 7, 3 * BLOCK + 1] {
            let x = crate::util::randn(n, n as u64);
            let want: f64 = x.iter().map(|&v| v as f64).sum();
            let abs: f64 = x.iter().map(|&v| (v as f64).abs()).sum();
            assert!((row_sum_map(&x, |v| v) as f64 - want).abs() <= 1e-5 * abs.max(1.0), "sum n={n}");
            assert!(
                (lanes_sum(&x[..n.min(BLOCK)]) as f64
                    - x[..n.min(BLOCK)].iter().map(|&v| v as f64).sum::<f64>())
                .abs()
                    <= 1e-5 * abs.max(1.0)
            );
            let sq: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
            assert!((row_sum_map(&x, |v| v * v) as f64 - sq).abs() <= 1e-5 * sq.max(1.0), "sum sq n={n}");
            let m = x.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            assert_eq!(lanes_max(&x), m, "max n={n}");
        }
    }
}
