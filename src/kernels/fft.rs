//! Multi-dimensional FFTs over `rustfft` (complex) and `realfft` (real
//! input), forward and inverse, unnormalised as FFTW and `torch.fft` with
//! `norm="backward"` are. A 1-D transform is one rustfft call (Bailey's
//! four-step form over rustfft sub-plans, [`four_step`], threaded and
//! blocked for the caches, is there to be timed beside it through
//! [`FftPlan::with_four_step`]; it did not win here, see `FftPlan::new`);
//! each further
//! axis is done by transposing it to the last position in blocks, running
//! the row transforms, and transposing back, with the planes spread over the
//! context's threads (rustfft itself is single-threaded). Real transforms
//! take `[.., L]` f32 and give `[.., L/2+1]` complex (the half spectrum
//! along the last axis, as `torch.fft.rfftn`).
//!
//! The f64 references beside them ([`dft_f64`], [`dft_bin_f64`]) are the
//! textbook sums, for small sizes in full and single bins of large ones.

use crate::kernels::SendPtr;
use rayon::prelude::*;
use realfft::{RealFftPlanner, RealToComplex};
use rustfft::num_complex::Complex;
use rustfft::{Fft, FftDirection, FftPlanner};
use std::sync::Arc;

pub mod four_step;

/// A complex f32.
pub type C32 = Complex<f32>;

/// Plans for every axis of one shape, made once.
pub struct FftPlan {
    /// Extents, outermost first.
    pub shape: Vec<usize>,
    /// Real input (half spectrum along the last axis) or complex.
    pub real: bool,
    /// One complex plan per axis (for real input, the last axis's entry is
    /// unused and the real plan below serves it).
    axes: Vec<Arc<dyn Fft<f32>>>,
    r2c: Option<Arc<dyn RealToComplex<f32>>>,
    /// The four-step form of a large 1-D complex transform, when chosen.
    four_step: Option<four_step::FourStep>,
}

impl FftPlan {
    /// Plans the forward (or inverse) transform of `shape`: one rustfft
    /// plan per axis. The four-step form is not chosen here: in the `fft`
    /// cases that pin `algo` (interleaved rounds on the busy 2-core dev
    /// host, 2026-11-28) it took 3.5x the single plan's time at 2^20 and
    /// 1.04-1.28x at 2^22, with two threads or one.
    pub fn new(shape: &[usize], real: bool, direction: FftDirection) -> Self {
        Self::with_four_step(shape, real, direction, false)
    }

    /// As [`FftPlan::new`], with the four-step form used (a 1-D complex
    /// shape) or not as `four_step` says: both algorithms side by side.
    pub fn with_four_step(shape: &[usize], real: bool, direction: FftDirection, four_step: bool) -> Self {
        let four_step = (four_step && !real && shape.len() == 1).then(|| {
            let (n1, n2) = four_step::square_split(shape[0]);
            four_step::FourStep::new(n1, n2, direction)
        });
        let mut planner = FftPlanner::<f32>::new();
        // A real transform's last axis is realfft's; its complex slot is a dummy.
        let axes = shape
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                // The last axis of a real transform is realfft's, a four-step one the sub-plans'.
                let own = i + 1 < shape.len() || !(real || four_step.is_some());
                planner.plan_fft(if own { n } else { 1 }, direction)
            })
            .collect();
        let r2c = real.then(|| RealFftPlanner::<f32>::new().plan_fft_forward(shape[shape.len() - 1]));
        Self { shape: shape.to_vec(), real, axes, r2c, four_step }
    }

    /// Whether the transform runs as the four-step form.
    pub fn is_four_step(&self) -> bool {
        self.four_step.is_some()
    }

    /// Complex elements of the output: all of them, or the half spectrum.
    pub fn output_len(&self) -> usize {
        let (last, outer) =
            self.shape.split_last().map(|(l, o)| (*l, o.iter().product::<usize>())).unwrap_or((1, 1));
        outer * if self.real { last / 2 + 1 } else { last }
    }

    /// Transforms complex `data` in place (a complex plan).
    pub fn run_c2c(&self, data: &mut [C32]) {
        assert!(!self.real);
        if let Some(f) = &self.four_step {
            return f.process(data);
        }
        self.last_axis_c2c(data, self.shape[self.shape.len() - 1]);
        self.other_axes(data, self.shape[self.shape.len() - 1]);
    }

    /// Transforms real `input` into `out` (the half spectrum; a real plan).
    /// `input` is used as scratch and left undefined, as realfft does.
    pub fn run_r2c(&self, input: &mut [f32], out: &mut [C32]) {
        let r2c = self.r2c.as_ref().expect("a real plan");
        let last = self.shape[self.shape.len() - 1];
        let half = last / 2 + 1;
        input.par_chunks_mut(last).zip(out.par_chunks_mut(half)).for_each_init(
            || r2c.make_scratch_vec(),
            |scratch, (i, o)| {
                r2c.process_with_scratch(i, o, scratch).expect("lengths checked by the plan");
            },
        );
        self.other_axes(out, half);
    }

    /// Row transforms along the last axis (`len` long), rows spread over threads.
    fn last_axis_c2c(&self, data: &mut [C32], len: usize) {
        let plan = &self.axes[self.axes.len() - 1];
        let rows = data.len() / len;
        if rows == 1 {
            plan.process(data);
        } else {
            // Tasks of about 16K elements: enough of them for any pool
            // (rayon balances them), none too small to pay for itself.
            let per = (16384 / len).max(1) * len;
            data.par_chunks_mut(per).for_each(|c| plan.process(c));
        }
    }

    /// Every axis but the last, for data whose last axis is `last` long.
    /// Tasks are (plane, block of BLOCK columns) pairs, not whole planes,
    /// so a 2-D transform's single plane (or a 3-D one's outermost axis)
    /// still spreads over every thread.
    fn other_axes(&self, data: &mut [C32], last: usize) {
        let nd = self.shape.len();
        for axis in (0..nd - 1).rev() {
            let len = self.shape[axis];
            // Inner stride: the product of the (stored) extents after `axis`.
            let inner: usize = self.shape[axis + 1..nd - 1].iter().product::<usize>() * last;
            let plan = &self.axes[axis];
            let blocks = inner.div_ceil(BLOCK);
            let planes = data.len() / (len * inner);
            let base = SendPtr(data.as_mut_ptr());
            (0..planes * blocks).into_par_iter().for_each_init(
                || {
                    let scratch = vec![C32::default(); plan.get_inplace_scratch_len()];
                    (vec![C32::default(); len * inner.min(BLOCK)], scratch)
                },
                |(buf, scratch), task| {
                    let (plane, c0) = (task / blocks, task % blocks * BLOCK);
                    let w = BLOCK.min(inner - c0);
                    let buf = &mut buf[..len * w];
                    let start = plane * len * inner + c0;
                    // SAFETY: this task alone reads and writes columns
                    // c0..c0 + w of plane `plane`, elements start + r *
                    // inner + c for r < len, c < w: in bounds (plane <
                    // planes, c0 + w <= inner) and disjoint from every
                    // other task's; `data` outlives the loop.
                    unsafe {
                        let p = base.get().add(start);
                        for r in 0..len {
                            for c in 0..w {
                                buf[c * len + r] = *p.add(r * inner + c);
                            }
                        }
                        plan.process_with_scratch(buf, scratch);
                        for r in 0..len {
                            for c in 0..w {
                                *p.add(r * inner + c) = buf[c * len + r];
                            }
                        }
                    }
                },
            );
        }
    }
}

/// Columns gathered per pass over a non-last axis: enough for whole cache
/// lines of each row, few enough to stay in L2.
const BLOCK: usize = 16;

/// FLOPs of one transform as FFTW's benchFFT counts them: `5 N log2 N` for
/// complex, `2.5 N log2 N` for real input (N = all elements), whatever the
/// algorithm really does.
pub fn bench_fft_flops(shape: &[usize], real: bool) -> f64 {
    let n: f64 = shape.iter().map(|&v| v as f64).product();
    let f = 5.0 * n * n.log2();
    if real { f / 2.0 } else { f }
}

/// The full forward DFT of `x` (complex, `shape`) in f64, by the
/// separable textbook sums (O(N * sum of extents)).
pub fn dft_f64(shape: &[usize], x: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut data = x.to_vec();
    let mut inner = 1usize;
    for &len in shape.iter().rev() {
        let outer = data.len() / (len * inner);
        let mut next = vec![(0.0, 0.0); data.len()];
        for o in 0..outer {
            for i in 0..inner {
                for k in 0..len {
                    let mut acc = (0.0, 0.0);
                    for j in 0..len {
                        let (re, im) = data[(o * len + j) * inner + i];
                        let ang = -2.0 * std::f64::consts::PI * ((j * k) % len) as f64 / len as f64;
                        acc.0 += re * ang.cos() - im * ang.sin();
                        acc.1 += re * ang.sin() + im * ang.cos();
                    }
                    next[(o * len + k) * inner + i] = acc;
                }
            }
        }
        data = next;
        inner *= len;
    }
    data
}

/// One bin `k` (a multi-index) of the forward DFT of `x` in f64: the plain
/// sum over every element (O(N)), for spot checks of large transforms.
pub fn dft_bin_f64(shape: &[usize], x: &[(f64, f64)], k: &[usize]) -> (f64, f64) {
    let mut acc = (0.0, 0.0);
    for (flat, &(re, im)) in x.iter().enumerate() {
        let (mut rest, mut phase) = (flat, 0.0f64);
        for (axis, &len) in shape.iter().enumerate().rev() {
            let j = rest % len;
            rest /= len;
            phase += ((j * k[axis]) % len) as f64 / len as f64;
        }
        let ang = -2.0 * std::f64::consts::PI * phase.fract();
        acc.0 += re * ang.cos() - im * ang.sin();
        acc.1 += re * ang.sin() + im * ang.cos();
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(n: usize, seed: u64) -> Vec<C32> {
        let v = crate::util::randn(2 * n, seed);
        v.chunks(2).map(|p| C32::new(p[0], p[1])).collect()
    }

    #[test]
    fn complex_and_real_transforms_match_the_dft_in_1d_2d_3d() {
        for shape in [&[64][..], &[97], &[48], &[8, 12], &[7, 5], &[4, 6, 10], &[3, 5, 4]] {
            let n: usize = shape.iter().product();
            let x = input(n, 9);
            let want = dft_f64(shape, &x.iter().map(|c| (c.re as f64, c.im as f64)).collect::<Vec<_>>());
            let mut got = x.clone();
            FftPlan::new(shape, false, FftDirection::Forward).run_c2c(&mut got);
            let tol = 1e-5 * (n as f64).sqrt() * (1.0 + (n as f64).log2());
            for (g, w) in got.iter().zip(&want) {
                assert!((g.re as f64 - w.0).abs() < tol && (g.im as f64 - w.1).abs() < tol, "{shape:?}");
            }
            // Real input: the half spectrum of the same DFT.
            let real: Vec<f32> = x.iter().map(|c| c.re).collect();
            let want = dft_f64(shape, &real.iter().map(|&r| (r as f64, 0.0)).collect::<Vec<_>>());
            let plan = FftPlan::new(shape, true, FftDirection::Forward);
            let mut out = vec![C32::default(); plan.output_len()];
            plan.run_r2c(&mut real.clone(), &mut out);
            let (last, half) = (shape[shape.len() - 1], shape[shape.len() - 1] / 2 + 1);
            for (i, g) in out.iter().enumerate() {
                let (row, col) = (i / half, i % half);
                let w = want[row * last + col];
                assert!(
                    (g.re as f64 - w.0).abs() < tol && (g.im as f64 - w.1).abs() < tol,
                    "real {shape:?} [{i}]"
                );
            }
            // A single bin agrees with the full DFT.
            let k: Vec<usize> = shape.iter().map(|&l| l / 3).collect();
            let flat = k.iter().zip(shape).fold(0, |a, (&k, &l)| a * l + k);
            let bin = dft_bin_f64(shape, &real.iter().map(|&r| (r as f64, 0.0)).collect::<Vec<_>>(), &k);
            assert!(
                (bin.0 - want[flat].0).abs() < 1e-9 * n as f64
                    && (bin.1 - want[flat].1).abs() < 1e-9 * n as f64
            );
        }
    }

    #[test]
    fn flops_follow_bench_fft() {
        assert_eq!(bench_fft_flops(&[1024], false), 5.0 * 1024.0 * 10.0);
        assert_eq!(bench_fft_flops(&[32, 32], true), 2.5 * 1024.0 * 10.0);
    }
}
