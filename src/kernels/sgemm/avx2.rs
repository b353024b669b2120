//! tfbench's f32 GEMM for CPUs with AVX2 and FMA but no AVX-512 (most
//! laptops, desktops and hosted CI runners of the last decade), so
//! `impl=tfbench` runs there instead of being skipped.
//!
//! A 6 x 16 register tile (`MR2 x NR2`): per k step two ymm loads of the
//! packed B row, six broadcasts of packed A and twelve FMAs into twelve
//! accumulators, which with the two B vectors and a broadcast fill 15 of the
//! 16 ymm registers (the tile of BLIS's Haswell kernel, transposed). Loops
//! as the AVX-512 driver's, outermost first: [`NC2`] columns, [`KC2`] steps
//! of k (the B block packed into NR2-column panels, 512 KiB: L2), [`MC2`]
//! rows (the A block packed into MR2-row panels, 72 KiB), then every tile.
//!
//! Threading is simpler than the AVX-512 driver's: the columns are cut into
//! one contiguous range of panels per task (rayon, current pool), and each
//! task packs its own blocks of B and all of A, in per-thread buffers.
//! Packing A once per task costs `m k` per task against `2 m k n / tasks`
//! FLOPs of work, small for the shapes worth threading.

use super::pack::View;
use rayon::prelude::*;
use std::cell::RefCell;

/// Rows of the register tile.
pub(super) const MR2: usize = 6;
/// Columns of the register tile (two ymm vectors).
pub(super) const NR2: usize = 16;
/// k steps per packed block: a 6 x 256 A panel (6 KiB) stays in L1 while B
/// panels stream from L2.
const KC2: usize = 256;
/// Rows per packed A block (12 panels).
const MC2: usize = 12 * MR2;
/// Columns per packed B block: 256 x 512 floats = 512 KiB, within L2.
const NC2: usize = 32 * NR2;
/// Below this many multiply-adds one thread is faster than waking others.
const PAR_MIN_MKN: usize = 1 << 20;

/// The features this driver is compiled for.
pub const FEATURES: [crate::isa::Feature; 2] = [crate::isa::Feature::Avx2, crate::isa::Feature::Fma];

/// True when the AVX2 driver may run here (the CPU has AVX2 and FMA, and
/// `TFBENCH_MAX_ISA` allows them).
pub fn available() -> bool {
    cfg!(target_arch = "x86_64") && crate::isa::has_all(&FEATURES)
}

thread_local! {
    /// Packed A and B blocks of the calling thread, reused across calls.
    static PACKS: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// A pointer to C shared by tasks that write disjoint column ranges.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: every task writes only the columns of its own range.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    fn at(self, i: usize) -> *mut f32 {
        self.0.wrapping_add(i)
    }
}

/// `c[m x n] (+)= a[m x k] * B`, B seen through `bv` as the `n x k`
/// matrix B^T (`bv` row j is column j of B), on up to `threads` tasks.
/// The caller checked the shapes and [`available`], and `m, n, k >= 1`.
pub(super) fn matmul(
    threads: usize,
    (m, k, n): (usize, usize, usize),
    av: View,
    bv: View,
    c: &mut [f32],
    acc: bool,
) {
    let jpanels = n.div_ceil(NR2);
    let tasks = if m * k * n < PAR_MIN_MKN { 1 } else { threads.clamp(1, jpanels) };
    let cp = OutPtr(c.as_mut_ptr());
    let run = |t: usize| {
        let cols = super::chunk(jpanels, tasks, t);
        let cols = cols.start * NR2..(cols.end * NR2).min(n);
        // SAFETY: available() was checked by the caller; the task writes
        // only columns `cols` of C, which `cp` covers as m x n.
        unsafe { block(m, k, n, av, bv, cp, cols, acc) };
    };
    if tasks == 1 {
        run(0);
    } else {
        (0..tasks).into_par_iter().for_each(run);
    }
}

/// Columns `cols` of the product, blocked for the caches.
///
/// # Safety
/// AVX2 and FMA; `c` covers `m x n`; this call alone writes columns `cols`.
#[allow(clippy::too_many_arguments)]
unsafe fn block(
    m: usize,
    k: usize,
    n: usize,
    av: View,
    bv: View,
    c: OutPtr,
    cols: std::ops::Range<usize>,
    accumulate: bool,
) {
    PACKS.with_borrow_mut(|(ap, bp)| {
        let (a_need, b_need) = (MC2 * KC2, KC2 * NC2);
        if ap.len() < a_need {
            ap.resize(a_need, 0.0);
        }
        if bp.len() < b_need {
            bp.resize(b_need, 0.0);
        }
        for jc in cols.clone().step_by(NC2) {
            let nc = NC2.min(cols.end - jc);
            let jpanels = nc.div_ceil(NR2);
            for pc in (0..k).step_by(KC2) {
                let kc = KC2.min(k - pc);
                for jp in 0..jpanels {
                    let w = NR2.min(nc - jp * NR2);
                    pack::<NR2>(&mut bp[jp * NR2 * kc..][..NR2 * kc], bv, jc + jp * NR2, pc, w, kc);
                }
                let load_c = accumulate || pc > 0;
                for ic in (0..m).step_by(MC2) {
                    let mc = MC2.min(m - ic);
                    let ipanels = mc.div_ceil(MR2);
                    for ip in 0..ipanels {
                        let h = MR2.min(mc - ip * MR2);
                        pack::<MR2>(&mut ap[ip * MR2 * kc..][..MR2 * kc], av, ic + ip * MR2, pc, h, kc);
                    }
                    for jp in 0..jpanels {
                        for ip in 0..ipanels {
                            let (row, col) = (ic + ip * MR2, jc + jp * NR2);
                            // SAFETY: the packed panels hold kc steps; the
                            // tile's rows x cols lie inside C and this task's
                            // columns; AVX2 and FMA per the caller.
                            unsafe {
                                tile(
                                    kc,
                                    ap.as_ptr().add(ip * MR2 * kc),
                                    bp.as_ptr().add(jp * NR2 * kc),
                                    c.at(row * n + col),
                                    n,
                                    MR2.min(m - row),
                                    NR2.min(cols.end - col),
                                    load_c,
                                )
                            };
                        }
                    }
                }
            }
        }
    });
}

/// Packs lines `first .. first + w` of `v` (rows of A, or rows of B^T),
/// steps `pc .. pc + kc`, into a `kc x W` panel; lines `w..W` are zero.
fn pack<const W: usize>(dst: &mut [f32], v: View, first: usize, pc: usize, w: usize, kc: usize) {
    for (p, step) in dst.chunks_exact_mut(W).take(kc).enumerate() {
        for (l, x) in step.iter_mut().enumerate() {
            *x = if l < w {
                // SAFETY: line first + l < the matrix's lines and step pc + p
                // < k, which the caller's view covers.
                unsafe { *v.ptr.add((first + l) * v.rs + (pc + p) * v.cs) }
            } else {
                0.0
            };
        }
    }
}

/// `C[rows x cols] (+)= Ap[MR2 x kc] * Bp[kc x NR2]` (the top-left part of
/// the tile), adding to C when `load_c`.
///
/// # Safety
/// AVX2 and FMA; `a` holds `kc * MR2` floats, `b` `kc * NR2`; `c` covers
/// `rows x cols` at row stride `ldc`; `rows <= MR2`, `cols <= NR2`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
    load_c: bool,
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm256_setzero_ps(); 2]; MR2];
    for p in 0..kc {
        // SAFETY: p < kc, within both panels.
        unsafe {
            let b0 = _mm256_loadu_ps(b.add(p * NR2));
            let b1 = _mm256_loadu_ps(b.add(p * NR2 + 8));
            for (i, row) in acc.iter_mut().enumerate() {
                let ai = _mm256_broadcast_ss(&*a.add(p * MR2 + i));
                row[0] = _mm256_fmadd_ps(ai, b0, row[0]);
                row[1] = _mm256_fmadd_ps(ai, b1, row[1]);
            }
        }
    }
    if cols == NR2 {
        for (i, row) in acc.iter().enumerate().take(rows) {
            for (v, &x) in row.iter().enumerate() {
                // SAFETY: row i < rows and 8 columns from v * 8 < cols = NR2.
                unsafe {
                    let p = c.add(i * ldc + v * 8);
                    let r = if load_c { _mm256_add_ps(_mm256_loadu_ps(p), x) } else { x };
                    _mm256_storeu_ps(p, r);
                }
            }
        }
        return;
    }
    // A ragged right edge: through a buffer, then only the columns that exist.
    let mut buf = [0.0f32; MR2 * NR2];
    for (i, row) in acc.iter().enumerate() {
        for (v, &x) in row.iter().enumerate() {
            // SAFETY: the buffer holds MR2 rows of NR2 floats.
            unsafe { _mm256_storeu_ps(buf.as_mut_ptr().add(i * NR2 + v * 8), x) };
        }
    }
    for i in 0..rows {
        for j in 0..cols {
            // SAFETY: (i, j) is inside the rows x cols part of C.
            unsafe {
                let p = c.add(i * ldc + j);
                *p = if load_c { *p + buf[i * NR2 + j] } else { buf[i * NR2 + j] };
            }
        }
    }
}

/// Not on x86-64: [`available`] is false, so this is never called.
#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
unsafe fn tile(_: usize, _: *const f32, _: *const f32, _: *mut f32, _: usize, _: usize, _: usize, _: bool) {
    unreachable!("the AVX2 GEMM runs only on x86-64")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{Layout, naive_matmul};

    /// Against the f64 triple loop, natively and under `TFBENCH_MAX_ISA=avx2`
    /// (which is what an AVX2-only CPU runs), at the tile's every edge.
    #[test]
    fn matches_the_f64_reference_at_every_edge_and_under_the_avx2_cap() {
        if !available() {
            eprintln!("SKIPPED: no AVX2 and FMA here");
            return;
        }
        let shapes =
            [(1, 1, 1), (5, 7, 15), (6, 16, 16), (7, 300, 17), (13, 257, 33), (73, 40, 530), (128, 96, 200)];
        for &(m, k, n) in &shapes {
            let a = crate::util::randn(m * k, (m * 31 + k) as u64);
            let b = crate::util::randn(k * n, (k * 17 + n) as u64);
            for layout in [Layout::KxN, Layout::NxK] {
                let want = naive_matmul((m, k, n), &a, &b, layout);
                let tol = 4.0 * (k as f32).sqrt() * f32::EPSILON;
                for threads in [1, 3] {
                    for capped in [false, true] {
                        let mut c = vec![1.0f32; m * n];
                        let mut run =
                            || super::super::matmul_into(threads, (m, k, n), &a, &b, layout, &mut c, true);
                        let done = if capped {
                            crate::isa::with_cap(crate::isa::IsaLevel::Avx2, run)
                        } else {
                            run()
                        };
                        assert!(done, "declined {m}x{k}x{n}");
                        for (i, (&g, &w)) in c.iter().zip(&want).enumerate() {
                            let scale: f32 = (0..k)
                                .map(|p| {
                                    let (r, j) = (i / n, i % n);
                                    let bv = match layout {
                                        Layout::KxN => b[p * n + j],
                                        Layout::NxK => b[j * k + p],
                                    };
                                    (a[r * k + p] * bv).abs()
                                })
                                .sum::<f32>()
                                + 1.0;
                            assert!(
                                (g - (w + 1.0)).abs() <= tol * scale + 1e-6,
                                "{m}x{k}x{n} {layout:?} t{threads} capped={capped} [{i}]: {g} vs {}",
                                w + 1.0
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_avx2_driver_itself_matches_on_a_large_threaded_product() {
        if !available() {
            return;
        }
        let (m, k, n) = (200, 300, 700);
        let a = crate::util::randn(m * k, 1);
        let b = crate::util::randn(k * n, 2);
        let want = naive_matmul((m, k, n), &a, &b, Layout::KxN);
        let mut c = vec![f32::NAN; m * n];
        let (av, bv) = (View { ptr: a.as_ptr(), rs: k, cs: 1 }, View { ptr: b.as_ptr(), rs: 1, cs: n });
        matmul(4, (m, k, n), av, bv, &mut c, false);
        let worst = c.iter().zip(&want).map(|(g, w)| (g - w).abs()).fold(0.0f32, f32::max);
        assert!(worst < 1e-3, "worst error {worst}");
    }
}
