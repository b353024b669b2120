//! Backward through time (BPTT) for the recurrent layers of [`super::rnn`]:
//! a forward pass that keeps what the backward needs ([`RnnTrain::forward`]:
//! every hidden state, the gate activations, LSTM's cell states, GRU's
//! `W_hn h + b_hn`), then [`RnnTrain::backward`], which, given `dL/dh` of
//! every step's output, gives the gradients of the input, both weight
//! matrices, both biases and the initial state (and LSTM's initial cell).
//!
//! The GEMMs are the forward's: per step one `[B x gates*H] x W_hh`
//! product carries the hidden gradient back a step (with AVX-512 through
//! `W_hh^T` packed once, as the forward packs `W_hh`); after the loop the
//! input gradient is one `[T*B x gates*H] x W_ih` GEMM over the whole
//! sequence, and each weight gradient one GEMM over the whole sequence,
//! `dG^T [gates*H x T*B] x X` and `dG^T x H_prev` (the gate gradients
//! transposed once: the GEMM multiplies `A * op(B)` only). The bias
//! gradients are the row sums of the transposed gate gradients. Gate
//! updates of a step run one SIMD-dispatched pass per batch row, rows spread
//! over the pool when a step has enough of them. Gradients are written,
//! not accumulated.
//!
//! The gate-gradient formulas are in [`super::rnn_ref`]'s f64 loop too,
//! written independently and checked by finite differences there.

use super::rnn::{Cell, RnnWeights, project};
use crate::kernels::activation::{sigmoid_f32, tanh_f32};
use crate::kernels::sgemm::PackedB;
use crate::kernels::{Layout, SendPtr, simd_dispatch};
use rayon::prelude::*;

/// Gradients of one sequence (overwritten by each backward pass).
#[derive(Clone, Debug, Default)]
pub struct RnnGrads {
    /// `[T x B x I]`.
    pub dx: Vec<f32>,
    /// `[gates*H x I]`.
    pub dw_ih: Vec<f32>,
    /// `[gates*H x H]`.
    pub dw_hh: Vec<f32>,
    /// `gates*H`.
    pub db_ih: Vec<f32>,
    /// `gates*H`.
    pub db_hh: Vec<f32>,
    /// `[B x H]`: the initial hidden state's.
    pub dh0: Vec<f32>,
    /// `[B x H]`: LSTM's initial cell state's (empty for RNN and GRU).
    pub dc0: Vec<f32>,
}

impl RnnGrads {
    /// Zeroed gradients of `cell` at `(t, b, i, h)`.
    pub fn new(cell: Cell, (t, b, i, h): (usize, usize, usize, usize)) -> Self {
        let gh = cell.gates() * h;
        Self {
            dx: vec![0.0; t * b * i],
            dw_ih: vec![0.0; gh * i],
            dw_hh: vec![0.0; gh * h],
            db_ih: vec![0.0; gh],
            db_hh: vec![0.0; gh],
            dh0: vec![0.0; b * h],
            dc0: vec![0.0; if cell == Cell::Lstm { b * h } else { 0 }],
        }
    }
}

/// FLOPs of the backward pass of one sequence: four GEMM families (the
/// input gradient and `dW_ih`, `gates*H x I` each per token; the carried
/// hidden gradient and `dW_hh`, `gates*H x H` each), 2 per multiply-add,
/// and about twelve element-wise operations per gate value (the gate
/// derivatives and the bias sums): about twice the forward's.
pub fn backward_flops(cell: Cell, t: usize, b: usize, i: usize, h: usize) -> f64 {
    let gh = (cell.gates() * h) as f64;
    (t * b) as f64 * (4.0 * gh * (i + h) as f64 + 12.0 * gh)
}

/// The forward pass's record and the backward pass's scratch for one shape.
pub struct RnnTrain {
    cell: Cell,
    dims: (usize, usize, usize, usize),
    /// `[(T+1) x B x H]`: the initial state, then every step's output.
    hs: Vec<f32>,
    /// `[T x B x gates*H]`: the input projections, then (forward) the gate
    /// activations, then (backward) the gates' pre-activation gradients.
    gates: Vec<f32>,
    /// LSTM: `[(T+1) x B x H]` cell states, `c0` first; GRU: `[T x B x H]`
    /// `W_hn h + b_hn` (forward), then the n gate's hidden-side gradient
    /// (backward); RNN: unused.
    aux: Vec<f32>,
    /// `[B x gates*H]`: a step's hidden projection (forward), GRU's
    /// hidden-side gate gradients (backward).
    hp: Vec<f32>,
    /// `[B x H]`: the hidden (and LSTM's cell) gradient carried back a step.
    carry_h: Vec<f32>,
    carry_c: Vec<f32>,
    /// `[gates*H x T*B]`: gate gradients transposed for the weight GEMMs.
    tr: Vec<f32>,
    /// Summed biases (`gates*H`), then `b_hh` (GRU's n gate keeps it apart).
    bias: Vec<f32>,
    /// With AVX-512: `W_ih`, `W_hh` (as the forward packs them) and `W_hh^T`.
    packed: Option<(PackedB, PackedB, PackedB)>,
}

/// A `[rows x width]` buffer whose rows go to parallel tasks, one task
/// per row index.
#[derive(Clone, Copy)]
struct Rows {
    base: SendPtr<f32>,
    width: usize,
    len: usize,
}

impl Rows {
    fn new(buf: &mut [f32], width: usize) -> Self {
        Self { base: SendPtr(buf.as_mut_ptr()), width, len: buf.len() }
    }
    /// Row `r`.
    ///
    /// # Safety
    /// No two live slices may be of the same row: every caller hands row
    /// `r` of each buffer to task `r` alone, and the buffer outlives it.
    unsafe fn row<'a>(self, r: usize) -> &'a mut [f32] {
        assert!((r + 1) * self.width <= self.len, "row {r} out of bounds");
        // SAFETY: in bounds (asserted); exclusive per the contract above.
        unsafe { std::slice::from_raw_parts_mut(self.base.get().add(r * self.width), self.width) }
    }
}

/// Runs `f(r)` for every row `r < b`, over the pool when the step is large
/// enough to pay for it (the forward's rule).
fn for_rows(b: usize, gh: usize, f: impl Fn(usize) + Sync + Send) {
    if b * gh >= 1 << 14 {
        (0..b).into_par_iter().for_each(f);
    } else {
        (0..b).for_each(f);
    }
}

impl RnnTrain {
    /// Scratch for `cell` at `(t, b, i, h)`.
    pub fn new(cell: Cell, dims: (usize, usize, usize, usize)) -> Self {
        let (t, b, _, h) = dims;
        let gh = cell.gates() * h;
        let aux = match cell {
            Cell::Rnn => 0,
            Cell::Lstm => (t + 1) * b * h,
            Cell::Gru => t * b * h,
        };
        Self {
            cell,
            dims,
            hs: vec![0.0; (t + 1) * b * h],
            gates: vec![0.0; t * b * gh],
            aux: vec![0.0; aux],
            hp: vec![0.0; b * gh],
            carry_h: vec![0.0; b * h],
            carry_c: vec![0.0; b * h],
            tr: vec![0.0; t * b * gh],
            bias: vec![0.0; 2 * gh],
            packed: None,
        }
    }

    /// Packs `W_ih`, `W_hh` and `W_hh^T` once for the AVX-512 GEMM (a
    /// model's weight reorder, done once, as [`super::rnn::RnnScratch::pack`]);
    /// without AVX-512 nothing is packed. `w` must stay the weights later passed.
    pub fn pack(&mut self, w: &RnnWeights) {
        let (_, _, i, h) = self.dims;
        let gh = self.cell.gates() * h;
        let mut wt = vec![0.0f32; h * gh];
        for (j, row) in w.w_hh.chunks_exact(h).enumerate() {
            row.iter().enumerate().for_each(|(k, &v)| wt[k * gh + j] = v);
        }
        self.packed = match (PackedB::from_nxk(&w.w_ih, gh, i), PackedB::from_nxk(&w.w_hh, gh, h)) {
            (Some(a), Some(b)) => PackedB::from_nxk(&wt, h, gh).map(|c| (a, b, c)),
            _ => None,
        };
    }

    /// Every step's hidden state after [`RnnTrain::forward`] (`[T x B x H]`).
    pub fn output(&self) -> &[f32] {
        let (_, b, _, h) = self.dims;
        &self.hs[b * h..]
    }

    /// Runs the layer over `x` (`[T x B x I]`) from `h0` (`[B x H]`; LSTM's
    /// `c0` too, ignored by the others), keeping what the backward needs.
    pub fn forward(&mut self, x: &[f32], w: &RnnWeights, h0: &[f32], c0: &[f32], threads: usize) {
        let (cell, (t, b, i, h)) = (self.cell, self.dims);
        let gh = cell.gates() * h;
        assert_eq!((x.len(), w.w_ih.len(), w.w_hh.len(), h0.len()), (t * b * i, gh * i, gh * h, b * h));
        let packed = self.packed.as_ref();
        project(threads, (t * b, i, gh), x, &w.w_ih, packed.map(|p| &p.0), &mut self.gates);
        let (bsum, bh) = self.bias.split_at_mut(gh);
        for j in 0..gh {
            let fold = cell != Cell::Gru || j < 2 * h;
            bsum[j] = w.b_ih[j] + if fold { w.b_hh[j] } else { 0.0 };
            bh[j] = w.b_hh[j];
        }
        self.hs[..b * h].copy_from_slice(h0);
        if cell == Cell::Lstm {
            assert_eq!(c0.len(), b * h, "LSTM needs c0");
            self.aux[..b * h].copy_from_slice(c0);
        }
        for step in 0..t {
            let (done, next) = self.hs.split_at_mut((step + 1) * b * h);
            let prev = &done[step * b * h..];
            project(threads, (b, h, gh), prev, &w.w_hh, packed.map(|p| &p.1), &mut self.hp);
            let (bias, hp) = (&self.bias, &self.hp);
            let g = Rows::new(&mut self.gates[step * b * gh..][..b * gh], gh);
            let out = Rows::new(&mut next[..b * h], h);
            let aux = Rows::new(&mut self.aux, h);
            for_rows(b, gh, |r| {
                // SAFETY: task r alone touches row r of the step's gates and
                // outputs, and row (step or step + 1) * b + r of aux.
                let (g, out) = unsafe { (g.row(r), out.row(r)) };
                let (hr, hprev) = (&hp[r * gh..][..gh], &prev[r * h..][..h]);
                match cell {
                    Cell::Rnn => rnn_fwd_row(g, hr, &bias[..gh], out),
                    Cell::Lstm => {
                        let (cp, c) = unsafe { (aux.row(step * b + r), aux.row((step + 1) * b + r)) };
                        lstm_fwd_row(g, hr, &bias[..gh], cp, c, out)
                    }
                    Cell::Gru => {
                        let hn = unsafe { aux.row(step * b + r) };
                        gru_fwd_row(g, hr, &bias[..gh], &bias[gh..], hprev, hn, out)
                    }
                }
            });
        }
    }

    /// The gradients for `dy` (`dL/dh` of every step's output, `[T x B x
    /// H]`) after [`RnnTrain::forward`] on the same `x` and `w`.
    pub fn backward(&mut self, x: &[f32], w: &RnnWeights, dy: &[f32], g: &mut RnnGrads, threads: usize) {
        let (cell, (t, b, i, h)) = (self.cell, self.dims);
        let gh = cell.gates() * h;
        assert_eq!((dy.len(), g.dx.len(), g.dw_hh.len()), (t * b * h, t * b * i, gh * h));
        self.carry_h.fill(0.0);
        self.carry_c.fill(0.0);
        for step in (0..t).rev() {
            self.step_back(step, &dy[step * b * h..][..b * h]);
            // The hidden gradient one step back: dG_h W_hh (+ GRU's z dh, already in carry_h).
            let dgh = if cell == Cell::Gru { &self.hp } else { &self.gates[step * b * gh..][..b * gh] };
            let acc = cell == Cell::Gru;
            match &self.packed {
                Some((_, _, wt)) if crate::kernels::sgemm::available() => {
                    wt.matmul_into(threads, b, dgh, &mut self.carry_h, acc)
                }
                _ => super::gemm(threads, (b, gh, h), dgh, &w.w_hh, Layout::KxN, &mut self.carry_h, acc),
            }
        }
        g.dh0.copy_from_slice(&self.carry_h);
        if cell == Cell::Lstm {
            g.dc0.copy_from_slice(&self.carry_c);
        }
        // The whole sequence's products: dX = dG W_ih, dW_ih = dG^T X, dW_hh = dG_h^T H_prev.
        super::gemm(threads, (t * b, gh, i), &self.gates, &w.w_ih, Layout::KxN, &mut g.dx, false);
        transpose_into(&self.gates, t * b, gh, &mut self.tr);
        super::gemm(threads, (gh, t * b, i), &self.tr, x, Layout::KxN, &mut g.dw_ih, false);
        row_sums(&self.tr, t * b, &mut g.db_ih);
        if cell == Cell::Gru {
            // dG_h differs from dG_x in the n block only: r times it, kept in aux.
            transpose_into(&self.aux, t * b, h, &mut self.tr[2 * h * t * b..]);
        }
        let hprev = &self.hs[..t * b * h];
        super::gemm(threads, (gh, t * b, h), &self.tr, hprev, Layout::KxN, &mut g.dw_hh, false);
        row_sums(&self.tr, t * b, &mut g.db_hh);
    }

    /// One step of the backward: the gates' pre-activation gradients of
    /// step `step` over its input projections' slots, the cell gradient
    /// carried back (LSTM), and GRU's hidden-side gradients in `hp`/`aux`.
    fn step_back(&mut self, step: usize, dy: &[f32]) {
        let (cell, (_, b, _, h)) = (self.cell, self.dims);
        let gh = cell.gates() * h;
        let g = Rows::new(&mut self.gates[step * b * gh..][..b * gh], gh);
        let (ch, cc) = (Rows::new(&mut self.carry_h, h), Rows::new(&mut self.carry_c, h));
        let (aux, hp) = (Rows::new(&mut self.aux, h), Rows::new(&mut self.hp, gh));
        let hs = &self.hs;
        for_rows(b, gh, |r| {
            // SAFETY: task r alone touches row r of the step's gates, of
            // the carries and of hp, and row step * b + r of aux (LSTM
            // reads rows step * b + r and (step + 1) * b + r, no task writes aux).
            let (g, dh) = unsafe { (g.row(r), ch.row(r)) };
            let dyr = &dy[r * h..][..h];
            match cell {
                Cell::Rnn => rnn_bwd_row(g, &hs[((step + 1) * b + r) * h..][..h], dyr, dh),
                Cell::Lstm => {
                    let (cp, c) = unsafe { (aux.row(step * b + r), aux.row((step + 1) * b + r)) };
                    lstm_bwd_row(g, cp, c, dyr, dh, unsafe { cc.row(r) })
                }
                Cell::Gru => {
                    let hprev = &hs[(step * b + r) * h..][..h];
                    gru_bwd_row(g, unsafe { aux.row(step * b + r) }, hprev, dyr, dh, unsafe { hp.row(r) })
                }
            }
        });
    }
}

/// `dst[c * ld + r] = src[r * cols + c]`: `[rows x cols]` transposed into a
/// `[cols x rows]` buffer (leading dimension `rows`), in 32 x 32 tiles, tiles
/// of output rows over the pool.
fn transpose_into(src: &[f32], rows: usize, cols: usize, dst: &mut [f32]) {
    const T: usize = 32;
    dst[..rows * cols].par_chunks_mut(T * rows).enumerate().for_each(|(blk, out)| {
        let c0 = blk * T;
        let w = out.len() / rows;
        for r0 in (0..rows).step_by(T) {
            for r in r0..(r0 + T).min(rows) {
                let s = &src[r * cols + c0..][..w];
                for (c, &v) in s.iter().enumerate() {
                    out[c * rows + r] = v;
                }
            }
        }
    });
}

/// `out[j] = sum of row j` of a `[out.len() x cols]` matrix, in f64.
fn row_sums(m: &[f32], cols: usize, out: &mut [f32]) {
    out.par_iter_mut().enumerate().for_each(|(j, o)| {
        *o = m[j * cols..][..cols].iter().map(|&v| v as f64).sum::<f64>() as f32;
    });
}

simd_dispatch! {
    /// RNN forward row: `g` holds the input projection; `out = g = tanh(g + hr + bias)`.
    fn rnn_fwd_row(g: &mut [f32], hr: &[f32], bias: &[f32], out: &mut [f32]) {
        let n = out.len();
        let (g, hr, bias) = (&mut g[..n], &hr[..n], &bias[..n]);
        for j in 0..n {
            g[j] = tanh_f32(g[j] + hr[j] + bias[j]);
            out[j] = g[j];
        }
    }
}

simd_dispatch! {
    /// LSTM forward row: `g` (input projections) becomes the activations
    /// (i, f, g, o); `c = f cp + i g`, `out = o tanh(c)`.
    fn lstm_fwd_row(g: &mut [f32], hr: &[f32], bias: &[f32], cp: &[f32], c: &mut [f32], out: &mut [f32]) {
        let h = out.len();
        let (cp, c) = (&cp[..h], &mut c[..h]);
        let (gi, rest) = g[..4 * h].split_at_mut(h);
        let (gf, rest) = rest.split_at_mut(h);
        let (gg, go) = rest.split_at_mut(h);
        let (hi, hf, hg, ho) = (&hr[..h], &hr[h..2 * h], &hr[2 * h..3 * h], &hr[3 * h..4 * h]);
        let (bi, bf, bg, bo) = (&bias[..h], &bias[h..2 * h], &bias[2 * h..3 * h], &bias[3 * h..4 * h]);
        for j in 0..h {
            gi[j] = sigmoid_f32(gi[j] + hi[j] + bi[j]);
            gf[j] = sigmoid_f32(gf[j] + hf[j] + bf[j]);
            gg[j] = tanh_f32(gg[j] + hg[j] + bg[j]);
            go[j] = sigmoid_f32(go[j] + ho[j] + bo[j]);
            c[j] = gf[j] * cp[j] + gi[j] * gg[j];
            out[j] = go[j] * tanh_f32(c[j]);
        }
    }
}

simd_dispatch! {
    /// GRU forward row: `g` becomes (r, z, n); `hn = W_hn h + b_hn` kept for
    /// the backward; `out = (1 - z) n + z hprev`.
    fn gru_fwd_row(g: &mut [f32], hr: &[f32], bias: &[f32], bh: &[f32], hprev: &[f32], hn: &mut [f32], out: &mut [f32]) {
        let h = out.len();
        let (hprev, hn) = (&hprev[..h], &mut hn[..h]);
        let (gr, rest) = g[..3 * h].split_at_mut(h);
        let (gz, gn) = rest.split_at_mut(h);
        let (hr_, hz, hh) = (&hr[..h], &hr[h..2 * h], &hr[2 * h..3 * h]);
        let (br, bz, bn, bhn) = (&bias[..h], &bias[h..2 * h], &bias[2 * h..3 * h], &bh[2 * h..3 * h]);
        for j in 0..h {
            gr[j] = sigmoid_f32(gr[j] + hr_[j] + br[j]);
            gz[j] = sigmoid_f32(gz[j] + hz[j] + bz[j]);
            hn[j] = hh[j] + bhn[j];
            gn[j] = tanh_f32(gn[j] + bn[j] + gr[j] * hn[j]);
            out[j] = (1.0 - gz[j]) * gn[j] + gz[j] * hprev[j];
        }
    }
}

simd_dispatch! {
    /// RNN backward row: `dh = dy + carried`; `g = dh (1 - h^2)` (the
    /// pre-activation gradient over the activation `h`). The carry is then
    /// overwritten by the step's GEMM.
    fn rnn_bwd_row(g: &mut [f32], hout: &[f32], dy: &[f32], carry: &mut [f32]) {
        let h = carry.len();
        let (g, hout, dy) = (&mut g[..h], &hout[..h], &dy[..h]);
        for j in 0..h {
            let dh = dy[j] + carry[j];
            g[j] = dh * (1.0 - hout[j] * hout[j]);
        }
    }
}

simd_dispatch! {
    /// LSTM backward row: `g` (activations i, f, g, o) becomes their
    /// pre-activation gradients; `dc` carried back becomes `dc f`.
    fn lstm_bwd_row(g: &mut [f32], cp: &[f32], c: &[f32], dy: &[f32], carry: &mut [f32], dc: &mut [f32]) {
        let h = carry.len();
        let (cp, c, dy, dc) = (&cp[..h], &c[..h], &dy[..h], &mut dc[..h]);
        let (gi, rest) = g[..4 * h].split_at_mut(h);
        let (gf, rest) = rest.split_at_mut(h);
        let (gg, go) = rest.split_at_mut(h);
        for j in 0..h {
            let dh = dy[j] + carry[j];
            let (i, f, gv, o) = (gi[j], gf[j], gg[j], go[j]);
            let tc = tanh_f32(c[j]);
            let dcj = dc[j] + dh * o * (1.0 - tc * tc);
            gi[j] = dcj * gv * i * (1.0 - i);
            gf[j] = dcj * cp[j] * f * (1.0 - f);
            gg[j] = dcj * i * (1.0 - gv * gv);
            go[j] = dh * tc * o * (1.0 - o);
            dc[j] = dcj * f;
        }
    }
}

simd_dispatch! {
    /// GRU backward row: `g` (r, z, n) becomes the input-side gradients,
    /// `dgh` the hidden-side ones (the n block times r), `hn` (`W_hn h +
    /// b_hn`) that n block alone (for `dW_hh`), and the carry `z dh`.
    fn gru_bwd_row(g: &mut [f32], hn: &mut [f32], hprev: &[f32], dy: &[f32], carry: &mut [f32], dgh: &mut [f32]) {
        let h = carry.len();
        let (hn, hprev, dy) = (&mut hn[..h], &hprev[..h], &dy[..h]);
        let (gr, rest) = g[..3 * h].split_at_mut(h);
        let (gz, gn) = rest.split_at_mut(h);
        let (dr, rest) = dgh[..3 * h].split_at_mut(h);
        let (dz, dn) = rest.split_at_mut(h);
        for j in 0..h {
            let dh = dy[j] + carry[j];
            let (r, z, n) = (gr[j], gz[j], gn[j]);
            let dnp = dh * (1.0 - z) * (1.0 - n * n);
            let drp = dnp * hn[j] * r * (1.0 - r);
            let dzp = dh * (hprev[j] - n) * z * (1.0 - z);
            (gr[j], gz[j], gn[j]) = (drp, dzp, dnp);
            (dr[j], dz[j], dn[j]) = (drp, dzp, dnp * r);
            hn[j] = dnp * r;
            carry[j] = dh * z;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::rnn::init_weights;
    use super::super::rnn_ref::{Grads64, Weights64, bptt_f64, outputs_f64};
    use super::*;

    /// Each value within 1e-4 of the tensor's largest plus 1e-4 of its own
    /// magnitude: f32 sums over up to T*B terms against f64 ones.
    fn close(what: &str, got: &[f32], want: &[f64]) {
        assert_eq!(got.len(), want.len(), "{what}");
        let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        for (k, (&g, &w)) in got.iter().zip(want).enumerate() {
            let bound = 1e-4 * (scale + w.abs()) + 1e-7;
            assert!((g as f64 - w).abs() <= bound, "{what} [{k}]: {g} against f64 {w} (bound {bound:e})");
        }
    }

    fn against_f64(cell: Cell, (t, b, i, h): (usize, usize, usize, usize)) {
        let dims = (t, b, i, h);
        let w = init_weights(cell, i, h, 21);
        let x = crate::util::randn(t * b * i, 22);
        let (h0, c0) =
            (crate::util::uniform(b * h, -0.5, 0.5, 23), crate::util::uniform(b * h, -0.5, 0.5, 24));
        let dy = crate::util::randn(t * b * h, 25);
        let mut tape = RnnTrain::new(cell, dims);
        tape.pack(&w);
        let mut g = RnnGrads::new(cell, dims);
        // Twice: nothing of the first pass may leak into the second.
        for _ in 0..2 {
            tape.forward(&x, &w, &h0, &c0, 2);
            tape.backward(&x, &w, &dy, &mut g, 2);
        }
        let w64 = Weights64::from(&w);
        let f = |v: &[f32]| v.iter().map(|&a| a as f64).collect::<Vec<f64>>();
        let mut sum =
            Grads64 { dw_ih: vec![0.0; w.w_ih.len()], dw_hh: vec![0.0; w.w_hh.len()], ..Default::default() };
        sum.db_ih = vec![0.0; w.b_ih.len()];
        sum.db_hh = vec![0.0; w.b_hh.len()];
        for r in 0..b {
            let rows = |v: &[f32], k: usize| {
                (0..t).flat_map(|s| f(&v[(s * b + r) * k..][..k])).collect::<Vec<f64>>()
            };
            let (xr, dyr) = (rows(&x, i), rows(&dy, h));
            let (h0r, c0r) = (f(&h0[r * h..][..h]), f(&c0[r * h..][..h]));
            let what = format!("{cell:?} {dims:?} row {r}");
            close(
                &format!("{what} output"),
                &rows(tape.output(), h).iter().map(|&v| v as f32).collect::<Vec<_>>(),
                &outputs_f64(cell, h, &w64, &xr, &h0r, &c0r),
            );
            let want = bptt_f64(cell, h, &w64, &xr, (&h0r, &c0r), &dyr);
            let got_dx: Vec<f32> = (0..t).flat_map(|s| g.dx[(s * b + r) * i..][..i].to_vec()).collect();
            close(&format!("{what} dx"), &got_dx, &want.dx);
            close(&format!("{what} dh0"), &g.dh0[r * h..][..h], &want.dh0);
            if cell == Cell::Lstm {
                close(&format!("{what} dc0"), &g.dc0[r * h..][..h], &want.dc0);
            }
            for (s, o) in [
                (&want.dw_ih, &mut sum.dw_ih),
                (&want.dw_hh, &mut sum.dw_hh),
                (&want.db_ih, &mut sum.db_ih),
                (&want.db_hh, &mut sum.db_hh),
            ] {
                o.iter_mut().zip(s).for_each(|(a, b)| *a += b);
            }
        }
        close(&format!("{cell:?} {dims:?} dW_ih"), &g.dw_ih, &sum.dw_ih);
        close(&format!("{cell:?} {dims:?} dW_hh"), &g.dw_hh, &sum.dw_hh);
        close(&format!("{cell:?} {dims:?} db_ih"), &g.db_ih, &sum.db_ih);
        close(&format!("{cell:?} {dims:?} db_hh"), &g.db_hh, &sum.db_hh);
    }

    /// Every gradient of every cell against the f64 BPTT, from a nonzero
    /// initial state, under every ISA cap (weights packed with AVX-512).
    #[test]
    fn every_cell_s_gradients_match_the_f64_bptt_under_every_isa_cap() {
        use crate::isa::IsaLevel;
        for level in [IsaLevel::Scalar, IsaLevel::Avx2, IsaLevel::Avx512] {
            for dims in [(9, 3, 5, 16), (4, 7, 40, 37)] {
                for cell in [Cell::Rnn, Cell::Lstm, Cell::Gru] {
                    crate::isa::with_cap(level, || against_f64(cell, dims));
                }
            }
        }
    }

    /// A step wide enough (batch x gates x H >= 2^14) for the rows to go
    /// over the pool, as the suite's batch-32 cases do.
    #[test]
    fn rows_spread_over_the_pool_give_the_same_gradients() {
        for cell in [Cell::Lstm, Cell::Gru] {
            against_f64(cell, (3, 22, 8, 256));
        }
    }

    #[test]
    fn backward_flops_are_about_twice_the_forward_s() {
        for cell in [Cell::Rnn, Cell::Lstm, Cell::Gru] {
            let r = backward_flops(cell, 128, 32, 1024, 1024) / cell.flops(128, 32, 1024, 1024);
            assert!((1.9..2.1).contains(&r), "{cell:?}: {r}");
        }
    }
}
