//! Data movement: transpose, reshape, slice and concat.
//!
//! All results except the contiguous reshape are materialised into buffers
//! allocated in `prepare`, so the copy is measured rather than the allocator.

use super::{CHUNK, PAR_MIN, choice, reference, shape2};
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use crate::util;
use anyhow::{Result, bail};
use ndarray::{Array2, CowArray, Ix1};
use rayon::prelude::*;

/// Tile of the blocked transpose: `TI` input rows by `TJ` input columns
/// (`TJ` output rows by `TI` output columns), staged through a 32 KiB buffer.
pub(crate) const TI: usize = 128;
/// See [`TI`].
pub(crate) const TJ: usize = 64;

/// Transposes the 8x8 block at `src` (row stride `ss`) into `dst` (row stride `ds`).
///
/// # Safety
/// The CPU must support AVX; `src` must be readable and `dst` writable for
/// 8 rows of 8 floats at the given strides.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn t8x8_avx(src: *const f32, ss: usize, dst: *mut f32, ds: usize) {
    use std::arch::x86_64::*;
    // SAFETY: the caller guarantees AVX and the 8x8 extents of src and dst.
    unsafe {
        let r0 = _mm256_loadu_ps(src);
        let r1 = _mm256_loadu_ps(src.add(ss));
        let r2 = _mm256_loadu_ps(src.add(2 * ss));
        let r3 = _mm256_loadu_ps(src.add(3 * ss));
        let r4 = _mm256_loadu_ps(src.add(4 * ss));
        let r5 = _mm256_loadu_ps(src.add(5 * ss));
        let r6 = _mm256_loadu_ps(src.add(6 * ss));
        let r7 = _mm256_loadu_ps(src.add(7 * ss));
        let (t0, t1) = (_mm256_unpacklo_ps(r0, r1), _mm256_unpackhi_ps(r0, r1));
        let (t2, t3) = (_mm256_unpacklo_ps(r2, r3), _mm256_unpackhi_ps(r2, r3));
        let (t4, t5) = (_mm256_unpacklo_ps(r4, r5), _mm256_unpackhi_ps(r4, r5));
        let (t6, t7) = (_mm256_unpacklo_ps(r6, r7), _mm256_unpackhi_ps(r6, r7));
        let (s0, s1) = (_mm256_shuffle_ps::<0x44>(t0, t2), _mm256_shuffle_ps::<0xee>(t0, t2));
        let (s2, s3) = (_mm256_shuffle_ps::<0x44>(t1, t3), _mm256_shuffle_ps::<0xee>(t1, t3));
        let (s4, s5) = (_mm256_shuffle_ps::<0x44>(t4, t6), _mm256_shuffle_ps::<0xee>(t4, t6));
        let (s6, s7) = (_mm256_shuffle_ps::<0x44>(t5, t7), _mm256_shuffle_ps::<0xee>(t5, t7));
        _mm256_storeu_ps(dst, _mm256_permute2f128_ps::<0x20>(s0, s4));
        _mm256_storeu_ps(dst.add(ds), _mm256_permute2f128_ps::<0x20>(s1, s5));
        _mm256_storeu_ps(dst.add(2 * ds), _mm256_permute2f128_ps::<0x20>(s2, s6));
        _mm256_storeu_ps(dst.add(3 * ds), _mm256_permute2f128_ps::<0x20>(s3, s7));
        _mm256_storeu_ps(dst.add(4 * ds), _mm256_permute2f128_ps::<0x31>(s0, s4));
        _mm256_storeu_ps(dst.add(5 * ds), _mm256_permute2f128_ps::<0x31>(s1, s5));
        _mm256_storeu_ps(dst.add(6 * ds), _mm256_permute2f128_ps::<0x31>(s2, s6));
        _mm256_storeu_ps(dst.add(7 * ds), _mm256_permute2f128_ps::<0x31>(s3, s7));
    }
}

/// Transposes input rows `i0..i0+ti`, columns `j0..j0+tj` of `a` (row length
/// `cols`) into `buf[j * TI + i]`: 8x8 AVX blocks where possible, scalar edges.
fn tile_to_buf(
    buf: &mut [f32],
    a: &[f32],
    cols: usize,
    (i0, ti): (usize, usize),
    (j0, tj): (usize, usize),
    avx: bool,
) {
    assert!(ti <= TI && tj <= TJ && buf.len() >= TI * TJ);
    assert!(i0 + ti <= a.len() / cols && j0 + tj <= cols);
    let (ti8, tj8) = if avx { (ti / 8 * 8, tj / 8 * 8) } else { (0, 0) };
    #[cfg(target_arch = "x86_64")]
    for ib in (0..ti8).step_by(8) {
        for jb in (0..tj8).step_by(8) {
            // SAFETY: `avx` is only true when the CPU has AVX; the asserts above
            // keep the 8x8 source block inside `a` and the buffer block inside `buf`.
            unsafe {
                t8x8_avx(
                    a.as_ptr().add((i0 + ib) * cols + j0 + jb),
                    cols,
                    buf.as_mut_ptr().add(jb * TI + ib),
                    TI,
                )
            };
        }
    }
    for i in 0..ti {
        let row = &a[(i0 + i) * cols + j0..(i0 + i) * cols + j0 + tj];
        let start = if i < ti8 { tj8 } else { 0 };
        for (j, &v) in row.iter().enumerate().skip(start) {
            buf[j * TI + i] = v;
        }
    }
}

/// Transposes `a[rows x cols]` into `out[cols x rows]`. Tiles of `TI x TJ`
/// are transposed into a small buffer (8x8 AVX blocks where available) and
/// written out as `TJ` contiguous runs, so every cache line of the input and
/// the output is consumed whole (a direct strided write thrashes the cache at
/// power-of-two sizes). Parallel over tile rows of the output when large.
pub(crate) fn transpose(out: &mut [f32], a: &[f32], rows: usize, cols: usize) {
    #[cfg(target_arch = "x86_64")]
    let avx = crate::isa::has(crate::isa::Feature::Avx);
    #[cfg(not(target_arch = "x86_64"))]
    let avx = false;
    transpose_with(out, a, rows, cols, avx);
}

/// [`transpose`], with the AVX blocks enabled or not (`avx` only if the CPU has AVX).
fn transpose_with(out: &mut [f32], a: &[f32], rows: usize, cols: usize, avx: bool) {
    assert!(a.len() == rows * cols && out.len() == a.len(), "transpose: shape mismatch");
    if a.is_empty() {
        return;
    }
    // One task: output rows j0 .. j0 + o.len() / rows, i.e. input columns.
    let task = |(bj, o): (usize, &mut [f32])| {
        let mut buf = [0.0f32; TI * TJ];
        let (j0, tj) = (bj * TJ, o.len() / rows);
        for i0 in (0..rows).step_by(TI) {
            let ti = TI.min(rows - i0);
            tile_to_buf(&mut buf, a, cols, (i0, ti), (j0, tj), avx);
            for j in 0..tj {
                o[j * rows + i0..j * rows + i0 + ti].copy_from_slice(&buf[j * TI..j * TI + ti]);
            }
        }
    };
    if a.len() < PAR_MIN {
        out.chunks_mut(TJ * rows).enumerate().for_each(task);
    } else {
        out.par_chunks_mut(TJ * rows).enumerate().for_each(task);
    }
}

/// `dst.copy_from_slice(src)`, in parallel chunks when large.
pub(crate) fn copy(dst: &mut [f32], src: &[f32]) {
    if dst.len() < PAR_MIN {
        dst.copy_from_slice(src);
    } else {
        dst.par_chunks_mut(CHUNK).zip(src.par_chunks(CHUNK)).for_each(|(d, s)| d.copy_from_slice(s));
    }
}

/// Copies row `r` of the output from `src_row(r)`, for every `width`-wide
/// output row, parallel over rows when large.
fn copy_rows(out: &mut [f32], width: usize, src_row: impl Fn(usize, &mut [f32]) + Sync) {
    if out.len() < PAR_MIN {
        out.chunks_exact_mut(width).enumerate().for_each(|(r, o)| src_row(r, o));
    } else {
        let rows_per_task = CHUNK.div_ceil(width);
        out.par_chunks_mut(rows_per_task * width).enumerate().for_each(|(t, block)| {
            for (k, o) in block.chunks_exact_mut(width).enumerate() {
                src_row(t * rows_per_task + k, o);
            }
        });
    }
}

/// The middle-half region of a `rows x cols` matrix: `rows` keeps whole rows
/// `rows/4 .. rows/4 + rows/2` (one contiguous range), `block` also keeps
/// only columns `cols/4 .. cols/4 + cols/2` (one range per row).
fn slice_region(region: &str, rows: usize, cols: usize) -> (usize, usize, usize, usize) {
    let (r0, nr) = (rows / 4, (rows / 2).max(1));
    match region {
        "rows" => (r0, nr, 0, cols),
        _ => (r0, nr, cols / 4, (cols / 2).max(1)),
    }
}

/// Copies the region `(r0, nr, c0, nc)` of `a[.. x cols]` into `out[nr x nc]`.
pub(crate) fn slice_copy(
    out: &mut [f32],
    a: &[f32],
    cols: usize,
    (r0, nr, c0, nc): (usize, usize, usize, usize),
) {
    assert_eq!(out.len(), nr * nc);
    if nc == cols {
        copy(out, &a[r0 * cols..(r0 + nr) * cols]);
    } else {
        copy_rows(out, nc, |r, o| {
            let s = (r0 + r) * cols + c0;
            o.copy_from_slice(&a[s..s + nc]);
        });
    }
}

/// Concatenates `a` and `b` (both `rows x cols`) along `axis` into `out`.
pub(crate) fn concat(out: &mut [f32], a: &[f32], b: &[f32], cols: usize, axis: usize) {
    let n = a.len();
    assert!(b.len() == n && out.len() == 2 * n);
    if axis == 0 {
        let (top, bottom) = out.split_at_mut(n);
        copy(top, a);
        copy(bottom, b);
    } else {
        copy_rows(out, 2 * cols, |r, o| {
            let (left, right) = o.split_at_mut(cols);
            left.copy_from_slice(&a[r * cols..(r + 1) * cols]);
            right.copy_from_slice(&b[r * cols..(r + 1) * cols]);
        });
    }
}

struct Transpose {
    rows: usize,
    cols: usize,
    a: Vec<f32>,
    out: Vec<f32>,
}

pub(crate) fn prepare_transpose(case: &Case) -> Result<Box<dyn Workload>> {
    let (rows, cols) = shape2(case)?;
    let a = util::randn(rows * cols, super::seed(case));
    Ok(Box::new(Transpose { rows, cols, out: vec![f32::NAN; a.len()], a }))
}

impl Workload for Transpose {
    fn verify(&mut self) -> Result<Verification> {
        self.out.fill(f32::NAN);
        transpose(&mut self.out, &self.a, self.rows, self.cols);
        let want = reference::transpose_naive(&self.a, self.rows, self.cols);
        Ok(Verification::compare("naive A^T[j][i] = A[i][j] for every entry", &self.out, &want, 0.0, 0.0))
    }
    fn throughput(&self) -> Vec<Throughput> {
        let n = self.a.len() as f64;
        vec![Throughput::elements(n), Throughput::bytes(8.0 * n)]
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            transpose(&mut self.out, &self.a, self.rows, self.cols);
            std::hint::black_box(&mut self.out);
        }
        Ok(())
    }
}

struct Reshape {
    transposed: bool,
    a: Array2<f32>,
}

/// Valid `layout` values of `reshape`.
pub(super) const LAYOUTS: &[&str] = &["contiguous", "transposed"];

pub(crate) fn prepare_reshape(case: &Case) -> Result<Box<dyn Workload>> {
    let transposed = choice(case, "layout", LAYOUTS)? == "transposed";
    let (rows, cols) = shape2(case)?;
    let a = Array2::from_shape_vec((rows, cols), util::randn(rows * cols, super::seed(case)))?;
    Ok(Box::new(Reshape { transposed, a }))
}

impl Reshape {
    /// The timed operation: flatten to one dimension with ndarray's `to_shape`
    /// (row-major order). A view when contiguous; a copy of the transposed view.
    fn flatten(&self) -> CowArray<'_, f32, Ix1> {
        let n = self.a.len();
        const OK: &str = "flattening preserves the element count";
        if self.transposed {
            // Always an owned copy; into_owned moves it out of the temporary view's Cow.
            CowArray::from(self.a.t().to_shape(n).expect(OK).into_owned())
        } else {
            self.a.to_shape(n).expect(OK)
        }
    }
}

impl Workload for Reshape {
    fn verify(&mut self) -> Result<Verification> {
        let flat = self.flatten();
        if self.transposed {
            if !flat.is_owned() {
                bail!("reshape of a transposed view should copy, but returned a view");
            }
            let (r, c) = self.a.dim();
            let src = self.a.as_slice().expect("standard layout");
            let want = reference::transpose_naive(src, r, c);
            let got = flat.as_slice().expect("owned result is contiguous").to_vec();
            Ok(Verification::compare("naive row-major flattening of A^T", &got, &want, 0.0, 0.0))
        } else {
            let same = flat.is_view() && flat.as_ptr() == self.a.as_ptr() && flat.len() == self.a.len();
            Ok(Verification {
                passed: same,
                reference: "zero-copy view of the same buffer".into(),
                max_error: None,
                detail: if same {
                    "view aliases the input".into()
                } else {
                    "reshape copied or moved data".into()
                },
            })
        }
    }
    fn throughput(&self) -> Vec<Throughput> {
        let n = self.a.len() as f64;
        if self.transposed {
            vec![Throughput::elements(n), Throughput::bytes(8.0 * n)]
        } else {
            // A metadata operation: one reshape per iteration, no data moved.
            vec![Throughput::items(1.0)]
        }
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            std::hint::black_box(self.flatten());
        }
        Ok(())
    }
}

struct Slice {
    cols: usize,
    region: (usize, usize, usize, usize),
    a: Vec<f32>,
    out: Vec<f32>,
}

/// Valid `region` values of `slice`.
pub(super) const REGIONS: &[&str] = &["rows", "block"];

pub(crate) fn prepare_slice(case: &Case) -> Result<Box<dyn Workload>> {
    let region = choice(case, "region", REGIONS)?;
    let (rows, cols) = shape2(case)?;
    let region = slice_region(region, rows, cols);
    let a = util::randn(rows * cols, super::seed(case));
    Ok(Box::new(Slice { cols, region, a, out: vec![f32::NAN; region.1 * region.3] }))
}

impl Workload for Slice {
    fn verify(&mut self) -> Result<Verification> {
        self.out.fill(f32::NAN);
        slice_copy(&mut self.out, &self.a, self.cols, self.region);
        let (r0, nr, c0, nc) = self.region;
        let mut want = Vec::with_capacity(nr * nc);
        for r in r0..r0 + nr {
            for c in c0..c0 + nc {
                want.push(self.a[r * self.cols + c]);
            }
        }
        Ok(Verification::compare("naive element-by-element sub-block copy", &self.out, &want, 0.0, 0.0))
    }
    fn throughput(&self) -> Vec<Throughput> {
        let n = self.out.len() as f64;
        vec![Throughput::elements(n), Throughput::bytes(8.0 * n)]
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            slice_copy(&mut self.out, &self.a, self.cols, self.region);
            std::hint::black_box(&mut self.out);
        }
        Ok(())
    }
}

struct Concat {
    cols: usize,
    axis: usize,
    a: Vec<f32>,
    b: Vec<f32>,
    out: Vec<f32>,
}

pub(crate) fn prepare_concat(case: &Case) -> Result<Box<dyn Workload>> {
    let axis = case.usize("axis")?;
    if axis > 1 {
        bail!("case {}: `axis` = {axis} is not valid; valid: 0, 1", case.id);
    }
    let (rows, cols) = shape2(case)?;
    let seed = super::seed(case);
    let (a, b) = (util::randn(rows * cols, seed), util::randn(rows * cols, seed ^ 1));
    Ok(Box::new(Concat { cols, axis, out: vec![f32::NAN; 2 * a.len()], a, b }))
}

impl Workload for Concat {
    fn verify(&mut self) -> Result<Verification> {
        self.out.fill(f32::NAN);
        concat(&mut self.out, &self.a, &self.b, self.cols, self.axis);
        let c = self.cols;
        let rows = self.a.len() / c;
        let mut want = Vec::with_capacity(self.out.len());
        if self.axis == 0 {
            want.extend(self.a.iter().chain(&self.b));
        } else {
            for r in 0..rows {
                want.extend(&self.a[r * c..(r + 1) * c]);
                want.extend(&self.b[r * c..(r + 1) * c]);
            }
        }
        Ok(Verification::compare("naive row-by-row concatenation", &self.out, &want, 0.0, 0.0))
    }
    fn throughput(&self) -> Vec<Throughput> {
        let n = self.out.len() as f64;
        vec![Throughput::elements(n), Throughput::bytes(8.0 * n)]
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            concat(&mut self.out, &self.a, &self.b, self.cols, self.axis);
            std::hint::black_box(&mut self.out);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transpose_matches_naive_on_non_tile_multiple_shapes() {
        for (r, c) in [
            (1, 1),
            (37, 53),
            (53, 37),
            (1, 100),
            (100, 1),
            (TI + 1, 2 * TJ - 1),
            (TI * 2 + 9, TJ + 8),
            (8, 8),
            (16, 9),
            (513, 300),
        ] {
            let a = util::randn(r * c, 1);
            let want = reference::transpose_naive(&a, r, c);
            let mut out = vec![f32::NAN; r * c];
            transpose(&mut out, &a, r, c);
            assert_eq!(out, want, "{r}x{c}");
            let mut out = vec![f32::NAN; r * c];
            transpose_with(&mut out, &a, r, c, false);
            assert_eq!(out, want, "{r}x{c} without AVX");
        }
    }

    #[test]
    fn slice_and_concat_match_naive() {
        for (r, c) in [(37, 53), (1, 1), (600, 301)] {
            let a = util::randn(r * c, 2);
            for region in ["rows", "block"] {
                let reg = slice_region(region, r, c);
                let mut out = vec![f32::NAN; reg.1 * reg.3];
                slice_copy(&mut out, &a, c, reg);
                let (r0, _, c0, nc) = reg;
                for (k, &v) in out.iter().enumerate() {
                    assert_eq!(v, a[(r0 + k / nc) * c + c0 + k % nc], "{region} {r}x{c}");
                }
            }
            let b = util::randn(r * c, 3);
            for axis in [0, 1] {
                let mut out = vec![f32::NAN; 2 * r * c];
                concat(&mut out, &a, &b, c, axis);
                for i in 0..r {
                    for j in 0..c {
                        let (pa, pb) = if axis == 0 {
                            (i * c + j, (r + i) * c + j)
                        } else {
                            (i * 2 * c + j, i * 2 * c + c + j)
                        };
                        assert_eq!((out[pa], out[pb]), (a[i * c + j], b[i * c + j]), "axis {axis} {r}x{c}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_wrong_transpose_fails_verification() {
        let a = util::randn(37 * 53, 4);
        let mut out = vec![0.0; a.len()];
        transpose(&mut out, &a, 37, 53);
        let want = reference::transpose_naive(&a, 37, 53);
        assert!(Verification::compare("t", &out, &want, 0.0, 0.0).passed);
        out.swap(1, 2);
        assert!(!Verification::compare("t", &out, &want, 0.0, 0.0).passed);
    }
}
