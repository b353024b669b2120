//! Matrix multiplication, `C[m x n] = A[m x k] B[k x n]` (row-major f32), with
//! `matrixmultiply`, `gemm` or tfbench's own AVX-512 kernel
//! ([`crate::kernels::sgemm`]), on one thread or on all of them; and batched
//! matmul (`bmm`). `tfbench-packed` is tfbench's kernel with B packed once
//! in setup ([`crate::kernels::sgemm::PackedB`]), as an inference engine
//! holds its weights: the gap to `tfbench` is what repacking B costs.
//!
//! Threading: `threads = 1` runs inside a dedicated one-thread rayon pool so
//! no kernel can go parallel; `threads = "all"` uses the global pool. The
//! harness samples an explicit thread count from inside a pool as wide, so
//! each iteration's `install` runs on the timing thread rather than waking
//! the dedicated pool's worker (issue 45: that wake-up once cost a tick).
//! `gemm` threads itself (`Parallelism::Rayon(threads)`), `tfbench` with
//! its own persistent workers sharing its packed panels. `matrixmultiply` is
//! built without its threading feature (single-threaded, and its thread count
//! would be fixed per process anyway), so with several threads we split C into
//! one row block per thread (multiples of 8 rows; column blocks when there are
//! too few rows, as for GEMV) and run one `sgemm` per block on rayon. `bmm`
//! with several threads runs whole batch items in parallel, each with a
//! single-threaded GEMM: parallelism is never nested around a threaded GEMM.

use super::{choice, install, reference};
use crate::backend::cpu::Context;
use crate::kernels::buffer::HugeBuf;
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use crate::util;
use anyhow::{Result, bail};
use rayon::prelude::*;

pub(super) const IMPLS: &[&str] = &["matrixmultiply", "gemm", "tfbench", "tfbench-packed", "openblas"];

/// A GEMM implementation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Impl {
    /// bluss's `matrixmultiply::sgemm`.
    MatrixMultiply,
    /// sarah-ek's `gemm::gemm`.
    Gemm,
    /// tfbench's own AVX-512 kernel, [`crate::kernels::sgemm`].
    Tfbench,
    /// The same kernel on a B packed once ([`crate::kernels::sgemm::PackedB`]);
    /// `matmul` only.
    TfbenchPacked,
    /// OpenBLAS's `cblas_sgemm`, loaded at run time
    /// ([`crate::kernels::openblas`]): the BLAS NumPy uses.
    OpenBlas,
}

// The kernels' one raw-pointer wrapper: it hands disjoint column blocks of C
// to rayon tasks here.
use crate::kernels::SendPtr;

/// Single-call GEMM on the current thread (`gemm` may use `gemm_threads`
/// rayon threads of the current pool). Strides are in elements.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_raw(
    imp: Impl,
    gemm_threads: usize,
    (m, k, n): (usize, usize, usize),
    a: *const f32,
    lda: usize,
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
) {
    // SAFETY (both arms): the caller guarantees the pointers cover the
    // m x k, k x n and m x n matrices at the given row strides, and that no
    // one else accesses that part of C during the call.
    match imp {
        Impl::Tfbench | Impl::TfbenchPacked | Impl::OpenBlas => {
            unreachable!("tfbench's kernel and OpenBLAS take whole slices, see matmul")
        }
        Impl::MatrixMultiply => unsafe {
            matrixmultiply::sgemm(
                m,
                k,
                n,
                1.0,
                a,
                lda as isize,
                1,
                b,
                ldb as isize,
                1,
                0.0,
                c,
                ldc as isize,
                1,
            )
        },
        Impl::Gemm => unsafe {
            let par = if gemm_threads > 1 {
                gemm::Parallelism::Rayon(gemm_threads)
            } else {
                gemm::Parallelism::None
            };
            // gemm computes dst = alpha * dst + beta * lhs * rhs; read_dst = false ignores dst.
            gemm::gemm(
                m,
                n,
                k,
                c,
                1,
                ldc as isize,
                false,
                a,
                1,
                lda as isize,
                b,
                1,
                ldb as isize,
                0.0,
                1.0,
                false,
                false,
                false,
                par,
            )
        },
    }
}

/// `c = a * b` with `threads` threads of the current rayon pool (see the module docs).
pub(crate) fn matmul(
    imp: Impl,
    threads: usize,
    (m, k, n): (usize, usize, usize),
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
) {
    assert!(a.len() == m * k && b.len() == k * n && c.len() == m * n, "matmul: shape mismatch");
    if imp == Impl::TfbenchPacked {
        unreachable!("impl=tfbench-packed multiplies its PackedB (Matmul::once)");
    }
    if imp == Impl::Tfbench {
        // prepare checked kernels::sgemm::runs_here(), so this never declines.
        let done = crate::kernels::sgemm::matmul_into(
            threads,
            (m, k, n),
            a,
            b,
            crate::kernels::Layout::KxN,
            c,
            false,
        );
        assert!(done, "tfbench sgemm needs AVX2 and FMA, or AVX-512");
    } else if imp == Impl::OpenBlas {
        // prepare loaded it, so this never fails here.
        let lib =
            crate::kernels::openblas::load().expect("impl=openblas is prepared only when OpenBLAS loads");
        // OpenBLAS threads itself; bmm's parallel items each ask for one.
        lib.set_threads(threads);
        lib.sgemm((m, k, n), a, b, c);
    } else if imp == Impl::Gemm || threads <= 1 {
        // SAFETY: the slices have exactly the asserted shapes.
        unsafe { gemm_raw(imp, threads, (m, k, n), a.as_ptr(), k, b.as_ptr(), n, c.as_mut_ptr(), n) };
    } else if m >= 8 * threads {
        let rows = m.div_ceil(threads).div_ceil(8) * 8;
        c.par_chunks_mut(rows * n).enumerate().for_each(|(t, cb)| {
            let (r0, mr) = (t * rows, cb.len() / n);
            // SAFETY: rows r0..r0+mr of A and of C (this task's disjoint chunk).
            unsafe {
                gemm_raw(imp, 1, (mr, k, n), a[r0 * k..].as_ptr(), k, b.as_ptr(), n, cb.as_mut_ptr(), n)
            };
        });
    } else if n >= 8 * threads {
        let cols = n.div_ceil(threads).div_ceil(8) * 8;
        let cp = SendPtr(c.as_mut_ptr());
        (0..n.div_ceil(cols)).into_par_iter().for_each(|t| {
            let (j0, nc) = (t * cols, cols.min(n - t * cols));
            // SAFETY: columns j0..j0+nc of B and C; tasks write disjoint columns of C.
            unsafe { gemm_raw(imp, 1, (m, k, nc), a.as_ptr(), k, b[j0..].as_ptr(), n, cp.get().add(j0), n) };
        });
    } else {
        // SAFETY: as above.
        unsafe { gemm_raw(imp, 1, (m, k, n), a.as_ptr(), k, b.as_ptr(), n, c.as_mut_ptr(), n) };
    }
}

/// Batched `c[i] = a[i] * b[i]`: serially with single-threaded GEMMs when
/// `threads == 1`, else batch items in parallel, each single-threaded.
pub(crate) fn bmm(
    imp: Impl,
    threads: usize,
    (batch, m, k, n): (usize, usize, usize, usize),
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
) {
    assert!(a.len() == batch * m * k && b.len() == batch * k * n && c.len() == batch * m * n);
    let one = |((c, a), b): ((&mut [f32], &[f32]), &[f32])| matmul(imp, 1, (m, k, n), a, b, c);
    if threads <= 1 {
        c.chunks_mut(m * n).zip(a.chunks(m * k)).zip(b.chunks(k * n)).for_each(one);
    } else {
        c.par_chunks_mut(m * n).zip(a.par_chunks(m * k)).zip(b.par_chunks(k * n)).for_each(one);
    }
}

fn parse_impl(case: &Case) -> Result<Impl> {
    Ok(match choice(case, "impl", IMPLS)? {
        "gemm" => Impl::Gemm,
        "tfbench" if !crate::kernels::sgemm::runs_here() => {
            let why = crate::kernels::sgemm::unavailable_reason().unwrap_or_default();
            return Err(crate::suites::skip(format!("impl=tfbench needs AVX2 and FMA (or AVX-512F): {why}")));
        }
        name @ "tfbench-packed" if !crate::kernels::sgemm::available() => {
            let why = crate::isa::unavailable(&crate::kernels::sgemm::FEATURES)
                .unwrap_or_else(|| "this build has no AVX-512 kernel".to_string());
            return Err(crate::suites::skip(format!("impl={name} needs AVX-512F: {why}")));
        }
        "tfbench" => Impl::Tfbench,
        "tfbench-packed" => Impl::TfbenchPacked,
        "openblas" => match crate::kernels::openblas::load() {
            Ok(_) => Impl::OpenBlas,
            Err(why) => return Err(crate::suites::skip(format!("impl=openblas: {why}"))),
        },
        _ => Impl::MatrixMultiply,
    })
}

struct Matmul {
    imp: Impl,
    threads: usize,
    pool: Option<std::sync::Arc<rayon::ThreadPool>>,
    batch: usize,
    dims: (usize, usize, usize),
    // Operands on huge pages, as NumPy allocates its large arrays: with
    // 4 KiB pages the kernels' repeated passes over B miss the TLB.
    a: HugeBuf<f32>,
    b: HugeBuf<f32>,
    c: HugeBuf<f32>,
    /// B packed once (`impl=tfbench-packed`).
    packed: Option<crate::kernels::sgemm::PackedB>,
    seed: u64,
}

pub(crate) fn prepare_matmul(case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    let dims = match case.shape("shape")?.as_slice() {
        &[m, k, n] => (m, k, n),
        _ => bail!("case {}: matmul `shape` must be MxKxN", case.id),
    };
    build(case, ctx, 1, dims)
}

pub(crate) fn prepare_bmm(case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    match case.shape("shape")?.as_slice() {
        &[batch, m, k, n] => build(case, ctx, batch, (m, k, n)),
        _ => bail!("case {}: bmm `shape` must be BATCHxMxKxN", case.id),
    }
}

fn build(
    case: &Case,
    ctx: &Context,
    batch: usize,
    (m, k, n): (usize, usize, usize),
) -> Result<Box<dyn Workload>> {
    let imp = parse_impl(case)?;
    if imp == Impl::OpenBlas && [m, k, n].iter().any(|&d| d > i32::MAX as usize) {
        bail!(
            "case {}: impl=openblas takes dimensions up to {} (its BLAS interface uses 32-bit integers), \
             not {m}x{k}x{n}",
            case.id,
            i32::MAX
        );
    }
    let (pool, threads) = (ctx.pool(), ctx.threads());
    let seed = super::seed(case);
    let a = HugeBuf::from_slice(&util::randn(batch * m * k, seed));
    let b = HugeBuf::from_slice(&util::randn(batch * k * n, seed ^ 1));
    let c = HugeBuf::filled(batch * m * n, f32::NAN);
    let packed = if imp == Impl::TfbenchPacked {
        if batch != 1 {
            bail!(
                "case {}: impl=tfbench-packed packs one B for many products; bmm's B changes per item",
                case.id
            );
        }
        // PackedB takes B as stored by a linear layer, [n x k].
        let mut bt = vec![0.0; k * n];
        for (p, row) in b.chunks(n.max(1)).enumerate() {
            row.iter().enumerate().for_each(|(j, &v)| bt[j * k + p] = v);
        }
        let packed = crate::kernels::sgemm::PackedB::from_nxk(&bt, n, k);
        Some(packed.ok_or_else(|| anyhow::anyhow!("case {}: PackedB declined (no AVX-512F)", case.id))?)
    } else {
        None
    };
    Ok(Box::new(Matmul { imp, threads, pool, batch, dims: (m, k, n), a, b, c, packed, seed }))
}

impl Matmul {
    fn once(&mut self) {
        let Self { imp, threads, pool, batch, dims, a, b, c, packed, .. } = self;
        let (imp, threads, batch, dims) = (*imp, *threads, *batch, *dims);
        install(pool.as_deref(), || {
            if let Some(p) = packed {
                p.matmul_into(threads, dims.0, a, c, false);
            } else if batch == 1 {
                matmul(imp, threads, dims, a, b, c);
            } else {
                let (m, k, n) = dims;
                bmm(imp, threads, (batch, m, k, n), a, b, c);
            }
        });
    }
}

/// Entries of C checked against the reference: computed values, f64
/// reference values, tolerances and `(row, column)` positions.
pub(crate) struct Checked {
    pub(crate) got: Vec<f32>,
    pub(crate) want: Vec<f64>,
    pub(crate) tol: Vec<f64>,
    pub(crate) entries: Vec<(usize, usize)>,
}

/// Checks `c = a * b` (one batch item) against f64 dot products: every entry
/// when `m * k * n <= 2^24`, otherwise `samples` entries (corners included).
pub(crate) fn check_product(
    a: &[f32],
    b: &[f32],
    c: &[f32],
    dims: (usize, usize, usize),
    samples: usize,
    seed: u64,
) -> Checked {
    let k = dims.1;
    check_product_with(a, b, c, dims, samples, seed, |abs, _| reference::dot_tolerance(k, abs))
}

/// [`check_product`] with another tolerance per entry, `tol(sum |a b|,
/// reference value)`: the GPU GEMMs' data types round differently.
pub(crate) fn check_product_with(
    a: &[f32],
    b: &[f32],
    c: &[f32],
    (m, k, n): (usize, usize, usize),
    samples: usize,
    seed: u64,
    tolerance: impl Fn(f64, f64) -> f64,
) -> Checked {
    let every = m * k * n <= 1 << 24;
    let entries: Vec<(usize, usize)> = if every {
        (0..m).flat_map(|i| (0..n).map(move |j| (i, j))).collect()
    } else {
        let mut e: Vec<_> =
            crate::util::sample_indices(m * n, samples, seed).into_iter().map(|x| (x / n, x % n)).collect();
        e.extend([(0, n - 1), (m - 1, 0)]);
        e
    };
    let (mut got, mut want, mut tol) = (Vec::new(), Vec::new(), Vec::new());
    if every {
        // Whole rows at once: B read sequentially (see `dot_row`).
        for i in 0..m {
            let (s, abs) = reference::dot_row(a, b, k, n, i);
            got.extend_from_slice(&c[i * n..(i + 1) * n]);
            want.extend_from_slice(&s);
            tol.extend(abs.iter().zip(&s).map(|(&x, &w)| tolerance(x, w)));
        }
        return Checked { got, want, tol, entries };
    }
    for &(i, j) in &entries {
        let (s, abs) = reference::dot_entry(a, b, k, n, i, j);
        got.push(c[i * n + j]);
        want.push(s);
        tol.push(tolerance(abs, s));
    }
    Checked { got, want, tol, entries }
}

impl Workload for Matmul {
    fn verify(&mut self) -> Result<Verification> {
        self.c.fill(f32::NAN);
        self.once();
        let (m, k, n) = self.dims;
        let samples = if self.batch == 1 { 64 } else { 16 };
        let (mut got, mut want, mut tol, mut labels) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for t in 0..self.batch {
            let Checked { got: g, want: w, tol: tl, entries: e } = check_product(
                &self.a[t * m * k..(t + 1) * m * k],
                &self.b[t * k * n..(t + 1) * k * n],
                &self.c[t * m * n..(t + 1) * m * n],
                self.dims,
                samples,
                self.seed ^ t as u64,
            );
            got.extend(g);
            want.extend(w);
            tol.extend(tl);
            labels.extend(e.into_iter().map(|(i, j)| (t, i, j)));
        }
        let what = if m * k * n <= 1 << 24 {
            "every entry".to_string()
        } else {
            format!("{samples} sampled entries")
        };
        let mut v = reference::compare_bounded(
            format!("f64 dot products, {what} per batch item, tolerance 8 sqrt(k) eps sum|a b|"),
            &got,
            &want,
            &tol,
            |x| {
                let (t, i, j) = labels[x];
                format!("C[{t}][{i},{j}]")
            },
        );
        if let (Impl::OpenBlas, Ok(lib)) = (self.imp, crate::kernels::openblas::load()) {
            // Which build and core kernel ran: results differ a lot between them.
            v.detail = format!("{}; {} from {}", v.detail, lib.config, lib.path);
        }
        Ok(v)
    }

    fn throughput(&self) -> Vec<Throughput> {
        let (m, k, n) = self.dims;
        let b = self.batch as f64;
        let (m, k, n) = (m as f64, k as f64, n as f64);
        // Minimum traffic: read A and B once, write C once.
        vec![Throughput::flops(b * 2.0 * m * n * k), Throughput::bytes(b * 4.0 * (m * k + k * n + m * n))]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.once();
            std::hint::black_box(&mut self.c);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
