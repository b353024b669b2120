//! `tfbench sysinfo`.

use crate::cli::{ListFormat, SysinfoArgs};
use crate::config;
use crate::env::Environment;
use crate::probe;
use anyhow::{Result, bail};

/// `tfbench sysinfo`: the machine, and with `--probe` its measured limits.
pub fn sysinfo(args: &SysinfoArgs) -> Result<String> {
    let env = Environment::gather();
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
        Some(l)
    } else {
        probe::load(&env.fingerprint())?
    };
    match args.format {
        ListFormat::Json => Ok(serde_json::to_string_pretty(&serde_json::json!({
            "environment": env,
            "fingerprint": env.fingerprint(),
            "machine_limits": limits,
        }))? + "\n"),
        ListFormat::Table => Ok(crate::env::render_table(&env, limits.as_ref()) + "\n"),
    }
}
