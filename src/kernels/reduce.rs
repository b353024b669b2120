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
    for (a, &v) in acc.iter_mut().zip(chunks.remainder()) {
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
