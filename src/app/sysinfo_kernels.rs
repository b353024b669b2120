//! `tfbench sysinfo --kernels`: the quantized kernels' dispatch table (per
//! format and operation, which implementation runs at the ISA cap in force
//! and at each lower level), from the same choice the kernels make
//! ([`crate::kernels::quant::dispatch`]), so a scalar fallback cannot hide.

use crate::cli::ListFormat;
use crate::kernels::quant::dispatch;
use anyhow::Result;

/// The dispatch table as text or JSON.
pub fn render(format: ListFormat) -> Result<String> {
    let rows = dispatch::table();
    Ok(match format {
        ListFormat::Table => format!(
            "ISA cap: {}\ncolumns: what runs with dispatch capped at each level on this CPU (a level above \
             the CPU's features runs what the CPU has)\n\n{}",
            crate::isa::describe(),
            dispatch::render(&rows)
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
            });
            serde_json::to_string_pretty(&json)? + "\n"
        }
    })
}
