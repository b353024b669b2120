//! Convolution over 1, 2 or 3 spatial dimensions, f32, NCHW (`N x C x
//! [D x] [H x] W`, weights `K x C/groups x [kD x] [kH x] kW` as PyTorch
//! stores them), with stride, padding, dilation and groups, no bias.
//!
//! Two algorithms over the same geometry, so they can be timed side by side:
//! - [`conv_im2col`]: unfold the input into `(C/g * kvol) x block` blocks
//!   of output positions (sized so a block stays in L2), each multiplied by
//!   the group's weights with tfbench's GEMM ([`super::gemm`]) on its own
//!   thread, blocks of every image spread over the pool; a 1x1, stride-1,
//!   unpadded convolution skips the unfold (the input already is the
//!   matrix). This is the fast path.
//! - [`conv_direct`]: per output plane, one axpy per (input channel, kernel
//!   tap, output row) over a contiguous output row (vectorised along the
//!   row): no scratch at all, and the natural kernel for depthwise
//!   convolutions, where the GEMM degenerates to one row. For dense layers
//!   it rereads each output row once per (channel, tap) and runs several
//!   times slower than im2col: a reference algorithm, not a fast path.
//!
//! Lower-dimensional convolutions are the 3-D one with leading extents of 1,
//! so one kernel (and one f64 reference, [`conv_plane_f64`]) serves all three.

use crate::kernels::{Layout, SendPtr};
use rayon::prelude::*;

/// The shape of one convolution; unused leading spatial dimensions (for 1-D
/// and 2-D) have extent 1, kernel 1, stride 1, padding 0 and dilation 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvGeom {
    /// Batch size.
    pub n: usize,
    /// Input channels.
    pub c: usize,
    /// Output channels.
    pub k: usize,
    /// Channel groups (`groups == c == k`: depthwise).
    pub groups: usize,
    /// Spatial dimensions written (1, 2 or 3).
    pub dims: usize,
    /// Input extents `[D, H, W]`.
    pub input: [usize; 3],
    /// Kernel extents `[kD, kH, kW]`.
    pub kernel: [usize; 3],
    /// Strides.
    pub stride: [usize; 3],
    /// Zero padding on each side.
    pub pad: [usize; 3],
    /// Dilations.
    pub dilation: [usize; 3],
}

/// Parses `N x C x spatial... - k K x taps... [-sS] [-pP] [-dD] [-gG]`, e.g.
/// `1x256x16x16-k256x3x3-s1-p1` (stride, padding and dilation apply to every
/// spatial dimension; defaults s1, p0, d1, g1), and checks that it can work.
pub fn parse_conv(spec: &str) -> Result<ConvGeom, String> {
    let form = "NxCx[D]x[H]xW-kKx[kD]x[kH]xkW[-sS][-pP][-dD][-gG], e.g. 1x64x56x56-k64x3x3-p1";
    let bad = |why: &str| format!("`{spec}`: {why} (form {form})");
    let mut parts = spec.split('-');
    let input = dims_of(parts.next().unwrap_or(""), &bad)?;
    if !(3..=5).contains(&input.len()) {
        return Err(bad("the input needs N, C and 1 to 3 spatial extents"));
    }
    let dims = input.len() - 2;
    let (mut kernel, mut stride, mut pad, mut dil, mut groups) = (None, 1, 0, 1, 1);
    for p in parts {
        let (tag, rest) = p.split_at(p.find(|c: char| c.is_ascii_digit()).unwrap_or(p.len()));
        let one = || rest.parse::<usize>().map_err(|_| bad(&format!("`{p}` is not a tag and a number")));
        match tag {
            "k" => kernel = Some(dims_of(rest, &bad)?),
            "s" => stride = one()?,
            "p" => pad = one()?,
            "d" => dil = one()?,
            "g" => groups = one()?,
            _ => return Err(bad(&format!("unknown part `{p}`"))),
        }
    }
    let kernel = kernel.ok_or_else(|| bad("no -k part"))?;
    if kernel.len() != dims + 1 {
        return Err(bad(&format!("-k needs K and {dims} kernel extents for {dims} spatial dimensions")));
    }
    let fill = |v: &[usize], unused: usize| {
        let mut a = [unused; 3];
        a[3 - v.len()..].copy_from_slice(v);
        a
    };
    let g = ConvGeom {
        n: input[0],
        c: input[1],
        k: kernel[0],
        groups,
        dims,
        input: fill(&input[2..], 1),
        kernel: fill(&kernel[1..], 1),
        stride: fill(&vec![stride; dims], 1),
        pad: fill(&vec![pad; dims], 0),
        dilation: fill(&vec![dil; dims], 1),
    };
    g.check().map_err(|why| bad(&why))?;
    Ok(g)
}

/// Positive integers joined by `x`.
fn dims_of(s: &str, bad: &dyn Fn(&str) -> String) -> Result<Vec<usize>, String> {
    s.split('x')
        .map(|d| d.parse::<usize>().ok().filter(|&v| v > 0))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| bad(&format!("`{s}` is not positive integers joined by x")))
}

impl ConvGeom {
    /// Why this shape cannot work, if it cannot: zero stride or dilation,
    /// groups not dividing both channel counts, a dilated kernel larger than
    /// the padded input, padding at least the dilated kernel (all-padding
    /// windows), or an output too large to index.
    pub fn check(&self) -> Result<(), String> {
        if self.groups == 0 || !self.c.is_multiple_of(self.groups) || !self.k.is_multiple_of(self.groups) {
            return Err(format!(
                "groups {} must divide the input channels {} and the output channels {}",
                self.groups, self.c, self.k
            ));
        }
        for i in 0..3 {
            if self.stride[i] == 0 || self.dilation[i] == 0 {
                return Err("stride and dilation must be positive".into());
            }
            let span = (self.kernel[i] - 1) * self.dilation[i] + 1;
            if span > self.input[i] + 2 * self.pad[i] {
                return Err(format!(
                    "the dilated kernel ({span}) is larger than the padded input ({} + 2 x {})",
                    self.input[i], self.pad[i]
                ));
            }
            if self.pad[i] >= span {
                return Err(format!(
                    "padding {} must be smaller than the dilated kernel {span}",
                    self.pad[i]
                ));
            }
        }
        let total = [self.n, self.c.max(self.k), self.input.iter().product(), self.kernel.iter().product()];
        if total.iter().try_fold(1usize, |a, &b| a.checked_mul(b)).is_none_or(|v| v > 1 << 40) {
            return Err("the shape is too large to index".into());
        }
        Ok(())
    }

    /// Output extents `[oD, oH, oW]`.
    pub fn output(&self) -> [usize; 3] {
        std::array::from_fn(|i| {
            (self.input[i] + 2 * self.pad[i] - (self.kernel[i] - 1) * self.dilation[i] - 1) / self.stride[i]
                + 1
        })
    }
    /// Elements of one input plane.
    pub fn in_spatial(&self) -> usize {
        self.input.iter().product()
    }
    /// Elements of one output plane.
    pub fn out_spatial(&self) -> usize {
        self.output().iter().product()
    }
    /// Kernel taps.
    pub fn kvol(&self) -> usize {
        self.kernel.iter().product()
    }
    /// Input elements.
    pub fn input_len(&self) -> usize {
        self.n * self.c * self.in_spatial()
    }
    /// Weight elements.
    pub fn weight_len(&self) -> usize {
        self.k * (self.c / self.groups) * self.kvol()
    }
    /// Output elements.
    pub fn output_len(&self) -> usize {
        self.n * self.k * self.out_spatial()
    }
    /// Multiply-adds x 2.
    pub fn flops(&self) -> f64 {
        2.0 * self.output_len() as f64 * (self.c / self.groups) as f64 * self.kvol() as f64
    }
    /// A 1x1, stride-1, unpadded convolution: a plain GEMM on the input.
    pub fn is_pointwise(&self) -> bool {
        self.kvol() == 1 && self.stride == [1; 3] && self.pad == [0; 3]
    }
}

/// The input index range `ow` of an output row may read for tap `t` along
/// one dimension: output positions `[lo, hi)` whose input position
/// `o * s - p + t * d` falls inside `0..len`.
fn valid_range(out: usize, len: usize, s: usize, p: usize, t: usize, d: usize) -> (usize, usize) {
    let off = t * d; // input = o*s + off - p
    let lo = if off >= p { 0 } else { (p - off).div_ceil(s) };
    // o*s + off - p <= len - 1  =>  o <= (len - 1 + p - off) / s
    let hi = if len + p > off { ((len - 1 + p - off) / s + 1).min(out) } else { 0 };
    (lo.min(hi), hi)
}

/// Floats of one im2col block, the target: 1 MiB, the L2 of one core of
/// the dev host, so the block is still cached when the GEMM packs it (the
/// whole unfolded image of ResNet-50's layer-1 3x3, 7 MiB, was not).
const COL_BLOCK: usize = 256 * 1024;
/// Output columns per block are a multiple of this (both GEMM kernels'
/// register-tile width divides it), so only an image's last block is ragged.
const COL_STEP: usize = 32;

thread_local! {
    /// A task's im2col block and GEMM result, reused across tasks and calls.
    static BLOCK_BUF: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` on this thread's reused block buffer of at least `len` floats.
pub(super) fn with_block_buf<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    BLOCK_BUF.with_borrow_mut(|b| {
        if b.len() < len {
            b.resize(len, 0.0);
        }
        f(&mut b[..len])
    })
}

/// Output positions per im2col block for `rows` unfolded rows, out of
/// `osp` per image: the image cut into the fewest blocks of at most
/// [`COL_BLOCK`] floats, all of one width (a multiple of `step`) but the
/// last.
pub(super) fn block_cols(rows: usize, osp: usize, step: usize) -> usize {
    let fit = (COL_BLOCK / rows.max(1)).max(step);
    let blocks = osp.div_ceil(fit);
    osp.div_ceil(blocks).next_multiple_of(step).min(osp)
}

/// Floats of the buffer [`conv_im2col`] holds per thread: one im2col block
/// and its GEMM result (0 for a 1x1 stride-1 layer, read in place).
pub fn block_len(g: &ConvGeom) -> usize {
    if g.is_pointwise() {
        return 0;
    }
    let (ck, kg) = (g.c / g.groups * g.kvol(), g.k / g.groups);
    (ck + kg) * block_cols(ck, g.out_spatial(), COL_STEP)
}

/// Unfolds row `row` (channel `c0 + row / kvol`, one tap) of the im2col
/// matrix of image `img` (`C x spatial`), output positions `cols`, into
/// `dst` (zero where the tap reads padding).
fn im2col_row(
    g: &ConvGeom,
    img: &[f32],
    c0: usize,
    row: usize,
    cols: std::ops::Range<usize>,
    dst: &mut [f32],
) {
    let [_, oh, ow] = g.output();
    let [id, ih, iw] = g.input;
    let kvol = g.kvol();
    let (sw, pw) = (g.stride[2], g.pad[2]);
    let (c, tap) = (c0 + row / kvol, row % kvol);
    let (td, th, tw) =
        (tap / (g.kernel[1] * g.kernel[2]), tap / g.kernel[2] % g.kernel[1], tap % g.kernel[2]);
    let plane = &img[c * id * ih * iw..(c + 1) * id * ih * iw];
    let (wlo, whi) = valid_range(ow, iw, sw, pw, tw, g.dilation[2]);
    let base = tw * g.dilation[2];
    let mut p = cols.start;
    // One output row (fixed z, y) of the block at a time.
    while p < cols.end {
        let (zy, x0) = (p / ow, p % ow);
        let x1 = ow.min(x0 + cols.end - p);
        let out = &mut dst[p - cols.start..][..x1 - x0];
        p += x1 - x0;
        let zi = (zy / oh * g.stride[0] + td * g.dilation[0]).wrapping_sub(g.pad[0]);
        let yi = (zy % oh * g.stride[1] + th * g.dilation[1]).wrapping_sub(g.pad[1]);
        if zi >= id || yi >= ih {
            out.fill(0.0);
            continue;
        }
        let src = &plane[(zi * ih + yi) * iw..][..iw];
        let (lo, hi) = (wlo.clamp(x0, x1), whi.clamp(x0, x1).max(wlo.clamp(x0, x1)));
        out[..lo - x0].fill(0.0);
        out[hi - x0..].fill(0.0);
        let live = &mut out[lo - x0..hi - x0];
        if lo < hi {
            let first = lo * sw + base - pw;
            if sw == 1 {
                live.copy_from_slice(&src[first..first + live.len()]);
            } else {
                for (j, o) in live.iter_mut().enumerate() {
                    *o = src[first + j * sw];
                }
            }
        }
    }
}

/// `out = conv(x, w)` by im2col + GEMM on the current pool (`threads` of
/// it). A 1x1 stride-1 unpadded layer is one GEMM per (image, group) on the
/// input as it lies, no copy. Otherwise each (image, group) is cut into
/// blocks of [`block_cols`] output positions, each unfolded into a buffer
/// that stays in L2 and multiplied by the group's weights ([`super::gemm`]),
/// the `K/g x block` result copied into the output rows. With at least as
/// many (image, group) pairs as threads (batch 32, depthwise), the blocks
/// are tasks spread over the pool, each on its own thread's buffer and
/// one-thread GEMM; with fewer (batch 1), blocks go one after another, the
/// unfold split by rows and the GEMM threaded.
pub fn conv_im2col(g: &ConvGeom, x: &[f32], w: &[f32], out: &mut [f32], threads: usize) {
    assert_eq!((x.len(), w.len(), out.len()), (g.input_len(), g.weight_len(), g.output_len()));
    let (cg, kg, osp, isp) = (g.c / g.groups, g.k / g.groups, g.out_spatial(), g.in_spatial());
    let ck = cg * g.kvol();
    let images = g.n * g.groups;
    let dst = SendPtr(out.as_mut_ptr());
    let wide = images >= threads;
    let inner = if wide { 1 } else { threads };
    if g.is_pointwise() {
        let one = |task: usize| {
            let (n, grp) = (task / g.groups, task % g.groups);
            let src = &x[(n * g.c + grp * cg) * isp..][..cg * isp];
            // SAFETY: (image, group) `task` alone writes its kg output planes.
            let o = unsafe {
                std::slice::from_raw_parts_mut(dst.get().add((n * g.k + grp * kg) * osp), kg * osp)
            };
            super::gemm(inner, (kg, ck, osp), &w[grp * kg * ck..][..kg * ck], src, Layout::KxN, o, false);
        };
        if wide {
            (0..images).into_par_iter().for_each(one);
        } else {
            (0..images).for_each(one);
        }
        return;
    }
    let t = block_cols(ck, osp, COL_STEP);
    let blocks = osp.div_ceil(t);
    let one = |task: usize| {
        let (img_grp, b) = (task / blocks, task % blocks);
        let (n, grp) = (img_grp / g.groups, img_grp % g.groups);
        let cols = b * t..osp.min((b + 1) * t);
        let width = cols.len();
        let img = &x[n * g.c * isp..][..g.c * isp];
        with_block_buf((ck + kg) * t, |buf| {
            let (col, res) = buf.split_at_mut(ck * width);
            let res = &mut res[..kg * width];
            let unfold = |(r, d): (usize, &mut [f32])| im2col_row(g, img, grp * cg, r, cols.clone(), d);
            if wide {
                col.chunks_exact_mut(width).enumerate().for_each(unfold);
            } else {
                col.par_chunks_exact_mut(width).enumerate().for_each(unfold);
            }
            super::gemm(inner, (kg, ck, width), &w[grp * kg * ck..][..kg * ck], col, Layout::KxN, res, false);
            for (r, row) in res.chunks_exact(width).enumerate() {
                let plane = (n * g.k + grp * kg + r) * osp;
                // SAFETY: block (image, group, b) alone writes columns
                // `cols` of its kg output planes; `out` outlives the loop.
                let o = unsafe { std::slice::from_raw_parts_mut(dst.get().add(plane + cols.start), width) };
                o.copy_from_slice(row);
            }
        });
    };
    if wide {
        (0..images * blocks).into_par_iter().for_each(one);
    } else {
        (0..images * blocks).for_each(one);
    }
}

/// `out = conv(x, w)` computed directly, parallel over output planes.
pub fn conv_direct(g: &ConvGeom, x: &[f32], w: &[f32], out: &mut [f32]) {
    assert_eq!((x.len(), w.len(), out.len()), (g.input_len(), g.weight_len(), g.output_len()));
    let osp = g.out_spatial();
    let dst = SendPtr(out.as_mut_ptr());
    (0..g.n * g.k).into_par_iter().for_each(|plane| {
        // SAFETY: each task writes only output plane `plane`, `osp` floats
        // inside `out`, which outlives the loop; planes are disjoint.
        let o = unsafe { std::slice::from_raw_parts_mut(dst.get().add(plane * osp), osp) };
        direct_plane(g, x, w, plane / g.k, plane % g.k, o);
    });
}

crate::kernels::simd_dispatch! {
    /// Output plane `(n, kk)` of the direct convolution into `o` (compiled
    /// for AVX-512 and AVX2 too: the row axpys are its whole cost).
    fn direct_plane(g: &ConvGeom, x: &[f32], w: &[f32], n: usize, kk: usize, o: &mut [f32]) {
        let [od, oh, ow] = g.output();
        let [id, ih, iw] = g.input;
        let [kd, kh, kw] = g.kernel;
        let [sd, sh, sw] = g.stride;
        let [pd, ph, pw] = g.pad;
        let [dd, dh, dw] = g.dilation;
        let (cg, kg) = (g.c / g.groups, g.k / g.groups);
        let c0 = kk / kg * cg;
        o.fill(0.0);
        for ci in 0..cg {
            let plane = &x[(n * g.c + c0 + ci) * id * ih * iw..][..id * ih * iw];
            let wk = &w[(kk * cg + ci) * kd * kh * kw..][..kd * kh * kw];
            for (tap, &wv) in wk.iter().enumerate() {
                let (td, th, tw) = (tap / (kh * kw), tap / kw % kh, tap % kw);
                let (lo, hi) = valid_range(ow, iw, sw, pw, tw, dw);
                if lo >= hi {
                    continue;
                }
                for z in 0..od {
                    let zi = (z * sd + td * dd).wrapping_sub(pd);
                    if zi >= id {
                        continue;
                    }
                    for y in 0..oh {
                        let yi = (y * sh + th * dh).wrapping_sub(ph);
                        if yi >= ih {
                            continue;
                        }
                        let src = &plane[(zi * ih + yi) * iw..][..iw];
                        let row = &mut o[(z * oh + y) * ow..][..ow];
                        let first = lo * sw + tw * dw - pw;
                        if sw == 1 {
                            let s = &src[first..first + (hi - lo)];
                            row[lo..hi].iter_mut().zip(s).for_each(|(r, &v)| *r += wv * v);
                        } else {
                            for (j, r) in row[lo..hi].iter_mut().enumerate() {
                                *r += wv * src[first + j * sw];
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Output plane `(n, kk)` in f64 by the textbook loop (every tap of every
/// output position, bounds checked one by one), and beside each value the
/// sum of the absolute products (the scale of its rounding error).
pub fn conv_plane_f64(g: &ConvGeom, x: &[f32], w: &[f32], n: usize, kk: usize) -> (Vec<f64>, Vec<f64>) {
    let [od, oh, ow] = g.output();
    let (cg, kg) = (g.c / g.groups, g.k / g.groups);
    let mut out = Vec::with_capacity(od * oh * ow);
    let mut mag = Vec::with_capacity(od * oh * ow);
    for z in 0..od {
        for y in 0..oh {
            for xo in 0..ow {
                let (mut acc, mut abs) = (0.0f64, 0.0f64);
                for ci in 0..cg {
                    let c = kk / kg * cg + ci;
                    for t in 0..g.kvol() {
                        let tap =
                            [t / (g.kernel[1] * g.kernel[2]), t / g.kernel[2] % g.kernel[1], t % g.kernel[2]];
                        let pos = [z, y, xo];
                        let mut at = [0usize; 3];
                        let mut inside = true;
                        for i in 0..3 {
                            let v =
                                (pos[i] * g.stride[i] + tap[i] * g.dilation[i]) as isize - g.pad[i] as isize;
                            inside &= v >= 0 && (v as usize) < g.input[i];
                            at[i] = v.max(0) as usize;
                        }
                        if !inside {
                            continue;
                        }
                        let xi =
                            (((n * g.c + c) * g.input[0] + at[0]) * g.input[1] + at[1]) * g.input[2] + at[2];
                        let p = w[(kk * cg + ci) * g.kvol() + t] as f64 * x[xi] as f64;
                        acc += p;
                        abs += p.abs();
                    }
                }
                out.push(acc);
                mag.push(abs);
            }
        }
    }
    (out, mag)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(spec: &str) {
        let g = parse_conv(spec).unwrap();
        let x = crate::util::randn(g.input_len(), 1);
        let w = crate::util::randn(g.weight_len(), 2);
        let mut a = vec![f32::NAN; g.output_len()];
        let mut b = vec![f32::NAN; g.output_len()];
        conv_im2col(&g, &x, &w, &mut a, 2);
        conv_direct(&g, &x, &w, &mut b);
        let osp = g.out_spatial();
        for n in 0..g.n {
            for kk in 0..g.k {
                let (want, mag) = conv_plane_f64(&g, &x, &w, n, kk);
                for (i, (&r, &m)) in want.iter().zip(&mag).enumerate() {
                    let at = (n * g.k + kk) * osp + i;
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

    /// Under every ISA cap (AVX-512 and AVX2 GEMMs, the `gemm` crate).
    #[test]
    fn both_algorithms_match_the_f64_loop_in_1d_2d_3d_under_every_isa_cap() {
        use crate::isa::IsaLevel;
        for level in [IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::Avx512] {
            crate::isa::with_cap(level, every_shape);
        }
    }

    fn every_shape() {
        for spec in [
            // 4608 unfolded rows: blocks of 64 positions, the last ragged.
            "1x512x10x10-k4x3x3-p1",
            "4x512x10x10-k4x3x3-p1",
            "2x3x17-k4x3-p1",
            "1x4x9x10-k6x3x3-s2-p1",
            "2x6x7x8-k6x3x3-p1-g6",
            "1x4x8x8-k4x3x3-p2-d2-g2",
            "2x8x5x5-k3x1x1",
            "1x8x6x6-k4x1x1-s2",
            "1x2x4x5x6-k3x3x3x3-p1",
            "1x3x5x7x7-k2x2x3x3-s2-d1",
            "1x2x7-k2x7",
        ] {
            check(spec);
        }
    }

    #[test]
    fn bad_shapes_are_refused_with_the_reason() {
        let e = parse_conv("1x6x8x8-k4x3x3-g4").unwrap_err();
        assert!(e.contains("groups 4 must divide"), "{e}");
        let e = parse_conv("1x3x4x4-k8x7x7").unwrap_err();
        assert!(e.contains("larger than the padded input"), "{e}");
        assert!(parse_conv("1x3x4x4-k8x7x7-p2").is_ok());
        assert!(parse_conv("1x3x4x4-k8x3").unwrap_err().contains("2 spatial"));
        assert!(parse_conv("1x3x0x4-k8x3x3").is_err());
        assert!(parse_conv("1x3x4x4-k8x3x3-q1").unwrap_err().contains("unknown part"));
        assert!(parse_conv("1x3x4x4").unwrap_err().contains("no -k"));
        assert!(parse_conv("1x3x4x4-k8x3x3-s0").unwrap_err().contains("positive"));
        assert!(parse_conv("1x3x4x4-k8x3x3-p3").unwrap_err().contains("smaller than"));
        let g = parse_conv("1x256x16x16-k256x3x3").unwrap();
        assert_eq!(g.output(), [1, 14, 14]);
        assert_eq!(g.flops(), 2.0 * 256.0 * 196.0 * 256.0 * 9.0);
    }
}
