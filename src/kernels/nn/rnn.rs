//! Recurrent layers over a sequence, forward, with PyTorch's weight layout
//! and gate order: `w_ih` is `[gates*H x I]`, `w_hh` is `[gates*H x H]`,
//! biases `b_ih`, `b_hh` of `gates*H`; gates are (i, f, g, o) for LSTM and
//! (r, z, n) for GRU; RNN uses tanh. The input projection of every time step
//! is one GEMM up front (`[T*B x I] * w_ih^T`), then each step is one
//! `[B x H] * w_hh^T` GEMM and the element-wise gate update, as cuDNN and
//! PyTorch's CPU path do. `h0` (and LSTM's `c0`) are zero.
//!
//! The GEMMs are tfbench's own: with AVX-512 both weight matrices are
//! packed once ([`RnnScratch::pack`], [`PackedB`]), so the 128 recurrent
//! products of a sequence do not repack `w_hh` (16 MiB for an LSTM of 1024)
//! every step; elsewhere [`super::gemm`] (AVX2, else the `gemm` crate).
//! The gate update of a row is one SIMD-dispatched pass over its gates, the
//! biases pre-summed once per call, rows split over the pool when a step
//! has enough of them.

use crate::kernels::activation::{sigmoid_f32, tanh_f32};
use crate::kernels::sgemm::PackedB;
use crate::kernels::{Layout, simd_dispatch};
use rayon::prelude::*;

/// Which cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cell {
    /// `h = tanh(W_ih x + b_ih + W_hh h + b_hh)`.
    Rnn,
    /// Long short-term memory (4 gates).
    Lstm,
    /// Gated recurrent unit (3 gates).
    Gru,
}

impl Cell {
    /// Gate blocks of `H` rows in the weights.
    pub fn gates(self) -> usize {
        match self {
            Self::Rnn => 1,
            Self::Lstm => 4,
            Self::Gru => 3,
        }
    }
    /// FLOPs of one sequence: both GEMMs (2 per multiply-add) and about ten
    /// element-wise operations per gate value.
    pub fn flops(self, t: usize, b: usize, i: usize, h: usize) -> f64 {
        let gh = (self.gates() * h) as f64;
        (t * b) as f64 * (2.0 * gh * (i + h) as f64 + 10.0 * gh)
    }
}

/// Weights of one layer.
#[derive(Clone)]
pub struct RnnWeights {
    /// `[gates*H x I]`.
    pub w_ih: Vec<f32>,
    /// `[gates*H x H]`.
    pub w_hh: Vec<f32>,
    /// `gates*H`.
    pub b_ih: Vec<f32>,
    /// `gates*H`.
    pub b_hh: Vec<f32>,
}

/// Scratch of [`rnn_forward`]: the input projections `[T*B x gates*H]`, the
/// step's hidden projection `[B x gates*H]`, LSTM's cell state `[B x H]`,
/// the summed biases, and (after [`RnnScratch::pack`]) the packed weights.
pub struct RnnScratch {
    xp: Vec<f32>,
    hp: Vec<f32>,
    cell: Vec<f32>,
    bias: Vec<f32>,
    packed: Option<(PackedB, PackedB)>,
}

impl RnnScratch {
    /// Scratch for `t` steps of `b` rows, hidden `h`.
    pub fn new(cell: Cell, t: usize, b: usize, h: usize) -> Self {
        let gh = cell.gates() * h;
        Self {
            xp: vec![0.0; t * b * gh],
            hp: vec![0.0; b * gh],
            cell: vec![0.0; b * h],
            bias: vec![0.0; 2 * gh],
            packed: None,
        }
    }

    /// Packs `w_ih` and `w_hh` once for the AVX-512 GEMM (a model's weight
    /// reorder, done once); without AVX-512 nothing is packed and every
    /// product packs its own blocks. `w` must stay the weights later passed
    /// to [`rnn_forward`].
    pub fn pack(&mut self, w: &RnnWeights, i: usize, h: usize) {
        let gh = w.b_ih.len();
        self.packed = PackedB::from_nxk(&w.w_ih, gh, i).zip(PackedB::from_nxk(&w.w_hh, gh, h));
    }
}

/// `c = a * w^T` (`w` is `[n x k]`) through the packed form when there is
/// one (AVX-512, shapes matching), else tfbench's per-call GEMM.
pub(super) fn project(
    threads: usize,
    (m, k, n): (usize, usize, usize),
    a: &[f32],
    w: &[f32],
    packed: Option<&PackedB>,
    c: &mut [f32],
) {
    match packed {
        Some(p) if p.k() == k && p.n() == n && crate::kernels::sgemm::available() => {
            p.matmul_into(threads, m, a, c, false)
        }
        _ => super::gemm(threads, (m, k, n), a, w, Layout::NxK, c, false),
    }
}

/// Runs `cell` over `x` (`[T x B x I]`) into `y` (`[T x B x H]`, every
/// step's hidden state), GEMMs on `threads` threads of the current pool.
#[allow(clippy::too_many_arguments)]
pub fn rnn_forward(
    cell: Cell,
    (t, b, i, h): (usize, usize, usize, usize),
    x: &[f32],
    w: &RnnWeights,
    y: &mut [f32],
    s: &mut RnnScratch,
    threads: usize,
) {
    let gh = cell.gates() * h;
    assert_eq!((x.len(), y.len(), w.w_ih.len(), w.w_hh.len()), (t * b * i, t * b * h, gh * i, gh * h));
    let (pih, phh) = match &s.packed {
        Some((a, c)) => (Some(a), Some(c)),
        None => (None, None),
    };
    project(threads, (t * b, i, gh), x, &w.w_ih, pih, &mut s.xp);
    // bias[..gh]: added to every gate's pre-activation; bias[gh..]: GRU's
    // b_hh, which its n gate scales by r (the other cells fold it in).
    let (bsum, bh) = s.bias.split_at_mut(gh);
    for j in 0..gh {
        let fold = cell != Cell::Gru || j < 2 * h;
        bsum[j] = w.b_ih[j] + if fold { w.b_hh[j] } else { 0.0 };
        bh[j] = w.b_hh[j];
    }
    s.cell.fill(0.0);
    for step in 0..t {
        let (done, rest) = y.split_at_mut(step * b * h);
        let out = &mut rest[..b * h];
        let xp = &s.xp[step * b * gh..][..b * gh];
        let hprev = (step > 0).then(|| &done[(step - 1) * b * h..]);
        match hprev {
            None => s.hp.fill(0.0),
            Some(prev) => project(threads, (b, h, gh), prev, &w.w_hh, phh, &mut s.hp),
        }
        let (bsum, bh, hp) = (&s.bias[..gh], &s.bias[gh..], &s.hp);
        let update = |r: usize, out: &mut [f32], c: &mut [f32]| {
            let (xr, hr) = (&xp[r * gh..][..gh], &hp[r * gh..][..gh]);
            match cell {
                Cell::Rnn => rnn_gates(xr, hr, bsum, out),
                Cell::Lstm => lstm_gates(xr, hr, bsum, c, out),
                Cell::Gru => gru_gates(xr, hr, bsum, bh, hprev.map_or(&[][..], |p| &p[r * h..][..h]), out),
            }
        };
        if b * gh >= 1 << 14 {
            out.par_chunks_mut(h)
                .zip(s.cell.par_chunks_mut(h))
                .enumerate()
                .for_each(|(r, (o, c))| update(r, o, c));
        } else {
            out.chunks_mut(h).zip(s.cell.chunks_mut(h)).enumerate().for_each(|(r, (o, c))| update(r, o, c));
        }
    }
}

simd_dispatch! {
    /// `out = tanh(x + h + bias)` for one row.
    fn rnn_gates(xr: &[f32], hr: &[f32], bias: &[f32], out: &mut [f32]) {
        let n = out.len();
        let (xr, hr, bias) = (&xr[..n], &hr[..n], &bias[..n]);
        for j in 0..n {
            out[j] = tanh_f32(xr[j] + hr[j] + bias[j]);
        }
    }
}

simd_dispatch! {
    /// One LSTM row: gates (i, f, g, o) from the projections and summed
    /// biases, the cell state `c` updated in place, `out = o * tanh(c)`.
    fn lstm_gates(xr: &[f32], hr: &[f32], bias: &[f32], c: &mut [f32], out: &mut [f32]) {
        let h = out.len();
        let c = &mut c[..h];
        let (xi, xf, xg, xo) = (&xr[..h], &xr[h..2 * h], &xr[2 * h..3 * h], &xr[3 * h..4 * h]);
        let (hi, hf, hg, ho) = (&hr[..h], &hr[h..2 * h], &hr[2 * h..3 * h], &hr[3 * h..4 * h]);
        let (bi, bf, bg, bo) = (&bias[..h], &bias[h..2 * h], &bias[2 * h..3 * h], &bias[3 * h..4 * h]);
        for j in 0..h {
            let ig = sigmoid_f32(xi[j] + hi[j] + bi[j]);
            let fg = sigmoid_f32(xf[j] + hf[j] + bf[j]);
            let gg = tanh_f32(xg[j] + hg[j] + bg[j]);
            let og = sigmoid_f32(xo[j] + ho[j] + bo[j]);
            c[j] = fg * c[j] + ig * gg;
            out[j] = og * tanh_f32(c[j]);
        }
    }
}

simd_dispatch! {
    /// One GRU row: r and z from the projections and summed biases, `n =
    /// tanh(x_n + b_in + r * (h_n + b_hn))`, `out = (1 - z) n + z h_prev`
    /// (`hprev` empty at the first step: a zero state).
    fn gru_gates(xr: &[f32], hr: &[f32], bias: &[f32], bh: &[f32], hprev: &[f32], out: &mut [f32]) {
        let h = out.len();
        let (xr_, xz, xn) = (&xr[..h], &xr[h..2 * h], &xr[2 * h..3 * h]);
        let (hr_, hz, hn) = (&hr[..h], &hr[h..2 * h], &hr[2 * h..3 * h]);
        let (br, bz, bn, bhn) = (&bias[..h], &bias[h..2 * h], &bias[2 * h..3 * h], &bh[2 * h..3 * h]);
        for j in 0..h {
            let rg = sigmoid_f32(xr_[j] + hr_[j] + br[j]);
            let zg = sigmoid_f32(xz[j] + hz[j] + bz[j]);
            let ng = tanh_f32(xn[j] + bn[j] + rg * (hn[j] + bhn[j]));
            let hp = if hprev.is_empty() { 0.0 } else { hprev[j] };
            out[j] = (1.0 - zg) * ng + zg * hp;
        }
    }
}

/// The first `steps` hidden states of batch row `row` in f64 by the
/// textbook recurrence (`[steps x H]`).
pub fn rnn_row_f64(
    cell: Cell,
    (b, i, h): (usize, usize, usize),
    x: &[f32],
    w: &RnnWeights,
    row: usize,
    steps: usize,
) -> Vec<f64> {
    let gh = cell.gates() * h;
    let sig = |v: f64| 1.0 / (1.0 + (-v).exp());
    let (mut hs, mut cs) = (vec![0.0f64; h], vec![0.0f64; h]);
    let mut out = Vec::with_capacity(steps * h);
    for step in 0..steps {
        let xr = &x[(step * b + row) * i..][..i];
        let proj = |wm: &[f32], v: &[f64], j: usize, k: usize| -> f64 {
            (0..k).map(|p| wm[j * k + p] as f64 * v[p]).sum()
        };
        let xv: Vec<f64> = xr.iter().map(|&v| v as f64).collect();
        let xg: Vec<f64> = (0..gh).map(|j| proj(&w.w_ih, &xv, j, i) + w.b_ih[j] as f64).collect();
        let hg: Vec<f64> = (0..gh).map(|j| proj(&w.w_hh, &hs, j, h) + w.b_hh[j] as f64).collect();
        let next: Vec<f64> = (0..h)
            .map(|j| match cell {
                Cell::Rnn => (xg[j] + hg[j]).tanh(),
                Cell::Lstm => {
                    let (ig, fg) = (sig(xg[j] + hg[j]), sig(xg[h + j] + hg[h + j]));
                    let (gg, og) =
                        ((xg[2 * h + j] + hg[2 * h + j]).tanh(), sig(xg[3 * h + j] + hg[3 * h + j]));
                    cs[j] = fg * cs[j] + ig * gg;
                    og * cs[j].tanh()
                }
                Cell::Gru => {
                    let (rg, zg) = (sig(xg[j] + hg[j]), sig(xg[h + j] + hg[h + j]));
                    let ng = (xg[2 * h + j] + rg * hg[2 * h + j]).tanh();
                    (1.0 - zg) * ng + zg * hs[j]
                }
            })
            .collect();
        hs = next;
        out.extend_from_slice(&hs);
    }
    out
}

/// Weights drawn as PyTorch initialises them: uniform in `±1/sqrt(H)`.
pub fn init_weights(cell: Cell, i: usize, h: usize, seed: u64) -> RnnWeights {
    let (gh, a) = (cell.gates() * h, 1.0 / (h as f32).sqrt());
    RnnWeights {
        w_ih: crate::util::uniform(gh * i, -a, a, seed),
        w_hh: crate::util::uniform(gh * h, -a, a, seed ^ 1),
        b_ih: crate::util::uniform(gh, -a, a, seed ^ 2),
        b_hh: crate::util::uniform(gh, -a, a, seed ^ 3),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Under every ISA cap, with the weights packed (AVX-512) or not.
    #[test]
    fn every_cell_matches_the_f64_recurrence_under_every_isa_cap() {
        use crate::isa::IsaLevel;
        for level in [IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::Avx512] {
            for (t, b, i, h) in [(9, 3, 5, 16), (4, 7, 40, 37)] {
                crate::isa::with_cap(level, || every_cell(t, b, i, h));
            }
        }
    }

    fn every_cell(t: usize, b: usize, i: usize, h: usize) {
        for cell in [Cell::Rnn, Cell::Lstm, Cell::Gru] {
            let w = init_weights(cell, i, h, 11);
            let x = crate::util::randn(t * b * i, 12);
            let mut y = vec![f32::NAN; t * b * h];
            let mut s = RnnScratch::new(cell, t, b, h);
            s.pack(&w, i, h);
            rnn_forward(cell, (t, b, i, h), &x, &w, &mut y, &mut s, 2);
            for row in 0..b {
                let want = rnn_row_f64(cell, (b, i, h), &x, &w, row, t);
                for step in 0..t {
                    for j in 0..h {
                        let (g, r) = (y[(step * b + row) * h + j] as f64, want[step * h + j]);
                        assert!((g - r).abs() < 2e-5, "{cell:?} step {step} row {row} [{j}]: {g} vs {r}");
                    }
                }
            }
        }
    }
}
