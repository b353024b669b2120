//! The f64 reference of the recurrent layers' backward pass: one batch row
//! (rows are independent) run forward by the textbook recurrence, then
//! back through time by the chain rule written out per gate, with every
//! product a plain loop over the weights. The finite-difference test below
//! checks it against the definition of the gradient; the f32 kernel of
//! [`super::rnn_bwd`] and the `rnn` suite's `pass=forward_backward` cases
//! are checked against it.

use super::rnn::{Cell, RnnWeights};

/// A layer's weights in f64.
pub struct Weights64 {
    /// `[gates*H x I]`.
    pub w_ih: Vec<f64>,
    /// `[gates*H x H]`.
    pub w_hh: Vec<f64>,
    /// `gates*H`.
    pub b_ih: Vec<f64>,
    /// `gates*H`.
    pub b_hh: Vec<f64>,
}

impl From<&RnnWeights> for Weights64 {
    fn from(w: &RnnWeights) -> Self {
        let f = |v: &[f32]| v.iter().map(|&x| x as f64).collect();
        Self { w_ih: f(&w.w_ih), w_hh: f(&w.w_hh), b_ih: f(&w.b_ih), b_hh: f(&w.b_hh) }
    }
}

/// Gradients of one row's sequence, f64, laid out as [`super::rnn_bwd::RnnGrads`]
/// (`dx` is `[steps x I]`, `dh0`/`dc0` are `H` long).
#[derive(Clone, Debug, Default)]
pub struct Grads64 {
    /// `[steps x I]`.
    pub dx: Vec<f64>,
    /// `[gates*H x I]`.
    pub dw_ih: Vec<f64>,
    /// `[gates*H x H]`.
    pub dw_hh: Vec<f64>,
    /// `gates*H`.
    pub db_ih: Vec<f64>,
    /// `gates*H`.
    pub db_hh: Vec<f64>,
    /// `H`.
    pub dh0: Vec<f64>,
    /// `H` (LSTM; zeros for the others).
    pub dc0: Vec<f64>,
}

/// What one forward step leaves for the backward.
struct Step {
    /// The input and hidden projections with their biases (`gates*H` each).
    xg: Vec<f64>,
    hg: Vec<f64>,
    /// The state before and after.
    h_prev: Vec<f64>,
    c_prev: Vec<f64>,
    c: Vec<f64>,
    h: Vec<f64>,
}

fn sig(v: f64) -> f64 {
    1.0 / (1.0 + (-v).exp())
}

/// `w[gates*H x k] v + b`.
fn affine(w: &[f64], b: &[f64], v: &[f64]) -> Vec<f64> {
    let k = v.len();
    b.iter().enumerate().map(|(j, &bj)| bj + (0..k).map(|p| w[j * k + p] * v[p]).sum::<f64>()).collect()
}

/// Runs one row's sequence `x` (`[steps x I]`) from `h0`, `c0` (LSTM).
fn forward(cell: Cell, h: usize, w: &Weights64, x: &[f64], h0: &[f64], c0: &[f64]) -> Vec<Step> {
    let i = w.w_ih.len() / (cell.gates() * h);
    let (mut hs, mut cs) = (h0.to_vec(), if cell == Cell::Lstm { c0.to_vec() } else { vec![0.0; h] });
    let mut tape = Vec::new();
    for xt in x.chunks_exact(i) {
        let (xg, hg) = (affine(&w.w_ih, &w.b_ih, xt), affine(&w.w_hh, &w.b_hh, &hs));
        let a = |j: usize| xg[j] + hg[j];
        let mut c = cs.clone();
        let next: Vec<f64> = (0..h)
            .map(|j| match cell {
                Cell::Rnn => a(j).tanh(),
                Cell::Lstm => {
                    c[j] = sig(a(h + j)) * cs[j] + sig(a(j)) * a(2 * h + j).tanh();
                    sig(a(3 * h + j)) * c[j].tanh()
                }
                Cell::Gru => {
                    let (r, z) = (sig(a(j)), sig(a(h + j)));
                    let n = (xg[2 * h + j] + r * hg[2 * h + j]).tanh();
                    (1.0 - z) * n + z * hs[j]
                }
            })
            .collect();
        tape.push(Step { xg, hg, h_prev: hs, c_prev: cs, c: c.clone(), h: next.clone() });
        (hs, cs) = (next, c);
    }
    tape
}

/// Every step's output of one row (`[steps x H]`).
pub fn outputs_f64(cell: Cell, h: usize, w: &Weights64, x: &[f64], h0: &[f64], c0: &[f64]) -> Vec<f64> {
    forward(cell, h, w, x, h0, c0).into_iter().flat_map(|s| s.h).collect()
}

/// The gradients of `L = sum dy . y` (`dy` is `[steps x H]`) for one row's
/// sequence `x` from `h0` (and LSTM's `c0`).
pub fn bptt_f64(
    cell: Cell,
    h: usize,
    w: &Weights64,
    x: &[f64],
    (h0, c0): (&[f64], &[f64]),
    dy: &[f64],
) -> Grads64 {
    let gh = cell.gates() * h;
    let i = w.w_ih.len() / gh;
    let tape = forward(cell, h, w, x, h0, c0);
    let mut g = Grads64 {
        dx: vec![0.0; x.len()],
        dw_ih: vec![0.0; gh * i],
        dw_hh: vec![0.0; gh * h],
        db_ih: vec![0.0; gh],
        db_hh: vec![0.0; gh],
        dh0: vec![0.0; h],
        dc0: vec![0.0; h],
    };
    let (mut dh_next, mut dc_next) = (vec![0.0f64; h], vec![0.0f64; h]);
    for (t, st) in tape.iter().enumerate().rev() {
        let dh: Vec<f64> = (0..h).map(|j| dy[t * h + j] + dh_next[j]).collect();
        // Gradients of the input-side (dax) and hidden-side (dah)
        // pre-activations; they differ only in GRU's n gate.
        let (mut dax, mut dah) = (vec![0.0; gh], vec![0.0; gh]);
        let mut dh_direct = vec![0.0; h];
        let a = |j: usize| st.xg[j] + st.hg[j];
        for j in 0..h {
            match cell {
                Cell::Rnn => dax[j] = dh[j] * (1.0 - st.h[j] * st.h[j]),
                Cell::Lstm => {
                    let (ig, fg, gg, og) = (sig(a(j)), sig(a(h + j)), a(2 * h + j).tanh(), sig(a(3 * h + j)));
                    let tc = st.c[j].tanh();
                    let dc = dc_next[j] + dh[j] * og * (1.0 - tc * tc);
                    dax[j] = dc * gg * ig * (1.0 - ig);
                    dax[h + j] = dc * st.c_prev[j] * fg * (1.0 - fg);
                    dax[2 * h + j] = dc * ig * (1.0 - gg * gg);
                    dax[3 * h + j] = dh[j] * tc * og * (1.0 - og);
                    dc_next[j] = dc * fg;
                }
                Cell::Gru => {
                    let (r, z) = (sig(a(j)), sig(a(h + j)));
                    let n = (st.xg[2 * h + j] + r * st.hg[2 * h + j]).tanh();
                    let dn = dh[j] * (1.0 - z) * (1.0 - n * n);
                    dax[j] = dn * st.hg[2 * h + j] * r * (1.0 - r);
                    dax[h + j] = dh[j] * (st.h_prev[j] - n) * z * (1.0 - z);
                    dax[2 * h + j] = dn;
                    dah[2 * h + j] = dn * r;
                    dh_direct[j] = dh[j] * z;
                }
            }
        }
        for j in 0..gh {
            if cell != Cell::Gru || j < 2 * h {
                dah[j] = dax[j];
            }
        }
        let xt = &x[t * i..][..i];
        for j in 0..gh {
            g.db_ih[j] += dax[j];
            g.db_hh[j] += dah[j];
            for (p, &xp) in xt.iter().enumerate() {
                g.dw_ih[j * i + p] += dax[j] * xp;
                g.dx[t * i + p] += dax[j] * w.w_ih[j * i + p];
            }
            for p in 0..h {
                g.dw_hh[j * h + p] += dah[j] * st.h_prev[p];
            }
        }
        dh_next =
            (0..h).map(|p| dh_direct[p] + (0..gh).map(|j| dah[j] * w.w_hh[j * h + p]).sum::<f64>()).collect();
    }
    g.dh0 = dh_next;
    if cell == Cell::Lstm {
        g.dc0 = dc_next;
    }
    g
}

#[cfg(test)]
mod tests {
    use super::*;

    fn randv(n: usize, seed: u64) -> Vec<f64> {
        crate::util::randn(n, seed).iter().map(|&v| 0.7 * v as f64).collect()
    }

    /// Tensor `which` of (w_ih, w_hh, b_ih, b_hh, x, h0, c0).
    fn slot<'a>(
        which: usize,
        w: &'a mut Weights64,
        x: &'a mut [f64],
        h0: &'a mut [f64],
        c0: &'a mut [f64],
    ) -> &'a mut [f64] {
        match which {
            0 => &mut w.w_ih,
            1 => &mut w.w_hh,
            2 => &mut w.b_ih,
            3 => &mut w.b_hh,
            4 => x,
            5 => h0,
            _ => c0,
        }
    }

    /// Every gradient of `L = sum dy . y` against central differences of
    /// `L`, each weight, bias, input and initial-state entry perturbed by
    /// ±1e-6 in turn (truncation error O(1e-12), rounding O(1e-10)).
    #[test]
    fn bptt_matches_finite_differences_for_every_cell() {
        let (steps, i, h) = (5, 3, 4);
        for cell in [Cell::Rnn, Cell::Lstm, Cell::Gru] {
            let gh = cell.gates() * h;
            let mut w = Weights64 {
                w_ih: randv(gh * i, 1),
                w_hh: randv(gh * h, 2),
                b_ih: randv(gh, 3),
                b_hh: randv(gh, 4),
            };
            let (mut x, mut h0, mut c0) = (randv(steps * i, 5), randv(h, 6), randv(h, 7));
            let dy = randv(steps * h, 8);
            let g = bptt_f64(cell, h, &w, &x, (&h0, &c0), &dy);
            const EPS: f64 = 1e-6;
            // Central differences of L in one entry of tensor `which` at a time.
            let mut check = |which: usize, got: &[f64]| {
                for (k, &want) in got.iter().enumerate() {
                    let mut at = |d: f64| {
                        slot(which, &mut w, &mut x, &mut h0, &mut c0)[k] += d;
                        let y = outputs_f64(cell, h, &w, &x, &h0, &c0);
                        slot(which, &mut w, &mut x, &mut h0, &mut c0)[k] -= d;
                        y.iter().zip(&dy).map(|(a, b)| a * b).sum::<f64>()
                    };
                    let fd = (at(EPS) - at(-EPS)) / (2.0 * EPS);
                    assert!(
                        (fd - want).abs() <= 1e-7 + 1e-6 * fd.abs(),
                        "{cell:?} tensor {which} [{k}]: finite difference {fd}, BPTT {want}"
                    );
                }
            };
            for (which, got) in
                [&g.dw_ih, &g.dw_hh, &g.db_ih, &g.db_hh, &g.dx, &g.dh0, &g.dc0].iter().enumerate()
            {
                check(which, got);
            }
            // Not vacuous: the gradients are not all zero (c0 is unused outside LSTM).
            assert!(g.dw_hh.iter().any(|v| v.abs() > 1e-3) && g.dh0.iter().any(|v| v.abs() > 1e-3));
            assert_eq!(g.dc0.iter().any(|&v| v != 0.0), cell == Cell::Lstm, "{cell:?}");
        }
    }
}
