//! Winograd F(4x4, 3x3) convolution (Lavin & Gray 2016, points 0, ±1, ±2,
//! ∞) for 2-D 3x3 layers with stride 1, dilation 1 and no groups, in NCHW or
//! NHWC, any padding. The output is cut into 4x4 tiles; each reads a 6x6
//! input patch. With `U = G g G^T` (the filter transform), `V = B^T d B`
//! (the input transform) and `Y = A^T M A` (the output transform), the 36
//! transform-domain points are 36 independent GEMMs `M[p] = V[p] U[p]`
//! (tiles x C times C x K): 36 multiplies per 16 outputs instead of 144, a
//! quarter of the direct FLOPs, paid for by the transforms.
//!
//! - The filter transform is done once ([`transform_weights`], in f64,
//!   rounded once), as a library transforms a model's weights once at load:
//!   the suite does it in prepare, untimed. With AVX-512 each `U[p]` is also
//!   packed once for the GEMM kernel ([`PackedB`]).
//! - [`conv_winograd`] cuts the tiles of the whole batch into blocks whose
//!   transformed inputs and products (`36 x tiles x (C + K)` floats) stay
//!   near the L2 cache; per block it transforms the input tile by tile (16
//!   channels per SIMD pass), runs the 36 GEMMs through tfbench's GEMM on
//!   one thread each, and transforms the products back into the output.
//!   Blocks are tasks over the pool when there are enough tiles for every
//!   thread; otherwise (ResNet-50's 14x14 layers at batch 1: 16 tiles) one
//!   block runs at a time with its tiles and its 36 GEMMs split over the pool.
//!
//! Accuracy: the transforms' entries (up to 8 in `A^T`, 5 in `B^T`, 1/24 in
//! `G`) make the rounding error scale with the magnitudes of the terms
//! Winograd actually adds, `sum_c |A^T| (|G||g_c||G^T| ⊙ |B^T||d_c||B|) |A|`
//! ([`winograd_scale_f64`]; Barabasz et al., "Error analysis and improving
//! the accuracy of Winograd convolution for deep neural networks", 2020),
//! not with the direct sum of `|w x|`; the suite checks each value within
//! 1e-5 of that scale, the constant it uses for im2col and direct against
//! theirs.

use super::conv::{ConvGeom, with_block_buf};
use crate::kernels::sgemm::{self, PackedB};
use crate::kernels::{Layout, SendPtr};
use rayon::prelude::*;

/// Output tile edge (`m` of F(m, r)).
const TILE: usize = 4;
/// Transform-domain points per tile (`(m + r - 1)^2`): the number of GEMMs.
pub const POINTS: usize = 36;
/// Channels per SIMD pass of a transform: one AVX-512 register, two AVX2.
const W: usize = 16;
/// One transform value for `W` channels.
type Lanes = [f32; W];
/// Target floats of a block's transformed inputs and products (2 MiB).
const BLOCK_FLOATS: usize = 512 * 1024;
/// Fewest tiles per block (GEMM rows) when the work is split into blocks.
const MIN_TILES: usize = 12;

/// `B^T`: the input transform.
const BT: [[f64; 6]; 6] = [
    [4.0, 0.0, -5.0, 0.0, 1.0, 0.0],
    [0.0, -4.0, -4.0, 1.0, 1.0, 0.0],
    [0.0, 4.0, -4.0, -1.0, 1.0, 0.0],
    [0.0, -2.0, -1.0, 2.0, 1.0, 0.0],
    [0.0, 2.0, -1.0, -2.0, 1.0, 0.0],
    [0.0, 4.0, 0.0, -5.0, 0.0, 1.0],
];
/// `G`: the filter transform.
const G: [[f64; 3]; 6] = [
    [1.0 / 4.0, 0.0, 0.0],
    [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
    [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
    [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
    [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
    [0.0, 0.0, 1.0],
];
/// `A^T`: the output transform.
const AT: [[f64; 6]; 4] = [
    [1.0, 1.0, 1.0, 1.0, 1.0, 0.0],
    [0.0, 1.0, -1.0, 2.0, -2.0, 0.0],
    [0.0, 1.0, 1.0, 4.0, 4.0, 0.0],
    [0.0, 1.0, -1.0, 8.0, -8.0, 1.0],
];

/// Why F(4x4, 3x3) cannot compute `g`, if it cannot: the rule is a 2-D
/// convolution with a 3x3 kernel, stride 1, dilation 1 and groups 1.
pub fn check(g: &ConvGeom) -> Result<(), String> {
    let mut why = Vec::new();
    if g.dims != 2 {
        why.push(format!("{} spatial dimensions", g.dims));
    }
    if g.kernel != [1, 3, 3] {
        why.push(format!("a {}x{} kernel", g.kernel[1], g.kernel[2]));
    }
    if g.stride != [1; 3] {
        why.push(format!("stride {}", g.stride[2].max(g.stride[1])));
    }
    if g.dilation != [1; 3] {
        why.push(format!("dilation {}", g.dilation[2].max(g.dilation[1])));
    }
    if g.groups != 1 {
        why.push(format!("{} groups", g.groups));
    }
    if why.is_empty() {
        return Ok(());
    }
    Err(format!(
        "algo=winograd (F(4x4, 3x3)) needs a 2-D convolution with a 3x3 kernel, stride 1, dilation 1 and \
         groups 1; this one has {}",
        why.join(", ")
    ))
}

/// The filters transformed once: `U[p]` per point, stored transposed
/// (`K x C`, the GEMM's `NxK` operand) and, with AVX-512, also packed.
pub struct WinogradWeights {
    c: usize,
    k: usize,
    /// `[point][K][C]`.
    ut: Vec<f32>,
    /// `U[p]` packed for the AVX-512 kernel, one per point (empty without it).
    packed: Vec<PackedB>,
}

impl WinogradWeights {
    /// Bytes held (both forms).
    pub fn bytes(&self) -> usize {
        4 * self.ut.len() + self.packed.iter().map(PackedB::bytes).sum::<usize>()
    }

    /// `m (rows x K) = v (rows x C) U[p]` on this thread.
    fn multiply(&self, p: usize, rows: usize, v: &[f32], m: &mut [f32]) {
        match self.packed.get(p) {
            Some(b) if sgemm::available() => b.matmul_into(1, rows, v, m, false),
            _ => {
                let ut = &self.ut[p * self.k * self.c..][..self.k * self.c];
                super::gemm(1, (rows, self.c, self.k), v, ut, Layout::NxK, m, false)
            }
        }
    }
}

/// Transforms the weights of `g` (planar `K x C x 3 x 3`, or channels-last
/// `K x 3 x 3 x C` when `nhwc`) into `U = G g G^T` per (filter, channel),
/// in f64, rounded once. `g` must pass [`check`].
pub fn transform_weights(g: &ConvGeom, w: &[f32], nhwc: bool) -> WinogradWeights {
    assert!(check(g).is_ok() && w.len() == g.weight_len());
    let (c, k) = (g.c, g.k);
    let mut ut = vec![0.0f32; POINTS * k * c];
    for kk in 0..k {
        for ci in 0..c {
            let tap = |r: usize, s: usize| {
                f64::from(if nhwc {
                    w[(kk * 9 + r * 3 + s) * c + ci]
                } else {
                    w[(kk * c + ci) * 9 + r * 3 + s]
                })
            };
            let u = sandwich(&G, &std::array::from_fn(|r| std::array::from_fn(|s| tap(r, s))));
            for (p, &v) in u.iter().flatten().enumerate() {
                ut[(p * k + kk) * c + ci] = v as f32;
            }
        }
    }
    let packed = if sgemm::available() {
        (0..POINTS).map(|p| PackedB::from_nxk(&ut[p * k * c..][..k * c], k, c)).collect::<Option<Vec<_>>>()
    } else {
        None
    };
    WinogradWeights { c, k, ut, packed: packed.unwrap_or_default() }
}

/// `L x R x L^T` in f64 for an `L` of `P x Q` and an `R` of `Q x Q`.
fn sandwich<const P: usize, const Q: usize>(l: &[[f64; Q]; P], r: &[[f64; Q]; Q]) -> [[f64; P]; P] {
    let lr: [[f64; Q]; P] =
        std::array::from_fn(|i| std::array::from_fn(|s| (0..Q).map(|t| l[i][t] * r[t][s]).sum()));
    std::array::from_fn(|i| std::array::from_fn(|j| (0..Q).map(|s| lr[i][s] * l[j][s]).sum()))
}

/// Tiles of one image along each axis, and of the whole batch.
/// The multiply-adds Winograd executes, as FLOPs: its 36 products of
/// `tiles x C` by `C x K` (the transforms' additions, a few per cent at
/// these channel counts, are not counted). A third to a quarter of the
/// direct count [`ConvGeom::flops`], so a rate or `% of peak` from the direct
/// count would read above the machine's FMA peak for work never done.
pub fn executed_flops(g: &ConvGeom) -> f64 {
    let (_, _, tiles) = tile_grid(g);
    2.0 * POINTS as f64 * tiles as f64 * g.c as f64 * g.k as f64
}

fn tile_grid(g: &ConvGeom) -> (usize, usize, usize) {
    let [_, oh, ow] = g.output();
    let (ty, tx) = (oh.div_ceil(TILE), ow.div_ceil(TILE));
    (ty, tx, g.n * ty * tx)
}

/// Tiles per block and whether blocks are tasks over the pool (`wide`).
fn blocking(g: &ConvGeom, threads: usize) -> (usize, bool) {
    let (_, _, total) = tile_grid(g);
    let fit = (BLOCK_FLOATS / (POINTS * (g.c + g.k))).max(MIN_TILES);
    let wide = total >= threads.max(1) * MIN_TILES;
    let mut blocks = total.div_ceil(fit);
    if wide {
        blocks = blocks.next_multiple_of(threads.max(1));
    }
    (total.div_ceil(blocks.max(1)), wide)
}

/// Floats of the buffer [`conv_winograd`] holds per thread on `threads`
/// threads: one block's transformed inputs and products.
pub fn block_len(g: &ConvGeom, threads: usize) -> usize {
    POINTS * (g.c + g.k) * blocking(g, threads).0
}

/// `out = conv(x, w)` by Winograd F(4x4, 3x3) on the current pool
/// (`threads` of it), from the weights [`transform_weights`] made; layout
/// NCHW, or NHWC when `nhwc`. `g` must pass [`check`].
pub fn conv_winograd(
    g: &ConvGeom,
    x: &[f32],
    wt: &WinogradWeights,
    out: &mut [f32],
    threads: usize,
    nhwc: bool,
) {
    assert!(check(g).is_ok() && (wt.c, wt.k) == (g.c, g.k));
    assert_eq!((x.len(), out.len()), (g.input_len(), g.output_len()));
    let (_, _, total) = tile_grid(g);
    let (per, wide) = blocking(g, threads);
    let dst = SendPtr(out.as_mut_ptr());
    let one = |b: usize| {
        let tiles = b * per..total.min((b + 1) * per);
        with_block_buf(POINTS * (g.c + g.k) * per, |buf| block(g, x, wt, tiles, buf, dst, nhwc, !wide));
    };
    if wide {
        (0..total.div_ceil(per)).into_par_iter().for_each(one);
    } else {
        (0..total.div_ceil(per)).for_each(one);
    }
}

/// One block of tiles: input transform into `V` (`36 x tiles x C`), the 36
/// GEMMs into `M` (`36 x tiles x K`), output transform; each step split
/// over the pool when `par`.
#[allow(clippy::too_many_arguments)]
fn block(
    g: &ConvGeom,
    x: &[f32],
    wt: &WinogradWeights,
    tiles: std::ops::Range<usize>,
    buf: &mut [f32],
    dst: SendPtr<f32>,
    nhwc: bool,
    par: bool,
) {
    let rows = tiles.len();
    let (v, m) = buf.split_at_mut(POINTS * rows * g.c);
    let m = &mut m[..POINTS * rows * g.k];
    let vp = SendPtr(v.as_mut_ptr());
    // SAFETY (both transforms): the task of row i writes only row i of each
    // point's matrix in V, or only tile `tiles.start + i`'s output pixels;
    // V and the output outlive the loops.
    let input = |i: usize| input_tile(g, x, tiles.start + i, i, rows, vp, nhwc);
    if par {
        (0..rows).into_par_iter().for_each(input);
    } else {
        (0..rows).for_each(input);
    }
    let gemm = |(p, (vp, mp)): (usize, (&[f32], &mut [f32]))| wt.multiply(p, rows, vp, mp);
    if par {
        v.par_chunks(rows * g.c).zip(m.par_chunks_mut(rows * g.k)).enumerate().for_each(gemm);
    } else {
        v.chunks(rows * g.c).zip(m.chunks_mut(rows * g.k)).enumerate().for_each(gemm);
    }
    let m = &*m;
    let output = |i: usize| output_tile(g, m, tiles.start + i, i, rows, dst, nhwc);
    if par {
        (0..rows).into_par_iter().for_each(output);
    } else {
        (0..rows).for_each(output);
    }
}

/// Image, and the input row and column (padding subtracted, so possibly
/// negative) of the top-left corner of tile `tile`'s patch.
#[inline(always)]
fn tile_origin(g: &ConvGeom, tile: usize) -> (usize, isize, isize) {
    let (ty, tx, _) = tile_grid(g);
    let (n, r) = (tile / (ty * tx), tile % (ty * tx));
    let y0 = (r / tx * TILE) as isize - g.pad[1] as isize;
    let x0 = (r % tx * TILE) as isize - g.pad[2] as isize;
    (n, y0, x0)
}

/// `B^T d` along one axis for `W` channels: six values in, six out.
#[inline(always)]
fn bt6(d: [&Lanes; 6]) -> [Lanes; 6] {
    let mut o = [[0.0; W]; 6];
    for l in 0..W {
        let (d0, d1, d2, d3, d4, d5) = (d[0][l], d[1][l], d[2][l], d[3][l], d[4][l], d[5][l]);
        o[0][l] = 4.0 * d0 - 5.0 * d2 + d4;
        o[1][l] = -4.0 * (d1 + d2) + (d3 + d4);
        o[2][l] = 4.0 * (d1 - d2) + (d4 - d3);
        o[3][l] = 2.0 * (d3 - d1) + (d4 - d2);
        o[4][l] = 2.0 * (d1 - d3) + (d4 - d2);
        o[5][l] = 4.0 * d1 - 5.0 * d3 + d5;
    }
    o
}

/// `A^T m` along one axis for `W` channels: six values in, four out.
#[inline(always)]
fn at6(m: [&Lanes; 6]) -> [Lanes; 4] {
    let mut o = [[0.0; W]; 4];
    for l in 0..W {
        let (s12, d12) = (m[1][l] + m[2][l], m[1][l] - m[2][l]);
        let (s34, d34) = (m[3][l] + m[4][l], m[3][l] - m[4][l]);
        o[0][l] = m[0][l] + s12 + s34;
        o[1][l] = d12 + 2.0 * d34;
        o[2][l] = s12 + 4.0 * s34;
        o[3][l] = d12 + 8.0 * d34 + m[5][l];
    }
    o
}

/// The 6x6 patch `d` (row-major, `W` channels each) of one tile, read from
/// the input (zero in the padding): `cw` channels from `c0` of image `n`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn gather(
    g: &ConvGeom,
    x: &[f32],
    n: usize,
    y0: isize,
    x0: isize,
    c0: usize,
    cw: usize,
    nhwc: bool,
    d: &mut [Lanes; 36],
) {
    let [_, ih, iw] = g.input;
    let inside = y0 >= 0 && x0 >= 0 && y0 as usize + 6 <= ih && x0 as usize + 6 <= iw;
    if !nhwc && inside {
        // The common case in planar layout: six contiguous runs per channel.
        let (y0, x0) = (y0 as usize, x0 as usize);
        for l in 0..cw {
            let plane = &x[(n * g.c + c0 + l) * ih * iw..][..ih * iw];
            for r in 0..6 {
                let row = &plane[(y0 + r) * iw + x0..][..6];
                for (s, &v) in row.iter().enumerate() {
                    d[r * 6 + s][l] = v;
                }
            }
        }
        return;
    }
    for r in 0..6 {
        let iy = y0 + r as isize;
        for s in 0..6 {
            let ix = x0 + s as isize;
            let lane = &mut d[r * 6 + s];
            if iy < 0 || ix < 0 || iy as usize >= ih || ix as usize >= iw {
                *lane = [0.0; W];
                continue;
            }
            let pix = n * ih * iw + iy as usize * iw + ix as usize;
            if nhwc {
                lane[..cw].copy_from_slice(&x[pix * g.c + c0..][..cw]);
            } else {
                let at = (n * g.c + c0) * ih * iw + iy as usize * iw + ix as usize;
                for (l, v) in lane[..cw].iter_mut().enumerate() {
                    *v = x[at + l * ih * iw];
                }
            }
        }
    }
}

crate::kernels::simd_dispatch! {
    /// Input transform of tile `tile` (of the batch) into row `row` of every
    /// point's `rows x C` matrix of `v`, `W` channels per pass.
    fn input_tile(g: &ConvGeom, x: &[f32], tile: usize, row: usize, rows: usize, v: SendPtr<f32>, nhwc: bool) {
        let (n, y0, x0) = tile_origin(g, tile);
        let mut d = [[0.0f32; W]; 36];
        let mut t = [[0.0f32; W]; 36];
        for c0 in (0..g.c).step_by(W) {
            let cw = W.min(g.c - c0);
            gather(g, x, n, y0, x0, c0, cw, nhwc, &mut d);
            for s in 0..6 {
                let col = bt6([&d[s], &d[6 + s], &d[12 + s], &d[18 + s], &d[24 + s], &d[30 + s]]);
                for (i, c) in col.iter().enumerate() {
                    t[i * 6 + s] = *c;
                }
            }
            for i in 0..6 {
                let r = &t[i * 6..i * 6 + 6];
                let out = bt6([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]]);
                for (j, lanes) in out.iter().enumerate() {
                    // SAFETY: row `row` of point i*6+j, channels c0.. +cw:
                    // inside V and written by this task alone (see `block`).
                    let o = unsafe {
                        std::slice::from_raw_parts_mut(v.get().add(((i * 6 + j) * rows + row) * g.c + c0), cw)
                    };
                    o.copy_from_slice(&lanes[..cw]);
                }
            }
        }
    }
}

crate::kernels::simd_dispatch! {
    /// Output transform of row `row` of every point's `rows x K` product in
    /// `m` into tile `tile`'s output pixels (those inside the output).
    fn output_tile(g: &ConvGeom, m: &[f32], tile: usize, row: usize, rows: usize, out: SendPtr<f32>, nhwc: bool) {
        let [_, oh, ow] = g.output();
        let (ty, tx, _) = tile_grid(g);
        let (n, r) = (tile / (ty * tx), tile % (ty * tx));
        let (oy0, ox0) = (r / tx * TILE, r % tx * TILE);
        let (hi, wi) = (TILE.min(oh - oy0), TILE.min(ow - ox0));
        let mut mm = [[0.0f32; W]; 36];
        let mut t = [[0.0f32; W]; 24];
        for k0 in (0..g.k).step_by(W) {
            let kw = W.min(g.k - k0);
            for (p, lanes) in mm.iter_mut().enumerate() {
                lanes[..kw].copy_from_slice(&m[(p * rows + row) * g.k + k0..][..kw]);
            }
            for b in 0..6 {
                let col = at6([&mm[b], &mm[6 + b], &mm[12 + b], &mm[18 + b], &mm[24 + b], &mm[30 + b]]);
                for (i, c) in col.iter().enumerate() {
                    t[i * 6 + b] = *c;
                }
            }
            for i in 0..hi {
                let rr = &t[i * 6..i * 6 + 6];
                let y = at6([&rr[0], &rr[1], &rr[2], &rr[3], &rr[4], &rr[5]]);
                for (j, lanes) in y.iter().enumerate().take(wi) {
                    let (oy, ox) = (oy0 + i, ox0 + j);
                    // SAFETY: pixel (oy, ox) of image n lies inside the output
                    // and belongs to this tile, written by this task alone.
                    unsafe {
                        if nhwc {
                            let at = ((n * oh + oy) * ow + ox) * g.k + k0;
                            std::slice::from_raw_parts_mut(out.get().add(at), kw).copy_from_slice(&lanes[..kw]);
                        } else {
                            let at = ((n * g.k + k0) * oh + oy) * ow + ox;
                            for (l, &v) in lanes[..kw].iter().enumerate() {
                                *out.get().add(at + l * oh * ow) = v;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The scale of Winograd's rounding error at each output of plane `(n, kk)`
/// (planar `x` and `w`): `sum_c |A^T| (|G||g_c||G^T| ⊙ |B^T||d_c||B|) |A|`,
/// the sum of the absolute values of every term the algorithm adds, in f64.
pub fn winograd_scale_f64(g: &ConvGeom, x: &[f32], w: &[f32], n: usize, kk: usize) -> Vec<f64> {
    let [_, oh, ow] = g.output();
    let [_, ih, iw] = g.input;
    let (ty, tx, _) = tile_grid(g);
    let abs = |m: &[[f64; 6]; 6]| m.map(|r| r.map(f64::abs));
    let (bt, at) = (abs(&BT), AT.map(|r| r.map(f64::abs)));
    let ga = G.map(|r| r.map(f64::abs));
    // |G||g_c||G^T| per channel of filter kk.
    let us: Vec<[[f64; 6]; 6]> = (0..g.c)
        .map(|c| {
            let f = &w[(kk * g.c + c) * 9..][..9];
            sandwich(&ga, &std::array::from_fn(|r| std::array::from_fn(|s| f64::from(f[r * 3 + s]).abs())))
        })
        .collect();
    let mut out = vec![0.0; oh * ow];
    for t in 0..ty * tx {
        let (_, y0, x0) = tile_origin(g, n * ty * tx + t);
        let mut acc = [[0.0f64; 6]; 6];
        for (c, u) in us.iter().enumerate() {
            let plane = &x[(n * g.c + c) * ih * iw..][..ih * iw];
            let d: [[f64; 6]; 6] = std::array::from_fn(|r| {
                std::array::from_fn(|s| {
                    let (iy, ix) = (y0 + r as isize, x0 + s as isize);
                    let inside = iy >= 0 && ix >= 0 && (iy as usize) < ih && (ix as usize) < iw;
                    if inside { f64::from(plane[iy as usize * iw + ix as usize]).abs() } else { 0.0 }
                })
            });
            let v = sandwich(&bt, &d);
            for (a, row) in acc.iter_mut().enumerate() {
                for (b, e) in row.iter_mut().enumerate() {
                    *e += u[a][b] * v[a][b];
                }
            }
        }
        let y = sandwich(&at, &acc);
        let (oy0, ox0) = (t / tx * TILE, t % tx * TILE);
        for (i, row) in y.iter().enumerate().take(oh - oy0.min(oh)) {
            for (j, &v) in row.iter().enumerate().take(ow - ox0.min(ow)) {
                out[(oy0 + i) * ow + ox0 + j] = v;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::conv::{conv_plane_f64, parse_conv};
    use super::super::conv_nhwc::{to_nchw, weights_to_planar};
    use super::*;

    /// Runs `spec` in `layout` on `threads` threads and checks every output
    /// against the f64 loop within 1e-5 of Winograd's error scale; returns
    /// the largest error relative to the direct scale (the sum of |w x|).
    fn check_spec(spec: &str, nhwc: bool, threads: usize) -> f64 {
        let g = parse_conv(spec).unwrap();
        let x = crate::util::randn(g.input_len(), 1);
        let w: Vec<f32> = crate::util::randn(g.weight_len(), 2).iter().map(|v| v / 3.0).collect();
        let wt = transform_weights(&g, &w, nhwc);
        let mut out = vec![f32::NAN; g.output_len()];
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| conv_winograd(&g, &x, &wt, &mut out, threads, nhwc));
        let (osp, isp) = (g.out_spatial(), g.in_spatial());
        let (x, w, out) = if nhwc {
            (to_nchw(&x, g.n, g.c, isp), weights_to_planar(&g, &w), to_nchw(&out, g.n, g.k, osp))
        } else {
            (x, w, out)
        };
        let mut worst = 0.0f64;
        for n in 0..g.n {
            for k in 0..g.k {
                let (want, mag) = conv_plane_f64(&g, &x, &w, n, k);
                let scale = winograd_scale_f64(&g, &x, &w, n, k);
                for i in 0..osp {
                    let got = out[(n * g.k + k) * osp + i] as f64;
                    let err = (got - want[i]).abs();
                    assert!(
                        err <= 1e-6 + 1e-5 * scale[i],
                        "{spec} nhwc={nhwc} [{n},{k},{i}]: {got} vs {}",
                        want[i]
                    );
                    // The Winograd scale bounds the direct one from above.
                    assert!(scale[i] >= mag[i] * (1.0 - 1e-12), "{spec}: scale {} < {}", scale[i], mag[i]);
                    worst = worst.max(err / mag[i].max(1e-30));
                }
            }
        }
        worst
    }

    /// Under every ISA cap (AVX-512 with packed weights, AVX2, the `gemm`
    /// crate), both layouts, blocks as tasks and one block split.
    #[test]
    fn winograd_matches_the_f64_loop_in_both_layouts_under_every_isa_cap() {
        use crate::isa::IsaLevel;
        for level in [IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::Avx512] {
            crate::isa::with_cap(level, || {
                for (spec, threads) in [
                    // Ragged tiles, channels not a multiple of 16.
                    ("1x5x9x11-k7x3x3-p1", 2),
                    ("2x20x14x14-k18x3x3-p1", 3),
                    // Unpadded (operator_benchmark's form), padding 2.
                    ("1x33x16x16-k17x3x3", 2),
                    ("3x8x6x7-k4x3x3-p2", 1),
                    // Many tiles: several blocks as tasks; few: one block split.
                    ("4x16x30x30-k16x3x3-p1", 2),
                    ("1x64x6x6-k48x3x3-p1", 2),
                ] {
                    for nhwc in [false, true] {
                        check_spec(spec, nhwc, threads);
                    }
                }
            });
        }
    }

    /// The error of ResNet-50's layer-3 shape (256 channels), measured:
    /// printed with --nocapture for the docs.
    #[test]
    fn a_resnet_layer3_shape_stays_within_the_bound() {
        let spec = "1x256x14x14-k8x3x3-p1";
        let worst = check_spec(spec, false, 2);
        // im2col on the same inputs, for comparison.
        let g = parse_conv(spec).unwrap();
        let x = crate::util::randn(g.input_len(), 1);
        let w: Vec<f32> = crate::util::randn(g.weight_len(), 2).iter().map(|v| v / 3.0).collect();
        let mut out = vec![0.0; g.output_len()];
        super::super::conv::conv_im2col(&g, &x, &w, &mut out, 1);
        let mut im2col = 0.0f64;
        for k in 0..g.k {
            let (want, mag) = conv_plane_f64(&g, &x, &w, 0, k);
            for (i, (&r, &m)) in want.iter().zip(&mag).enumerate() {
                im2col = im2col.max((out[k * g.out_spatial() + i] as f64 - r).abs() / m);
            }
        }
        eprintln!(
            "256 channels, max |error| / sum |w x|: winograd F(4x4,3x3) {worst:.2e}, im2col {im2col:.2e}"
        );
        assert!(worst < 1e-4, "{worst}");
    }

    #[test]
    fn shapes_winograd_cannot_do_are_refused_naming_the_rule() {
        let why = |s: &str| check(&parse_conv(s).unwrap()).unwrap_err();
        assert!(why("1x8x6x6-k8x1x1").contains("a 1x1 kernel"), "{}", why("1x8x6x6-k8x1x1"));
        assert!(why("1x8x9x9-k8x3x3-s2").contains("stride 2"));
        assert!(why("1x8x9x9-k8x3x3-d2").contains("dilation 2"));
        assert!(why("1x8x9x9-k8x3x3-g2").contains("2 groups"));
        assert!(why("1x8x9-k8x3").contains("1 spatial dimensions"));
        assert!(why("1x8x4x9x9-k8x3x3x3").contains("3 spatial dimensions"));
        assert!(why("1x8x9x9-k8x1x1-s2").contains("needs a 2-D convolution with a 3x3 kernel, stride 1"));
        assert!(check(&parse_conv("1x8x9x9-k8x3x3-p1").unwrap()).is_ok());
    }
}
