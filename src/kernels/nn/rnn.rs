//! Recurrent layers over a sequence, forward, with PyTorch's weight layout
//! and gate order: `w_ih` is `[gates*H x I]`, `w_hh` is `[gates*H x H]`,
//! biases `b_ih`, `b_hh` of `gates*H`; gates are (i, f, g, o) for LSTM and
//! (r, z, n) for GRU; RNN uses tanh. The input projection of every time step
//! is one GEMM up front (`[T*B x I] * w_ih^T`), then each step is one
//! `[B x H] * w_hh^T` GEMM and the element-wise gate update, as cuDNN and
//! PyTorch's CPU path do. `h0` (and LSTM's `c0`) are zero.

use crate::kernels::activation::{sigmoid_f32, tanh_f32};
use crate::kernels::{Layout, matmul};
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
/// step's hidden projection `[B x gates*H]` and LSTM's cell state `[B x H]`.
pub struct RnnScratch {
    xp: Vec<f32>,
    hp: Vec<f32>,
    cell: Vec<f32>,
}

impl RnnScratch {
    /// Scratch for `t` steps of `b` rows, hidden `h`.
    pub fn new(cell: Cell, t: usize, b: usize, h: usize) -> Self {
        let gh = cell.gates() * h;
        Self { xp: vec![0.0; t * b * gh], hp: vec![0.0; b * gh], cell: vec![0.0; b * h] }
    }
}

/// Runs `cell` over `x` (`[T x B x I]`) into `y` (`[T x B x H]`, every
/// step's hidden state), GEMMs on `threads` threads.
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
    matmul(threads, (t * b, i, gh), x, &w.w_ih, Layout::NxK, &mut s.xp);
    s.cell.fill(0.0);
    for step in 0..t {
        let (done, rest) = y.split_at_mut(step * b * h);
        let out = &mut rest[..b * h];
        let xp = &s.xp[step * b * gh..][..b * gh];
        if step == 0 {
            s.hp.fill(0.0);
        } else {
            matmul(threads, (b, h, gh), &done[(step - 1) * b * h..], &w.w_hh, Layout::NxK, &mut s.hp);
        }
        let hprev: Option<&[f32]> = (step > 0).then(|| &done[(step - 1) * b * h..]);
        let update = |r: usize, out: &mut [f32], c: &mut [f32]| {
            let (xr, hr) = (&xp[r * gh..][..gh], &s.hp[r * gh..][..gh]);
            let bi = &w.b_ih;
            let bh = &w.b_hh;
            let pre = |j: usize| xr[j] + bi[j] + hr[j] + bh[j];
            for j in 0..h {
                out[j] = match cell {
                    Cell::Rnn => tanh_f32(pre(j)),
                    Cell::Lstm => {
                        let (ig, fg) = (sigmoid_f32(pre(j)), sigmoid_f32(pre(h + j)));
                        let (gg, og) = (tanh_f32(pre(2 * h + j)), sigmoid_f32(pre(3 * h + j)));
                        c[j] = fg * c[j] + ig * gg;
                        og * tanh_f32(c[j])
                    }
                    Cell::Gru => {
                        let rg = sigmoid_f32(pre(j));
                        let zg = sigmoid_f32(pre(h + j));
                        let ng =
                            tanh_f32(xr[2 * h + j] + bi[2 * h + j] + rg * (hr[2 * h + j] + bh[2 * h + j]));
                        let hp = hprev.map_or(0.0, |p| p[r * h + j]);
                        (1.0 - zg) * ng + zg * hp
                    }
                };
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

    #[test]
    fn every_cell_matches_the_f64_recurrence() {
        let (t, b, i, h) = (9, 3, 5, 16);
        for cell in [Cell::Rnn, Cell::Lstm, Cell::Gru] {
            let w = init_weights(cell, i, h, 11);
            let x = crate::util::randn(t * b * i, 12);
            let mut y = vec![f32::NAN; t * b * h];
            let mut s = RnnScratch::new(cell, t, b, h);
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
