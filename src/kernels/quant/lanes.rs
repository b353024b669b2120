//! The decode layout of Q8_0, Q4_0 and Q4_1 weights: a copy of a matrix's
//! codes, row by row, reordered so that one 64-byte load holds four values
//! of each of 16 blocks. A VNNI dot of that load with the activations laid
//! out the same way leaves block `l`'s partial sum in lane `l`, so a row's
//! integer sums of 16 blocks build up in one register with no shuffles, and
//! each group of 16 blocks is scaled once (a vector of 16 scales, one
//! conversion, one multiply-add). The file's order (`w8a8`, `w4a8`)
//! holds one block's 32 values in a 32-byte run, which costs a lane
//! permutation, a conversion and a multiply-add per two (Q8_0) or four
//! (Q4) blocks per row; this is what ggml's AMX buffer type gains by
//! repacking, kept row by row so rows split over threads as before.
//!
//! Layout of a row of `nb` blocks, per group `g` of `r = min(16, nb - 16g)`
//! blocks:
//! - Q8_0, `512 g` bytes in: for each quad `q` of values (`4q..4q+4`) of a
//!   block, `4r` bytes: block `l`'s four codes at `4l`. Codes are stored
//!   offset by 128 (`u8`), the unsigned operand of `vpdpbusd`; the offset is
//!   taken out exactly in i32 through the activations' block sums.
//! - Q4_0 / Q4_1, `256 g` bytes in: for each quad `q < 4`, `4r` bytes: byte
//!   `4l + j` holds value `4q + j` of block `l` in its low nibble and value
//!   `16 + 4q + j` in its high nibble.
//!
//! Activations ([`LaneActs`]) use the Q8_0 order with signed codes.
//!
//! A row's last group of `r < 16` blocks (576 values = 16 + 2 blocks,
//! SmolLM2's hidden size) would cost a full group's instructions for `r`
//! blocks if it kept one block per lane; there the same bytes are read as
//! consecutive 64-byte chunks instead, lane `i` of chunk `c` holding block
//! `(16c + i) mod r`, and the scales are permuted to match (as the file-order
//! kernels do).

use super::blocks::{BlockFormat, BlockTensor, QK};
use super::w4a8::{ActLayout, ActQuant, Q8Acts};

/// Blocks per group (lanes of a 512-bit register of i32).
const GROUP: usize = 16;

/// Byte offset of value `j` of block `b` in a row of `nb` blocks, Q8_0 order.
#[inline]
fn q8_pos(nb: usize, b: usize, j: usize) -> usize {
    let (g, l) = (b / GROUP, b % GROUP);
    let r = (nb - GROUP * g).min(GROUP);
    g * GROUP * QK + (j / 4) * 4 * r + l * 4 + j % 4
}

/// Byte offset and nibble (`false`: low) of value `j` of block `b`, Q4 order.
#[inline]
fn q4_pos(nb: usize, b: usize, j: usize) -> (usize, bool) {
    let (g, l) = (b / GROUP, b % GROUP);
    let r = (nb - GROUP * g).min(GROUP);
    let q = j / 4;
    (g * GROUP * QK / 2 + (q % 4) * 4 * r + l * 4 + j % 4, q >= 4)
}

/// A matrix's codes in the decode layout (scales and minimums stay in the
/// [`BlockTensor`] they came from).
#[derive(Debug, Clone)]
pub struct LaneCodes {
    /// Q8_0, Q4_0 or Q4_1.
    pub format: BlockFormat,
    /// Blocks per row.
    pub nb: usize,
    /// Code bytes, `nb * code_bytes` per row.
    pub codes: Vec<u8>,
}

/// Whether this CPU decodes one token through the layout, and so makes a
/// copy of every Q8_0 / Q4_0 / Q4_1 matrix it decodes with: AVX-512 VNNI.
pub fn in_use() -> bool {
    super::Int8Path::Avx512Vnni.available() && super::has_avx512()
}

/// Bytes of the decode copy of a `rows x cols` matrix in `format` (the
/// length of [`LaneCodes::pack`]'s codes; none below [`ROWS`] rows, which
/// decode without it).
pub fn copy_bytes(format: BlockFormat, rows: usize, cols: usize) -> usize {
    if rows < ROWS { 0 } else { rows * (cols / QK) * format.code_bytes() }
}

impl LaneCodes {
    /// The decode copy of `t`'s codes.
    pub fn pack(t: &BlockTensor) -> Self {
        use rayon::prelude::*;
        let nb = t.cols / QK;
        let cb = t.format.code_bytes();
        let per_row = nb * cb;
        let mut codes = vec![0u8; t.rows * per_row];
        codes.par_chunks_mut(per_row.max(1)).enumerate().for_each(|(r, out)| {
            let src = &t.qs[r * per_row..(r + 1) * per_row];
            for b in 0..nb {
                let block = &src[b * cb..(b + 1) * cb];
                for j in 0..QK {
                    match t.format {
                        BlockFormat::Q8_0 => out[q8_pos(nb, b, j)] = block[j] ^ 0x80,
                        BlockFormat::Q4_0 | BlockFormat::Q4_1 => {
                            // ggml: byte i holds value i (low) and i + 16 (high).
                            let v = if j < 16 { block[j] & 15 } else { block[j - 16] >> 4 };
                            let (p, high) = q4_pos(nb, b, j);
                            out[p] |= if high { v << 4 } else { v };
                        }
                    }
                }
            }
        });
        Self { format: t.format, nb, codes }
    }

    /// Code bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.nb * self.format.code_bytes()
    }

    /// Row `r`'s codes.
    pub fn row(&self, r: usize) -> &[u8] {
        let n = self.row_bytes();
        &self.codes[r * n..(r + 1) * n]
    }
}

/// One token's activations quantized as [`Q8Acts`] by llama.cpp's Q8_1
/// rule (Q8_0's codes and scales, plus the f16 block sum `s` that only
/// Q4_1's minimum term reads; Q8_0 and Q4_0 take their offsets out through
/// the exact integer sums), in the decode layout.
#[derive(Debug, Clone)]
pub struct LaneActs {
    /// Blocks.
    pub nb: usize,
    /// Codes in Q8_0 lane order.
    pub qs: Vec<i8>,
    /// `d_a` per block.
    pub d: Vec<f32>,
    /// Q8_1's `s` per block (Q4_1's minimum term).
    pub s: Vec<f32>,
    /// `sum(q_a)` per block (the offsets' exact correction).
    pub sum: Vec<i32>,
    /// Per 64-byte chunk of the last group of `r = nb mod 16` blocks: lane
    /// `i` of chunk `c` holds block `(16c + i) mod r` (made once per call,
    /// not per row: a division per lane).
    pub tail: Vec<[i32; 16]>,
}

impl LaneActs {
    /// Quantizes one token `x` (`x.len()` a multiple of 32).
    pub fn new(x: &[f32]) -> Self {
        let a = Q8Acts::new(x, 1, x.len(), ActLayout::Natural, ActQuant::Q8_1);
        let nb = x.len() / QK;
        let mut qs = vec![0i8; nb * QK];
        let mut sum = vec![0i32; nb];
        for b in 0..nb {
            for j in 0..QK {
                let c = a.qs[b * QK + j];
                qs[q8_pos(nb, b, j)] = c;
                sum[b] += i32::from(c);
            }
        }
        let r = nb % GROUP;
        let tail =
            (0..(QK * r).div_ceil(64)).map(|c| std::array::from_fn(|i| ((16 * c + i) % r) as i32)).collect();
        Self { nb, qs, d: a.d, s: a.s, sum, tail }
    }

    /// The activations as the kernels multiply them, `d_a * q_a`, in natural order.
    pub fn dequantized(&self) -> Vec<f32> {
        (0..self.nb * QK).map(|i| self.d[i / QK] * self.qs[q8_pos(self.nb, i / QK, i % QK)] as f32).collect()
    }
}

/// Rows per call of the VNNI kernel.
pub const ROWS: usize = 4;

/// One matrix of a [`matvec_many`] call: its decode copy, its scales, its output.
pub type Part<'a> = (&'a LaneCodes, &'a BlockTensor, &'a mut [f32]);

/// `y_i = W_i x^` for one token `x` and every matrix `i` of `parts` (each
/// `(codes, t, y_i)`: `codes` is `t`'s decode copy, `t` has `x.len()`
/// columns and at least [`ROWS`] rows), with VNNI (the caller checked AVX-512
/// F/BW/VL, VNNI, F16C and FMA). `x` is quantized once and all rows share
/// one parallel loop on the current rayon pool: a layer's query, key and
/// value projections (or gate and up) cost one hand-off to the pool, not
/// three.
pub fn matvec_many(parts: &mut [Part], x: &[f32]) {
    use rayon::prelude::*;
    for (codes, t, y) in parts.iter() {
        assert!(
            t.rows >= ROWS && x.len() == t.cols && y.len() == t.rows && codes.nb * QK == t.cols,
            "lanes::matvec_many: shapes do not match"
        );
    }
    let a = LaneActs::new(x);
    // 16 rows per task, as the other decode paths.
    const TASK: usize = 16;
    let mut tasks: Vec<(&LaneCodes, &BlockTensor, usize, &mut [f32])> = Vec::new();
    for (codes, t, y) in parts.iter_mut() {
        let (codes, t) = (*codes, *t);
        tasks.extend(y.chunks_mut(TASK).enumerate().map(|(b, ys)| (codes, t, b * TASK, ys)));
    }
    tasks.into_par_iter().for_each(|(codes, t, r0, ys)| {
        let (n, end) = (t.rows, r0 + ys.len());
        let mut r = r0;
        while r < end {
            // A matrix whose rows are not a multiple of 4 ends with a call
            // that starts early and recomputes rows already written.
            let start = r.min(n - ROWS);
            let mut o = [0.0f32; ROWS];
            dot_rows(codes, t, start, &a, true, &mut o);
            for (i, &v) in o.iter().enumerate() {
                let row = start + i;
                if row >= r && row < end {
                    ys[row - r0] = v;
                }
            }
            r = start + ROWS;
        }
    });
}

/// `out[i] = row_i . x^` for [`ROWS`] consecutive rows `r0..` of `codes`
/// (scales and minimums from `t`), with VNNI when `vnni` (the caller checked
/// AVX-512 F/BW/VL, VNNI, F16C and FMA), else the portable integer loop.
/// Both sum the same integers; only the f32 accumulation order differs.
pub fn dot_rows(
    codes: &LaneCodes,
    t: &BlockTensor,
    r0: usize,
    a: &LaneActs,
    vnni: bool,
    out: &mut [f32; ROWS],
) {
    assert!(r0 + ROWS <= t.rows && a.nb == codes.nb, "lanes::dot_rows: rows or length out of range");
    #[cfg(target_arch = "x86_64")]
    if vnni {
        // SAFETY: the caller checked the features; the rows exist and hold
        // nb blocks, as `a` does (asserted above).
        unsafe {
            match codes.format {
                BlockFormat::Q8_0 => vnni512::q8(codes, t, r0, a, out),
                _ => vnni512::q4(codes, t, r0, a, out),
            }
        }
        return;
    }
    let _ = vnni;
    for (i, o) in out.iter_mut().enumerate() {
        *o = portable_row(codes, t, r0 + i, a);
    }
}

/// One row in plain integer arithmetic on the decode layout.
fn portable_row(codes: &LaneCodes, t: &BlockTensor, r: usize, a: &LaneActs) -> f32 {
    let nb = codes.nb;
    let row = codes.row(r);
    (0..nb)
        .map(|b| {
            let dot: i32 = (0..QK)
                .map(|j| {
                    let q = match codes.format {
                        BlockFormat::Q8_0 => i32::from(row[q8_pos(nb, b, j)]),
                        _ => {
                            let (p, high) = q4_pos(nb, b, j);
                            i32::from(if high { row[p] >> 4 } else { row[p] & 15 })
                        }
                    };
                    q * i32::from(a.qs[q8_pos(nb, b, j)])
                })
                .sum();
            let d = t.scales[r * nb + b].to_f32() * a.d[b];
            match codes.format {
                // Stored as u8 = code + 128: take the offset out exactly.
                BlockFormat::Q8_0 => (dot - 128 * a.sum[b]) as f32 * d,
                BlockFormat::Q4_0 => (dot - 8 * a.sum[b]) as f32 * d,
                BlockFormat::Q4_1 => dot as f32 * d + t.mins[r * nb + b].to_f32() * a.s[b],
            }
        })
        .sum()
}

#[cfg(target_arch = "x86_64")]
// Rows are indexed across several parallel arrays (codes, scales,
// accumulators); index loops say that more plainly than zipped iterators.
#[allow(clippy::needless_range_loop)]
mod vnni512 {
    use super::{BlockTensor, GROUP, LaneActs, LaneCodes, QK, ROWS};
    use half::f16;
    use std::arch::x86_64::*;

    /// Converts 16 f16 scales, lanes past the mask zero.
    #[inline]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,f16c")]
    unsafe fn halfs(lanes: __mmask16, p: *const f16) -> __m512 {
        // SAFETY: the caller passes a pointer with the masked lanes inside.
        _mm512_cvtph_ps(unsafe { _mm256_maskz_loadu_epi16(lanes, p.cast()) })
    }

    /// The byte mask of the first `n <= 64` bytes.
    #[inline(always)]
    fn first(n: usize) -> __mmask64 {
        if n >= 64 { !0 } else { (1u64 << n) - 1 }
    }

    /// The lane -> block vector of tail chunk `c`.
    #[inline]
    #[target_feature(enable = "avx512f")]
    unsafe fn tail_idx(a: &LaneActs, c: usize) -> __m512i {
        // SAFETY: 16 i32 are 64 bytes.
        unsafe { _mm512_loadu_si512(a.tail[c].as_ptr().cast()) }
    }

    /// Q8_0: per full group, 8 quads of 64 bytes, one `vpdpbusd` each per
    /// row; the tail in chunks (module docs).
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
    pub unsafe fn q8(codes: &LaneCodes, t: &BlockTensor, r0: usize, a: &LaneActs, out: &mut [f32; ROWS]) {
        let nb = codes.nb;
        let rows: [&[u8]; ROWS] = std::array::from_fn(|i| codes.row(r0 + i));
        let scales: [*const f16; ROWS] =
            std::array::from_fn(|i| unsafe { t.scales.as_ptr().add((r0 + i) * nb) });
        let mut f = [_mm512_setzero_ps(); ROWS];
        let full = nb / GROUP;
        // Each load also prefetches the same bytes 16 rows on (4 calls
        // ahead): with the hardware's stream prefetcher alone a one-thread
        // decode waited on memory (SmolLM2 tg128 +25-35% with this, measured
        // against no prefetch and 4 and 8 rows ahead). A prefetch never
        // faults, so past the matrix's end it is only wasted.
        let ahead = 4 * ROWS * codes.row_bytes();
        // SAFETY (all loads): a row and the activations hold 32 nb bytes;
        // group g spans 512g..512(g+1), the tail 512 full..32 nb, and every
        // load is masked to the bytes (and scale lanes) inside those.
        for g in 0..full {
            let base = g * GROUP * QK;
            let mut acc = [_mm512_setzero_si512(); ROWS];
            for q in 0..8 {
                let av = unsafe { _mm512_loadu_si512(a.qs.as_ptr().add(base + 64 * q).cast()) };
                for i in 0..ROWS {
                    _mm_prefetch::<_MM_HINT_T0>(rows[i].as_ptr().wrapping_add(ahead + base + 64 * q).cast());
                    let w = unsafe { _mm512_loadu_si512(rows[i].as_ptr().add(base + 64 * q).cast()) };
                    acc[i] = _mm512_dpbusd_epi32(acc[i], w, av);
                }
            }
            let (ad, sum) = unsafe {
                (
                    _mm512_loadu_ps(a.d.as_ptr().add(GROUP * g)),
                    _mm512_loadu_si512(a.sum.as_ptr().add(GROUP * g).cast()),
                )
            };
            // The codes went in as code + 128: take 128 x the block sums out.
            let off = _mm512_slli_epi32(sum, 7);
            for i in 0..ROWS {
                let dw = unsafe { halfs(!0, scales[i].add(GROUP * g)) };
                let dot = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[i], off));
                f[i] = _mm512_fmadd_ps(dot, _mm512_mul_ps(dw, ad), f[i]);
            }
        }
        let r = nb - GROUP * full;
        if r > 0 {
            let (b0, base) = (GROUP * full, GROUP * full * QK);
            let lanes: __mmask16 = (1u16 << r) - 1;
            let (ad, sum) = unsafe {
                (
                    _mm512_maskz_loadu_ps(lanes, a.d.as_ptr().add(b0)),
                    _mm512_maskz_loadu_epi32(lanes, a.sum.as_ptr().add(b0)),
                )
            };
            // Loops, not `array::from_fn`: a closure does not inherit the
            // target features, so the intrinsics in it would not inline.
            let mut sc = [_mm512_setzero_ps(); ROWS];
            for i in 0..ROWS {
                sc[i] = _mm512_mul_ps(unsafe { halfs(lanes, scales[i].add(b0)) }, ad);
            }
            for c in 0..(QK * r).div_ceil(64) {
                let m = first(QK * r - 64 * c);
                let idx = unsafe { tail_idx(a, c) };
                let av = unsafe { _mm512_maskz_loadu_epi8(m, a.qs.as_ptr().add(base + 64 * c).cast()) };
                for i in 0..ROWS {
                    let w = unsafe { _mm512_maskz_loadu_epi8(m, rows[i].as_ptr().add(base + 64 * c).cast()) };
                    let dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, av);
                    f[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(idx, sc[i]), f[i]);
                }
            }
            let off = _mm512_cvtepi32_ps(_mm512_slli_epi32(sum, 7));
            for i in 0..ROWS {
                f[i] = _mm512_fnmadd_ps(off, sc[i], f[i]);
            }
        }
        for i in 0..ROWS {
            out[i] = _mm512_reduce_add_ps(f[i]);
        }
    }

    /// Q4_0 / Q4_1: per full group, 4 runs of 64 code bytes, two `vpdpbusd`
    /// (low and high nibbles) each per row; the tail in chunks.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
    pub unsafe fn q4(codes: &LaneCodes, t: &BlockTensor, r0: usize, a: &LaneActs, out: &mut [f32; ROWS]) {
        let nb = codes.nb;
        let q4_1 = codes.format == super::BlockFormat::Q4_1;
        let rows: [&[u8]; ROWS] = std::array::from_fn(|i| codes.row(r0 + i));
        let at = |i: usize| (r0 + i) * nb;
        let nib = _mm512_set1_epi8(15);
        let mut f = [_mm512_setzero_ps(); ROWS];
        let full = nb / GROUP;
        let ahead = 4 * ROWS * codes.row_bytes();
        // SAFETY (all loads): as in `q8`; a row holds 16 nb bytes, group g
        // spans 256g..256(g+1), the tail 256 full..16 nb.
        for g in 0..full {
            let (abase, wbase) = (g * GROUP * QK, g * GROUP * QK / 2);
            let mut acc = [_mm512_setzero_si512(); ROWS];
            for q in 0..4 {
                let (alo, ahi) = unsafe {
                    (
                        _mm512_loadu_si512(a.qs.as_ptr().add(abase + 64 * q).cast()),
                        _mm512_loadu_si512(a.qs.as_ptr().add(abase + 64 * (q + 4)).cast()),
                    )
                };
                for i in 0..ROWS {
                    _mm_prefetch::<_MM_HINT_T0>(rows[i].as_ptr().wrapping_add(ahead + wbase + 64 * q).cast());
                    let v = unsafe { _mm512_loadu_si512(rows[i].as_ptr().add(wbase + 64 * q).cast()) };
                    let lo = _mm512_and_si512(v, nib);
                    let hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
                    acc[i] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(acc[i], lo, alo), hi, ahi);
                }
            }
            let b0 = GROUP * g;
            let ad = unsafe { _mm512_loadu_ps(a.d.as_ptr().add(b0)) };
            let (s, sum8) = unsafe {
                (
                    _mm512_loadu_ps(a.s.as_ptr().add(b0)),
                    _mm512_slli_epi32(_mm512_loadu_si512(a.sum.as_ptr().add(b0).cast()), 3),
                )
            };
            for i in 0..ROWS {
                let dw = unsafe { halfs(!0, t.scales.as_ptr().add(at(i) + b0)) };
                if q4_1 {
                    let mw = unsafe { halfs(!0, t.mins.as_ptr().add(at(i) + b0)) };
                    f[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i]), _mm512_mul_ps(dw, ad), f[i]);
                    f[i] = _mm512_fmadd_ps(mw, s, f[i]);
                } else {
                    // Q4_0's codes are value + 8: take 8 x the block sums out.
                    let dot = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[i], sum8));
                    f[i] = _mm512_fmadd_ps(dot, _mm512_mul_ps(dw, ad), f[i]);
                }
            }
        }
        let r = nb - GROUP * full;
        if r > 0 {
            let b0 = GROUP * full;
            let (abase, wbase) = (b0 * QK, b0 * QK / 2);
            let lanes: __mmask16 = (1u16 << r) - 1;
            let (ad, s, sum) = unsafe {
                (
                    _mm512_maskz_loadu_ps(lanes, a.d.as_ptr().add(b0)),
                    _mm512_maskz_loadu_ps(lanes, a.s.as_ptr().add(b0)),
                    _mm512_maskz_loadu_epi32(lanes, a.sum.as_ptr().add(b0)),
                )
            };
            let mut sc = [_mm512_setzero_ps(); ROWS];
            for i in 0..ROWS {
                sc[i] = _mm512_mul_ps(unsafe { halfs(lanes, t.scales.as_ptr().add(at(i) + b0)) }, ad);
            }
            // Low nibbles pair with quads 0-3 (the tail's first 16r
            // activation bytes), high ones with quads 4-7 (the next 16r).
            for c in 0..(16 * r).div_ceil(64) {
                let m = first(16 * r - 64 * c);
                let idx = unsafe { tail_idx(a, c) };
                let (alo, ahi) = unsafe {
                    (
                        _mm512_maskz_loadu_epi8(m, a.qs.as_ptr().add(abase + 64 * c).cast()),
                        _mm512_maskz_loadu_epi8(m, a.qs.as_ptr().add(abase + 16 * r + 64 * c).cast()),
                    )
                };
                for i in 0..ROWS {
                    let v =
                        unsafe { _mm512_maskz_loadu_epi8(m, rows[i].as_ptr().add(wbase + 64 * c).cast()) };
                    let lo = _mm512_and_si512(v, nib);
                    let hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
                    let dot =
                        _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, alo), hi, ahi);
                    f[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(idx, sc[i]), f[i]);
                }
            }
            for i in 0..ROWS {
                if q4_1 {
                    let mw = unsafe { halfs(lanes, t.mins.as_ptr().add(at(i) + b0)) };
                    f[i] = _mm512_fmadd_ps(mw, s, f[i]);
                } else {
                    let off = _mm512_cvtepi32_ps(_mm512_slli_epi32(sum, 3));
                    f[i] = _mm512_fnmadd_ps(off, sc[i], f[i]);
                }
            }
        }
        for i in 0..ROWS {
            out[i] = _mm512_reduce_add_ps(f[i]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::quant::Int8Path;

    /// Every value lands on its own byte or nibble, and the whole row is covered.
    #[test]
    fn layouts_are_permutations() {
        for nb in [1, 2, 15, 16, 17, 18, 33, 48] {
            let mut seen = vec![0u8; nb * QK];
            for b in 0..nb {
                for j in 0..QK {
                    seen[q8_pos(nb, b, j)] += 1;
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "Q8_0 nb={nb}");
            let mut seen = vec![0u8; nb * QK];
            for b in 0..nb {
                for j in 0..QK {
                    let (p, high) = q4_pos(nb, b, j);
                    seen[2 * p + usize::from(high)] += 1;
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "Q4 nb={nb}");
        }
    }

    /// The decode layout's dot against an f64 sum over the dequantized
    /// weights and the dequantized activations, portable and (where the CPU
    /// has it) VNNI, for each format and row lengths with partial groups.
    #[test]
    fn rows_match_the_dequantized_product() {
        let vnni = Int8Path::Avx512Vnni.available() && crate::kernels::quant::has_avx512();
        for k in [32, 64, 512, 544, 576, 1536] {
            for f in [BlockFormat::Q8_0, BlockFormat::Q4_0, BlockFormat::Q4_1] {
                let w: Vec<f32> = (0..ROWS * k).map(|i| ((i * 37 % 101) as f32 - 50.0) / 31.0).collect();
                let x: Vec<f32> = (0..k).map(|i| ((i * 53 % 89) as f32 - 44.0) / 17.0).collect();
                let mut t = BlockTensor::zeros(f, ROWS, k).unwrap();
                t.quantize_from(&w);
                let mut wd = vec![0.0f32; ROWS * k];
                t.dequantize_into(&mut wd);
                let codes = LaneCodes::pack(&t);
                assert_eq!(codes.codes.len(), copy_bytes(f, ROWS, k));
                let a = LaneActs::new(&x);
                let xd = a.dequantized();
                for use_vnni in [false, vnni] {
                    let mut got = [f32::NAN; ROWS];
                    dot_rows(&codes, &t, 0, &a, use_vnni, &mut got);
                    for (r, &g) in got.iter().enumerate() {
                        let mut want: f64 = (0..k).map(|j| f64::from(wd[r * k + j]) * f64::from(xd[j])).sum();
                        let mut scale: f64 =
                            (0..k).map(|j| (f64::from(wd[r * k + j]) * f64::from(xd[j])).abs()).sum();
                        // Q4_1's minimum term multiplies Q8_1's f16 `s`.
                        if f == BlockFormat::Q4_1 {
                            for b in 0..k / QK {
                                let sum = f64::from(a.d[b]) * f64::from(a.sum[b]);
                                let c =
                                    f64::from(t.mins[r * (k / QK) + b].to_f32()) * (f64::from(a.s[b]) - sum);
                                want += c;
                                scale += c.abs();
                            }
                        }
                        assert!(
                            (f64::from(g) - want).abs() <= 1e-5 * scale.max(1.0),
                            "{f:?} k={k} row {r} vnni={use_vnni}: {g} vs {want}"
                        );
                    }
                }
            }
        }
    }
}
