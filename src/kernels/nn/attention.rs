//! Scaled dot-product attention over `heads` heads of `n` queries and keys
//! of width `d` (`q`, `k`, `v`, `out` all `[heads x n x d]`), causal or not,
//! two ways:
//! - [`attention_materialised`]: the whole `heads x n x n` score matrix is
//!   allocated on every call (as PyTorch's math path does), filled by one
//!   GEMM per head, soft-maxed row by row and multiplied by V: O(n^2) memory.
//! - [`attention_flash`]: blocks of [`BR`] queries against blocks of [`BC`]
//!   keys with the online softmax (running maximum and sum per query, the
//!   accumulator rescaled when the maximum grows; FlashAttention's
//!   recurrence). Each task (one query block of one head, heaviest causal
//!   blocks first) holds one `BR x BC` score block, 192 KiB, in L2, and
//!   accumulates straight into its rows of the output: O(n) memory in all,
//!   and key blocks past the causal diagonal are never computed (the last
//!   one is cut at the diagonal). Both block products go through tfbench's
//!   packed GEMM on the task's thread ([`super::gemm`], AVX-512 or AVX2),
//!   and the softmax of a block is one SIMD-dispatched pass ([`online_softmax`]).
//!   The first version (64 x 64 tiles through the `gemm` crate, scalar
//!   exponentials) ran 2.5 s against the materialised 0.73 s at 8 heads of
//!   4096 on the busy 2-core dev host.
//!
//! Both allocate their scratch inside the call, so the harness's allocation
//! pass reports each one's real peak.

use crate::kernels::activation::exp_flush_f32;
use crate::kernels::reduce::{lanes_max, row_sum_map};
use crate::kernels::softmax::masked_softmax_row;
use crate::kernels::{Layout, SendPtr, matmul, simd_dispatch};
use rayon::prelude::*;

/// Queries per block of [`attention_flash`]: a whole number of both GEMM
/// register tiles (12 rows AVX-512, 6 AVX2), so no packed row is padding,
/// and each packed K and V block serves 192 queries.
pub const BR: usize = 192;
/// Keys per block of [`attention_flash`]: the `BR x BC` score block (192
/// KiB) and the `BC x 64` K and V panels (64 KiB each) stay in L2, and
/// each GEMM call has 3 M multiply-adds to amortise its packing.
pub const BC: usize = 256;

/// Floats of scratch one thread of [`attention_flash`] holds: its score
/// block and its rows' running maxima and sums (the accumulator is the
/// output itself).
pub const FLASH_SCRATCH: usize = BR * BC + 2 * BR;

/// FLOPs of one call: `QK^T` and `PV` (2 per multiply-add each), halved
/// for causal (only the lower triangle is needed); the same count for both
/// algorithms, so their rates compare directly.
pub fn attention_flops(heads: usize, n: usize, d: usize, causal: bool) -> f64 {
    let full = 4.0 * heads as f64 * (n as f64) * (n as f64) * d as f64;
    if causal { full / 2.0 } else { full }
}

/// Attention with the scores materialised (`threads` for the GEMMs).
pub fn attention_materialised(
    (heads, n, d): (usize, usize, usize),
    q: &[f32],
    k: &[f32],
    v: &[f32],
    causal: bool,
    out: &mut [f32],
    threads: usize,
) {
    let scale = 1.0 / (d as f32).sqrt();
    let mut scores = vec![0.0f32; heads * n * n];
    for h in 0..heads {
        let (qh, kh, vh) = (&q[h * n * d..][..n * d], &k[h * n * d..][..n * d], &v[h * n * d..][..n * d]);
        let s = &mut scores[h * n * n..][..n * n];
        matmul(threads, (n, d, n), qh, kh, Layout::NxK, s);
        s.par_chunks_mut(n).enumerate().for_each(|(i, row)| {
            row.iter_mut().for_each(|x| *x *= scale);
            masked_softmax_row(row, &[], if causal { i + 1 } else { n });
        });
        matmul(threads, (n, n, d), s, vh, Layout::KxN, &mut out[h * n * d..][..n * d]);
    }
}

/// Attention by blocks with the online softmax (see the module notes),
/// parallel over (head, query block) on the current pool.
pub fn attention_flash(
    (heads, n, d): (usize, usize, usize),
    q: &[f32],
    k: &[f32],
    v: &[f32],
    causal: bool,
    out: &mut [f32],
) {
    assert!(q.len() == heads * n * d && k.len() == q.len() && v.len() == q.len() && out.len() == q.len());
    let scale = 1.0 / (d as f32).sqrt();
    let qblocks = n.div_ceil(BR);
    let dst = SendPtr(out.as_mut_ptr());
    // Task t: query block `qblocks - 1 - t / heads` of head `t % heads`, so
    // the longest causal blocks are handed out first and the short ones
    // fill in at the end.
    (0..heads * qblocks).into_par_iter().for_each_init(
        || vec![0.0f32; FLASH_SCRATCH],
        |scratch, t| {
            let (h, qb) = (t % heads, qblocks - 1 - t / heads);
            let (q0, br) = (qb * BR, BR.min(n - qb * BR));
            let base = h * n * d;
            // SAFETY: this task alone writes rows q0..q0+br of head h, a
            // disjoint range of `out`, which outlives the loop.
            let acc = unsafe { std::slice::from_raw_parts_mut(dst.get().add(base + q0 * d), br * d) };
            let rows = Rows { q0, causal, scale, d };
            flash_block(
                rows,
                &q[base + q0 * d..][..br * d],
                &k[base..][..n * d],
                &v[base..][..n * d],
                acc,
                scratch,
            );
        },
    );
}

/// Where a block of query rows sits and how its scores are treated.
#[derive(Clone, Copy)]
struct Rows {
    /// Position of the block's first query.
    q0: usize,
    causal: bool,
    /// `1/sqrt(d)`, applied to the scores inside the softmax pass.
    scale: f32,
    /// Head width.
    d: usize,
}

/// One query block (`qt`, `br x d`) against every visible key block of one
/// head (`k`, `v`: `n x d`), the result written to `acc` (`br x d`).
fn flash_block(rows: Rows, qt: &[f32], k: &[f32], v: &[f32], acc: &mut [f32], scratch: &mut [f32]) {
    let d = rows.d;
    let (n, br) = (k.len() / d, qt.len() / d);
    let (s, ml) = scratch.split_at_mut(BR * BC);
    let (m, l) = ml.split_at_mut(BR);
    let (m, l) = (&mut m[..br], &mut l[..br]);
    m.fill(f32::NEG_INFINITY);
    l.fill(0.0);
    acc.fill(0.0);
    let kend = if rows.causal { rows.q0 + br } else { n };
    for k0 in (0..kend).step_by(BC) {
        let bc = BC.min(kend - k0);
        let s = &mut s[..br * bc];
        super::gemm(1, (br, d, bc), qt, &k[k0 * d..][..bc * d], Layout::NxK, s, false);
        online_softmax(rows, k0, s, m, l, acc);
        super::gemm(1, (br, bc, d), s, &v[k0 * d..][..bc * d], Layout::KxN, acc, true);
    }
    finish_rows(acc, l, d);
}

simd_dispatch! {
    /// The online-softmax step of one score block `s` (`m.len()` rows of
    /// keys `k0..`): per row, keys past the query (causal) are zeroed, the
    /// running maximum `m` grows to cover the scaled scores, the scores
    /// become `exp(scale * s - m)`, the running sum `l` and the row of `acc`
    /// are rescaled by `exp(m_old - m)` and the row's sum added to `l`.
    fn online_softmax(rows: Rows, k0: usize, s: &mut [f32], m: &mut [f32], l: &mut [f32], acc: &mut [f32]) {
        let bc = s.len() / m.len();
        let d = rows.d;
        for (r, row) in s.chunks_exact_mut(bc).enumerate() {
            let visible = if rows.causal { (rows.q0 + r + 1).saturating_sub(k0).min(bc) } else { bc };
            let (live, dead) = row.split_at_mut(visible);
            dead.fill(0.0);
            // The scale is positive, so the largest scaled score is the
            // scaled largest score; an empty row leaves the maximum as it is.
            let mx = m[r].max(lanes_max(live) * rows.scale);
            let scale = rows.scale;
            live.iter_mut().for_each(|x| *x = exp_flush_f32(*x * scale - mx));
            let alpha = exp_flush_f32(m[r] - mx);
            l[r] = l[r] * alpha + row_sum_map(live, |x| x);
            m[r] = mx;
            if alpha != 1.0 {
                acc[r * d..(r + 1) * d].iter_mut().for_each(|a| *a *= alpha);
            }
        }
    }
}

simd_dispatch! {
    /// Divides each accumulated row by its softmax sum.
    fn finish_rows(acc: &mut [f32], l: &[f32], d: usize) {
        for (row, &sum) in acc.chunks_exact_mut(d).zip(l) {
            let inv = 1.0 / sum;
            row.iter_mut().for_each(|a| *a *= inv);
        }
    }
}

/// Output row `i` of head `h` in f64, straight from the definition.
pub fn attention_row_f64(
    (n, d): (usize, usize),
    q: &[f32],
    k: &[f32],
    v: &[f32],
    causal: bool,
    h: usize,
    i: usize,
) -> Vec<f64> {
    let base = h * n * d;
    let keys = if causal { i + 1 } else { n };
    let scale = 1.0 / (d as f64).sqrt();
    let s: Vec<f64> = (0..keys)
        .map(|j| (0..d).map(|c| q[base + i * d + c] as f64 * k[base + j * d + c] as f64).sum::<f64>() * scale)
        .collect();
    let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let p: Vec<f64> = s.iter().map(|&x| (x - mx).exp()).collect();
    let z: f64 = p.iter().sum();
    (0..d).map(|c| (0..keys).map(|j| p[j] * v[base + j * d + c] as f64).sum::<f64>() / z).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Under every ISA cap: AVX-512 and AVX2 take tfbench's GEMM, the
    /// portable build the `gemm` crate.
    #[test]
    fn both_forms_match_the_definition_causal_or_not_under_every_isa_cap() {
        use crate::isa::IsaLevel;
        for level in [IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::Avx512] {
            // 300 queries: three full query blocks and a ragged one, a full
            // key block and a ragged one; 150: one ragged key block.
            for (heads, n, d) in [(2, 300, 16), (3, 150, 64)] {
                crate::isa::with_cap(level, || one_shape(heads, n, d));
            }
        }
    }

    fn one_shape(heads: usize, n: usize, d: usize) {
        let q: Vec<f32> = crate::util::randn(heads * n * d, 1);
        let k: Vec<f32> = crate::util::randn(heads * n * d, 2);
        let v: Vec<f32> = crate::util::randn(heads * n * d, 3);
        for causal in [false, true] {
            let mut a = vec![f32::NAN; q.len()];
            let mut b = vec![f32::NAN; q.len()];
            attention_materialised((heads, n, d), &q, &k, &v, causal, &mut a, 2);
            attention_flash((heads, n, d), &q, &k, &v, causal, &mut b);
            for h in 0..heads {
                for i in 0..n {
                    let want = attention_row_f64((n, d), &q, &k, &v, causal, h, i);
                    for (c, &w) in want.iter().enumerate() {
                        let at = (h * n + i) * d + c;
                        for (name, got) in [("materialised", a[at]), ("flash", b[at])] {
                            assert!((got as f64 - w).abs() < 1e-5, "{name} causal={causal} h{h} q{i} c{c}");
                        }
                    }
                }
            }
        }
    }
}
