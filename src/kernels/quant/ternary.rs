//! BitNet b1.58 ternary weights: `gamma = mean|W|`,
//! `W~ = RoundClip(W / (gamma + eps), -1, 1)`, weight value `W~ * gamma`;
//! activations are int8 per token (absmax), so a linear layer is integer
//! additions and subtractions only, scaled once per output.
//!
//! Two packings:
//! - compute: two bit planes per 64 weights (`plus`, `minus`), 2 bits per
//!   weight; the AVX-512 kernel turns each plane word into lane masks for
//!   masked 16-bit adds and subtracts (no multiplies).
//! - storage: 5 trits per byte (`sum (t_i + 1) 3^i <= 242`), 1.6 bits per
//!   weight, near the log2(3) = 1.585 bound.

use crate::kernels::simd_dispatch;
use rayon::prelude::*;

/// BitNet's epsilon in `W / (gamma + eps)`.
pub const EPS: f32 = 1e-5;

/// A ternary `[rows, cols]` matrix in bit planes with its scale.
#[derive(Debug, Clone)]
pub struct TernaryMatrix {
    /// Output channels.
    pub rows: usize,
    /// Input channels.
    pub cols: usize,
    /// `mean|W|` of the original weights.
    pub gamma: f32,
    /// 64-bit words per row (`cols` rounded up to 64).
    pub words: usize,
    /// Bit set where the code is +1.
    pub plus: Vec<u64>,
    /// Bit set where the code is -1.
    pub minus: Vec<u64>,
}

/// `mean|w|` (f64 partial sums, so 10^9 weights do not lose precision).
pub fn absmean(w: &[f32]) -> f32 {
    if w.is_empty() {
        return 0.0;
    }
    let s: f64 = w.par_chunks(1 << 16).map(abs_sum).sum();
    (s / w.len() as f64) as f32
}

/// The bit planes of one row: bit `i` of word `w` in `plus` / `minus` is set
/// when `rne(bound(x * inv, -1, 1))` of value `64 w + i` is 1 / -1. The
/// AVX-512 kernel when the CPU has it, else [`planes_portable`]; both give
/// the same bits.
fn planes(row: &[f32], inv: f32, plus: &mut [u64], minus: &mut [u64]) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx512() {
        // SAFETY: has_avx512() checked every feature the kernel is compiled for.
        return unsafe { super::avx512::ternary_planes(row, inv, plus, minus) };
    }
    planes_portable(row, inv, plus, minus)
}

/// [`planes`] in portable code.
pub fn planes_portable(row: &[f32], inv: f32, plus: &mut [u64], minus: &mut [u64]) {
    for ((p, m), chunk) in plus.iter_mut().zip(minus.iter_mut()).zip(row.chunks(64)) {
        let (mut pb, mut mb) = (0u64, 0u64);
        for (i, &v) in chunk.iter().enumerate() {
            let c = super::rne(super::bound(v * inv, -1.0, 1.0));
            pb |= ((c > 0.0) as u64) << i;
            mb |= ((c < 0.0) as u64) << i;
        }
        (*p, *m) = (pb, mb);
    }
}

simd_dispatch! {
    /// Sum of `|w|` in f64: 32 interleaved partial sums (so it vectorises
    /// without reordering any one sum), added in order at the end.
    fn abs_sum(w: &[f32]) -> f64 {
        let mut acc = [0.0f64; 32];
        let mut chunks = w.chunks_exact(32);
        for c in &mut chunks {
            for l in 0..32 {
                acc[l] += c[l].abs() as f64;
            }
        }
        for (a, &v) in acc.iter_mut().zip(chunks.remainder()) {
            *a += v.abs() as f64;
        }
        acc.iter().sum()
    }
}

/// RoundClip(w / (gamma + eps), -1, 1) for every weight.
pub fn ternary_codes(w: &[f32], gamma: f32, out: &mut [i8]) {
    assert_eq!(w.len(), out.len(), "ternary_codes: length mismatch");
    let inv = 1.0 / (gamma + EPS);
    for (o, &v) in out.iter_mut().zip(w) {
        *o = super::clamp_to_i32(super::rne(super::bound(v * inv, -1.0, 1.0)), -1.0, 1.0) as i8;
    }
}

impl TernaryMatrix {
    /// Quantizes `w` (`rows * cols`).
    pub fn quantize(w: &[f32], rows: usize, cols: usize) -> Self {
        assert_eq!(w.len(), rows * cols, "TernaryMatrix::quantize: shape mismatch");
        let gamma = absmean(w);
        let mut codes = vec![0i8; w.len()];
        codes
            .par_chunks_mut(1 << 16)
            .zip(w.par_chunks(1 << 16))
            .for_each(|(o, w)| ternary_codes(w, gamma, o));
        Self::from_codes(&codes, rows, cols, gamma)
    }

    /// Re-quantizes `w` (same shape) into this matrix without allocating:
    /// the absmean pass, then codes written straight into the bit planes,
    /// rows in parallel.
    ///
    /// # Panics
    /// When `w` has the wrong length.
    pub fn quantize_into(&mut self, w: &[f32]) {
        assert_eq!(w.len(), self.rows * self.cols, "TernaryMatrix::quantize_into: shape mismatch");
        let gamma = absmean(w);
        self.gamma = gamma;
        let inv = 1.0 / (gamma + EPS);
        let (words, cols) = (self.words, self.cols.max(1));
        self.plus
            .par_chunks_mut(words)
            .zip(self.minus.par_chunks_mut(words))
            .zip(w.par_chunks(cols))
            .for_each(|((p, m), row)| planes(row, inv, p, m));
    }

    /// `code * gamma` for every weight, rows in parallel.
    ///
    /// # Panics
    /// When `out` has the wrong length.
    pub fn dequantize_into(&self, out: &mut [f32]) {
        assert_eq!(out.len(), self.rows * self.cols, "TernaryMatrix::dequantize_into: shape mismatch");
        let (words, g, cols) = (self.words, self.gamma, self.cols.max(1));
        super::stream_fill(out, 1 << 16, |off, o| {
            decode_range(&self.plus, &self.minus, words, cols, g, off, o)
        });
    }

    /// Packs codes in {-1, 0, 1} into bit planes.
    ///
    /// # Panics
    /// When a code is outside {-1, 0, 1} or the length is wrong.
    pub fn from_codes(codes: &[i8], rows: usize, cols: usize, gamma: f32) -> Self {
        assert_eq!(codes.len(), rows * cols, "TernaryMatrix::from_codes: shape mismatch");
        let words = cols.div_ceil(64);
        let mut plus = vec![0u64; rows * words];
        let mut minus = vec![0u64; rows * words];
        for (r, row) in codes.chunks(cols.max(1)).enumerate() {
            for (i, &c) in row.iter().enumerate() {
                let bit = 1u64 << (i % 64);
                match c {
                    1 => plus[r * words + i / 64] |= bit,
                    -1 => minus[r * words + i / 64] |= bit,
                    0 => {}
                    other => panic!("ternary code {other} at row {r}, column {i}"),
                }
            }
        }
        Self { rows, cols, gamma, words, plus, minus }
    }

    /// The codes back, row-major.
    pub fn codes(&self) -> Vec<i8> {
        let mut out = vec![0i8; self.rows * self.cols];
        for (r, row) in out.chunks_mut(self.cols.max(1)).enumerate() {
            for (i, c) in row.iter_mut().enumerate() {
                let (p, m) = (self.plus[r * self.words + i / 64], self.minus[r * self.words + i / 64]);
                *c = ((p >> (i % 64)) & 1) as i8 - ((m >> (i % 64)) & 1) as i8;
            }
        }
        out
    }

    /// Bytes of the bit planes plus the f32 scale.
    pub fn storage_bytes(&self) -> usize {
        (self.plus.len() + self.minus.len()) * 8 + 4
    }

    /// `sum_k x[k] * code[r, k]` for a row, `x` padded to `words * 64` i16
    /// values with |x| <= 127: the fastest kernel the CPU and cap allow
    /// when `simd`, else the portable loop.
    pub fn dot_row(&self, r: usize, x: &[i16], simd: bool) -> i32 {
        let isa = if simd {
            super::dispatch::gemv(super::WeightFormat::Ternary, false, super::DotIsa::current())
        } else {
            super::DotIsa::Portable
        };
        self.dot_row_isa(r, x, isa)
    }

    /// [`dot_row`](Self::dot_row) with the kernels of `isa` (AVX-512, AVX2
    /// or portable), which the caller checked can run here.
    pub fn dot_row_isa(&self, r: usize, x: &[i16], isa: super::DotIsa) -> i32 {
        let (p, m) = (
            &self.plus[r * self.words..(r + 1) * self.words],
            &self.minus[r * self.words..(r + 1) * self.words],
        );
        #[cfg(target_arch = "x86_64")]
        if isa >= super::DotIsa::Avx512 {
            // SAFETY: the CPU has AVX-512 F and BW; slice lengths are checked inside.
            return unsafe { dot_avx512(p, m, x) };
        }
        #[cfg(target_arch = "x86_64")]
        if isa == super::DotIsa::Avx2 {
            // SAFETY: the CPU has AVX2; slice lengths are checked inside.
            return unsafe { super::avx2::ternary_dot(p, m, x) };
        }
        let _ = isa;
        dot_portable(p, m, x)
    }
}

/// Portable bit-plane dot product: adds where the plus bit is set, subtracts
/// where the minus bit is (bit masks, no multiplies).
pub fn dot_portable(plus: &[u64], minus: &[u64], x: &[i16]) -> i32 {
    assert_eq!(x.len(), plus.len() * 64, "ternary dot: x must be padded to whole words");
    let mut acc = 0i32;
    for ((&p, &m), xs) in plus.iter().zip(minus).zip(x.chunks_exact(64)) {
        for (i, &v) in xs.iter().enumerate() {
            let v = v as i32;
            let pm = -(((p >> i) & 1) as i32);
            let mm = -(((m >> i) & 1) as i32);
            acc += (v & pm) - (v & mm);
        }
    }
    acc
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn dot_avx512(plus: &[u64], minus: &[u64], x: &[i16]) -> i32 {
    use std::arch::x86_64::*;
    assert_eq!(x.len(), plus.len() * 64, "ternary dot: x must be padded to whole words");
    let ones = _mm512_set1_epi16(1);
    let mut total = _mm512_setzero_si512();
    // Each 16-bit lane takes one |x| <= 127 per word: 256 words stay below
    // 2^15, then the lanes are widened into i32.
    for ((p, m), xs) in plus.chunks(256).zip(minus.chunks(256)).zip(x.chunks(256 * 64)) {
        let (mut lo, mut hi) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        for ((&p, &m), xs) in p.iter().zip(m).zip(xs.chunks_exact(64)) {
            // SAFETY: xs holds 64 i16 = two 512-bit vectors.
            let (x0, x1) = unsafe {
                (_mm512_loadu_si512(xs.as_ptr().cast()), _mm512_loadu_si512(xs.as_ptr().add(32).cast()))
            };
            lo = _mm512_mask_add_epi16(lo, p as u32, lo, x0);
            lo = _mm512_mask_sub_epi16(lo, m as u32, lo, x0);
            hi = _mm512_mask_add_epi16(hi, (p >> 32) as u32, hi, x1);
            hi = _mm512_mask_sub_epi16(hi, (m >> 32) as u32, hi, x1);
        }
        total = _mm512_add_epi32(
            total,
            _mm512_add_epi32(_mm512_madd_epi16(lo, ones), _mm512_madd_epi16(hi, ones)),
        );
    }
    _mm512_reduce_add_epi32(total)
}

/// Packs codes in {-1, 0, 1} five per byte (base 3, first code least
/// significant); the last byte may hold fewer.
pub fn pack_base3(codes: &[i8]) -> Vec<u8> {
    codes.chunks(5).map(|c| c.iter().rev().fold(0u8, |acc, &t| acc * 3 + (t + 1) as u8)).collect()
}

/// Inverse of [`pack_base3`] for `n` codes.
pub fn unpack_base3(packed: &[u8], n: usize) -> Vec<i8> {
    let mut out = Vec::with_capacity(n);
    for &b in packed {
        let mut v = b;
        for _ in 0..5 {
            if out.len() == n {
                break;
            }
            out.push((v % 3) as i8 - 1);
            v /= 3;
        }
    }
    out
}

/// Per-token int8 activations for the ternary kernel, widened to i16 and
/// padded to `words * 64` per token; returns the per-token scales
/// (`max|x| / 127`).
pub fn quantize_activations(x: &[f32], k: usize, words: usize, out: &mut [i16], scales: &mut [f32]) {
    let m = scales.len();
    assert_eq!(x.len(), m * k, "ternary activations: x is not {m}x{k}");
    assert_eq!(out.len(), m * words * 64, "ternary activations: out must be padded");
    let mut q = vec![0i8; k];
    for (t, (xs, o)) in x.chunks(k).zip(out.chunks_mut(words * 64)).enumerate() {
        super::int8::quantize_per_token(xs, k, &mut q, &mut scales[t..t + 1]);
        for (o, &v) in o.iter_mut().zip(&q) {
            *o = v as i16;
        }
        o[k..].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absmean_round_clip_follows_the_paper() {
        let w = [0.9f32, -0.1, 0.3, -2.0, 0.0, 0.2];
        let g = absmean(&w);
        assert!((g - 3.5 / 6.0).abs() < 1e-6);
        let mut c = [0i8; 6];
        ternary_codes(&w, g, &mut c);
        // 0.9/0.583 = 1.54 -> 1 (clip); 0.3/0.583 = 0.51 -> 1; 0.2 -> 0.34 -> 0.
        assert_eq!(c, [1, 0, 1, -1, 0, 0]);
    }

    #[test]
    fn bit_planes_and_base3_pack_losslessly() {
        let codes: Vec<i8> = (0..3 * 131).map(|i: i32| ((i * 7 + i / 5) % 3) as i8 - 1).collect();
        let t = TernaryMatrix::from_codes(&codes, 3, 131, 0.5);
        assert_eq!(t.codes(), codes);
        assert_eq!(t.words, 3);
        let packed = pack_base3(&codes);
        assert_eq!(packed.len(), codes.len().div_ceil(5));
        assert!(packed.iter().all(|&b| b <= 242));
        assert_eq!(unpack_base3(&packed, codes.len()), codes);
    }

    #[test]
    fn quantize_into_equals_quantize_and_dequantize_is_code_times_gamma() {
        let w: Vec<f32> = (0..7 * 150).map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0).collect();
        let a = TernaryMatrix::quantize(&w, 7, 150);
        let mut b = TernaryMatrix::from_codes(&vec![0; 7 * 150], 7, 150, 0.0);
        b.quantize_into(&w);
        assert_eq!((a.gamma, &a.plus, &a.minus), (b.gamma, &b.plus, &b.minus));
        let mut out = vec![0.0; w.len()];
        b.dequantize_into(&mut out);
        let codes = b.codes();
        assert!(out.iter().zip(&codes).all(|(&o, &c)| o == c as f32 * b.gamma));
    }

    #[test]
    fn plane_runs_tile_the_range_without_crossing_a_word_or_a_row() {
        for (cols, off, len) in
            [(130usize, 0usize, 390usize), (130, 63, 200), (64, 5, 64), (7, 3, 30), (200, 190, 1)]
        {
            let words = cols.div_ceil(64);
            let mut next = 0;
            for (i, n, w, shift) in plane_runs(words, cols, off, len) {
                assert_eq!(i, next, "runs are contiguous");
                let (r, c) = ((off + i) / cols, (off + i) % cols);
                assert_eq!((w, shift as usize), (r * words + c / 64, c % 64), "{cols}/{off}: run at {i}");
                assert!(n >= 1 && c % 64 + n <= 64 && c + n <= cols, "{cols}/{off}: run at {i} crosses");
                next = i + n;
            }
            assert_eq!(next, len, "{cols}/{off}: every value covered");
        }
    }

    #[test]
    fn simd_dot_equals_portable_and_naive() {
        let (rows, cols) = (5, 16_500); // more than 256 words: the i16 flush runs
        let codes: Vec<i8> = (0..rows * cols).map(|i| ((i * 31 + i / 7) % 3) as i8 - 1).collect();
        let t = TernaryMatrix::from_codes(&codes, rows, cols, 1.0);
        let x: Vec<i16> =
            (0..t.words * 64).map(|i| if i < cols { 127 - (i as i16 * 13) % 255 } else { 0 }).collect();
        for r in 0..rows {
            let naive: i32 = (0..cols).map(|i| codes[r * cols + i] as i32 * x[i] as i32).sum();
            assert_eq!(t.dot_row(r, &x, false), naive);
            for isa in super::super::DotIsa::available_all() {
                assert_eq!(t.dot_row_isa(r, &x, isa), naive, "{isa:?}");
            }
        }
        // All +1 (and all -1) against all 127: the worst case for 16-bit lanes.
        for c in [1, -1] {
            let t = TernaryMatrix::from_codes(&vec![c; cols], 1, cols, 1.0);
            let x: Vec<i16> = (0..t.words * 64).map(|i| if i < cols { 127 } else { 0 }).collect();
            for isa in super::super::DotIsa::available_all() {
                assert_eq!(t.dot_row_isa(0, &x, isa), 127 * c as i32 * cols as i32, "{isa:?}");
            }
        }
    }
}

/// Values `off..off + out.len()` (row-major) of bit planes with `words`
/// words per row of `cols`, times `g`: the AVX-512 kernel when the CPU has
/// it, else [`decode_range_portable`]; both give the same values.
fn decode_range(plus: &[u64], minus: &[u64], words: usize, cols: usize, g: f32, off: usize, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx512() {
        // SAFETY: has_avx512() checked every feature the kernel is compiled for.
        return unsafe { super::avx512::ternary_decode(plus, minus, words, cols, g, off, out) };
    }
    decode_range_portable(plus, minus, words, cols, g, off, out)
}

simd_dispatch! {
    /// [`decode_range`] in portable code: runs of one row and one word each.
    pub fn decode_range_portable(plus: &[u64], minus: &[u64], words: usize, cols: usize, g: f32, off: usize, out: &mut [f32]) {
        for (i, n, w, shift) in plane_runs(words, cols, off, out.len()) {
            let (p, m) = (plus[w] >> shift, minus[w] >> shift);
            for (j, o) in out[i..i + n].iter_mut().enumerate() {
                *o = (((p >> j) & 1) as f32 - ((m >> j) & 1) as f32) * g;
            }
        }
    }
}

/// The runs of values `off..off + len` (row-major, `cols` per row, `words`
/// plane words per row) that each lie in one word of one row, as
/// `(start in the output, length, word index, bit of the first value)`.
/// Shared by both decoders; the row and column advance with the runs, so
/// there is no division per word.
pub(super) fn plane_runs(
    words: usize,
    cols: usize,
    off: usize,
    len: usize,
) -> impl Iterator<Item = (usize, usize, usize, u32)> {
    let (mut r, mut c, mut i) = (off / cols.max(1), off % cols.max(1), 0);
    std::iter::from_fn(move || {
        if i >= len {
            return None;
        }
        let n = (64 - c % 64).min(cols - c).min(len - i);
        let run = (i, n, r * words + c / 64, (c % 64) as u32);
        i += n;
        c += n;
        if c == cols {
            (r, c) = (r + 1, 0);
        }
        Some(run)
    })
}
