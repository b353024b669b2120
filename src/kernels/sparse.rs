//! Sparse matrices in compressed-row form: building from triplets (COO),
//! transposing to compressed columns (CSC), and the products SpMV
//! (`y = A x`) and SpMM (`Y = A X`, X dense row-major), parallel over row
//! ranges of equal nonzero count, so a power-law matrix whose first rows
//! hold most entries still splits evenly. Indices are `usize`, as `sprs`
//! stores them, so the two are timed on the same bytes. Also the pattern
//! generators the `sci` suite draws its matrices from.

use crate::kernels::SendPtr;
use rand::RngExt;
use rayon::prelude::*;

/// A compressed sparse matrix: `indptr[r]..indptr[r+1]` index the entries
/// of row `r` (of column `r` for CSC), sorted by their minor index.
#[derive(Debug, Clone, PartialEq)]
pub struct Compressed {
    /// Rows (CSR) or columns (CSC): the major dimension.
    pub major: usize,
    /// The other dimension.
    pub minor: usize,
    /// `major + 1` offsets into `indices` and `data`.
    pub indptr: Vec<usize>,
    /// Minor index of each entry.
    pub indices: Vec<usize>,
    /// Value of each entry.
    pub data: Vec<f32>,
}

/// Triplets `(row, col, value)`, in any order, no duplicates.
#[derive(Debug, Clone, PartialEq)]
pub struct Coo {
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// Row of each entry.
    pub row: Vec<usize>,
    /// Column of each entry.
    pub col: Vec<usize>,
    /// Value of each entry.
    pub val: Vec<f32>,
}

/// Builds the compressed form with `major` = `major_of` of each entry: a
/// counting sort by major index, then each row's entries sorted by minor
/// index (rows in parallel).
pub fn compress(coo: &Coo, by_row: bool) -> Compressed {
    let (maj, min, major, minor) = if by_row {
        (&coo.row, &coo.col, coo.rows, coo.cols)
    } else {
        (&coo.col, &coo.row, coo.cols, coo.rows)
    };
    let mut indptr = vec![0usize; major + 1];
    for &m in maj {
        indptr[m + 1] += 1;
    }
    for i in 0..major {
        indptr[i + 1] += indptr[i];
    }
    let mut next = indptr[..major].to_vec();
    let mut indices = vec![0usize; maj.len()];
    let mut data = vec![0.0f32; maj.len()];
    for ((&m, &j), &v) in maj.iter().zip(min).zip(&coo.val) {
        indices[next[m]] = j;
        data[next[m]] = v;
        next[m] += 1;
    }
    let (ip, ix, dx) = (&indptr, SendPtr(indices.as_mut_ptr()), SendPtr(data.as_mut_ptr()));
    // One pair buffer per rayon job, reused across its rows.
    (0..major).into_par_iter().for_each_init(Vec::new, |pairs: &mut Vec<(usize, f32)>, r| {
        let (a, b) = (ip[r], ip[r + 1]);
        // SAFETY: row r owns entries a..b of both arrays, disjoint from
        // every other row's; both outlive the loop.
        let (idx, val) = unsafe {
            (
                std::slice::from_raw_parts_mut(ix.get().add(a), b - a),
                std::slice::from_raw_parts_mut(dx.get().add(a), b - a),
            )
        };
        if idx.windows(2).any(|w| w[0] > w[1]) {
            pairs.clear();
            pairs.extend(idx.iter().copied().zip(val.iter().copied()));
            pairs.sort_unstable_by_key(|p| p.0);
            for (k, &(j, v)) in pairs.iter().enumerate() {
                idx[k] = j;
                val[k] = v;
            }
        }
    });
    Compressed { major, minor, indptr, indices, data }
}

/// The other compressed form of the same matrix (CSR to CSC or back): a
/// counting sort by minor index; a serial scan in major order leaves each
/// new row sorted.
pub fn transpose(a: &Compressed) -> Compressed {
    let mut indptr = vec![0usize; a.minor + 1];
    for &j in &a.indices {
        indptr[j + 1] += 1;
    }
    for i in 0..a.minor {
        indptr[i + 1] += indptr[i];
    }
    let mut next = indptr[..a.minor].to_vec();
    let mut indices = vec![0usize; a.indices.len()];
    let mut data = vec![0.0f32; a.indices.len()];
    for r in 0..a.major {
        for p in a.indptr[r]..a.indptr[r + 1] {
            let j = a.indices[p];
            indices[next[j]] = r;
            data[next[j]] = a.data[p];
            next[j] += 1;
        }
    }
    Compressed { major: a.minor, minor: a.major, indptr, indices, data }
}

/// Row ranges of about equal nonzero count, `parts` of them at most.
fn balanced_rows(a: &Compressed, parts: usize) -> Vec<(usize, usize)> {
    let nnz = a.indices.len();
    let mut out = Vec::with_capacity(parts);
    let mut start = 0;
    for p in 1..=parts {
        let target = nnz * p / parts;
        let end = if p == parts {
            a.major
        } else {
            a.indptr.partition_point(|&v| v <= target).saturating_sub(1).max(start)
        };
        if end > start {
            out.push((start, end));
            start = end;
        }
    }
    if start < a.major {
        out.push((start, a.major));
    }
    out
}

/// `y = A x` for CSR `a`, parallel over balanced row ranges.
pub fn spmv(a: &Compressed, x: &[f32], y: &mut [f32]) {
    spmm(a, x, y, 1);
}

/// `Y = A X` for CSR `a` and dense row-major `X` (`minor x k`), `Y` (`major
/// x k`), parallel over balanced row ranges.
pub fn spmm(a: &Compressed, x: &[f32], y: &mut [f32], k: usize) {
    assert_eq!((x.len(), y.len()), (a.minor * k, a.major * k));
    // Ranges of about 32K multiply-adds (at most 256): enough tasks for any
    // pool (rayon balances them), none too small to pay for itself.
    let parts = (a.indices.len() * k / 32768).clamp(1, 256);
    let dst = SendPtr(y.as_mut_ptr());
    balanced_rows(a, parts).into_par_iter().for_each(|(r0, r1)| {
        // SAFETY: this task alone writes rows r0..r1 of `y` (disjoint
        // ranges from `balanced_rows`); `y` outlives the loop.
        let y = unsafe { std::slice::from_raw_parts_mut(dst.get().add(r0 * k), (r1 - r0) * k) };
        spmm_rows(a, x, y, k, r0, r1);
    });
}

crate::kernels::simd_dispatch! {
    /// Rows `r0..r1` of `Y = A X` into `y` (those rows only), compiled for
    /// AVX-512 and AVX2 too (the 64-wide axpys of SpMM vectorise).
    fn spmm_rows(a: &Compressed, x: &[f32], y: &mut [f32], k: usize, r0: usize, r1: usize) {
        for r in r0..r1 {
            let (idx, val) = (&a.indices[a.indptr[r]..a.indptr[r + 1]], &a.data[a.indptr[r]..a.indptr[r + 1]]);
            let out = &mut y[(r - r0) * k..][..k];
            if k == 1 {
                out[0] = gather_dot(idx, val, x);
            } else {
                out.fill(0.0);
                for (&j, &v) in idx.iter().zip(val) {
                    out.iter_mut().zip(&x[j * k..][..k]).for_each(|(o, &xv)| *o += v * xv);
                }
            }
        }
    }
}

/// `sum val[i] * x[idx[i]]` with four independent accumulators: one
/// running sum waits the add latency (about 4 cycles) per nonzero, which
/// bounded SpMV at density 1% when the matrix sits in cache.
#[inline(always)]
fn gather_dot(idx: &[usize], val: &[f32], x: &[f32]) -> f32 {
    let mut acc = [0.0f32; 4];
    let (ic, vc) = (idx.chunks_exact(4), val.chunks_exact(4));
    let (it, vt) = (ic.remainder(), vc.remainder());
    for (i, v) in ic.zip(vc) {
        for ((a, &v), &j) in acc.iter_mut().zip(v).zip(i) {
            *a += v * x[j];
        }
    }
    let tail: f32 = it.iter().zip(vt).map(|(&j, &v)| v * x[j]).sum();
    (acc[0] + acc[1]) + (acc[2] + acc[3]) + tail
}

/// `Y = A X` in f64 straight from the triplets (no compressed form involved).
pub fn spmm_f64(coo: &Coo, x: &[f32], k: usize) -> Vec<f64> {
    let mut y = vec![0.0f64; coo.rows * k];
    for ((&r, &c), &v) in coo.row.iter().zip(&coo.col).zip(&coo.val) {
        for j in 0..k {
            y[r * k + j] += v as f64 * x[c * k + j] as f64;
        }
    }
    y
}

/// Nonzero patterns of the generated matrices.
pub const PATTERNS: &[&str] = &["random", "banded", "powerlaw"];

/// An `n x n` matrix of about `density * n * n` entries (values uniform in
/// [-1, 1)), rows in order and columns sorted within each row:
/// - `random`: every entry independently present with probability `density`;
/// - `banded`: each row the `density * n` columns centred on the diagonal;
/// - `powerlaw`: row `i` (in a random order) holds a share proportional to
///   `1 / (rank + 1)` (Zipf), capped at `n`, columns independent as `random`.
pub fn generate(pattern: &str, n: usize, density: f64, seed: u64) -> Coo {
    let mut rng = crate::util::rng(seed);
    let mut coo = Coo { rows: n, cols: n, row: Vec::new(), col: Vec::new(), val: Vec::new() };
    let want = density * n as f64 * n as f64;
    // Per-row probabilities.
    let probs: Vec<f64> = match pattern {
        "powerlaw" => {
            let h: f64 = (1..=n).map(|r| 1.0 / r as f64).sum();
            let mut ranks: Vec<usize> = (0..n).collect();
            for i in (1..n).rev() {
                ranks.swap(i, rng.random_range(0..=i));
            }
            ranks.iter().map(|&r| (want / h / (r + 1) as f64 / n as f64).min(1.0)).collect()
        }
        _ => vec![density; n],
    };
    for (r, &p) in probs.iter().enumerate() {
        if pattern == "banded" {
            let w = ((density * n as f64).round() as usize).clamp(1, n);
            let lo = (r + 1).saturating_sub(w.div_ceil(2)).min(n - w);
            for c in lo..lo + w {
                coo.row.push(r);
                coo.col.push(c);
            }
            continue;
        }
        // Geometric skips between present entries: O(entries), not O(n).
        let mut c = 0usize;
        loop {
            let skip = if p >= 1.0 { 0.0 } else { (1.0 - rng.random::<f64>()).ln() / (1.0 - p).ln() };
            c = match c.checked_add(skip.floor().min(n as f64) as usize) {
                Some(v) if v < n => v,
                _ => break,
            };
            coo.row.push(r);
            coo.col.push(c);
            c += 1;
        }
    }
    coo.val = (0..coo.row.len()).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    coo
}

/// The triplets in a random order (what a COO builder is usually handed).
pub fn shuffled(coo: &Coo, seed: u64) -> Coo {
    let mut rng = crate::util::rng(seed);
    let mut order: Vec<usize> = (0..coo.row.len()).collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    Coo {
        rows: coo.rows,
        cols: coo.cols,
        row: order.iter().map(|&i| coo.row[i]).collect(),
        col: order.iter().map(|&i| coo.col[i]).collect(),
        val: order.iter().map(|&i| coo.val[i]).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn building_transposing_and_products_match_the_triplets() {
        for pattern in PATTERNS {
            let coo = generate(pattern, 300, 0.03, 4);
            let nnz = coo.row.len() as f64;
            assert!((nnz / (300.0 * 300.0 * 0.03) - 1.0).abs() < 0.2, "{pattern}: {nnz} entries");
            let csr = compress(&shuffled(&coo, 5), true);
            assert_eq!(csr, compress(&coo, true), "{pattern}: the order of the triplets matters");
            let csc = transpose(&csr);
            assert_eq!(csc, compress(&coo, false), "{pattern}");
            assert_eq!(transpose(&csc), csr);
            for k in [1, 5] {
                let x = crate::util::randn(300 * k, 6);
                let mut y = vec![f32::NAN; 300 * k];
                spmm(&csr, &x, &mut y, k);
                for (g, w) in y.iter().zip(spmm_f64(&coo, &x, k)) {
                    assert!((*g as f64 - w).abs() < 1e-4, "{pattern} k={k}");
                }
            }
        }
        // Balanced ranges cover every row once.
        let csr = compress(&generate("powerlaw", 1000, 0.01, 1), true);
        let parts = balanced_rows(&csr, 16);
        assert_eq!(parts.first().map(|p| p.0), Some(0));
        assert_eq!(parts.last().map(|p| p.1), Some(1000));
        assert!(parts.windows(2).all(|w| w[0].1 == w[1].0));
    }
}
