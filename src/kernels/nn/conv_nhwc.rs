//! Convolution in the channels-last layout (NHWC: `N x [D x] [H x] W x C`,
//! output `N x oD x oH x oW x K`), the same geometry as [`super::conv`],
//! by the same two algorithms:
//! - [`conv_im2col_nhwc`]: one row of `taps x C/g` per output pixel (each
//!   tap's channels are contiguous, so the unfold is a row copy), then
//!   `out = col x W^T` per block of output pixels, each block unfolded into
//!   a per-thread buffer that stays in L2; an ungrouped 1x1 stride-1
//!   unpadded convolution is one GEMM over the whole batch, the input as it
//!   is (no copy).
//! - [`conv_direct_nhwc`]: per output pixel, one axpy along the output
//!   channels per (tap, input channel), with the weights repacked once as
//!   `[group][tap][C/g][K/g]` ([`pack_direct_weights`]) so that axpy reads
//!   contiguous memory.
//!
//! Weights are `K x [kD x] [kH x] kW x C/g` (PyTorch's channels-last weight
//! order). [`to_nchw`] turns a channels-last tensor into the planar layout,
//! so the f64 reference of [`super::conv`] checks these kernels too.

use super::conv::{ConvGeom, block_cols, with_block_buf};
use crate::kernels::{Layout, SendPtr};
use rayon::prelude::*;

/// A channels-last tensor (`n x spatial x c`) in the planar layout (`n x c x spatial`).
pub fn to_nchw(x: &[f32], n: usize, c: usize, spatial: usize) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for i in 0..n {
        for p in 0..spatial {
            for ch in 0..c {
                out[(i * c + ch) * spatial + p] = x[(i * spatial + p) * c + ch];
            }
        }
    }
    out
}

/// Channels-last weights (`K x taps x C/g`) in PyTorch's planar order (`K x C/g x taps`).
pub fn weights_to_planar(g: &ConvGeom, w: &[f32]) -> Vec<f32> {
    let (cg, kvol) = (g.c / g.groups, g.kvol());
    let mut out = vec![0.0; w.len()];
    for k in 0..g.k {
        for t in 0..kvol {
            for ci in 0..cg {
                out[(k * cg + ci) * kvol + t] = w[(k * kvol + t) * cg + ci];
            }
        }
    }
    out
}

/// Input pixel `(z, y, x)` read by tap `(td, th, tw)` of output pixel
/// `(oz, oy, ox)`, or `None` in the padding.
#[inline(always)]
fn source(g: &ConvGeom, out: [usize; 3], tap: [usize; 3]) -> Option<usize> {
    let mut at = 0usize;
    for i in 0..3 {
        let v = (out[i] * g.stride[i] + tap[i] * g.dilation[i]).wrapping_sub(g.pad[i]);
        if v >= g.input[i] {
            return None;
        }
        at = at * g.input[i] + v;
    }
    Some(at)
}

/// The multi-index of output pixel `p` and of tap `t`.
#[inline(always)]
fn unflat(p: usize, dims: [usize; 3]) -> [usize; 3] {
    [p / (dims[1] * dims[2]), p / dims[2] % dims[1], p % dims[2]]
}

/// Output pixels per block are a multiple of this (the GEMM register
/// tile's height: 12 rows AVX-512, 6 AVX2), so only the last block is ragged.
const ROW_STEP: usize = 24;

/// Floats of the buffer [`conv_im2col_nhwc`] holds per thread: one block
/// of unfolded rows, plus its GEMM result when a group is not the whole
/// output row (0 for an ungrouped 1x1 stride-1 layer, read in place).
pub fn block_len_nhwc(g: &ConvGeom) -> usize {
    if g.is_pointwise() && g.groups == 1 {
        return 0;
    }
    let (ck, kg) = (g.c / g.groups * g.kvol(), g.k / g.groups);
    block_cols(ck, g.out_spatial(), ROW_STEP) * (ck + if g.groups > 1 { kg } else { 0 })
}

/// Unfolds output pixels `rows` of image `img` for group `grp` into
/// `unfold` (one row of `taps x C/g` per pixel), pixel rows split over the
/// pool when `par`.
fn unfold_rows(
    g: &ConvGeom,
    img: &[f32],
    grp: usize,
    rows: std::ops::Range<usize>,
    unfold: &mut [f32],
    par: bool,
) {
    let (cg, odims) = (g.c / g.groups, g.output());
    let one = |(i, row): (usize, &mut [f32])| {
        let o = unflat(rows.start + i, odims);
        for (tap, part) in row.chunks_exact_mut(cg).enumerate() {
            match source(g, o, unflat(tap, g.kernel)) {
                Some(at) => part.copy_from_slice(&img[at * g.c + grp * cg..][..cg]),
                None => part.fill(0.0),
            }
        }
    };
    let ck = cg * g.kvol();
    if par {
        unfold.par_chunks_exact_mut(ck).enumerate().for_each(one);
    } else {
        unfold.chunks_exact_mut(ck).enumerate().for_each(one);
    }
}

/// `out = conv(x, w)` in channels-last layout by im2col + GEMM on the
/// current pool (`threads` of it). An ungrouped 1x1 stride-1 unpadded
/// layer is one GEMM over the whole batch on the input as it lies (no
/// copy). Otherwise each (image, group) is cut into blocks of output
/// pixels ([`block_cols`]), each unfolded (one row of `taps x C/g` per
/// pixel: each tap's channels are contiguous, so a row copy) into a buffer
/// that stays in L2 and multiplied by the group's weights ([`super::gemm`]),
/// ungrouped straight into the block's output rows. As in
/// [`super::conv::conv_im2col`]: blocks are tasks over the pool with
/// one-thread GEMMs when there are at least as many (image, group) pairs as
/// threads, else one after another with the unfold split and the GEMM threaded.
pub fn conv_im2col_nhwc(g: &ConvGeom, x: &[f32], w: &[f32], out: &mut [f32], threads: usize) {
    assert_eq!((x.len(), w.len(), out.len()), (g.input_len(), g.weight_len(), g.output_len()));
    let (cg, kg, osp, isp, kvol) =
        (g.c / g.groups, g.k / g.groups, g.out_spatial(), g.in_spatial(), g.kvol());
    let ck = cg * kvol;
    if g.is_pointwise() && g.groups == 1 {
        return pointwise(threads, (g.n * osp, g.c, g.k), x, w, out);
    }
    let images = g.n * g.groups;
    let (wide, t) = (images >= threads, block_cols(ck, osp, ROW_STEP));
    let inner = if wide { 1 } else { threads };
    let blocks = osp.div_ceil(t);
    let dst = SendPtr(out.as_mut_ptr());
    let one = |task: usize| {
        let (img_grp, b) = (task / blocks, task % blocks);
        let (n, grp) = (img_grp / g.groups, img_grp % g.groups);
        let rows = b * t..osp.min((b + 1) * t);
        let height = rows.len();
        let img = &x[n * isp * g.c..][..isp * g.c];
        let wg = &w[grp * kg * ck..][..kg * ck];
        let extra = if g.groups > 1 { kg * height } else { 0 };
        with_block_buf(ck * height + extra, |buf| {
            let (unfold, tmp) = buf.split_at_mut(ck * height);
            unfold_rows(g, img, grp, rows.clone(), unfold, !wide);
            // SAFETY: block (image, group, b) alone writes the block's
            // output rows (ungrouped: whole rows; grouped: the group's
            // channels of them); `out` outlives the loop.
            let first = unsafe { dst.get().add((n * osp + rows.start) * g.k) };
            if g.groups == 1 {
                // SAFETY: the block's whole output rows, as above.
                let o = unsafe { std::slice::from_raw_parts_mut(first, height * g.k) };
                super::gemm(inner, (height, ck, kg), unfold, wg, Layout::NxK, o, false);
            } else {
                super::gemm(inner, (height, ck, kg), unfold, wg, Layout::NxK, tmp, false);
                for (p, r) in tmp.chunks_exact(kg).enumerate() {
                    // SAFETY: as above, channels grp*kg.. of row p of the block.
                    let o = unsafe { std::slice::from_raw_parts_mut(first.add(p * g.k + grp * kg), kg) };
                    o.copy_from_slice(r);
                }
            }
        });
    };
    if wide {
        (0..images * blocks).into_par_iter().for_each(one);
    } else {
        (0..images * blocks).for_each(one);
    }
}

/// Rows per task of [`pointwise`] are a multiple of this (the AVX-512
/// GEMM's register-tile height; the AVX2 one's, 6, divides it).
const POINT_ROWS: usize = 12;

/// `out (m x K) = x (m x C) w^T` (an ungrouped 1x1 layer on channels-last
/// pixels) on `threads` threads. A short product is cut into one run of
/// whole [`POINT_ROWS`] per thread, each a one-thread product through
/// tfbench's GEMM ([`super::gemm`]), which packs its own copy of `w`:
/// handing it to the `gemm` crate's threaded split, as every product was
/// before, made ResNet-50's layer-3 1x1 at batch 1 (196 x 1024 x 256,
/// weights read transposed) 2.5x PyTorch's time; the split took 0.58x of
/// the time (median paired ratio, busy host, 12 rounds).
fn pointwise(threads: usize, (m, c, k): (usize, usize, usize), x: &[f32], w: &[f32], out: &mut [f32]) {
    // One task per thread, whole register tiles split evenly. Only for
    // short products: from 64 tiles per thread on (ResNet-50's layer-1 1x1
    // at batch 1, 3136 rows), the `gemm` crate's own split measured faster
    // (busy host, paired runs: 14% at 3136 x 64 x 256).
    let panels = m.div_ceil(POINT_ROWS);
    let rows = panels.div_ceil(threads.max(1)) * POINT_ROWS;
    if threads <= 1 || panels >= 64 * threads || rows >= m {
        return super::gemm(threads, (m, c, k), x, w, Layout::NxK, out, false);
    }
    x.par_chunks(rows * c).zip(out.par_chunks_mut(rows * k)).for_each(|(a, o)| {
        super::gemm(1, (a.len() / c, c, k), a, w, Layout::NxK, o, false);
    });
}

/// Channels-last weights (`K x taps x C/g`) repacked as `[group][tap][C/g][K/g]`
/// for [`conv_direct_nhwc`].
pub fn pack_direct_weights(g: &ConvGeom, w: &[f32]) -> Vec<f32> {
    let (cg, kg, kvol) = (g.c / g.groups, g.k / g.groups, g.kvol());
    let mut out = vec![0.0; w.len()];
    for k in 0..g.k {
        let (grp, kk) = (k / kg, k % kg);
        for t in 0..kvol {
            for ci in 0..cg {
                out[((grp * kvol + t) * cg + ci) * kg + kk] = w[(k * kvol + t) * cg + ci];
            }
        }
    }
    out
}

/// `out = conv(x, w)` in channels-last layout computed directly from the
/// [`pack_direct_weights`] form `wp`, parallel over output rows.
pub fn conv_direct_nhwc(g: &ConvGeom, x: &[f32], wp: &[f32], out: &mut [f32]) {
    assert_eq!((x.len(), wp.len(), out.len()), (g.input_len(), g.weight_len(), g.output_len()));
    let [od, oh, ow] = g.output();
    let row = ow * g.k;
    let dst = SendPtr(out.as_mut_ptr());
    (0..g.n * od * oh).into_par_iter().for_each(|r| {
        // SAFETY: each task writes only output row `r` (`ow x K` floats),
        // disjoint from every other task's; `out` outlives the loop.
        let o = unsafe { std::slice::from_raw_parts_mut(dst.get().add(r * row), row) };
        direct_row(g, x, wp, r / (od * oh), [r / oh % od, r % oh, 0], o);
    });
}

crate::kernels::simd_dispatch! {
    /// Output row `(n, oz, oy)` (all `ox` and every output channel) into `o`.
    fn direct_row(g: &ConvGeom, x: &[f32], wp: &[f32], n: usize, at: [usize; 3], o: &mut [f32]) {
        let (cg, kg, kvol) = (g.c / g.groups, g.k / g.groups, g.kvol());
        let img = &x[n * g.in_spatial() * g.c..][..g.in_spatial() * g.c];
        o.fill(0.0);
        for (ox, px) in o.chunks_exact_mut(g.k).enumerate() {
            for t in 0..kvol {
                let Some(src) = source(g, [at[0], at[1], ox], unflat(t, g.kernel)) else { continue };
                let inp = &img[src * g.c..][..g.c];
                for grp in 0..g.groups {
                    let acc = &mut px[grp * kg..(grp + 1) * kg];
                    let wt = &wp[(grp * kvol + t) * cg * kg..][..cg * kg];
                    for (ci, wr) in wt.chunks_exact(kg).enumerate() {
                        let a = inp[grp * cg + ci];
                        acc.iter_mut().zip(wr).for_each(|(s, &wv)| *s += a * wv);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::conv::{conv_plane_f64, parse_conv};
    use super::*;

    /// Under every ISA cap (AVX-512 and AVX2 GEMMs, the `gemm` crate).
    #[test]
    fn both_channels_last_algorithms_match_the_f64_loop_under_every_isa_cap() {
        use crate::isa::IsaLevel;
        for level in [IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::Avx512] {
            crate::isa::with_cap(level, every_shape);
        }
    }

    fn every_shape() {
        for spec in [
            // 4608 unfolded columns: blocks of 72 pixels, the last ragged.
            "1x512x10x10-k4x3x3-p1",
            "4x512x10x10-k4x3x3-p1",
            "3x12x10x10-k8x1x1",
            "2x8x9x9-k6x3x3-p1",
            "1x6x7x8-k6x3x3-s2-p1-g6",
            "1x4x8x8-k4x3x3-p2-d2-g2",
            "2x8x5x5-k3x1x1",
            "1x2x4x5x6-k3x3x3x3-p1",
            "2x3x17-k4x3-p1",
        ] {
            let g = parse_conv(spec).unwrap();
            let (isp, osp) = (g.in_spatial(), g.out_spatial());
            let x = crate::util::randn(g.input_len(), 1);
            let w = crate::util::randn(g.weight_len(), 2);
            let mut a = vec![f32::NAN; g.output_len()];
            let mut b = vec![f32::NAN; g.output_len()];
            conv_im2col_nhwc(&g, &x, &w, &mut a, 2);
            conv_direct_nhwc(&g, &x, &pack_direct_weights(&g, &w), &mut b);
            let (xp, wpl) = (to_nchw(&x, g.n, g.c, isp), weights_to_planar(&g, &w));
            let (a, b) = (to_nchw(&a, g.n, g.k, osp), to_nchw(&b, g.n, g.k, osp));
            for n in 0..g.n {
                for k in 0..g.k {
                    let (want, mag) = conv_plane_f64(&g, &xp, &wpl, n, k);
                    for (i, (&r, &m)) in want.iter().zip(&mag).enumerate() {
                        let at = (n * g.k + k) * osp + i;
                        for (name, got) in [("im2col", a[at]), ("direct", b[at])] {
                            assert!(
                                (got as f64 - r).abs() <= 1e-5 * m + 1e-6,
                                "{spec} {name} [{at}]: {got} vs {r}"
                            );
                        }
                    }
                }
            }
        }
    }
}
