//! GEMMs through cuBLAS: the row-major to column-major argument mapping,
//! the data types' cuBLAS names (f32, tf32, f16, bf16, always accumulating
//! in f32; the types themselves, their storage and verification tolerances
//! are [`crate::backend::ops::GemmDtype`]), and the one call wrapper
//! (`cublasGemmEx` / `cublasGemmStridedBatchedEx`).
//!
//! The mapping and the tolerances are pure functions, unit-tested on the
//! CPU: the mapping by a naive column-major GEMM that applies exactly the
//! arguments cuBLAS gets, the tolerances by emulating each data type's
//! rounding.

use anyhow::Result;
use cudarc::cublas::{CudaBlas, result as blas, sys as bsys};
use cudarc::driver::sys::CUdeviceptr;
use std::ffi::c_void;

// The GEMMs' element types (backend-neutral: how each is stored and how
// accurate it is) are `crate::backend::ops::GemmDtype`.
use crate::backend::ops::GemmDtype;

/// cuBLAS's element type of `d`.
fn cuda_type(d: GemmDtype) -> bsys::cudaDataType {
    match d {
        GemmDtype::F32 | GemmDtype::Tf32 => bsys::cudaDataType::CUDA_R_32F,
        GemmDtype::F16 => bsys::cudaDataType::CUDA_R_16F,
        GemmDtype::Bf16 => bsys::cudaDataType::CUDA_R_16BF,
    }
}

/// cuBLAS's compute type of `d` (TF32 on the tensor cores for tf32 only).
fn compute_type(d: GemmDtype) -> bsys::cublasComputeType_t {
    match d {
        GemmDtype::Tf32 => bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
        _ => bsys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
    }
}

/// A cuBLAS (column-major) GEMM call: `C = op(first) op(second)`, with
/// cuBLAS's names for its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColMajorGemm {
    /// Transpose the first operand (`transa`).
    pub transa: bool,
    /// Transpose the second operand (`transb`).
    pub transb: bool,
    /// Rows of C (column-major).
    pub m: i32,
    /// Columns of C.
    pub n: i32,
    /// Inner dimension.
    pub k: i32,
    /// Leading dimension of the first operand.
    pub lda: i32,
    /// Leading dimension of the second operand.
    pub ldb: i32,
    /// Leading dimension of C.
    pub ldc: i32,
}

/// The cuBLAS call computing row-major `C[m x n] = op(A) op(B)`, where A is
/// stored `m x k` (or `k x m` when `a_t`: C = A^T B) and B `k x n` (or
/// `n x k` when `b_t`). A row-major matrix read column-major is its
/// transpose, so cuBLAS computes `C^T = op(B)^T op(A)^T`: **its first
/// operand is our B and its second our A**, with m and n swapped.
pub fn row_major(m: usize, k: usize, n: usize, a_t: bool, b_t: bool) -> Result<ColMajorGemm> {
    let int = |x: usize, what: &str| {
        i32::try_from(x).map_err(|_| anyhow::anyhow!("GEMM {what} = {x} exceeds cuBLAS's 32-bit int"))
    };
    Ok(ColMajorGemm {
        transa: b_t,
        transb: a_t,
        m: int(n, "n")?,
        n: int(m, "m")?,
        k: int(k, "k")?,
        lda: int(if b_t { k } else { n }, "ldb")?,
        ldb: int(if a_t { m } else { k }, "lda")?,
        ldc: int(n, "ldc")?,
    })
}

/// Strides between batch items of a strided-batched call, in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    /// Batch items.
    pub count: i32,
    /// Stride of the first operand (our B: `k * n`).
    pub stride_first: i64,
    /// Stride of the second operand (our A: `m * k`).
    pub stride_second: i64,
    /// Stride of C (`m * n`).
    pub stride_c: i64,
}

impl Batch {
    /// Densely packed row-major batch items of `m x k` times `k x n`.
    pub fn packed(count: usize, m: usize, k: usize, n: usize) -> Result<Self> {
        Ok(Self {
            count: i32::try_from(count)?,
            stride_first: (k * n) as i64,
            stride_second: (m * k) as i64,
            stride_c: (m * n) as i64,
        })
    }
}

/// Enqueues `C = A B` (row-major, mapped by `g` from [`row_major`]) on the
/// handle's stream; `batch` makes it a strided-batched call. Pointers are
/// device addresses of buffers of `dtype` elements.
///
/// # Safety
/// The buffers must hold the elements `g` and `batch` address, stay alive
/// until the stream has run the call, and C must not overlap A or B.
pub unsafe fn gemm(
    handle: &CudaBlas,
    dtype: GemmDtype,
    g: &ColMajorGemm,
    batch: Option<Batch>,
    a: CUdeviceptr,
    b: CUdeviceptr,
    c: CUdeviceptr,
) -> Result<()> {
    let op =
        |t: bool| if t { bsys::cublasOperation_t::CUBLAS_OP_T } else { bsys::cublasOperation_t::CUBLAS_OP_N };
    let (alpha, beta) = (1.0f32, 0.0f32);
    let ty = cuda_type(dtype);
    let algo = bsys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;
    let (first, second) = (b as *const c_void, a as *const c_void);
    let alpha_p = &alpha as *const f32 as *const c_void;
    let beta_p = &beta as *const f32 as *const c_void;
    // SAFETY: the caller guarantees the buffers; alpha/beta live across the
    // call (host pointer mode copies them before returning).
    let r = unsafe {
        match batch {
            None => blas::gemm_ex(
                *handle.handle(),
                op(g.transa),
                op(g.transb),
                g.m,
                g.n,
                g.k,
                alpha_p,
                first,
                ty,
                g.lda,
                second,
                ty,
                g.ldb,
                beta_p,
                c as *mut c_void,
                ty,
                g.ldc,
                compute_type(dtype),
                algo,
            ),
            Some(bt) => blas::gemm_strided_batched_ex(
                *handle.handle(),
                op(g.transa),
                op(g.transb),
                g.m,
                g.n,
                g.k,
                alpha_p,
                first,
                ty,
                g.lda,
                bt.stride_first,
                second,
                ty,
                g.ldb,
                bt.stride_second,
                beta_p,
                c as *mut c_void,
                ty,
                g.ldc,
                bt.stride_c,
                bt.count,
                compute_type(dtype),
                algo,
            ),
        }
    };
    r.map_err(|e| anyhow::anyhow!("cublasGemmEx ({dtype:?}, {g:?}): {e}"))
}

/// A naive column-major GEMM applying cuBLAS's argument conventions
/// exactly (`C[i + j ldc] = sum_p op(first)[i, p] op(second)[p, j]`), in
/// f64: the CPU stand-in that checks [`row_major`]'s mapping.
pub fn emulate_col_major(g: &ColMajorGemm, first: &[f32], second: &[f32]) -> Vec<f32> {
    let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
    let (lda, ldb, ldc) = (g.lda as usize, g.ldb as usize, g.ldc as usize);
    let mut c = vec![f32::NAN; ldc * n];
    for j in 0..n {
        for i in 0..m {
            let mut s = 0.0f64;
            for p in 0..k {
                let x = if g.transa { first[p + i * lda] } else { first[i + p * lda] };
                let y = if g.transb { second[j + p * ldb] } else { second[p + j * ldb] };
                s += x as f64 * y as f64;
            }
            c[i + j * ldc] = s as f32;
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{Layout, naive_matmul};

    fn transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
        let mut t = vec![0.0; x.len()];
        for i in 0..rows {
            for j in 0..cols {
                t[j * rows + i] = x[i * cols + j];
            }
        }
        t
    }

    /// The mapping gives the row-major product for every transpose choice
    /// and odd, non-square shapes (a swapped m/n or a wrong leading
    /// dimension would read the wrong elements and fail here).
    #[test]
    fn row_major_mapping_reproduces_the_row_major_product() {
        for (m, k, n) in [(1, 1, 1), (3, 5, 7), (7, 3, 2), (16, 1, 9), (2, 33, 1)] {
            let a = crate::util::randn(m * k, 1);
            let b = crate::util::randn(k * n, 2);
            let want = naive_matmul((m, k, n), &a, &b, Layout::KxN);
            for (a_t, b_t) in [(false, false), (true, false), (false, true), (true, true)] {
                let sa = if a_t { transpose(&a, m, k) } else { a.clone() };
                let sb = if b_t { transpose(&b, k, n) } else { b.clone() };
                let g = row_major(m, k, n, a_t, b_t).unwrap();
                let c = emulate_col_major(&g, &sb, &sa);
                assert_eq!(c, want, "{m}x{k}x{n} a_t={a_t} b_t={b_t}: {g:?}");
            }
        }
        // The plain case, spelled out: C^T = B^T A^T.
        let g = row_major(2, 3, 4, false, false).unwrap();
        assert_eq!(
            (g.transa, g.transb, g.m, g.n, g.k, g.lda, g.ldb, g.ldc),
            (false, false, 4, 2, 3, 4, 3, 4)
        );
        assert!(row_major(1 << 31, 1, 1, false, false).is_err());
    }

    #[test]
    fn packed_batch_strides_step_over_whole_items() {
        let b = Batch::packed(12, 128, 64, 128).unwrap();
        assert_eq!(
            (b.count, b.stride_first, b.stride_second, b.stride_c),
            (12, 64 * 128, 128 * 64, 128 * 128)
        );
        // Item t of the emulated batch equals the product of item t.
        let (m, k, n, count) = (3, 4, 5, 2);
        let a = crate::util::randn(count * m * k, 3);
        let b = crate::util::randn(count * k * n, 4);
        let bt = Batch::packed(count, m, k, n).unwrap();
        let g = row_major(m, k, n, false, false).unwrap();
        for t in 0..count {
            let first = &b[t * bt.stride_first as usize..];
            let second = &a[t * bt.stride_second as usize..];
            let c = emulate_col_major(&g, first, second);
            let want = naive_matmul(
                (m, k, n),
                &a[t * m * k..(t + 1) * m * k],
                &b[t * k * n..(t + 1) * k * n],
                Layout::KxN,
            );
            assert_eq!(c, want, "item {t}");
        }
    }

    /// Each dtype's tolerance accepts a faithful emulation of what the GPU
    /// does (TF32 inputs truncated, f32 accumulation in order, output
    /// rounded to the stored type) and is tight enough that bf16 output
    /// rounding fails the f16 tolerance.
    #[test]
    fn tolerances_accept_faithful_rounding_and_separate_the_types() {
        let tf32 = |x: f32| f32::from_bits(x.to_bits() & !((1 << 13) - 1));
        let mut bf16_fails_f16 = 0;
        // A long dot product (accumulation error dominates) and a short one
        // (output rounding dominates, where the types must differ).
        for (m, k, n) in [(4, 4096, 4), (8, 16, 8)] {
            let a = crate::util::randn(m * k, 5);
            let b = crate::util::randn(k * n, 6);
            for dt in [GemmDtype::F32, GemmDtype::Tf32, GemmDtype::F16, GemmDtype::Bf16] {
                let sa: Vec<f32> = a.iter().map(|&x| dt.store(x)).collect();
                let sb: Vec<f32> = b.iter().map(|&x| dt.store(x)).collect();
                for i in 0..m {
                    for j in 0..n {
                        let (mut acc, mut want, mut abs) = (0.0f32, 0.0f64, 0.0f64);
                        for p in 0..k {
                            let (x, y) = (sa[i * k + p], sb[p * n + j]);
                            want += x as f64 * y as f64;
                            abs += (x as f64 * y as f64).abs();
                            let (gx, gy) = if dt == GemmDtype::Tf32 { (tf32(x), tf32(y)) } else { (x, y) };
                            acc += gx * gy;
                        }
                        let got = dt.store(acc) as f64;
                        let tol = dt.tolerance(k, abs, want);
                        assert!(
                            (got - want).abs() <= tol,
                            "{dt:?} k={k} C[{i},{j}]: {got} vs {want}, tol {tol:e}"
                        );
                        if dt == GemmDtype::Bf16
                            && (got - want).abs() > GemmDtype::F16.tolerance(k, abs, want)
                        {
                            bf16_fails_f16 += 1;
                        }
                    }
                }
            }
        }
        assert!(bf16_fails_f16 > 0, "the f16 tolerance accepted every bf16-rounded entry");
        assert!(GemmDtype::parse("fp8").unwrap_err().to_string().contains("valid: f32, tf32, f16, bf16"));
    }
}
