//! [`QMatrix`]'s int8-activation decode (one to eight tokens): the
//! activations quantized once per call by the format's llama.cpp rule, then
//! an integer dot per weight row with the dispatch table's kernels (VNNI,
//! AVX2 or portable), rows split over the current rayon pool in tasks of
//! [`ROWS`], so every core streams its share of the weights.

use super::*;

/// Weight rows per parallel task: 16 rows of a 576-wide Q4_1 matrix are
/// 5.6 KiB of codes, enough to amortise the hand-off, small enough that a
/// layer's few hundred rows still split evenly over the cores.
const ROWS: usize = 16;

impl QMatrix {
    /// Decode path of the block formats: quantize x once, an integer dot per
    /// row (W4A8, Q6_K's W6A8, Q8_0's W8A8), with the dispatch table's kernels.
    pub(super) fn w4a8_matmul(&self, x: &[f32], m: usize, y: &mut [f32], simd: bool) {
        let (k, n) = (self.cols, self.rows);
        let isa = if simd {
            super::super::dispatch::gemv(self.format, true, DotIsa::current())
        } else {
            DotIsa::Portable
        };
        // One token through Q8_0 / Q4_0 / Q4_1: the decode layout, copied
        // from the codes on the first such call.
        if m == 1
            && isa == DotIsa::Avx512Vnni
            && let Store::Block(t) = &self.store
            && t.rows >= lanes::ROWS
        {
            return lanes::matvec_many(&mut [(self.lane_codes(t), t, y)], x);
        }
        let a = Q8Acts::new(x, m, k, self.act_layout(), self.act_quant());
        let out = SendPtr(y.as_mut_ptr());
        (0..n.div_ceil(ROWS)).into_par_iter().for_each(|b| {
            // SAFETY: rows b * ROWS.. belong to this task alone; y is m x n.
            unsafe { self.act8_rows(&a, b * ROWS, ((b + 1) * ROWS).min(n), out, isa) }
        });
    }

    /// `y[t, r] = row r . x^_t` for rows `r0..r1` and every token of `a`,
    /// written through `out` (`a.m x self.rows`, token-major).
    ///
    /// # Safety
    /// `out` must point to `a.m * self.rows` values that no other thread
    /// writes in rows `r0..r1`; `isa` must be able to run here.
    unsafe fn act8_rows(&self, a: &Q8Acts, r0: usize, r1: usize, out: SendPtr<f32>, isa: DotIsa) {
        let (k, n, m) = (self.cols, self.rows, a.m);
        let mut acc = [0.0f32; DECODE_MAX_M];
        for r in r0..r1 {
            match &self.store {
                Store::Q6K(t) => super::super::q6k::dot_row(t, r, a, isa, &mut acc[..m]),
                Store::Block(t) if t.format == BlockFormat::Q8_0 => {
                    let (b0, b1) = (r * k / QK, (r + 1) * k / QK);
                    super::super::w8a8::dot_row(
                        &t.scales[b0..b1],
                        &t.qs[r * k..(r + 1) * k],
                        a,
                        isa,
                        &mut acc[..m],
                    )
                }
                _ => w4a8::dot_row(self.q4_row(r), a, isa, &mut acc[..m]),
            }
            for (t, &v) in acc[..m].iter().enumerate() {
                // SAFETY: (t, r) is inside y and row r belongs to this caller (contract).
                unsafe { *out.get().add(t * n + r) = v };
            }
        }
    }

    /// [`QMatrix::matmul_many`] for matrices that all decode with int8
    /// activations (any mix of Q8_0, Q4_0, Q4_1, Q4_K, Q6_K: a Q4_K_M
    /// file's Q4_K query beside its Q6_K value): `x` quantized once per
    /// activation rule among them, and every matrix's rows in one parallel
    /// loop, so a layer's projections cost one hand-off to the pool.
    /// Returns false, doing nothing, when a part does not qualify.
    pub(super) fn act8_many(parts: &mut [(&QMatrix, &mut [f32])], x: &[f32], m: usize) -> bool {
        let ok = |q: &QMatrix, y: &[f32]| {
            q.quantizes_activations(m)
                && q.cols > 0
                && x.len() == m * q.cols
                && y.len() == m * q.rows
                && !matches!(q.store, Store::Ternary(_))
        };
        if m == 0 || parts.is_empty() || !parts.iter().all(|(q, y)| ok(q, y)) {
            return false;
        }
        let k = parts[0].0.cols;
        let mut acts: Vec<(ActLayout, ActQuant, Q8Acts)> = Vec::new();
        for (q, _) in parts.iter() {
            let (l, aq) = (q.act_layout(), q.act_quant());
            if !acts.iter().any(|(l2, q2, _)| *l2 == l && *q2 == aq) {
                acts.push((l, aq, Q8Acts::new(x, m, k, l, aq)));
            }
        }
        let mut tasks: Vec<(&QMatrix, &Q8Acts, usize, SendPtr<f32>, DotIsa)> = Vec::new();
        for (q, y) in parts.iter_mut() {
            let q: &QMatrix = q;
            let a = &acts
                .iter()
                .find(|(l, aq, _)| *l == q.act_layout() && *aq == q.act_quant())
                .expect("quantized above")
                .2;
            let isa = super::super::dispatch::gemv(q.format, true, DotIsa::current());
            let out = SendPtr(y.as_mut_ptr());
            tasks.extend((0..q.rows.div_ceil(ROWS)).map(|b| (q, a, b * ROWS, out, isa)));
        }
        tasks.into_par_iter().for_each(|(q, a, r0, out, isa)| {
            // SAFETY: each task owns rows r0..r0 + ROWS of one matrix's output,
            // which is m x rows (checked above).
            unsafe { q.act8_rows(a, r0, (r0 + ROWS).min(q.rows), out, isa) }
        });
        true
    }
}
