//! `C = A * op(B)` for row-major f32 matrices through sarah-ek's `gemm`
//! (AVX-512 kernels via its `x86-v4` feature), with B either `[k x n]` or
//! stored transposed as `[n x k]` (the `[out x in]` layout of linear-layer
//! weights), so no caller ever materialises a transpose.
//!
//! tfbench's own AVX-512 kernel ([`super::sgemm`]) is not routed here: on
//! the tensor suite's shapes it measured within a few % of `gemm` either way
//! (faster at 128x768x768, slower at 128x768x3072 and 1024^3). Where one
//! operand is reused (model weights), [`super::sgemm::PackedB`] packs it
//! once and beats both.
//!
//! Threading: `threads > 1` lets `gemm` split the work over that many rayon
//! threads of the current pool; `threads == 1` keeps it on the caller's
//! thread. Never call a threaded GEMM from inside a parallel loop: nested
//! parallelism oversubscribes the cores and loses about a third.

/// How B is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `[k x n]` row-major: `C = A * B`.
    KxN,
    /// `[n x k]` row-major (a linear layer's `[out x in]` weight): `C = A * B^T`.
    NxK,
}

/// `c[m x n] = a[m x k] * op(b)` (overwrites `c`).
///
/// # Panics
/// When a slice length does not match its shape.
pub fn matmul(
    threads: usize,
    (m, k, n): (usize, usize, usize),
    a: &[f32],
    b: &[f32],
    layout: Layout,
    c: &mut [f32],
) {
    matmul_into(threads, (m, k, n), a, b, layout, c, false);
}

/// `c[m x n] (+)= a[m x k] * op(b)`: adds to `c` when `accumulate`, else
/// overwrites it.
///
/// # Panics
/// When a slice length does not match its shape.
pub fn matmul_into(
    threads: usize,
    (m, k, n): (usize, usize, usize),
    a: &[f32],
    b: &[f32],
    layout: Layout,
    c: &mut [f32],
    accumulate: bool,
) {
    assert_eq!(a.len(), m * k, "matmul: A is not {m}x{k}");
    assert_eq!(b.len(), k * n, "matmul: B does not hold {k}x{n}");
    assert_eq!(c.len(), m * n, "matmul: C is not {m}x{n}");
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c.fill(0.0);
        }
        return;
    }
    if m == 1 && layout == Layout::NxK {
        return super::gemv::gemv_nxk(threads, k, n, a, b, c, accumulate);
    }
    // Strides of B seen as a k x n matrix (element (p, j)).
    let (b_col_stride, b_row_stride) = match layout {
        Layout::KxN => (1isize, n as isize),
        Layout::NxK => (k as isize, 1isize),
    };
    let par = if threads > 1 { gemm::Parallelism::Rayon(threads) } else { gemm::Parallelism::None };
    // SAFETY: the asserts above guarantee every pointer covers its matrix at
    // the given strides; `c` is borrowed mutably so nothing else touches it.
    // gemm computes dst = alpha * dst + beta * lhs * rhs; alpha is ignored
    // when read_dst is false.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.as_ptr(),
            1,
            k as isize,
            b.as_ptr(),
            b_col_stride,
            b_row_stride,
            1.0,
            1.0,
            false,
            false,
            false,
            par,
        )
    }
}

/// The textbook triple loop in f64, for tests and reference checks.
pub fn naive_matmul((m, k, n): (usize, usize, usize), a: &[f32], b: &[f32], layout: Layout) -> Vec<f32> {
    let mut c = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f64;
            for p in 0..k {
                let bv = match layout {
                    Layout::KxN => b[p * n + j],
                    Layout::NxK => b[j * k + p],
                };
                acc += a[i * k + p] as f64 * bv as f64;
            }
            c[i * n + j] = acc as f32;
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: &[f32], want: &[f32]) {
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= 1e-4 + 1e-4 * w.abs(), "entry {i}: {g} vs {w}");
        }
    }

    #[test]
    fn both_layouts_match_the_triple_loop_at_one_and_two_threads() {
        for &(m, k, n) in &[(1, 7, 5), (13, 31, 17), (64, 64, 64), (40, 50, 70), (3, 200, 1), (1, 333, 300)] {
            let a = crate::util::randn(m * k, 1);
            let b = crate::util::randn(k * n, 2);
            for layout in [Layout::KxN, Layout::NxK] {
                let want = naive_matmul((m, k, n), &a, &b, layout);
                for threads in [1, 2] {
                    let mut c = vec![f32::NAN; m * n];
                    matmul(threads, (m, k, n), &a, &b, layout, &mut c);
                    close(&c, &want);
                }
            }
        }
    }

    #[test]
    fn accumulate_adds_to_c_and_empty_k_zeroes_it() {
        let (m, k, n) = (4, 3, 5);
        let a = crate::util::randn(m * k, 3);
        let b = crate::util::randn(k * n, 4);
        let mut c = vec![1.0f32; m * n];
        matmul_into(1, (m, k, n), &a, &b, Layout::KxN, &mut c, true);
        let want: Vec<f32> = naive_matmul((m, k, n), &a, &b, Layout::KxN).iter().map(|x| x + 1.0).collect();
        close(&c, &want);
        let mut z = vec![5.0f32; 6];
        matmul(1, (2, 0, 3), &[], &[], Layout::KxN, &mut z);
        assert!(z.iter().all(|&x| x == 0.0));
    }
}
