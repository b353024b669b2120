//! `c[n] = B[n x k] a[k]` for one activation row against `[out, in]`
//! weights: the decode step of a language model. `gemm` handles `m == 1`
//! poorly for wide outputs (an LM head of 50257 rows reaches a fraction of
//! memory bandwidth), so [`super::matmul`] routes that shape here: parallel
//! over blocks of output rows, four weight rows dotted per pass over the
//! activation.

use rayon::prelude::*;

/// Fewest output rows per parallel task: enough work to amortise a rayon steal.
const MIN_ROWS_PER_TASK: usize = 64;

/// Tasks per thread: a few, so a thread that is descheduled for a moment
/// does not leave the other idle at the join, but not hundreds (an LM head of
/// 50257 rows in 64-row tasks would pay 785 steals per token).
const TASKS_PER_THREAD: usize = 4;

/// Below this many weights the call stays on the caller's thread.
const PAR_MIN: usize = 1 << 15;

/// Rows dotted together: each load of `a` feeds this many FMAs, so the loop
/// issues about one load per FMA instead of two and the weight streams are
/// the only memory traffic.
const ROWS: usize = 4;

/// Lanes of each accumulator: one AVX-512 register.
const LANES: usize = 16;

#[inline(always)]
fn dot4_body(a: &[f32], b: [&[f32]; ROWS], out: &mut [f32; ROWS]) {
    // Two accumulators per row hide the FMA latency (8 chains in flight).
    let mut acc = [[0.0f32; 2 * LANES]; ROWS];
    let k = a.len();
    let main = k - k % (2 * LANES);
    let mut p = 0;
    while p < main {
        let x = &a[p..p + 2 * LANES];
        for r in 0..ROWS {
            let w = &b[r][p..p + 2 * LANES];
            for i in 0..2 * LANES {
                acc[r][i] = x[i].mul_add(w[i], acc[r][i]);
            }
        }
        p += 2 * LANES;
    }
    for r in 0..ROWS {
        let mut tail = 0.0f32;
        for q in main..k {
            tail = a[q].mul_add(b[r][q], tail);
        }
        out[r] = acc[r].iter().sum::<f32>() + tail;
    }
}

#[inline(always)]
fn dot_body(a: &[f32], b: &[f32]) -> f32 {
    // 32 independent accumulators: two AVX-512 FMA chains per cycle with
    // room to hide their latency.
    let mut acc = [0.0f32; 2 * LANES];
    let (ac, bc) = (a.chunks_exact(2 * LANES), b.chunks_exact(2 * LANES));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (x, y) in ac.zip(bc) {
        for i in 0..2 * LANES {
            acc[i] = x[i].mul_add(y[i], acc[i]);
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in ar.iter().zip(br) {
        tail = x.mul_add(*y, tail);
    }
    acc.iter().sum::<f32>() + tail
}

/// `c[j] (+)= a . b[j]` for the rows `j0..j0 + c.len()` of `b` (`[n x k]`).
#[inline(always)]
fn rows_body(k: usize, a: &[f32], b: &[f32], j0: usize, c: &mut [f32], accumulate: bool) {
    let row = |j: usize| &b[j * k..(j + 1) * k];
    let mut chunks = c.chunks_exact_mut(ROWS);
    let mut j = j0;
    for cs in &mut chunks {
        let mut d = [0.0f32; ROWS];
        dot4_body(a, [row(j), row(j + 1), row(j + 2), row(j + 3)], &mut d);
        for (o, v) in cs.iter_mut().zip(d) {
            *o = if accumulate { *o + v } else { v };
        }
        j += ROWS;
    }
    for o in chunks.into_remainder() {
        let v = dot_body(a, row(j));
        *o = if accumulate { *o + v } else { v };
        j += 1;
    }
}

/// [`rows_body`] compiled for AVX-512 / AVX2+FMA and picked at run time
/// (the crate targets baseline x86-64).
fn rows(k: usize, a: &[f32], b: &[f32], j0: usize, c: &mut [f32], accumulate: bool) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx2,fma")]
        unsafe fn v4(k: usize, a: &[f32], b: &[f32], j0: usize, c: &mut [f32], acc: bool) {
            rows_body(k, a, b, j0, c, acc)
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn v3(k: usize, a: &[f32], b: &[f32], j0: usize, c: &mut [f32], acc: bool) {
            rows_body(k, a, b, j0, c, acc)
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports every feature v4 was compiled for.
            return unsafe { v4(k, a, b, j0, c, accumulate) };
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
            // SAFETY: as above for v3.
            return unsafe { v3(k, a, b, j0, c, accumulate) };
        }
    }
    rows_body(k, a, b, j0, c, accumulate)
}

/// `c (+)= B a` with `B` `[n x k]` row-major, on up to `threads` threads of
/// the current rayon pool.
pub fn gemv_nxk(threads: usize, k: usize, n: usize, a: &[f32], b: &[f32], c: &mut [f32], accumulate: bool) {
    if threads > 1 && n * k >= PAR_MIN {
        let per = n.div_ceil(threads * TASKS_PER_THREAD).max(MIN_ROWS_PER_TASK).next_multiple_of(ROWS);
        c.par_chunks_mut(per).enumerate().for_each(|(t, cs)| rows(k, a, b, t * per, cs, accumulate));
    } else {
        rows(k, a, b, 0, c, accumulate);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemv_matches_the_naive_product_for_ragged_shapes() {
        for &(k, n) in &[(1, 1), (31, 7), (64, 5), (100, 257), (768, 1000), (33, 4099)] {
            let a = crate::util::randn(k, 1);
            let b = crate::util::randn(n * k, 2);
            let want = crate::kernels::naive_matmul((1, k, n), &a, &b, crate::kernels::Layout::NxK);
            for threads in [1, 2, 3] {
                for accumulate in [false, true] {
                    let mut c = vec![1.0f32; n];
                    gemv_nxk(threads, k, n, &a, &b, &mut c, accumulate);
                    for (j, (g, w)) in c.iter().zip(&want).enumerate() {
                        let w = if accumulate { w + 1.0 } else { *w };
                        assert!(
                            (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                            "k{k} n{n} t{threads} [{j}]: {g} vs {w}"
                        );
                    }
                }
            }
        }
    }
}
