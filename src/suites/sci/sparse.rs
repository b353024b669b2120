//! `sparse_convert`, `spmv` and `spmm`: sparse matrices of random, banded
//! and power-law patterns, built and converted, and multiplied by a dense
//! vector or matrix, through `sprs` and through the project's own parallel
//! CSR kernels ([`crate::kernels::sparse`]). Products are checked against
//! f64 sums taken straight from the generator's triplets; conversions
//! against the triplets sorted by a plain sort.

use super::{choice, ensure_memory, seed};
use crate::kernels::sparse::{
    Compressed, Coo, PATTERNS, compress, generate, shuffled, spmm, spmm_f64, transpose,
};
use crate::plan::{Case, ParamValue};
use crate::suites::{Throughput, Verification, Workload};
use anyhow::{Result, bail};
use rayon::ThreadPool;
use sprs::{CsMat, TriMat};
use std::sync::Arc;

/// Implementations.
pub(super) const IMPLS: &[&str] = &["own", "sprs"];
/// Conversions.
pub(super) const CONVERSIONS: &[&str] = &["coo_to_csr", "csr_to_csc"];
/// Dense columns of `spmm`'s right-hand side.
pub(super) const SPMM_COLS: usize = 64;

/// A density in (0, 1].
pub(super) fn check_density(v: &ParamValue) -> Result<(), String> {
    match v {
        ParamValue::Float(d) if *d > 0.0 && *d <= 1.0 => Ok(()),
        ParamValue::Int(1) => Ok(()),
        _ => Err("must be a density in (0, 1], e.g. 0.01".into()),
    }
}

/// The case's matrix: `pattern`, `density`, `n`, checked and drawn.
fn matrix(case: &Case, extra_bytes_per_nnz: f64) -> Result<Coo> {
    let pattern = choice(case, "pattern", PATTERNS)?;
    let density = match case.params.get("density") {
        Some(&ParamValue::Float(d)) if d > 0.0 && d <= 1.0 => d,
        Some(ParamValue::Int(1)) => 1.0,
        other => bail!("case {}: `density` = {other:?} must be in (0, 1]", case.id),
    };
    let n = case.usize("n")?;
    if n == 0 || n > 1 << 31 {
        bail!("case {}: `n` must be from 1 to 2^31", case.id);
    }
    let nnz = density * n as f64 * n as f64;
    // Triplets (20 B an entry), a CSR copy (12 B) and whatever the case adds.
    ensure_memory(
        "this sparse matrix",
        nnz * (32.0 + extra_bytes_per_nnz) + 16.0 * n as f64 * SPMM_COLS as f64,
    )?;
    Ok(generate(pattern, n, density, seed(case)))
}

/// The sprs matrix of `coo`, built by sprs itself from the triplets.
fn sprs_csr(coo: &Coo) -> CsMat<f32> {
    TriMat::from_triplets((coo.rows, coo.cols), coo.row.clone(), coo.col.clone(), coo.val.clone()).to_csr()
}

struct Product {
    own: Option<Compressed>,
    sprs: Option<CsMat<f32>>,
    coo: Coo,
    k: usize,
    x: Vec<f32>,
    y: Vec<f32>,
    pool: Option<Arc<ThreadPool>>,
}

/// Prepares an `spmv` (`k = 1`) or `spmm` (`k` = [`SPMM_COLS`]) case.
pub(super) fn prepare_product(
    case: &Case,
    ctx: &crate::backend::cpu::Context,
    k: usize,
) -> Result<Box<dyn Workload>> {
    let use_sprs = choice(case, "impl", IMPLS)? == "sprs";
    let coo = matrix(case, 12.0)?;
    let (own, sprs) =
        if use_sprs { (None, Some(sprs_csr(&coo))) } else { (Some(compress(&coo, true)), None) };
    let x = crate::util::randn(coo.cols * k, seed(case) ^ 1);
    let y = vec![f32::NAN; coo.rows * k];
    Ok(Box::new(Product { own, sprs, coo, k, x, y, pool: ctx.pool() }))
}

impl Product {
    fn once(&mut self) {
        let Self { own, sprs, k, x, y, pool, .. } = self;
        match (own, sprs) {
            (Some(a), _) => crate::backend::cpu::install(pool.as_deref(), || spmm(a, x, y, *k)),
            (None, Some(a)) => {
                // sprs accumulates into its output; single-threaded.
                y.fill(0.0);
                if *k == 1 {
                    sprs::prod::mul_acc_mat_vec_csr(a.view(), &x[..], &mut y[..]);
                } else {
                    let xv =
                        ndarray::ArrayView2::from_shape((a.cols(), *k), &x[..]).expect("x holds cols x k");
                    let yv = ndarray::ArrayViewMut2::from_shape((a.rows(), *k), &mut y[..])
                        .expect("y holds rows x k");
                    sprs::prod::csr_mulacc_dense_rowmaj(a.view(), xv, yv);
                }
            }
            (None, None) => unreachable!("one implementation is prepared"),
        }
    }
}

impl Workload for Product {
    fn verify(&mut self) -> Result<Verification> {
        self.y.fill(f32::NAN);
        self.once();
        let want = spmm_f64(&self.coo, &self.x, self.k);
        // Each sum has (row length) terms of size ~1: scale the bound by it.
        let got = &self.y;
        let rows = &self.coo;
        let mut len = vec![0usize; rows.rows];
        rows.row.iter().for_each(|&r| len[r] += 1);
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            let bound = 1e-5 * (1.0 + len[i / self.k] as f64).sqrt() * 4.0 + 1e-5 * w.abs();
            if (g as f64 - w).abs().is_nan() || (g as f64 - w).abs() > bound {
                return Ok(Verification::check(
                    "f64 product from the triplets",
                    false,
                    format!("value {i}: got {g}, reference {w}, bound {bound:e}"),
                ));
            }
        }
        Ok(Verification::check("f64 product from the triplets", true, format!("{} values", got.len())))
    }
    fn throughput(&self) -> Vec<Throughput> {
        let nnz = self.coo.row.len() as f64;
        let (n, m, k) = (self.coo.rows as f64, self.coo.cols as f64, self.k as f64);
        vec![
            Throughput::flops(2.0 * nnz * k),
            // Values and indices once, row offsets, x once, y written.
            Throughput::bytes(12.0 * nnz + 8.0 * n + 4.0 * k * (m + n)),
            Throughput::elements(nnz),
        ]
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.once();
        }
        Ok(())
    }
}

struct Convert {
    op: &'static str,
    use_sprs: bool,
    coo: Coo,
    tri: Option<TriMat<f32>>,
    csr: Compressed,
    csr_sprs: Option<CsMat<f32>>,
    /// The last conversion's output (sprs's kept as sprs made it, so the
    /// timed loop copies nothing).
    result: Option<Result<Compressed, CsMat<f32>>>,
    pool: Option<Arc<ThreadPool>>,
}

/// Prepares a `sparse_convert` case.
pub(super) fn prepare_convert(case: &Case, ctx: &crate::backend::cpu::Context) -> Result<Box<dyn Workload>> {
    let op = choice(case, "op", CONVERSIONS)?;
    let use_sprs = choice(case, "impl", IMPLS)? == "sprs";
    let coo = matrix(case, 40.0)?;
    // COO input arrives in a random order, as triplets usually do.
    let coo = if op == "coo_to_csr" { shuffled(&coo, seed(case) ^ 2) } else { coo };
    let tri = (use_sprs && op == "coo_to_csr").then(|| {
        TriMat::from_triplets((coo.rows, coo.cols), coo.row.clone(), coo.col.clone(), coo.val.clone())
    });
    let csr = compress(&coo, true);
    let csr_sprs = (use_sprs && op == "csr_to_csc").then(|| sprs_csr(&coo));
    Ok(Box::new(Convert { op, use_sprs, coo, tri, csr, csr_sprs, result: None, pool: ctx.pool() }))
}

/// The compressed arrays of a sprs matrix.
fn from_sprs(m: &CsMat<f32>) -> Compressed {
    let (major, minor) = if m.is_csr() { (m.rows(), m.cols()) } else { (m.cols(), m.rows()) };
    Compressed {
        major,
        minor,
        indptr: m.indptr().raw_storage().to_vec(),
        indices: m.indices().to_vec(),
        data: m.data().to_vec(),
    }
}

impl Workload for Convert {
    fn verify(&mut self) -> Result<Verification> {
        self.run(1)?;
        let got = match self.result.take().expect("converted") {
            Ok(own) => own,
            Err(m) => from_sprs(&m),
        };
        // Reference: the triplets sorted by (major, minor) with a plain sort.
        let by_row = self.op == "coo_to_csr";
        let mut t: Vec<(usize, usize, f32)> = (0..self.coo.row.len())
            .map(|i| {
                if by_row {
                    (self.coo.row[i], self.coo.col[i], self.coo.val[i])
                } else {
                    (self.coo.col[i], self.coo.row[i], self.coo.val[i])
                }
            })
            .collect();
        t.sort_unstable_by_key(|e| (e.0, e.1));
        let major = if by_row { self.coo.rows } else { self.coo.cols };
        let mut indptr = vec![0usize; major + 1];
        t.iter().for_each(|e| indptr[e.0 + 1] += 1);
        (0..major).for_each(|i| indptr[i + 1] += indptr[i]);
        let want = Compressed {
            major,
            minor: if by_row { self.coo.cols } else { self.coo.rows },
            indptr,
            indices: t.iter().map(|e| e.1).collect(),
            data: t.iter().map(|e| e.2).collect(),
        };
        let what = format!("triplets sorted by {}", if by_row { "(row, col)" } else { "(col, row)" });
        Ok(Verification::check(
            what,
            got == want,
            format!("{} entries, arrays {}", want.data.len(), if got == want { "equal" } else { "differ" }),
        ))
    }
    fn throughput(&self) -> Vec<Throughput> {
        let nnz = self.coo.row.len() as f64;
        let major = (self.coo.rows + 1) as f64;
        // Read triplets (20 B) or CSR (12 B), write the compressed form.
        let read = if self.op == "coo_to_csr" { 20.0 * nnz } else { 12.0 * nnz + 8.0 * major };
        vec![Throughput::elements(nnz), Throughput::bytes(read + 12.0 * nnz + 8.0 * major)]
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            let Self { op, use_sprs, coo, tri, csr, csr_sprs, pool, .. } = self;
            self.result = Some(match (*op, *use_sprs) {
                ("coo_to_csr", false) => {
                    Ok(crate::backend::cpu::install(pool.as_deref(), || compress(coo, true)))
                }
                ("coo_to_csr", true) => Err(tri.as_ref().expect("prepared").to_csr()),
                (_, false) => Ok(transpose(csr)),
                (_, true) => Err(csr_sprs.as_ref().expect("prepared").to_csc()),
            });
        }
        Ok(())
    }
}
