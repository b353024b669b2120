//! `C[m x n] (i32) = A[m x k] (i8) * B^T`, B an int8 `[n x k]` weight
//! (`[out, in]`), exact in i32 (no saturation anywhere).
//!
//! VNNI's `vpdpbusd` multiplies *unsigned* by signed bytes, so the VNNI
//! paths feed `A + 128` (an XOR with 0x80 in registers) and subtract
//! `128 * sum_k B[j, k]`, precomputed per weight row in [`I8Weights`]. The
//! AVX2 path sign-extends to i16 and uses `vpmaddwd`, which cannot saturate
//! (unlike `vpmaddubsw`, whose i16 pair sums overflow for u8 x i8).
//!
//! Work is split over the current rayon pool by blocks of weight rows, and
//! within a task by register tiles of A rows x B rows that share loads.

use anyhow::{Result, bail};
use rayon::prelude::*;

/// Which integer dot-product instructions run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Int8Path {
    /// AVX-512 VNNI `vpdpbusd` on 512-bit vectors (64 bytes per instruction).
    Avx512Vnni,
    /// AVX-VNNI `vpdpbusd` on 256-bit vectors (VEX encoded, Alder Lake and later).
    AvxVnni,
    /// AVX2 sign extension to i16 and `vpmaddwd` (no VNNI).
    Avx2,
    /// Plain Rust, whatever the compiler makes of it: the portable fallback.
    Scalar,
}

impl Int8Path {
    /// Every path, fastest first.
    pub const ALL: [Int8Path; 4] = [Self::Avx512Vnni, Self::AvxVnni, Self::Avx2, Self::Scalar];

    /// Lowercase name used in case ids and reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Avx512Vnni => "avx512_vnni",
            Self::AvxVnni => "avx_vnni",
            Self::Avx2 => "avx2",
            Self::Scalar => "scalar",
        }
    }

    /// The path named `s`, or an error listing the valid names.
    pub fn parse(s: &str) -> Result<Self> {
        match Self::ALL.iter().find(|p| p.name() == s) {
            Some(p) => Ok(*p),
            None => {
                let names: Vec<_> = Self::ALL.iter().map(|p| p.name()).collect();
                bail!("unknown int8 path `{s}`; valid: {}", names.join(", "))
            }
        }
    }

    /// The CPU features the path's kernel is compiled for.
    pub fn features(self) -> &'static [crate::isa::Feature] {
        use crate::isa::Feature::*;
        match self {
            Self::Avx512Vnni => &[Avx512f, Avx512bw, Avx512vnni],
            Self::AvxVnni => &[Avx2, AvxVnni],
            Self::Avx2 => &[Avx2],
            Self::Scalar => &[],
        }
    }

    /// Whether the path can run here: the CPU has its features and
    /// `TFBENCH_MAX_ISA` allows them ([`crate::isa`]).
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            crate::isa::has_all(self.features())
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Self::Scalar
        }
    }

    /// Why the path cannot run here (the CPU lacks a feature, or the ISA cap
    /// excludes one), or `None` when it can.
    pub fn unavailable(self) -> Option<String> {
        if self.available() {
            return None;
        }
        Some(crate::isa::unavailable(self.features()).unwrap_or_else(|| {
            // Only reached on builds without the path's kernels at all.
            format!("this build has no {} kernel (non-x86-64 target or rustc older than 1.89)", self.name())
        }))
    }

    /// The fastest path that can run here.
    pub fn detect() -> Self {
        Self::ALL.into_iter().find(|p| p.available()).unwrap_or(Self::Scalar)
    }
}

/// An int8 weight `[rows x cols]` (`[out, in]`) with the per-row code sums the
/// VNNI paths need.
#[derive(Debug, Clone)]
pub struct I8Weights {
    /// Output channels (n).
    pub rows: usize,
    /// Input channels (k).
    pub cols: usize,
    /// Codes, row-major.
    pub data: Vec<i8>,
    /// `sum_k data[r, k]` per row.
    pub row_sums: Vec<i32>,
}

impl I8Weights {
    /// Wraps codes and computes the row sums.
    ///
    /// # Panics
    /// When `data.len() != rows * cols`.
    pub fn new(data: Vec<i8>, rows: usize, cols: usize) -> Self {
        assert_eq!(data.len(), rows * cols, "I8Weights: shape mismatch");
        let row_sums = data.chunks(cols.max(1)).map(|r| r.iter().map(|&v| v as i32).sum()).collect();
        Self { rows, cols, data, row_sums }
    }
}

// Tasks write disjoint columns of C (each only its own weight-row block)
// through the kernels' one raw-pointer wrapper.
use crate::kernels::SendPtr as OutPtr;

/// Weight rows per parallel task: 64 rows of 4096 bytes stay in L2 while
/// every A tile streams past them.
const NB: usize = 64;

/// `c = a * b^T` in i32, on the current rayon pool.
///
/// # Panics
/// When `path` is not [`available`](Int8Path::available) on this CPU, or a
/// slice does not match its shape.
pub fn gemm_i8(path: Int8Path, m: usize, a: &[i8], b: &I8Weights, c: &mut [i32]) {
    let (k, n) = (b.cols, b.rows);
    assert!(path.available(), "int8 path {} is not available on this CPU", path.name());
    assert_eq!(a.len(), m * k, "gemm_i8: A is not {m}x{k}");
    assert_eq!(c.len(), m * n, "gemm_i8: C is not {m}x{n}");
    let out = OutPtr(c.as_mut_ptr());
    (0..n.div_ceil(NB)).into_par_iter().for_each(|blk| {
        let (j0, j1) = (blk * NB, ((blk + 1) * NB).min(n));
        block(path, m, k, n, a, b, j0, j1, out.get());
    });
}

/// One block of weight rows `j0..j1` against every row of A.
#[allow(clippy::too_many_arguments)]
fn block(
    path: Int8Path,
    m: usize,
    k: usize,
    n: usize,
    a: &[i8],
    b: &I8Weights,
    j0: usize,
    j1: usize,
    c: *mut i32,
) {
    let (mr, nr) = match path {
        Int8Path::Avx512Vnni => (4, 4),
        Int8Path::AvxVnni | Int8Path::Avx2 => (2, 4),
        Int8Path::Scalar => (1, 1),
    };
    let offset = matches!(path, Int8Path::Avx512Vnni | Int8Path::AvxVnni);
    let mut i = 0;
    while i < m {
        let mi = mr.min(m - i);
        let mut j = j0;
        while j < j1 {
            let nj = if j + nr <= j1 { nr } else { 1 };
            let mut t = [[0i32; 4]; 4];
            let (pa, pb) = (&a[i * k..], &b.data[j * k..]);
            tile(path, mi, nj, pa, pb, k, &mut t);
            for (ii, row) in t.iter().enumerate().take(mi) {
                for (jj, &v) in row.iter().enumerate().take(nj) {
                    let v = if offset { v - 128 * b.row_sums[j + jj] } else { v };
                    // SAFETY: (i+ii, j+jj) is inside C, and column j+jj belongs
                    // to this task's block alone.
                    unsafe { *c.add((i + ii) * n + j + jj) = v };
                }
            }
            j += nj;
        }
        i += mi;
    }
}

/// Dispatches one `mi x nj` register tile to the path's kernel.
fn tile(path: Int8Path, mi: usize, nj: usize, a: &[i8], b: &[i8], k: usize, t: &mut [[i32; 4]; 4]) {
    macro_rules! go {
        ($f:ident) => {
            // SAFETY: `gemm_i8` checked the CPU has the path's features; the
            // slices hold `mi` rows of A and `nj` rows of B of length k.
            unsafe {
                match (mi, nj) {
                    (4, 4) => $f::<4, 4>(a, b, k, t),
                    (3, 4) => $f::<3, 4>(a, b, k, t),
                    (2, 4) => $f::<2, 4>(a, b, k, t),
                    (1, 4) => $f::<1, 4>(a, b, k, t),
                    (4, _) => $f::<4, 1>(a, b, k, t),
                    (3, _) => $f::<3, 1>(a, b, k, t),
                    (2, _) => $f::<2, 1>(a, b, k, t),
                    _ => $f::<1, 1>(a, b, k, t),
                }
            }
        };
    }
    match path {
        #[cfg(target_arch = "x86_64")]
        Int8Path::Avx512Vnni => go!(tile_vnni512),
        #[cfg(target_arch = "x86_64")]
        Int8Path::AvxVnni => go!(tile_avxvnni),
        #[cfg(target_arch = "x86_64")]
        Int8Path::Avx2 => go!(tile_avx2),
        _ => {
            for (i, row) in t.iter_mut().enumerate().take(mi) {
                for (j, v) in row.iter_mut().enumerate().take(nj) {
                    *v = dot_scalar(&a[i * k..(i + 1) * k], &b[j * k..(j + 1) * k]);
                }
            }
        }
    }
}

/// Portable exact int8 dot product.
pub fn dot_scalar(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(&x, &y)| x as i32 * y as i32).sum()
}

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile_vnni512<const MR: usize, const NR: usize>(
    a: &[i8],
    b: &[i8],
    k: usize,
    t: &mut [[i32; 4]; 4],
) {
    let flip = _mm512_set1_epi8(-128);
    let mut acc = [[_mm512_setzero_si512(); NR]; MR];
    let mut p = 0;
    while p < k {
        let rem = k - p;
        // Masked loads read zeros past k: A's zero flips to 128, times B's 0.
        let mask: __mmask64 = if rem >= 64 { !0 } else { (1u64 << rem) - 1 };
        let mut bv = [_mm512_setzero_si512(); NR];
        for (j, v) in bv.iter_mut().enumerate() {
            // SAFETY: masked lanes are not read; row j has k bytes from p.
            *v = unsafe { _mm512_maskz_loadu_epi8(mask, b.as_ptr().add(j * k + p)) };
        }
        for (i, acc) in acc.iter_mut().enumerate() {
            // SAFETY: as above for row i of A.
            let av =
                _mm512_xor_si512(unsafe { _mm512_maskz_loadu_epi8(mask, a.as_ptr().add(i * k + p)) }, flip);
            for (acc, &bv) in acc.iter_mut().zip(&bv) {
                *acc = _mm512_dpbusd_epi32(*acc, av, bv);
            }
        }
        p += 64;
    }
    for (i, row) in acc.iter().enumerate() {
        for (j, v) in row.iter().enumerate() {
            t[i][j] = _mm512_reduce_add_epi32(*v);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn hsum256(v: __m256i) -> i32 {
    let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
    let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
    _mm_cvtsi128_si32(s)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avxvnni")]
unsafe fn tile_avxvnni<const MR: usize, const NR: usize>(
    a: &[i8],
    b: &[i8],
    k: usize,
    t: &mut [[i32; 4]; 4],
) {
    let flip = _mm256_set1_epi8(-128);
    let mut acc = [[_mm256_setzero_si256(); NR]; MR];
    let main = k - k % 32;
    let mut p = 0;
    while p < main {
        let mut bv = [_mm256_setzero_si256(); NR];
        for (j, v) in bv.iter_mut().enumerate() {
            // SAFETY: p + 32 <= k within row j.
            *v = unsafe { _mm256_loadu_si256(b.as_ptr().add(j * k + p).cast()) };
        }
        for (i, acc) in acc.iter_mut().enumerate() {
            // SAFETY: as above for row i of A.
            let av = _mm256_xor_si256(unsafe { _mm256_loadu_si256(a.as_ptr().add(i * k + p).cast()) }, flip);
            for (acc, &bv) in acc.iter_mut().zip(&bv) {
                *acc = _mm256_dpbusd_avx_epi32(*acc, av, bv);
            }
        }
        p += 32;
    }
    for (i, row) in acc.iter().enumerate() {
        for (j, v) in row.iter().enumerate() {
            // The tail runs unsigned-offset too, so the caller's correction holds.
            let tail: i32 = a[i * k + main..(i + 1) * k]
                .iter()
                .zip(&b[j * k + main..(j + 1) * k])
                .map(|(&x, &y)| (x as i32 + 128) * y as i32)
                .sum();
            t[i][j] = hsum256(*v) + tail;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn tile_avx2<const MR: usize, const NR: usize>(a: &[i8], b: &[i8], k: usize, t: &mut [[i32; 4]; 4]) {
    let mut acc = [[_mm256_setzero_si256(); NR]; MR];
    let main = k - k % 16;
    let mut p = 0;
    while p < main {
        let mut bv = [_mm256_setzero_si256(); NR];
        for (j, v) in bv.iter_mut().enumerate() {
            // SAFETY: p + 16 <= k within row j.
            *v = _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(b.as_ptr().add(j * k + p).cast()) });
        }
        for (i, acc) in acc.iter_mut().enumerate() {
            // SAFETY: as above for row i of A.
            let av = _mm256_cvtepi8_epi16(unsafe { _mm_loadu_si128(a.as_ptr().add(i * k + p).cast()) });
            for (acc, &bv) in acc.iter_mut().zip(&bv) {
                *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(av, bv));
            }
        }
        p += 16;
    }
    for (i, row) in acc.iter().enumerate() {
        for (j, v) in row.iter().enumerate() {
            let tail = dot_scalar(&a[i * k + main..(i + 1) * k], &b[j * k + main..(j + 1) * k]);
            t[i][j] = hsum256(*v) + tail;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(n: usize, seed: u32) -> Vec<i8> {
        // Full range including -128 and 127, so saturation bugs would show.
        (0..n as u32).map(|i| (i.wrapping_mul(2_654_435_761).wrapping_add(seed) >> 13) as u8 as i8).collect()
    }

    #[test]
    fn every_available_path_equals_the_naive_i32_reference_exactly() {
        for &(m, k, n) in &[(1, 64, 4), (5, 77, 9), (8, 300, 67), (1, 4096, 8), (4, 31, 3)] {
            let a = codes(m * k, 1);
            let w = I8Weights::new(codes(n * k, 7), n, k);
            let mut want = vec![0i32; m * n];
            for i in 0..m {
                for j in 0..n {
                    let mut s = 0i64;
                    for p in 0..k {
                        s += a[i * k + p] as i64 * w.data[j * k + p] as i64;
                    }
                    want[i * n + j] = s as i32;
                }
            }
            for path in Int8Path::ALL.into_iter().filter(|p| p.available()) {
                let mut c = vec![i32::MIN; m * n];
                gemm_i8(path, m, &a, &w, &mut c);
                assert_eq!(c, want, "{} at {m}x{k}x{n}", path.name());
            }
        }
    }

    #[test]
    fn paths_parse_and_scalar_is_always_available() {
        assert!(Int8Path::Scalar.available());
        assert!(Int8Path::detect().available());
        assert_eq!(Int8Path::parse("avx2").unwrap(), Int8Path::Avx2);
        let e = Int8Path::parse("amx").unwrap_err().to_string();
        assert!(e.contains("valid: avx512_vnni, avx_vnni, avx2, scalar"), "{e}");
    }
}
