//! `tfbench sysinfo`.

use crate::cli::{ListFormat, SysinfoArgs};
use crate::config;
use crate::env::Environment;
use crate::probe;
use anyhow::{Result, bail};

/// `tfbench sysinfo`: the machine, and with `--probe` its measured limits.
pub fn sysinfo(args: &SysinfoArgs) -> Result<String> {
    let env = Environment::gather();
    let data = crate::data::lookup();
    // GPUs are described here, not in `Environment`: the environment keys
    // the CPU probe's cache and is recorded with every result, and opening
    // the CUDA driver for a CPU run would cost it a second.
    let cuda = crate::cuda::info::gather();
    let gpu_limits = || -> Vec<(String, crate::cuda::probe::GpuLimits)> {
        cuda.gpus
            .iter()
            .filter_map(|g| Some((g.device.clone(), crate::cuda::probe::load(&g.uuid)?)))
            .collect()
    };
    let limits = if args.probe {
        let threads = args.threads.unwrap_or_else(config::default_threads);
        if threads == 0 {
            bail!("--threads must be at least 1");
        }
        eprintln!("probing peak FMA throughput and memory bandwidth on {threads} thread(s) ...");
        let l = probe::measure(threads)?;
        let path = probe::save(&l)?;
        eprintln!("cached in {}", path.display());
        if let Some(w) = probe::busy_warning(&l) {
            eprintln!("{w}");
        }
        for g in &cuda.gpus {
            let n: u32 = g.device.trim_start_matches("cuda:").parse().unwrap_or(0);
            eprintln!("probing {} ({}): cuBLAS GEMM per dtype, copies, launch latency ...", g.device, g.name);
            let gpu = crate::cuda::gpu(n).map_err(|why| anyhow::anyhow!(why))?;
            let gl = crate::cuda::probe::measure(&gpu)?;
            eprintln!("cached in {}", crate::cuda::probe::save(&gl)?.display());
        }
        Some(l)
    } else {
        probe::load(&env.fingerprint())?
    };
    match args.format {
        ListFormat::Json => Ok(serde_json::to_string_pretty(&serde_json::json!({
            "environment": env,
            "fingerprint": env.fingerprint(),
            "machine_limits": limits,
            "isa_usable": crate::isa::usable(),
            "data_dirs": data_dirs_json(&data),
            "cuda": cuda,
            "cuda_limits": gpu_limits().into_iter().map(|(_, l)| l).collect::<Vec<_>>(),
        }))? + "\n"),
        ListFormat::Table => Ok(super::sysinfo_table::render_table(&env, limits.as_ref())
            + "\n"
            + &crate::cuda::info::describe_lines(&cuda).iter().map(|l| format!("{l}\n")).collect::<String>()
            + &gpu_limits()
                .iter()
                .map(|(d, l)| format!("{}\n", crate::cuda::probe::describe(d, l)))
                .collect::<String>()
            + "\n"
            + "data folders (--data-dir, else TFBENCH_DATA_DIR, else these; first match wins per file):\n"
            + &data.describe().iter().map(|l| format!("  {l}\n")).collect::<String>()),
    }
}

/// The data folders searched, for `sysinfo --format json`: each with why it
/// is searched, whether it exists and which known entries it holds.
fn data_dirs_json(data: &crate::data::Lookup) -> serde_json::Value {
    data.places
        .iter()
        .map(|p| {
            let found: Vec<&str> = if p.exists {
                crate::data::KNOWN.iter().copied().filter(|k| p.dir.join(k).exists()).collect()
            } else {
                Vec::new()
            };
            serde_json::json!({
                "dir": p.dir,
                "source": p.source.label(),
                "exists": p.exists,
                "found": found,
            })
        })
        .collect()
}
