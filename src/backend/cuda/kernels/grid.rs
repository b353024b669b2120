//! Launch shapes of the kernels in [`super::source`], and the error bound
//! their sum follows from: pure arithmetic, tested on the CPU by replaying
//! the kernels' index math.

use super::source::REDUCE_BLOCK;

/// Threads per block of the elementwise kernels.
pub const ELEMENTWISE_BLOCK: u32 = 256;

/// Most blocks any grid-stride kernel is launched with: enough to fill any
/// GPU many times over; larger inputs loop.
pub const MAX_BLOCKS: u32 = 1 << 16;

/// Most blocks of a reduction's first pass: its partial sums must fit one
/// block's grid-stride loop in the second pass without many serial terms.
pub const MAX_REDUCE_BLOCKS: u32 = 1024;

/// Blocks for an elementwise kernel over `n` f32 values: one float4 per
/// thread (at least one block), capped at [`MAX_BLOCKS`].
pub fn elementwise_grid(n: usize) -> u32 {
    let vectors = n.div_ceil(4).max(1);
    vectors.div_ceil(ELEMENTWISE_BLOCK as usize).min(MAX_BLOCKS as usize) as u32
}

/// Blocks for the first pass of a reduction over `n` values: about eight
/// values per thread, at most [`MAX_REDUCE_BLOCKS`].
pub fn reduce_grid(n: usize) -> u32 {
    n.div_ceil(REDUCE_BLOCK as usize * 8).clamp(1, MAX_REDUCE_BLOCKS as usize) as u32
}

/// The longest chain of f32 additions any input value goes through in the
/// two-pass sum of `n` values over `grid` blocks of `block` threads. In each
/// pass a thread adds its float4 vectors into four lane accumulators (the
/// serial grid-stride terms), its scalar tail into the first lane (one more
/// term), combines the lanes as a pair tree (two levels), then the block's
/// tree (log2 block); the second pass does the same over the `grid`
/// partials with one block, and the mean's scaling is one more rounding.
/// Times the unit roundoff and `sum |x|`, it bounds the error (to first
/// order).
pub fn sum_error_levels(n: usize, grid: u32, block: u32) -> f64 {
    let tree = block.max(2).ilog2() as f64;
    let pass = |m: usize, threads: usize| (m / 4).div_ceil(threads) as f64 + 1.0 + 2.0 + tree;
    pass(n, grid as usize * block as usize) + pass(grid as usize, block as usize) + 1.0
}

/// Replays the elementwise kernels' index math (float4 body, scalar tail,
/// grid-stride) on the CPU: how many times each of `n` indices is written.
pub fn elementwise_coverage(n: usize, grid: u32, block: u32) -> Vec<u32> {
    let mut hits = vec![0u32; n];
    let stride = grid as usize * block as usize;
    let n4 = n / 4;
    for tid in 0..stride {
        let mut i = tid;
        while i < n4 {
            for h in &mut hits[4 * i..4 * i + 4] {
                *h += 1;
            }
            i += stride;
        }
        let mut i = n4 * 4 + tid;
        while i < n {
            hits[i] += 1;
            i += stride;
        }
    }
    hits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elementwise_grids_cover_every_index_once() {
        for n in [1usize, 3, 4, 5, 1023, 1024, 1025, 4096 * 4 + 3, 1 << 20] {
            let g = elementwise_grid(n);
            assert!(g >= 1);
            let hits = elementwise_coverage(n, g, ELEMENTWISE_BLOCK);
            assert!(hits.iter().all(|&h| h == 1), "n={n} grid={g}");
        }
        // A capped grid still covers everything through the stride loop.
        let hits = elementwise_coverage(10_007, 2, 32);
        assert!(hits.iter().all(|&h| h == 1));
        assert_eq!(elementwise_grid(1 << 30), MAX_BLOCKS);
        assert_eq!(elementwise_grid(16 << 20), (4 << 20) / 256);
    }

    #[test]
    fn reduce_grids_and_sum_levels() {
        assert_eq!(reduce_grid(1), 1);
        assert_eq!(reduce_grid(16 << 20), MAX_REDUCE_BLOCKS);
        assert_eq!(reduce_grid(1_000_000), 489);
        // 16M over 1024 x 256: 16 serial float4 terms per lane, the tail,
        // the lanes' pair tree and the block's tree of 8; then 1 serial
        // term over the 1024 partials, the same three steps; one scaling.
        assert_eq!(
            sum_error_levels(16 << 20, 1024, 256),
            (16.0 + 1.0 + 2.0 + 8.0) + (1.0 + 1.0 + 2.0 + 8.0) + 1.0
        );
        // The bound grows with n for a fixed grid.
        assert!(sum_error_levels(1 << 24, 8, 256) > sum_error_levels(1 << 20, 8, 256));
    }
}
