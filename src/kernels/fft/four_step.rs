//! Bailey's four-step 1-D FFT for large lengths, every sub-transform a
//! rustfft plan: a length `N = N1 * N2` transform is, with `n = N2 n1 + n2`
//! and `k = k1 + N1 k2`,
//!
//! ```text
//! X[k1 + N1 k2] = sum_n2 w_N2^(n2 k2) . w_N^(n2 k1) . sum_n1 x[N2 n1 + n2] w_N1^(n1 k1)
//! ```
//!
//! 1. the `N2` column transforms of length `N1` (the data seen as `[N1 x N2]`
//!    row-major), gathered in blocks of [`COLS`] columns, transformed by
//!    rustfft and written to a scratch buffer in place;
//! 2. each element of row `k1` multiplied by the twiddle `w_N^(n2 k1)`;
//! 3. the `N1` row transforms of length `N2`, in blocks of [`ROWS`] rows;
//! 4. the `[N1 x N2]` result written back transposed (`X[k2 N1 + k1]`).
//!
//! Steps 2-4 are one pass over each block of rows while it is in cache, so
//! the transform reads and writes the whole array twice, and both passes
//! are runs of blocks spread over the current rayon pool, each task with
//! buffers kept in the plan between calls. rustfft's single plan
//! runs on one thread and, past the caches, makes more passes over memory;
//! [`super::FftPlan::with_four_step`] selects this form; `FftPlan::new` does
//! not (it lost to the single plan on the 2-core dev host, see there).

use super::C32;
use crate::kernels::{SendPtr, simd_dispatch};
use rayon::prelude::*;
use rustfft::{Fft, FftDirection, FftPlanner};
use std::sync::{Arc, Mutex};

/// Columns gathered per block of the column pass: 256 bytes of each row
/// (fewer page walks per byte than 128), and `N1 x 32` complex values
/// (256 KiB at N1 = 1024) that stay in L2 while they are transformed.
const COLS: usize = 32;
/// Rows per block of the row pass: their twiddled, transformed values are
/// written out as runs of 32 consecutive outputs (256 bytes).
const ROWS: usize = 32;
/// Padding of each gathered column or row in the tasks' buffers (one cache
/// line): at a power-of-two stride the 32 columns of a block would share
/// one L1 set and evict each other on every store.
const PAD: usize = 8;
/// Twiddles of a row are `A[a] B[b]` at `n2 = 32 a + b`: two short tables
/// per row, then one vectorisable pass.
const TW: usize = 32;

/// A task's buffers, kept between calls (fresh zeroed buffers per task cost
/// more than the transforms of a block).
#[derive(Default)]
struct TaskBufs {
    /// `COLS` gathered columns or `ROWS` rows, each `PAD` longer than its transform.
    block: Vec<C32>,
    /// rustfft's scratch (the larger of the two plans').
    fft: Vec<C32>,
    /// A row's twiddle tables `A` (`ceil(N2 / TW)`) and `B` (`TW`).
    a: Vec<C32>,
    b: Vec<C32>,
}

/// The buffers of one call: the intermediate array and the tasks'.
#[derive(Default)]
struct Work {
    mid: Vec<C32>,
    tasks: Vec<TaskBufs>,
}

/// A planned four-step transform of length `n1 * n2`.
pub struct FourStep {
    n1: usize,
    n2: usize,
    col: Arc<dyn Fft<f32>>,
    row: Arc<dyn Fft<f32>>,
    /// `w^j` for `j < L`, and `w^(j L)` for `j < n / L + 1`, in f64 and
    /// rounded once: `w^m = hi[m / L] lo[m % L]` for any `m < n` without
    /// an `n`-long table (8 MiB at 2^20, read from memory every call).
    lo: Vec<C32>,
    hi: Vec<C32>,
    /// `log2` of `lo`'s length (a power of two: shifts, not divisions).
    lo_bits: u32,
    /// The intermediate `[N1 x N2]` array and the tasks' buffers.
    work: Mutex<Work>,
}

impl FourStep {
    /// Plans the `direction` transform of length `n1 * n2` (any positive
    /// extents; rustfft plans each sub-length).
    pub fn new(n1: usize, n2: usize, direction: FftDirection) -> Self {
        assert!(n1 > 0 && n2 > 0, "four-step extents must be positive");
        let mut planner = FftPlanner::<f32>::new();
        let (col, row) = (planner.plan_fft(n1, direction), planner.plan_fft(n2, direction));
        let n = n1 * n2;
        let lo_len = ((n as f64).sqrt().ceil() as usize).next_power_of_two();
        let sign = if direction == FftDirection::Forward { -1.0 } else { 1.0 };
        let w = |m: usize| {
            let ang = sign * 2.0 * std::f64::consts::PI * (m as f64 / n as f64);
            C32::new(ang.cos() as f32, ang.sin() as f32)
        };
        let lo = (0..lo_len).map(w).collect();
        let hi = (0..n / lo_len + 1).map(|j| w(j * lo_len)).collect();
        let lo_bits = lo_len.trailing_zeros();
        Self { n1, n2, col, row, lo, hi, lo_bits, work: Mutex::new(Work::default()) }
    }

    /// The length `n1 * n2`.
    pub fn len(&self) -> usize {
        self.n1 * self.n2
    }

    /// Whether the length is zero (never: the extents are positive).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The split `(n1, n2)`: `n1`-long column transforms, `n2`-long rows.
    pub fn split(&self) -> (usize, usize) {
        (self.n1, self.n2)
    }

    /// `w^m` for `m < n`.
    fn twiddle(&self, m: usize) -> C32 {
        self.hi[m >> self.lo_bits] * self.lo[m & ((1 << self.lo_bits) - 1)]
    }

    /// Transforms `data` (`n1 * n2` values) in place, unnormalised, with
    /// the blocks of both passes spread over the current rayon pool.
    pub fn process(&self, data: &mut [C32]) {
        assert_eq!(data.len(), self.len(), "four-step FFT: wrong length");
        // A poisoned lock only means an earlier call panicked mid-way; every
        // buffer is rewritten before it is read, so they are still fine.
        let mut guard = self.work.lock().unwrap_or_else(|p| p.into_inner());
        let work = &mut *guard;
        // Four tasks a thread: some balance when a thread is held up.
        let tasks = (4 * rayon::current_num_threads()).min(self.n1.div_ceil(ROWS)).max(1);
        if work.mid.len() != data.len() || work.tasks.len() != tasks {
            work.mid = vec![C32::default(); data.len()];
            let fft = self.col.get_inplace_scratch_len().max(self.row.get_inplace_scratch_len());
            work.tasks = (0..tasks)
                .map(|_| TaskBufs {
                    block: vec![C32::default(); ((self.n1 + PAD) * COLS).max((self.n2 + PAD) * ROWS)],
                    fft: vec![C32::default(); fft],
                    a: vec![C32::default(); self.n2.div_ceil(TW)],
                    b: vec![C32::default(); TW.min(self.n2)],
                })
                .collect();
        }
        self.columns(data, &mut work.mid, &mut work.tasks);
        self.rows(&work.mid, data, &mut work.tasks);
    }

    /// Step 1: the column transforms of `data` (`[n1 x n2]`) into `out`,
    /// same layout, in blocks of [`COLS`] columns, each task a run of blocks.
    fn columns(&self, data: &[C32], out: &mut [C32], tasks: &mut [TaskBufs]) {
        let (n1, n2, col) = (self.n1, self.n2, &self.col);
        let src = SendPtr(data.as_ptr() as *mut C32);
        let dst = SendPtr(out.as_mut_ptr());
        let blocks = n2.div_ceil(COLS);
        let per = blocks.div_ceil(tasks.len());
        tasks.par_iter_mut().enumerate().for_each(|(t, bufs)| {
            for block in t * per..((t + 1) * per).min(blocks) {
                let c0 = block * COLS;
                let w = COLS.min(n2 - c0);
                let ld = n1 + PAD;
                let buf = &mut bufs.block[..ld * w];
                let scratch = &mut bufs.fft[..col.get_inplace_scratch_len()];
                // SAFETY: this task reads columns c0..c0 + w of `data` and
                // writes the same columns of `out`: elements r * n2 + c0 + c
                // for r < n1, c < w, in bounds of both (n1 * n2 long) and
                // disjoint from every other task's blocks; `data` is only
                // read, and both outlive the loop.
                unsafe {
                    let (s, d) = (src.get().add(c0), dst.get().add(c0));
                    for r in 0..n1 {
                        for c in 0..w {
                            buf[c * ld + r] = *s.add(r * n2 + c);
                        }
                    }
                    for c in 0..w {
                        col.process_with_scratch(&mut buf[c * ld..c * ld + n1], scratch);
                    }
                    for r in 0..n1 {
                        for c in 0..w {
                            *d.add(r * n2 + c) = buf[c * ld + r];
                        }
                    }
                }
            }
        });
    }

    /// Steps 2-4: blocks of [`ROWS`] rows of `mid` copied out, twiddled,
    /// transformed and written transposed into `out` (`out[k2 n1 + k1]`),
    /// each task a run of blocks.
    fn rows(&self, mid: &[C32], out: &mut [C32], tasks: &mut [TaskBufs]) {
        let (n1, n2, row) = (self.n1, self.n2, &self.row);
        let dst = SendPtr(out.as_mut_ptr());
        let blocks = n1.div_ceil(ROWS);
        let per = blocks.div_ceil(tasks.len());
        let ld = n2 + PAD;
        tasks.par_iter_mut().enumerate().for_each(|(t, bufs)| {
            for block in t * per..((t + 1) * per).min(blocks) {
                let r0 = block * ROWS;
                let h = ROWS.min(n1 - r0);
                let scratch = &mut bufs.fft[..row.get_inplace_scratch_len()];
                for k in 0..h {
                    // w^(n2 k1) = A[n2 / TW] B[n2 % TW]; every exponent below n.
                    let k1 = r0 + k;
                    bufs.b.iter_mut().enumerate().for_each(|(j, v)| *v = self.twiddle(j * k1));
                    bufs.a.iter_mut().enumerate().for_each(|(j, v)| *v = self.twiddle(j * TW * k1));
                    let r = &mut bufs.block[k * ld..k * ld + n2];
                    r.copy_from_slice(&mid[k1 * n2..(k1 + 1) * n2]);
                    twiddle_row(r, &bufs.a, &bufs.b);
                    row.process_with_scratch(r, scratch);
                }
                let buf = &bufs.block[..ld * h];
                // SAFETY: this task writes out[k2 * n1 + r0 + k] for k2 <
                // n2, k < h: rows r0..r0 + h of the transposed result, in
                // bounds (r0 + h <= n1) and disjoint from every other
                // task's rows; `out` outlives the loop.
                unsafe {
                    let d = dst.get().add(r0);
                    for k2 in 0..n2 {
                        for k in 0..h {
                            *d.add(k2 * n1 + k) = buf[k * ld + k2];
                        }
                    }
                }
            }
        });
    }
}

simd_dispatch! {
    /// `row[TW a + b] *= A[a] B[b]`.
    fn twiddle_row(row: &mut [C32], a: &[C32], b: &[C32]) {
        for (chunk, &aa) in row.chunks_mut(TW).zip(a) {
            for (v, &bb) in chunk.iter_mut().zip(b) {
                *v *= aa * bb;
            }
        }
    }
}

/// The split of a power-of-two `n` used by [`super::FftPlan`]: `n1 =
/// 2^floor(log2 n / 2)` columns' length, `n2 = n / n1` (rows as long or
/// twice as long), so both sub-transforms fit in L2.
pub fn square_split(n: usize) -> (usize, usize) {
    let n1 = 1usize << (n.trailing_zeros() / 2);
    (n1, n / n1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(n: usize, seed: u64) -> Vec<C32> {
        crate::util::randn(2 * n, seed).chunks(2).map(|p| C32::new(p[0], p[1])).collect()
    }

    /// The four-step result against rustfft's single plan of the same
    /// length, both f32. Each has rounding error of about eps sqrt(log2 N)
    /// per unit of the output's rms (sqrt(N) for unit-variance input), with
    /// a worst bin a few rms from the mean; the bound is 8 eps log2 N rms,
    /// which allows for both transforms' errors and the twiddles' (one
    /// rounding each), while a wrong twiddle or index is off by O(rms).
    fn agrees_with_rustfft(n1: usize, n2: usize, direction: FftDirection, threads: usize) {
        let n = n1 * n2;
        let x = input(n, (n1 * 31 + n2) as u64);
        let mut want = x.clone();
        FftPlanner::<f32>::new().plan_fft(n, direction).process(&mut want);
        let mut got = x;
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a pool");
        let plan = FourStep::new(n1, n2, direction);
        pool.install(|| plan.process(&mut got));
        let rms = (n as f64).sqrt() * std::f64::consts::SQRT_2;
        let tol = 8.0 * f32::EPSILON as f64 * (n as f64).log2().max(1.0) * rms;
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            let err = ((g.re - w.re) as f64).hypot((g.im - w.im) as f64);
            assert!(err <= tol, "{n1}x{n2} {direction:?}: bin {k}: {g} vs {w} (tol {tol:e})");
        }
        // Twice (the scratch is reused) gives the same values.
        let mut again = input(n, (n1 * 31 + n2) as u64);
        pool.install(|| plan.process(&mut again));
        assert_eq!(again, got);
    }

    #[test]
    fn four_step_equals_rustfft_s_single_plan_for_square_and_oblong_splits() {
        for (n1, n2) in
            [(4, 4), (8, 32), (32, 8), (64, 64), (16, 1024), (1024, 16), (256, 512), (3, 40), (1, 7)]
        {
            for threads in [1, 3] {
                agrees_with_rustfft(n1, n2, FftDirection::Forward, threads);
            }
        }
        agrees_with_rustfft(512, 1024, FftDirection::Forward, 2);
        agrees_with_rustfft(128, 64, FftDirection::Inverse, 2);
    }

    #[test]
    fn the_default_split_is_near_square() {
        assert_eq!(square_split(1 << 20), (1024, 1024));
        assert_eq!(square_split(1 << 21), (1024, 2048));
        assert_eq!(square_split(1 << 17), (256, 512));
    }
}
