//! `tfbench sysinfo --kernels`: the quantized kernels' dispatch table (per
//! format and operation, which implementation runs at the ISA cap in force
//! and at each lower level), from the same choice the kernels make
//! ([`crate::kernels::quant::dispatch`]), so a scalar fallback cannot hide;
//! and the same for the elementwise maps of the tensor suite's unary cases
//! ([`crate::kernels::vmath`]).

use crate::cli::ListFormat;
use crate::isa::IsaLevel;
use crate::kernels::quant::dispatch;
use crate::kernels::vmath::{self, VOp};
use anyhow::Result;

/// The op's name in the tensor suite's `unary` cases.
fn vop_name(op: VOp) -> &'static str {
    match op {
        VOp::Exp => "exp",
        VOp::Ln => "log",
        VOp::Tanh => "tanh",
        VOp::Sigmoid => "sigmoid",
        VOp::Gelu => "gelu",
    }
}

/// What the transcendental maps run at each level of the table, highest
/// first: the same choice [`vmath::map`] makes, taken under each cap.
fn map_paths() -> Vec<(IsaLevel, &'static str)> {
    dispatch::levels().into_iter().map(|l| (l, crate::isa::with_cap(l, vmath::path_name))).collect()
}

/// The maps' row, one level per line.
fn maps_text() -> String {
    map_paths().into_iter().map(|(l, s)| format!("  {:<8} {s}\n", l.name())).collect()
}

/// The dispatch table as text or JSON.
pub fn render(format: ListFormat) -> Result<String> {
    let rows = dispatch::table();
    Ok(match format {
        ListFormat::Table => format!(
            "ISA cap: {}\ncolumns: what runs with dispatch capped at each level on this CPU (a level above \
             the CPU's features runs what the CPU has)\n\n{}\nelementwise maps (tensor unary: {}):\n{}",
            crate::isa::describe(),
            dispatch::render(&rows),
            VOp::ALL.map(vop_name).join(", "),
            maps_text()
        ),
        ListFormat::Json => {
            let kernels: Vec<serde_json::Value> = rows
                .iter()
                .map(|r| {
                    let impls: serde_json::Map<String, serde_json::Value> =
                        r.impls.iter().map(|(l, s)| (l.name().to_string(), s.clone().into())).collect();
                    serde_json::json!({
                        "format": r.format.name(),
                        "op": r.op,
                        "activations": r.act,
                        "impl": impls,
                    })
                })
                .collect();
            let json = serde_json::json!({
                "isa_cap": crate::isa::cap().name(),
                "isa_usable": crate::isa::usable(),
                "levels": dispatch::levels().iter().map(|l| l.name()).collect::<Vec<_>>(),
                "kernels": kernels,
                "maps": {
                    "ops": VOp::ALL.map(vop_name),
                    "impl": map_paths().into_iter().map(|(l, s)| (l.name().to_string(), serde_json::Value::from(s))).collect::<serde_json::Map<_, _>>(),
                },
            });
            serde_json::to_string_pretty(&json)? + "\n"
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On a CPU with AVX2, the maps never run the baseline (SSE2) build at
    /// the avx2 cap or above; at the scalar cap they do, by construction.
    #[test]
    fn maps_are_not_baseline_code_with_avx2() {
        let avx2 = crate::isa::Feature::Avx2.detected() && crate::isa::Feature::Fma.detected();
        let paths = crate::isa::with_cap(IsaLevel::Native, map_paths);
        assert_eq!(paths.last().map(|p| p.0), Some(IsaLevel::Scalar));
        assert!(paths.last().is_some_and(|p| p.1.contains("baseline")), "{paths:?}");
        if !avx2 {
            eprintln!("this CPU has no AVX2: checking only that every level resolves");
            return;
        }
        for (l, s) in &paths {
            if *l >= IsaLevel::Avx2 {
                assert!(!s.contains("baseline"), "{l:?}: {s}");
            }
        }
        let at_avx2 = crate::isa::with_cap(IsaLevel::Avx2, vmath::path_name);
        assert_eq!(at_avx2, "vmath avx2+fma (8 lanes)");
        let text = crate::isa::with_cap(IsaLevel::Avx2, || render(ListFormat::Table)).unwrap_or_default();
        assert!(text.contains("elementwise maps") && text.contains("vmath avx2+fma"), "{text}");
    }
}
