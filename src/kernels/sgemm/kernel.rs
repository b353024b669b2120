//! The AVX-512 register-blocked microkernel: `C[MR x 16 NV] (+)= Ap * Bp`
//! over `kc` steps of packed panels.
//!
//! Per step it loads NV vectors of the packed B row, broadcasts each of the
//! MR packed A values and issues MR * NV FMAs into accumulators that stay in
//! zmm registers for the whole panel (12 x 2 = 24 accumulators, 2 B vectors
//! and 1 broadcast fit the 32 zmm registers). C is read and written once per
//! call, with masked loads and stores on the ragged right/bottom edges.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Rows of C per microkernel call (broadcast dimension).
pub(super) const MR: usize = 12;
/// zmm vectors per row of the C tile.
pub(super) const NV: usize = 2;
/// Columns of C per microkernel call (vector dimension).
pub(super) const NR: usize = 16 * NV;

/// Prefetch distance in k steps (16 steps of B = 2 KiB ahead).
const PF: usize = 16;
/// k steps per loop iteration.
const UNROLL: usize = 4;

/// Computes the `rows x cols` top-left part of a `MR x NR` tile:
/// `c (+)= a_panel * b_panel (+ bias)`, adding to C when `load_c` and the
/// `cols` floats at `bias` to every row unless `bias` is null.
///
/// # Safety
/// The CPU supports AVX-512F; `a` holds `kc * MR` floats and `b` `kc * NR`
/// (64-byte aligned); `c` covers `rows x cols` at row stride `ldc`;
/// `rows <= MR`, `cols <= NR`, `kc >= 1`; `bias` is null or holds `cols`
/// floats.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn tile(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
    load_c: bool,
    bias: *const f32,
) {
    let mut acc = [[_mm512_setzero_ps(); NV]; MR];
    // Touch the C tile now so its lines arrive while the FMAs run.
    for i in 0..rows {
        for v in 0..NV {
            // A prefetch never faults, and the address is within C's row.
            _mm_prefetch::<_MM_HINT_T0>(c.wrapping_add(i * ldc + v * 16) as *const i8);
        }
    }
    let (mut ap, mut bp) = (a, b);
    // One k step: prefetch, load the B row, MR broadcasts x NV FMAs.
    macro_rules! step {
        () => {
            // B panels stream from L2 (and A's on its first use): ask for
            // them PF steps early; measured a few % faster than hardware
            // prefetch alone. A prefetch never faults, even past the end.
            _mm_prefetch::<_MM_HINT_T0>(bp.wrapping_add(PF * NR) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(bp.wrapping_add(PF * NR + 16) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(ap.wrapping_add(PF * MR) as *const i8);
            // SAFETY: the caller guarantees kc steps of MR (A) and NR (B) floats.
            unsafe {
                let mut bv = [_mm512_setzero_ps(); NV];
                for (v, x) in bv.iter_mut().enumerate() {
                    *x = _mm512_load_ps(bp.add(v * 16));
                }
                for (i, row) in acc.iter_mut().enumerate() {
                    let ai = _mm512_set1_ps(*ap.add(i));
                    for v in 0..NV {
                        row[v] = _mm512_fmadd_ps(ai, bv[v], row[v]);
                    }
                }
                ap = ap.add(MR);
                bp = bp.add(NR);
            }
        };
    }
    // Unrolled by UNROLL to spread the loop overhead.
    for _ in 0..kc / UNROLL {
        for _ in 0..UNROLL {
            step!();
        }
    }
    for _ in 0..kc % UNROLL {
        step!();
    }
    // SAFETY: the caller guarantees C covers rows x cols and the bias extent.
    unsafe { store(&acc, c, ldc, rows, cols, load_c, bias) };
}

/// Writes (or adds) the accumulators, plus the bias row when `bias` is not
/// null, to C, masking columns past `cols`. Adding the bias here saves a
/// separate pass over C (a serial one in the linear layers).
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn store(
    acc: &[[__m512; NV]; MR],
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
    load_c: bool,
    bias: *const f32,
) {
    let mut masks = [0 as __mmask16; NV];
    for (v, m) in masks.iter_mut().enumerate() {
        let left = cols.saturating_sub(v * 16).min(16);
        *m = ((1u32 << left) - 1) as __mmask16;
    }
    let mut add = [_mm512_setzero_ps(); NV];
    if !bias.is_null() {
        for (v, b) in add.iter_mut().enumerate() {
            // SAFETY: the mask keeps the read inside the bias's `cols` floats.
            *b = unsafe { _mm512_maskz_loadu_ps(masks[v], bias.wrapping_add(v * 16)) };
        }
    }
    if cols == NR {
        for (i, row) in acc.iter().enumerate().take(rows) {
            for (v, &x) in row.iter().enumerate() {
                // SAFETY: row i < rows, 16 columns from v * 16 < cols.
                unsafe {
                    let p = c.add(i * ldc + v * 16);
                    let x = _mm512_add_ps(x, add[v]);
                    let r = if load_c { _mm512_add_ps(_mm512_loadu_ps(p), x) } else { x };
                    _mm512_storeu_ps(p, r);
                }
            }
        }
        return;
    }
    for (i, row) in acc.iter().enumerate().take(rows) {
        for (v, &x) in row.iter().enumerate() {
            let mask = masks[v];
            if mask == 0 {
                break;
            }
            // SAFETY: the mask keeps every touched column below cols.
            unsafe {
                let p = c.add(i * ldc + v * 16);
                let x = _mm512_add_ps(x, add[v]);
                let r = if load_c { _mm512_add_ps(_mm512_maskz_loadu_ps(mask, p), x) } else { x };
                _mm512_mask_storeu_ps(p, mask, r);
            }
        }
    }
}

/// `C[M x cols] (+)= A[M x kc] * Bp` for a few rows of A (`M <= 4`) against
/// one packed `kc x NR` panel, streaming it once: the decode-step shape,
/// bound by how fast the panel arrives from memory. Two accumulator sets
/// (even and odd steps) keep two FMA chains per register in flight.
///
/// `bias`, when not null, holds `cols` floats added to every row.
///
/// # Safety
/// The CPU supports AVX-512F; row `i < M` of A holds `kc` floats from
/// `a + i * lda`; `b` holds `kc * NR` floats (64-byte aligned); `c` covers
/// `M x cols` at row stride `ldc`; `cols <= NR`; `bias` is null or holds
/// `cols` floats.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn stream<const M: usize>(
    kc: usize,
    a: *const f32,
    lda: usize,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    cols: usize,
    load_c: bool,
    bias: *const f32,
) {
    let mut even = [[_mm512_setzero_ps(); NV]; M];
    let mut odd = [[_mm512_setzero_ps(); NV]; M];
    // A macro, not a closure, so the body is compiled with AVX-512 enabled.
    macro_rules! step {
        ($acc:expr, $p:expr) => {{
            let p = $p;
            // Far enough ahead to cover DRAM latency at a few ns per step.
            _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add((p + 4 * PF) * NR) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(b.wrapping_add((p + 4 * PF) * NR + 16) as *const i8);
            // SAFETY: p < kc; the caller guarantees the extents.
            unsafe {
                let bv = [_mm512_load_ps(b.add(p * NR)), _mm512_load_ps(b.add(p * NR + 16))];
                for (i, row) in $acc.iter_mut().enumerate() {
                    let ai = _mm512_set1_ps(*a.add(i * lda + p));
                    for v in 0..NV {
                        row[v] = _mm512_fmadd_ps(ai, bv[v], row[v]);
                    }
                }
            }
        }};
    }
    let mut p = 0;
    while p + 2 <= kc {
        step!(even, p);
        step!(odd, p + 1);
        p += 2;
    }
    if p < kc {
        step!(even, p);
    }
    let mut acc = [[_mm512_setzero_ps(); NV]; MR];
    for i in 0..M {
        for v in 0..NV {
            acc[i][v] = _mm512_add_ps(even[i][v], odd[i][v]);
        }
    }
    // SAFETY: the caller guarantees C covers M x cols and the bias extent.
    unsafe { store(&acc, c, ldc, M, cols, load_c, bias) };
}
