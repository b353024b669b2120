//! The WGSL kernels (readable sources under `kernels/`, embedded) and how
//! each is dispatched: its buffers, its uniform and its grid. Plain Rust,
//! built with or without the `webgpu` feature, so the shapes and grids are
//! tested everywhere.

use anyhow::{Result, bail};

/// The most workgroups one dimension of a dispatch may have (WebGPU's
/// default `maxComputeWorkgroupsPerDimension`).
pub const MAX_GROUPS_PER_DIM: u32 = 65535;

/// One kernel with its shape: what a case dispatches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `c = a + b` over `n` floats (`add.wgsl`).
    Add {
        /// Elements.
        n: usize,
    },
    /// `C[m x n] = A[m x k] * B[k x n]`, row-major (`gemm.wgsl`, 64 x 64
    /// tiles through workgroup memory).
    Gemm {
        /// Rows of A and C.
        m: usize,
        /// Columns of A, rows of B.
        k: usize,
        /// Columns of B and C.
        n: usize,
    },
    /// Softmax over each row of a `rows x cols` matrix (`softmax.wgsl`, one
    /// workgroup per row).
    Softmax {
        /// Rows.
        rows: usize,
        /// Columns (the softmax's length).
        cols: usize,
    },
}

/// The op names [`Op::parse`] takes.
pub const OPS: &[&str] = &["add", "gemm", "softmax"];

impl Op {
    /// The op called `name` at `dims` (`n`; `m, k, n`; `rows, cols`); an
    /// error names the valid ops, the rank wanted, or the size past what
    /// one dispatch or a 32-bit index reaches.
    pub fn parse(name: &str, dims: &[usize]) -> Result<Op> {
        let op = match (name, dims) {
            ("add", &[n]) => Op::Add { n },
            ("gemm", &[m, k, n]) => Op::Gemm { m, k, n },
            ("softmax", &[rows, cols]) => Op::Softmax { rows, cols },
            ("add" | "gemm" | "softmax", _) => {
                bail!("{name} takes {} dimensions, got {}", Op::rank(name), dims.len())
            }
            _ => bail!("unknown WebGPU op `{name}`; valid: {}", OPS.join(", ")),
        };
        if dims.contains(&0) {
            bail!("{name}: every dimension must be at least 1, got {dims:?}");
        }
        // Indices are u32 in WGSL; every buffer's floats must fit.
        let most = op.inputs().into_iter().chain([op.output_len()]).max().unwrap_or(0);
        if most > u32::MAX as usize / 4 {
            bail!("{name} {dims:?}: {most} floats in one buffer exceed WGSL's 32-bit byte indexing");
        }
        let (x, y, _) = op.workgroups();
        if y > MAX_GROUPS_PER_DIM || x > MAX_GROUPS_PER_DIM {
            bail!(
                "{name} {dims:?} needs a grid of {x} x {y} workgroups, past WebGPU's {MAX_GROUPS_PER_DIM} a side"
            );
        }
        Ok(op)
    }

    /// How many dimensions op `name` takes.
    pub fn rank(name: &str) -> usize {
        match name {
            "gemm" => 3,
            "softmax" => 2,
            _ => 1,
        }
    }

    /// The op's name, as [`Op::parse`] takes it.
    pub fn name(self) -> &'static str {
        match self {
            Op::Add { .. } => "add",
            Op::Gemm { .. } => "gemm",
            Op::Softmax { .. } => "softmax",
        }
    }

    /// The kernel's WGSL source (entry point `main`).
    pub fn source(self) -> &'static str {
        match self {
            Op::Add { .. } => include_str!("kernels/add.wgsl"),
            Op::Gemm { .. } => include_str!("kernels/gemm.wgsl"),
            Op::Softmax { .. } => include_str!("kernels/softmax.wgsl"),
        }
    }

    /// Floats in each input buffer, in binding order (bindings 0, 1, ...).
    pub fn inputs(self) -> Vec<usize> {
        match self {
            Op::Add { n } => vec![n, n],
            Op::Gemm { m, k, n } => vec![m * k, k * n],
            Op::Softmax { rows, cols } => vec![rows * cols],
        }
    }

    /// Floats in the output buffer (the binding after the inputs).
    pub fn output_len(self) -> usize {
        match self {
            Op::Add { n } => n,
            Op::Gemm { m, n, .. } => m * n,
            Op::Softmax { rows, cols } => rows * cols,
        }
    }

    /// The uniform buffer's words (the binding after the output), if the
    /// kernel has one: GEMM's `m, k, n` (padded to 16 bytes), softmax's
    /// `rows, cols`.
    pub fn uniform(self) -> Option<Vec<u32>> {
        match self {
            Op::Add { .. } => None,
            Op::Gemm { m, k, n } => Some(vec![m as u32, k as u32, n as u32, 0]),
            Op::Softmax { rows, cols } => Some(vec![rows as u32, cols as u32]),
        }
    }

    /// The grid: workgroups in x, y, z. Add: one invocation per element in
    /// workgroups of 256, a row of at most 65535 workgroups; GEMM: one
    /// workgroup per 64 x 64 tile of C; softmax: one per row, folded into
    /// y past 65535 rows (the kernels rebuild the flat index the same way).
    pub fn workgroups(self) -> (u32, u32, u32) {
        let fold = |groups: usize| -> (u32, u32, u32) {
            let x = groups.clamp(1, MAX_GROUPS_PER_DIM as usize);
            (x as u32, groups.div_ceil(x).min(u32::MAX as usize) as u32, 1)
        };
        match self {
            Op::Add { n } => fold(n.div_ceil(256)),
            Op::Gemm { m, n, .. } => (
                n.div_ceil(64).min(u32::MAX as usize) as u32,
                m.div_ceil(64).min(u32::MAX as usize) as u32,
                1,
            ),
            Op::Softmax { rows, .. } => fold(rows),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_parse_with_their_rank_and_grid() {
        assert_eq!(Op::parse("add", &[65536]).unwrap(), Op::Add { n: 65536 });
        assert_eq!(Op::Add { n: 65536 }.workgroups(), (256, 1, 1));
        // Past 65535 workgroups the grid folds into y, covering every element.
        let (x, y, _) = Op::Add { n: 65536 * 512 }.workgroups();
        assert!(x <= MAX_GROUPS_PER_DIM && x as usize * y as usize * 256 >= 65536 * 512, "{x} {y}");
        let g = Op::parse("gemm", &[64, 128, 200]).unwrap();
        assert_eq!(g.workgroups(), (4, 1, 1));
        assert_eq!(g.inputs(), [64 * 128, 128 * 200]);
        assert_eq!(g.output_len(), 64 * 200);
        assert_eq!(g.uniform().unwrap(), [64, 128, 200, 0]);
        let s = Op::parse("softmax", &[64, 768]).unwrap();
        assert_eq!((s.workgroups(), s.uniform().unwrap()), ((64, 1, 1), vec![64, 768]));
        assert_eq!(Op::Softmax { rows: 70000, cols: 1 }.workgroups(), (65535, 2, 1));
        for op in OPS {
            let dims = vec![8; Op::rank(op)];
            let parsed = Op::parse(op, &dims).unwrap();
            assert_eq!(parsed.name(), *op);
            assert!(parsed.source().contains("fn main"), "{op}");
        }
    }

    #[test]
    fn bad_ops_and_shapes_are_errors_naming_the_fix() {
        let e = Op::parse("gelu", &[8]).unwrap_err().to_string();
        assert!(e.contains("unknown WebGPU op `gelu`") && e.contains("add, gemm, softmax"), "{e}");
        let e = Op::parse("gemm", &[8, 8]).unwrap_err().to_string();
        assert!(e.contains("takes 3 dimensions, got 2"), "{e}");
        let e = Op::parse("softmax", &[0, 8]).unwrap_err().to_string();
        assert!(e.contains("at least 1"), "{e}");
        let e = Op::parse("add", &[1 << 31]).unwrap_err().to_string();
        assert!(e.contains("32-bit"), "{e}");
        let e = Op::parse("gemm", &[64 * 70000, 1, 1]).unwrap_err().to_string();
        assert!(e.contains("65535"), "{e}");
    }
}
