//! Which implementation each quantized kernel runs, per ISA level: the one
//! table both [`super::QMatrix`]'s dispatch and `tfbench sysinfo --kernels`
//! read, so what the table prints is what runs, and a kernel that would
//! fall to scalar code on a CPU with AVX2 shows (and fails a test).
//!
//! A kernel's choice depends only on the ISA level ([`DotIsa::at`]: the
//! CPU's features under a cap) and, for decode, on whether the format
//! quantizes its activations to int8 (llama.cpp's arithmetic) or keeps them
//! f32 (the weight-only built-in models).

use super::WeightFormat;
use crate::isa::{Feature, IsaLevel};

/// The instruction-set family a decode kernel is compiled for, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DotIsa {
    /// Portable Rust compiled for baseline x86-64 (or any other target).
    Portable,
    /// AVX2, FMA, F16C.
    Avx2,
    /// AVX-512 F/BW/VL (no VNNI).
    Avx512,
    /// AVX-512 with VNNI (`vpdpbusd`).
    Avx512Vnni,
}

/// The features of [`DotIsa::Avx512Vnni`] (the VNNI kernels also use the
/// AVX-512 paths' F16C and FMA).
const VNNI512: [Feature; 7] = {
    use Feature::*;
    [Avx512f, Avx512bw, Avx512vl, Avx512vnni, F16c, Fma, Avx2]
};

impl DotIsa {
    /// Every family, lowest first.
    pub const ALL: [DotIsa; 4] = [Self::Portable, Self::Avx2, Self::Avx512, Self::Avx512Vnni];

    /// The family's name as the dispatch table prints it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Portable => "scalar",
            Self::Avx2 => "avx2",
            Self::Avx512 => "avx512",
            Self::Avx512Vnni => "avx512vnni",
        }
    }

    /// The features a kernel of this family needs.
    pub fn features(self) -> &'static [Feature] {
        match self {
            Self::Portable => &[],
            Self::Avx2 => &super::AVX2,
            Self::Avx512 => &super::AVX512,
            Self::Avx512Vnni => &VNNI512,
        }
    }

    /// The best family the CPU can run with dispatch capped at `level`
    /// (whatever the cap in force now).
    pub fn at(level: IsaLevel) -> Self {
        let ok = |f: &Feature| f.detected() && f.level() <= level;
        // AVX-512 kernels also use AVX2 instructions (e.g. the 256-bit halves).
        let has = |d: DotIsa| d.features().iter().all(ok) && DotIsa::Avx2.features().iter().all(ok);
        Self::ALL.into_iter().rev().find(|&d| d == Self::Portable || has(d)).unwrap_or(Self::Portable)
    }

    /// The family the kernels dispatch to now (the cap in force).
    pub fn current() -> Self {
        Self::at(crate::isa::cap())
    }

    /// Whether kernels of this family can run now (tests iterate over these).
    pub fn available(self) -> bool {
        self <= Self::current()
    }

    /// Every family that can run now, lowest first.
    pub fn available_all() -> Vec<Self> {
        Self::ALL.into_iter().filter(|d| d.available()).collect()
    }
}

/// The decode (one to eight tokens) kernel family of `format` at `isa`,
/// with int8 activations (`act8`, the formats that have them) or f32 ones.
pub fn gemv(format: WeightFormat, act8: bool, isa: DotIsa) -> DotIsa {
    let act8 = act8 && super::linear::act8_format(format);
    match (act8, isa) {
        // The int8-activation kernels have VNNI, AVX2 and portable twins;
        // AVX-512 without VNNI runs the AVX2 ones.
        (true, DotIsa::Avx512Vnni) => DotIsa::Avx512Vnni,
        (true, DotIsa::Avx512 | DotIsa::Avx2) => DotIsa::Avx2,
        // Weight-only and ternary kernels: AVX-512, AVX2 and portable.
        (false, DotIsa::Avx512Vnni | DotIsa::Avx512) => DotIsa::Avx512,
        (false, DotIsa::Avx2) => DotIsa::Avx2,
        (_, DotIsa::Portable) => DotIsa::Portable,
    }
}

/// The family of the code that dequantizes `format`'s weight tiles for the
/// prefill GEMM (none for f32, which the GEMM reads directly; ternary
/// prefill runs its decode kernel per token).
pub fn dequant(format: WeightFormat, isa: DotIsa) -> Option<DotIsa> {
    match format {
        WeightFormat::F32 | WeightFormat::Ternary => None,
        // The AVX-512 twins of the bulk converters, else the portable loops
        // compiled for AVX2 (`simd_dispatch!`) or the baseline.
        _ => Some(match isa {
            DotIsa::Avx512Vnni | DotIsa::Avx512 => DotIsa::Avx512,
            i => i,
        }),
    }
}

/// What the prefill (more than eight tokens) product of `format` runs at `isa`.
pub fn gemm(format: WeightFormat, isa: DotIsa) -> String {
    match format {
        WeightFormat::Ternary => format!("{} (int8 activations, per token)", gemv(format, false, isa).name()),
        _ => {
            let tile = dequant(format, isa).map_or(String::new(), |d| format!("dequantize {} + ", d.name()));
            // The `gemm` crate picks its kernel from the CPU's features at run
            // time; the cap does not reach it (see `crate::isa`).
            format!("{tile}f32 GEMM (gemm crate, CPU's own dispatch)")
        }
    }
}

/// One row of the dispatch table: a kernel and what runs at each level.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelRow {
    /// The weight format.
    pub format: WeightFormat,
    /// `gemv` (decode, 1-8 tokens) or `gemm` (prefill).
    pub op: &'static str,
    /// The activations the kernel multiplies: `int8` or `f32`.
    pub act: &'static str,
    /// Per ISA level (highest first, from the cap in force down to
    /// `scalar`), the level and the implementation's name.
    pub impls: Vec<(IsaLevel, String)>,
}

/// The levels the table shows: the cap in force and every lower one, highest first.
pub fn levels() -> Vec<IsaLevel> {
    let cap = crate::isa::cap();
    IsaLevel::ALL.into_iter().rev().filter(|&l| l <= cap).collect()
}

/// The dispatch table: per quantized format, decode with the activations it
/// takes by default (and with f32 ones where both exist), and prefill.
pub fn table() -> Vec<KernelRow> {
    let levels = levels();
    let mut rows = Vec::new();
    for format in WeightFormat::ALL {
        if format == WeightFormat::F32 {
            continue;
        }
        let act8 = super::linear::act8_format(format);
        let mut acts = vec![act8];
        if act8 {
            acts.push(false);
        }
        for a in acts {
            rows.push(KernelRow {
                format,
                op: "gemv",
                act: if a || format == WeightFormat::Ternary { "int8" } else { "f32" },
                impls: levels
                    .iter()
                    .map(|&l| (l, gemv(format, a, DotIsa::at(l)).name().to_string()))
                    .collect(),
            });
        }
        rows.push(KernelRow {
            format,
            op: "gemm",
            act: if format == WeightFormat::Ternary { "int8" } else { "f32" },
            impls: levels.iter().map(|&l| (l, gemm(format, DotIsa::at(l)))).collect(),
        });
    }
    rows
}

/// The table as text: one line per kernel, one column per level.
pub fn render(rows: &[KernelRow]) -> String {
    let levels = levels();
    let mut head = vec!["kernel".to_string()];
    head.extend(
        levels
            .iter()
            .enumerate()
            .map(|(i, l)| if i == 0 { format!("{} (cap in force)", l.name()) } else { l.name().to_string() }),
    );
    let mut lines: Vec<Vec<String>> = vec![head];
    for r in rows {
        let mut line = vec![format!("{} {} ({} act)", r.format.name(), r.op, r.act)];
        line.extend(r.impls.iter().map(|(_, s)| s.clone()));
        lines.push(line);
    }
    let cols = lines[0].len();
    let width: Vec<usize> =
        (0..cols).map(|c| lines.iter().map(|l| l.get(c).map_or(0, |s| s.len())).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for l in &lines {
        let cells: Vec<String> =
            l.iter().enumerate().map(|(c, s)| format!("{s:<w$}", w = width[c])).collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::with_cap;

    /// On a CPU with AVX2 (and so with the cap at avx2, as an AVX2-only
    /// CPU runs), no quantized kernel resolves to scalar code; on a CPU
    /// without AVX2 this checks only that every kernel resolves (said so).
    #[test]
    fn no_quantized_kernel_is_scalar_with_avx2() {
        let avx2 = DotIsa::Avx2.features().iter().all(|f| f.detected());
        if !avx2 {
            eprintln!("this CPU has no AVX2: skipping the no-scalar assertion");
        }
        for level in [IsaLevel::Avx2, IsaLevel::Native] {
            with_cap(level, || {
                let rows = table();
                assert_eq!(rows.len(), 9 + 5 + 9, "{rows:?}");
                for r in &rows {
                    let (top, name) = &r.impls[0];
                    assert_eq!(*top, crate::isa::cap());
                    if avx2 {
                        assert!(
                            !name.contains("scalar"),
                            "{} {} {:?}: {name}",
                            r.format.name(),
                            r.op,
                            r.impls
                        );
                    }
                    // The lowest column is the portable build, by construction.
                    assert_eq!(r.impls.last().map(|x| x.0), Some(IsaLevel::Scalar));
                }
            });
        }
    }

    /// The table's decode column is what `QMatrix` runs: its `decode_path`
    /// names the same family at every cap.
    #[test]
    fn table_matches_what_qmatrix_runs() {
        for level in IsaLevel::ALL {
            with_cap(level, || {
                for format in [
                    WeightFormat::Q4_0,
                    WeightFormat::Q4_1,
                    WeightFormat::Q4K,
                    WeightFormat::Q6K,
                    WeightFormat::Q8_0,
                    WeightFormat::Int8,
                ] {
                    let q = super::super::QMatrix::quantize(format, &vec![0.5; 4 * 256], 4, 256).unwrap();
                    let want = gemv(format, true, DotIsa::current());
                    assert_eq!(q.decode_isa(1), want, "{format:?} at {level:?}");
                    let cell =
                        &table().into_iter().find(|r| r.format == format && r.op == "gemv").unwrap().impls[0]
                            .1;
                    assert_eq!(cell, want.name());
                }
            });
        }
    }

    #[test]
    fn levels_are_found_in_order() {
        let mut last = DotIsa::Portable;
        for l in IsaLevel::ALL {
            let d = DotIsa::at(l);
            assert!(d >= last, "{l:?}");
            last = d;
        }
        assert_eq!(DotIsa::at(IsaLevel::Scalar), DotIsa::Portable);
        let text = with_cap(IsaLevel::Avx2, || render(&table()));
        assert!(text.lines().count() == 24 && text.contains("q4_k gemv (int8 act)"), "{text}");
    }
}
