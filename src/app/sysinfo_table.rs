//! The sysinfo table: the machine's description and, when probed, its
//! measured limits. It lives with the command, not in `env`, so that the
//! environment (which the probe's cache is keyed by) does not depend on the
//! probe.

use crate::env::Environment;
use crate::probe::MachineLimits;

fn unknown() -> String {
    "unknown".to_string()
}

/// Two-column ("property", "value") table of the environment and, when given,
/// the measured machine limits; printed by `tfbench sysinfo`.
pub fn render_table(env: &Environment, limits: Option<&MachineLimits>) -> String {
    let mut rows: Vec<(String, String)> = Vec::new();
    let mut row = |k: &str, v: String| rows.push((k.to_string(), v));
    let or_unknown = |v: Option<String>| v.unwrap_or_else(unknown);

    row("tfbench", format!("{} ({})", env.tfbench_version, env.git_revision));
    row("rustc", env.rustc_version.clone());
    row("build profile", env.build_profile.clone());
    row(
        "cargo features",
        if env.cargo_features.is_empty() { "none".into() } else { env.cargo_features.join(", ") },
    );
    row("cpu", env.cpu_model.clone());
    row("vendor", env.cpu_vendor.clone());
    row(
        "cores / threads",
        format!(
            "{} physical / {} logical ({} usable)",
            env.physical_cores.map_or_else(unknown, |c| c.to_string()),
            env.logical_threads,
            env.available_parallelism
        ),
    );
    row("isa", if env.isa_flags.is_empty() { "none detected".into() } else { env.isa_flags.join(" ") });
    // The live cap with what it leaves usable when it is this process's;
    // the recorded level alone for an environment read back from results.
    let cap =
        if env.max_isa == crate::isa::cap().name() { crate::isa::describe() } else { env.max_isa.clone() };
    row("max isa", cap);
    row(
        "l1d / l1i cache",
        format!("{} / {}", fmt_opt_bytes(env.l1d_cache_bytes), fmt_opt_bytes(env.l1i_cache_bytes)),
    );
    row("l2 cache", fmt_opt_bytes(env.l2_cache_bytes));
    row("l3 cache", fmt_opt_bytes(env.l3_cache_bytes));
    row(
        "memory",
        format!(
            "{} total, {} available",
            fmt_opt_bytes(env.total_memory_bytes),
            fmt_opt_bytes(env.available_memory_bytes)
        ),
    );
    row("os", env.os_name.clone());
    row("kernel", env.kernel_release.clone());
    row("arch", env.arch.clone());
    row("governor", or_unknown(env.cpu_governor.clone()));
    row("turbo", or_unknown(env.turbo_enabled.map(|t| if t { "on" } else { "off" }.to_string())));
    row("hypervisor", if env.hypervisor { "yes" } else { "no" }.into());
    let requested = if env.huge_pages_requested { "requested" } else { "off (TFBENCH_HUGE_PAGES=0)" };
    row("huge pages", format!("{}, {requested}", or_unknown(env.transparent_huge_pages.clone())));
    let allocator = if env.allocator.is_empty() { "unknown" } else { env.allocator.as_str() };
    row("allocator", format!("{allocator} (TFBENCH_ALLOCATOR={})", crate::alloc::Backend::NAMES.join("|")));
    let fingerprint = env.fingerprint();
    row("fingerprint", fingerprint.clone());

    match limits {
        Some(l) => {
            let stale = if l.fingerprint == fingerprint { "" } else { " (other machine fingerprint!)" };
            row("probe measured at", format!("{}{stale}", l.measured_at));
            row("probe load", l.load_summary());
            row("peak f32 FMA, 1 core", fmt_flops(l.peak_flops_one_core));
            row(&format!("peak f32 FMA, {} threads", l.threads), fmt_flops(l.peak_flops_all_cores));
            row("copy bandwidth, 1 thread", fmt_bandwidth(l.copy_bandwidth_one_thread));
            row(
                &format!("copy bandwidth, {} threads", l.threads),
                fmt_bandwidth(l.copy_bandwidth_all_threads),
            );
            row("triad bandwidth, 1 thread", fmt_bandwidth(l.triad_bandwidth_one_thread));
            row(
                &format!("triad bandwidth, {} threads", l.threads),
                fmt_bandwidth(l.triad_bandwidth_all_threads),
            );
            // The cache-aware roofline's roofs (docs/roofline.md).
            for lv in &l.levels {
                row(
                    &format!("{} read / copy / triad, 1 / {} threads", lv.level, l.threads),
                    format!(
                        "{} / {} / {}; {} / {} / {}",
                        fmt_bandwidth(lv.read_one_thread),
                        fmt_bandwidth(lv.copy_one_thread),
                        fmt_bandwidth(lv.triad_one_thread),
                        fmt_bandwidth(lv.read_all_threads),
                        fmt_bandwidth(lv.copy_all_threads),
                        fmt_bandwidth(lv.triad_all_threads),
                    ),
                );
            }
        }
        None => row("machine limits", "not measured (run `tfbench sysinfo --probe`)".into()),
    }

    let mut table = comfy_table::Table::new();
    table.load_style(comfy_table::presets::UTF8_FULL_CONDENSED);
    table.set_header(vec!["property", "value"]);
    table.set_content_arrangement(comfy_table::ContentArrangement::Dynamic);
    for (k, v) in rows {
        table.add_row(vec![k, v]);
    }
    table.to_string()
}

/// Binary units: the sizes of caches and memory are powers of two.
fn fmt_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 || value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

fn fmt_opt_bytes(bytes: Option<u64>) -> String {
    bytes.map_or_else(unknown, fmt_bytes)
}

fn fmt_flops(flops: f64) -> String {
    format!("{:.1} GFLOP/s", flops / 1e9)
}

/// Decimal GB/s, the convention of STREAM and of vendors' bandwidth figures.
fn fmt_bandwidth(bytes_per_sec: f64) -> String {
    format!("{:.1} GB/s", bytes_per_sec / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_units() {
        assert_eq!(fmt_bytes(48 << 10), "48 KiB");
        assert_eq!(fmt_bytes(107_520 << 10), "105 MiB");
        assert_eq!(fmt_bytes(24_684_084 * 1024), "23.5 GiB");
        assert_eq!(fmt_bytes(100), "100 B");
        assert_eq!(fmt_flops(350e9), "350.0 GFLOP/s");
        assert_eq!(fmt_bandwidth(14.2e9), "14.2 GB/s");
    }

    #[test]
    fn table_lists_environment_and_limits() {
        let env = Environment::gather();
        let without = render_table(&env, None);
        assert!(without.contains("property") && without.contains("value"));
        assert!(without.contains(&env.fingerprint()));
        assert!(without.contains("not measured"));
        assert!(without.contains("max isa"), "{without}");
        assert_eq!(env.max_isa, crate::isa::cap().name());
        let limits = MachineLimits {
            fingerprint: env.fingerprint(),
            measured_at: "2024-01-01T00:00:00Z".into(),
            threads: 2,
            peak_flops_one_core: 175e9,
            peak_flops_all_cores: 350e9,
            copy_bandwidth_one_thread: 12e9,
            copy_bandwidth_all_threads: 24e9,
            triad_bandwidth_one_thread: 14e9,
            triad_bandwidth_all_threads: 30e9,
            load: None,
            levels: Vec::new(),
            cores: None,
        };
        let with = render_table(&env, Some(&limits));
        assert!(with.contains("350.0 GFLOP/s") && with.contains("30.0 GB/s"));
        assert!(!with.contains("other machine"));
        // When, and under what load: unknown for a probe that did not record it.
        assert!(with.contains("2024-01-01T00:00:00Z") && with.contains("probe load"), "{with}");
        assert!(with.contains("unknown (not recorded"), "{with}");
        let disturbed = MachineLimits {
            load: Some(crate::probe::ProbeLoad {
                wall_ns: 5e9,
                others_ns: 3e9,
                steal_ns: 0.0,
                cpus: 2,
                threads: 2,
                disturbed: Some(0.6),
                attempt: 3,
                injected: None,
            }),
            ..limits
        };
        let shown = render_table(&env, Some(&disturbed));
        assert!(shown.contains("DISTURBED: other work took 60% of a core"), "{shown}");
        assert!(shown.contains("not cached"), "{shown}");
    }
}
