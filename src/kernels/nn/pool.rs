//! Pooling over 1, 2 or 3 spatial dimensions of an NCHW tensor: max and
//! average over a window (stride, padding; padding never counts, as
//! PyTorch's `count_include_pad=False` and max pooling's implicit -inf), and
//! adaptive average pooling to a given output size (PyTorch's windows:
//! `floor(i*in/out) .. ceil((i+1)*in/out)`). Parallel over (image, channel)
//! planes; lower-dimensional pools are the 3-D one with leading extents 1.

use crate::kernels::SendPtr;
use rayon::prelude::*;

/// Which pooling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolOp {
    /// Largest value of the window.
    Max,
    /// Mean of the window's values inside the input.
    Avg,
    /// Mean over adaptive windows that tile the input into the output size.
    AdaptiveAvg,
}

/// The shape of one pooling; unused leading dimensions have extent 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolGeom {
    /// Images x channels (planes pooled independently).
    pub planes: usize,
    /// Spatial dimensions written (1 to 3).
    pub dims: usize,
    /// Input extents `[D, H, W]`.
    pub input: [usize; 3],
    /// Window (unused for adaptive).
    pub kernel: [usize; 3],
    /// Stride (unused for adaptive).
    pub stride: [usize; 3],
    /// Padding (unused for adaptive).
    pub pad: [usize; 3],
    /// Output extents.
    pub output: [usize; 3],
}

/// Parses `NxCx[D]x[H]xW-kK[-sS][-pP]` (window pooling; stride defaults to
/// the window) or `NxCx[D]x[H]xW-oO` (adaptive, every output extent O).
pub fn parse_pool(spec: &str) -> Result<(PoolGeom, bool), String> {
    let form = "NxCx[D]x[H]xW-kK[-sS][-pP] or NxCx[D]x[H]xW-oO, e.g. 1x64x112x112-k3-s2-p1";
    let bad = |why: &str| format!("`{spec}`: {why} (form {form})");
    let mut parts = spec.split('-');
    let input: Vec<usize> = parts
        .next()
        .unwrap_or("")
        .split('x')
        .map(|d| d.parse().ok().filter(|&v: &usize| v > 0))
        .collect::<Option<_>>()
        .ok_or_else(|| bad("the input is not positive integers joined by x"))?;
    if !(3..=5).contains(&input.len()) {
        return Err(bad("the input needs N, C and 1 to 3 spatial extents"));
    }
    let dims = input.len() - 2;
    let (mut k, mut s, mut p, mut o) = (None, None, 0, None);
    for part in parts {
        let (tag, rest) = part.split_at(part.find(|c: char| c.is_ascii_digit()).unwrap_or(part.len()));
        let v: usize = rest.parse().map_err(|_| bad(&format!("`{part}` is not a tag and a number")))?;
        match tag {
            "k" => k = Some(v),
            "s" => s = Some(v),
            "p" => p = v,
            "o" => o = Some(v),
            _ => return Err(bad(&format!("unknown part `{part}`"))),
        }
    }
    let fill = |v: usize, unused: usize| std::array::from_fn(|i| if i < 3 - dims { unused } else { v });
    let mut inp = [1usize; 3];
    inp[3 - dims..].copy_from_slice(&input[2..]);
    let total = input.iter().try_fold(1usize, |a, &b| a.checked_mul(b)).filter(|&v| v <= 1 << 40);
    let planes = total.map(|_| input[0] * input[1]).ok_or_else(|| bad("the input is too large to index"))?;
    let mut g =
        PoolGeom { planes, dims, input: inp, kernel: [1; 3], stride: [1; 3], pad: [0; 3], output: inp };
    match (k, o) {
        (Some(k), None) => {
            let s = s.unwrap_or(k);
            if k == 0 || s == 0 {
                return Err(bad("window and stride must be positive"));
            }
            if 2 * p > k {
                return Err(bad(&format!("padding {p} must be at most half the window {k}")));
            }
            (g.kernel, g.stride, g.pad) = (fill(k, 1), fill(s, 1), fill(p, 0));
            for i in 0..3 {
                if g.kernel[i] > g.input[i] + 2 * g.pad[i] {
                    return Err(bad(&format!("the window {k} is larger than the padded input")));
                }
                g.output[i] = (g.input[i] + 2 * g.pad[i] - g.kernel[i]) / g.stride[i] + 1;
            }
            Ok((g, false))
        }
        (None, Some(o)) if o > 0 && s.is_none() && p == 0 => {
            g.output = fill(o, 1);
            Ok((g, true))
        }
        _ => Err(bad("give either a window -k (with -s, -p) or an adaptive output size -o")),
    }
}

impl PoolGeom {
    /// Input floats.
    pub fn input_len(&self) -> usize {
        self.planes * self.input.iter().product::<usize>()
    }
    /// Output floats.
    pub fn output_len(&self) -> usize {
        self.planes * self.output.iter().product::<usize>()
    }
    /// The input range window `o` covers along dimension `i`, clipped to the input.
    fn window(&self, op: PoolOp, i: usize, o: usize) -> (usize, usize) {
        if op == PoolOp::AdaptiveAvg {
            let (n, m) = (self.input[i], self.output[i]);
            (o * n / m, ((o + 1) * n).div_ceil(m))
        } else {
            let start = (o * self.stride[i]) as isize - self.pad[i] as isize;
            let end = (start + self.kernel[i] as isize).min(self.input[i] as isize);
            (start.max(0) as usize, end.max(0) as usize)
        }
    }
    /// Input values read by one pass (every window's elements).
    pub fn window_reads(&self, op: PoolOp) -> usize {
        let per_dim: Vec<usize> = (0..3)
            .map(|i| {
                (0..self.output[i])
                    .map(|o| {
                        let (a, b) = self.window(op, i, o);
                        b - a
                    })
                    .sum()
            })
            .collect();
        self.planes * per_dim.iter().product::<usize>()
    }
}

/// Pools `x` into `out`, parallel over planes.
pub fn pool(g: &PoolGeom, op: PoolOp, x: &[f32], out: &mut [f32]) {
    assert_eq!((x.len(), out.len()), (g.input_len(), g.output_len()));
    let (isp, osp) = (g.input.iter().product::<usize>(), g.output.iter().product::<usize>());
    let [od, oh, ow] = g.output;
    let [_, ih, iw] = g.input;
    // Windows along each dimension, computed once.
    let win: Vec<Vec<(usize, usize)>> =
        (0..3).map(|i| (0..g.output[i]).map(|o| g.window(op, i, o)).collect()).collect();
    let dst = SendPtr(out.as_mut_ptr());
    (0..g.planes).into_par_iter().for_each(|p| {
        let src = &x[p * isp..(p + 1) * isp];
        // SAFETY: each task writes only plane `p` of `out` (`osp` floats);
        // planes are disjoint and `out` outlives the loop.
        let o = unsafe { std::slice::from_raw_parts_mut(dst.get().add(p * osp), osp) };
        for z in 0..od {
            let (z0, z1) = win[0][z];
            for y in 0..oh {
                let (y0, y1) = win[1][y];
                for (xo, slot) in o[(z * oh + y) * ow..][..ow].iter_mut().enumerate() {
                    let (x0, x1) = win[2][xo];
                    let mut acc = if op == PoolOp::Max { f32::NEG_INFINITY } else { 0.0 };
                    for zi in z0..z1 {
                        for yi in y0..y1 {
                            let row = &src[(zi * ih + yi) * iw..][x0..x1];
                            acc = if op == PoolOp::Max {
                                row.iter().fold(acc, |m, &v| m.max(v))
                            } else {
                                acc + row.iter().sum::<f32>()
                            };
                        }
                    }
                    let count = (z1 - z0) * (y1 - y0) * (x1 - x0);
                    *slot = if op == PoolOp::Max { acc } else { acc / count as f32 };
                }
            }
        }
    });
}

/// Output value `idx` in f64 by brute force: every input position of the
/// plane tested for membership in the window, one by one.
pub fn pool_value_f64(g: &PoolGeom, op: PoolOp, x: &[f32], idx: usize) -> f64 {
    let osp: usize = g.output.iter().product();
    let isp: usize = g.input.iter().product();
    let (p, r) = (idx / osp, idx % osp);
    let pos = [r / (g.output[1] * g.output[2]), r / g.output[2] % g.output[1], r % g.output[2]];
    let inside = |i: usize, v: usize| -> bool {
        if op == PoolOp::AdaptiveAvg {
            let (n, m) = (g.input[i] as f64, g.output[i] as f64);
            let lo = (pos[i] as f64 * n / m).floor();
            let hi = ((pos[i] + 1) as f64 * n / m).ceil();
            (v as f64) >= lo && (v as f64) < hi
        } else {
            let start = pos[i] as i64 * g.stride[i] as i64 - g.pad[i] as i64;
            (v as i64) >= start && (v as i64) < start + g.kernel[i] as i64
        }
    };
    let (mut best, mut sum, mut count) = (f64::NEG_INFINITY, 0.0, 0usize);
    for (j, &v) in x[p * isp..(p + 1) * isp].iter().enumerate() {
        let at = [j / (g.input[1] * g.input[2]), j / g.input[2] % g.input[1], j % g.input[2]];
        if (0..3).all(|i| inside(i, at[i])) {
            best = best.max(v as f64);
            sum += v as f64;
            count += 1;
        }
    }
    if op == PoolOp::Max { best } else { sum / count as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pool_matches_brute_force_in_1d_2d_3d() {
        for (spec, ops) in [
            ("2x3x11-k3-s2-p1", &[PoolOp::Max, PoolOp::Avg][..]),
            ("1x4x9x10-k3-s2-p1", &[PoolOp::Max, PoolOp::Avg]),
            ("2x2x8x8-k2", &[PoolOp::Max, PoolOp::Avg]),
            ("1x2x5x6x7-k2-s1", &[PoolOp::Max, PoolOp::Avg]),
            ("2x3x7x7-o1", &[PoolOp::AdaptiveAvg]),
            ("1x2x10x7-o3", &[PoolOp::AdaptiveAvg]),
            ("1x2x5x6x7-o2", &[PoolOp::AdaptiveAvg]),
        ] {
            let (g, adaptive) = parse_pool(spec).unwrap();
            assert_eq!(adaptive, ops[0] == PoolOp::AdaptiveAvg);
            let x = crate::util::randn(g.input_len(), 3);
            for &op in ops {
                let mut out = vec![f32::NAN; g.output_len()];
                pool(&g, op, &x, &mut out);
                for (i, &v) in out.iter().enumerate() {
                    let want = pool_value_f64(&g, op, &x, i);
                    assert!(
                        (v as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()),
                        "{spec} {op:?} [{i}]: {v} vs {want}"
                    );
                }
            }
        }
    }

    #[test]
    fn bad_pools_are_refused() {
        assert!(parse_pool("1x3x4x4-k7").unwrap_err().contains("larger than the padded input"));
        assert!(parse_pool("1x3x4x4-k2-p2").unwrap_err().contains("half the window"));
        assert!(parse_pool("1x3x4x4").unwrap_err().contains("either a window"));
        assert!(parse_pool("1x3x4x4-k2-o2").unwrap_err().contains("either a window"));
        assert!(parse_pool("1x3-k2").unwrap_err().contains("1 to 3 spatial"));
        let (g, _) = parse_pool("1x64x112x112-k3-s2-p1").unwrap();
        assert_eq!(g.output, [1, 56, 56]);
    }
}
