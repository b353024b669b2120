//! Products with at most [`ROWS`] rows of A, read from B where it lies: a
//! decode step (one token's activations against a weight matrix, or a
//! query against the KV cache). Such a product does 2 to 8 FLOPs per float
//! of B, so it is bound by reading B once; packing B first would read it
//! twice and write it once, and the 12-row register tile would spend most
//! of its multiply-adds on padding. Measured at 1x4096x4096 (B in KxN
//! layout) on one thread, in tensor-suite runs: 15.9 ms packed, 6.0 ms
//! here, 6.6 ms for the `gemm` crate's unpacked path.
//!
//! - `KxN` (B row-major `k x n`): each task owns a [`CHUNK`]-column strip of
//!   C, accumulated in L1 while the strip's part of every B row streams
//!   past, four rows of B per pass so each accumulator is loaded and stored
//!   once per four multiply-adds.
//! - `NxK` (B stored `n x k`, row `j` is column `j` of B): each output is a
//!   dot product along a contiguous row; four rows of B at once share the
//!   loads of A.
//!
//! Tasks (strips of columns) are claimed from a counter by the caller's
//! thread and `threads - 1` pooled workers, as in the packed driver.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::{Layout, Shared};

/// Rows of A handled here.
pub(super) const ROWS: usize = 4;
/// Columns of C per `KxN` task: 2 KiB of each B row per pass, and `ROWS`
/// 2 KiB accumulator rows in L1.
const CHUNK: usize = 512;
/// Columns of C per `NxK` task (each a length-k dot product per row of A).
const NXK_TASK: usize = 64;
/// Rows of B ahead to prefetch in `KxN`: two passes of four rows.
const PF_ROWS: usize = 8;

/// Calls `$f::<M>` for the run-time row count `$m` in `1..=ROWS`.
macro_rules! dispatch_rows {
    ($m:expr, $f:ident, $($arg:expr),*) => {
        match $m {
            1 => $f::<1>($($arg),*),
            2 => $f::<2>($($arg),*),
            3 => $f::<3>($($arg),*),
            _ => $f::<4>($($arg),*),
        }
    };
}
/// `c[m x n] (+)= a[m x k] * op(b)` for `1 <= m <= ROWS`, `k >= 1`, on up to
/// `threads` threads.
///
/// # Safety
/// The CPU supports AVX-512F; the slices hold exactly the shapes given.
pub(super) unsafe fn matmul(
    threads: usize,
    (m, k, n): (usize, usize, usize),
    a: &[f32],
    b: &[f32],
    layout: Layout,
    c: &mut [f32],
    accumulate: bool,
) {
    debug_assert!((1..=ROWS).contains(&m) && k >= 1);
    let width = match layout {
        Layout::KxN => CHUNK,
        Layout::NxK => NXK_TASK,
    };
    let tasks = n.div_ceil(width);
    let next = AtomicUsize::new(0);
    // Shared only to cross into the helpers; A and B are only read.
    let (a, b, cp) = (Shared(a.as_ptr().cast_mut()), Shared(b.as_ptr().cast_mut()), Shared(c.as_mut_ptr()));
    let work = || {
        loop {
            let t = next.fetch_add(1, Ordering::Relaxed);
            if t >= tasks {
                return;
            }
            let (j0, cols) = (t * width, width.min(n - t * width));
            // SAFETY: columns j0..j0+cols of C belong to this task alone;
            // every read stays inside the shapes the caller guarantees.
            unsafe {
                match layout {
                    Layout::KxN => {
                        dispatch_rows!(m, kxn, k, a.at(0), b.at(j0), n, cp.at(j0), n, cols, accumulate)
                    }
                    Layout::NxK => {
                        dispatch_rows!(m, nxk, k, a.at(0), b.at(j0 * k), k, cp.at(j0), n, cols, accumulate)
                    }
                }
            }
        }
    };
    let workers = threads.clamp(1, tasks.max(1));
    if workers == 1 {
        work();
    } else {
        crate::kernels::workers::run(workers, &|_| work());
    }
}

/// Mask of the first `n` (<= 16) lanes.
fn lanes(n: usize) -> __mmask16 {
    ((1u32 << n.min(16)) - 1) as __mmask16
}

/// `C[M x cols] (+)= A[M x k] * B[k x cols]`, B rows at stride `ldb`
/// (`cols <= CHUNK`), A rows at stride `k`.
///
/// # Safety
/// AVX-512F; A holds `M x k`, B `k` rows of `cols` floats at stride `ldb`,
/// C `M` rows of `cols` floats at stride `ldc`.
#[target_feature(enable = "avx512f")]
// Indices run over the accumulators, B rows and A values together.
#[allow(clippy::too_many_arguments, clippy::needless_range_loop)]
unsafe fn kxn<const M: usize>(
    k: usize,
    a: *const f32,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    cols: usize,
    accumulate: bool,
) {
    let mut acc = [[_mm512_setzero_ps(); CHUNK / 16]; M];
    let vecs = cols.div_ceil(16);
    let mut p = 0;
    // SAFETY (whole body): masked loads and stores touch only the `cols`
    // columns of each row; prefetches never fault.
    unsafe {
        while p + 4 <= k {
            let mut av = [[_mm512_setzero_ps(); 4]; M];
            for (i, row) in av.iter_mut().enumerate() {
                for (q, x) in row.iter_mut().enumerate() {
                    *x = _mm512_set1_ps(*a.add(i * k + p + q));
                }
            }
            let rows = [b.add(p * ldb), b.add((p + 1) * ldb), b.add((p + 2) * ldb), b.add((p + 3) * ldb)];
            for v in 0..vecs {
                let (off, mk) = (v * 16, lanes(cols - v * 16));
                let ahead = b.wrapping_add((p + PF_ROWS) * ldb + off);
                for q in 0..4 {
                    _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(q * ldb) as *const i8);
                }
                // Plain loops, not closures, so everything is compiled
                // with AVX-512 enabled.
                let mut bv = [_mm512_setzero_ps(); 4];
                for q in 0..4 {
                    bv[q] = _mm512_maskz_loadu_ps(mk, rows[q].add(off));
                }
                for i in 0..M {
                    let mut x = acc[i][v];
                    for q in 0..4 {
                        x = _mm512_fmadd_ps(av[i][q], bv[q], x);
                    }
                    acc[i][v] = x;
                }
            }
            p += 4;
        }
        while p < k {
            let row = b.add(p * ldb);
            for v in 0..vecs {
                let bv = _mm512_maskz_loadu_ps(lanes(cols - v * 16), row.add(v * 16));
                for i in 0..M {
                    acc[i][v] = _mm512_fmadd_ps(_mm512_set1_ps(*a.add(i * k + p)), bv, acc[i][v]);
                }
            }
            p += 1;
        }
        for (i, row) in acc.iter().enumerate() {
            for (v, &x) in row.iter().enumerate().take(vecs) {
                let (dst, mk) = (c.add(i * ldc + v * 16), lanes(cols - v * 16));
                let x = if accumulate { _mm512_add_ps(_mm512_maskz_loadu_ps(mk, dst), x) } else { x };
                _mm512_mask_storeu_ps(dst, mk, x);
            }
        }
    }
}

/// `C[M x cols] (+)= A[M x k] * B^T` where B holds `cols` rows of `k`
/// floats at stride `ldb` (row `j` is column `j` of the product's B).
///
/// # Safety
/// AVX-512F; A holds `M x k`, B `cols` rows of `k` floats at stride `ldb`,
/// C `M` rows of `cols` floats at stride `ldc`.
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn nxk<const M: usize>(
    k: usize,
    a: *const f32,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    cols: usize,
    accumulate: bool,
) {
    let mut j = 0;
    // SAFETY: the caller's extents; groups never pass `cols`.
    unsafe {
        while j + 4 <= cols {
            dots::<M, 4>(k, a, b.add(j * ldb), ldb, c.add(j), ldc, accumulate);
            j += 4;
        }
        while j < cols {
            dots::<M, 1>(k, a, b.add(j * ldb), ldb, c.add(j), ldc, accumulate);
            j += 1;
        }
    }
}

/// `C[i][q] (+)= dot(A row i, B row q)` for `i < M`, `q < J`.
///
/// # Safety
/// As [`nxk`], for `J` rows of B and `J` columns of C.
#[target_feature(enable = "avx512f")]
#[inline]
#[allow(clippy::needless_range_loop)]
unsafe fn dots<const M: usize, const J: usize>(
    k: usize,
    a: *const f32,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
) {
    let mut acc = [[_mm512_setzero_ps(); J]; M];
    let mut p = 0;
    // SAFETY: masked loads stay inside each row's k floats.
    unsafe {
        while p < k {
            let mk = lanes(k - p);
            let mut bv = [_mm512_setzero_ps(); J];
            for (q, x) in bv.iter_mut().enumerate() {
                *x = _mm512_maskz_loadu_ps(mk, b.add(q * ldb + p));
            }
            for (i, row) in acc.iter_mut().enumerate() {
                let av = _mm512_maskz_loadu_ps(mk, a.add(i * k + p));
                for q in 0..J {
                    row[q] = _mm512_fmadd_ps(av, bv[q], row[q]);
                }
            }
            p += 16;
        }
        for (i, row) in acc.iter().enumerate() {
            for (q, &x) in row.iter().enumerate() {
                let dst = c.add(i * ldc + q);
                let s = _mm512_reduce_add_ps(x);
                *dst = if accumulate { *dst + s } else { s };
            }
        }
    }
}
