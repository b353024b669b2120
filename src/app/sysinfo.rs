//! `tfbench sysinfo`, and taking the CPU probe with the load it ran under
//! (here, in the app layer, because the probe sits below the harness that
//! reads the load and the comparison rule that judges it).

use crate::cli::{ListFormat, SysinfoArgs};
use crate::config;
use crate::env::Environment;
use crate::harness::load;
use crate::probe::{self, LoadState, MachineLimits, ProbeLoad};
use crate::results::LoadSample;
use anyhow::{Result, bail};
use std::time::Instant;

#[path = "sysinfo_kernels.rs"]
mod kernels;

/// The test hook for the probe's load: `TFBENCH_INJECT_PROBE_LOAD=SHARE[,SHARE...]`.
///
/// Each `SHARE` is the share of one core other work is taken to have used
/// during one try of the probe (`0.6`), or `unknown` for no reading (as on
/// a platform without `/proc`); try `k` reads the `k`-th, the last one
/// repeating. It replaces only the kernel's reading: the probe still runs,
/// the share is recorded as stolen time over the try's real wall time and
/// judged by the same rule as a real reading, and the probe records that
/// it was injected (`machine_limits.load.injected`). It exists so tests can
/// drive the caching decision deterministically on a machine whose real
/// load is whatever it is; it measures nothing.
pub const PROBE_LOAD_VAR: &str = "TFBENCH_INJECT_PROBE_LOAD";

/// Where the probe's load figures come from.
#[derive(Debug, Clone, PartialEq)]
pub enum LoadSource {
    /// The kernel's counters (`harness::load`).
    Kernel,
    /// The [`PROBE_LOAD_VAR`] test hook: its text, and a share per try.
    Injected {
        /// The variable's value as given.
        spec: String,
        /// Share of a core per try; `None` for no reading.
        shares: Vec<Option<f64>>,
    },
}

impl LoadSource {
    /// The source this process uses: the hook when [`PROBE_LOAD_VAR`] is
    /// set and not empty, else the kernel; an error for a bad value.
    pub fn from_env() -> Result<Self> {
        match std::env::var(PROBE_LOAD_VAR) {
            Ok(v) if !v.trim().is_empty() => Self::parse(v.trim()),
            _ => Ok(Self::Kernel),
        }
    }

    fn parse(spec: &str) -> Result<Self> {
        let share = |w: &str| -> Result<Option<f64>> {
            if w.eq_ignore_ascii_case("unknown") {
                return Ok(None);
            }
            match w.parse::<f64>() {
                Ok(x) if x.is_finite() && (0.0..=1024.0).contains(&x) => Ok(Some(x)),
                _ => bail!(
                    "{PROBE_LOAD_VAR}={spec:?}: {w:?} is neither a share of a core in [0, 1024] (e.g. 0.6) nor `unknown`"
                ),
            }
        };
        let shares = spec.split(',').map(|w| share(w.trim())).collect::<Result<Vec<_>>>()?;
        Ok(Self::Injected { spec: spec.to_string(), shares })
    }

    /// Whether a probe taken now would know its load (so a cached probe
    /// of unknown load is worth taking again).
    pub fn readable(&self) -> bool {
        match self {
            Self::Kernel => load::snapshot().is_some(),
            Self::Injected { .. } => self.injected(1).is_some(),
        }
    }

    /// The hook's share for try `attempt` (1-based; the last repeats).
    fn injected(&self, attempt: u32) -> Option<f64> {
        let Self::Injected { shares, .. } = self else { return None };
        let k = (attempt.max(1) as usize - 1).min(shares.len().saturating_sub(1));
        shares.get(k).copied().flatten()
    }
}

/// One try of the CPU probe on `threads` threads, with the load it ran
/// under read from `source` and judged by the rule that sets disturbed
/// case-rounds aside (`compare::disturbance::taken_share`).
fn probe_try(threads: usize, attempt: u32, source: &LoadSource) -> Result<MachineLimits> {
    let before = load::snapshot();
    let started = Instant::now();
    let mut limits = probe::measure(threads)?;
    let sample = match source {
        LoadSource::Kernel => {
            before.zip(load::snapshot()).map(|(a, b)| load::between(&a, &b, "probe", attempt, threads))
        }
        LoadSource::Injected { .. } => source.injected(attempt).map(|share| {
            let wall_ns = started.elapsed().as_nanos() as f64;
            LoadSample {
                case: "probe".into(),
                round: attempt,
                wall_ns,
                others_ns: 0.0,
                steal_ns: share * wall_ns,
                cpus: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
                threads: threads as u32,
            }
        }),
    };
    let injected = match source {
        LoadSource::Injected { spec, .. } => Some(spec.clone()),
        LoadSource::Kernel => None,
    };
    limits.load = sample.map(|s| ProbeLoad {
        disturbed: crate::compare::disturbance::taken_share(&s),
        wall_ns: s.wall_ns,
        others_ns: s.others_ns,
        steal_ns: s.steal_ns,
        cpus: s.cpus,
        threads: s.threads,
        attempt,
        injected: injected.clone(),
    });
    Ok(limits)
}

/// Takes the CPU probe up to `max_tries` times until one runs undisturbed
/// ([`probe::settle`]); says on stderr (unless `quiet`) when a try was
/// disturbed and another follows. The caller caches the result only when
/// [`MachineLimits::cacheable`].
pub fn take_probe(
    threads: usize,
    max_tries: u32,
    source: &LoadSource,
    quiet: bool,
) -> Result<probe::Settled> {
    if let LoadSource::Injected { spec, .. } = source {
        eprintln!(
            "WARNING: {PROBE_LOAD_VAR}={spec} is set: the probe's load is injected (a test hook), not read from the kernel"
        );
    }
    probe::settle(
        max_tries,
        probe::RETRY_PAUSE,
        |k| probe_try(threads, k, source),
        |k, share| {
            if !quiet {
                eprintln!(
                    "the probe was disturbed (other work took {:.0}% of a core); probing again in {} s (try {} of {max_tries}) ...",
                    share * 100.0,
                    probe::RETRY_PAUSE.as_secs(),
                    k + 1
                );
            }
        },
    )
}

/// The stderr line for a probe disturbed on every try, used uncached.
pub fn not_cached_warning(settled: &probe::Settled) -> String {
    let share = match settled.limits.load_state() {
        LoadState::Disturbed(s) => s,
        _ => 0.0,
    };
    format!(
        "warning: the probe was disturbed on all {} tries (other work took {:.0}% of a core on the least disturbed): \
         its figures are used by this command only and NOT cached; % of peak, roofline classes and targets from them carry \
         a note. Probe again on a quiet machine: tfbench sysinfo --probe",
        settled.tries,
        share * 100.0
    )
}

/// `tfbench sysinfo`: the machine, and with `--probe` its measured limits.
pub fn sysinfo(args: &SysinfoArgs) -> Result<String> {
    if args.kernels {
        if args.probe {
            bail!("--kernels prints the kernel dispatch table only; run --probe separately");
        }
        return kernels::render(args.format);
    }
    let env = Environment::gather();
    let data = crate::data::lookup();
    // Devices other than the CPU are described here, not in `Environment`:
    // the environment keys the CPU probe's cache and is recorded with every
    // result, and opening the CUDA driver for a CPU run would cost it a second.
    let backends = || crate::backend::registry().iter().filter_map(|b| b.describe()).collect::<Vec<_>>();
    let source = LoadSource::from_env()?;
    let mut cached = false;
    let limits = if args.probe {
        let threads = args.threads.unwrap_or_else(config::default_threads);
        if threads == 0 {
            bail!("--threads must be at least 1");
        }
        eprintln!("probing peak FMA throughput and memory bandwidth on {threads} thread(s) ...");
        let settled = take_probe(threads, probe::MAX_TRIES, &source, false)?;
        if settled.limits.cacheable() {
            eprintln!("cached in {}", probe::save(&settled.limits)?.display());
            cached = true;
        } else {
            eprintln!("{}", not_cached_warning(&settled));
        }
        let l = settled.limits;
        if let Some(w) = probe::busy_warning(&l) {
            eprintln!("{w}");
        }
        for b in crate::backend::registry() {
            b.probe()?;
        }
        Some(l)
    } else {
        let l = probe::load(&env.fingerprint(), args.threads.unwrap_or_else(config::default_threads))?;
        cached = l.is_some();
        if let Some(c) = l.as_ref().filter(|c| probe::needs_reprobe(c, source.readable())) {
            eprintln!(
                "note: the cached probe ({}) does not record {} (cached by an older tfbench); \
                 the next `tfbench run` probes again once, or run `tfbench sysinfo --probe`",
                c.measured_at,
                if c.levels.is_empty() {
                    "the bandwidth of each cache level"
                } else {
                    "the load it ran under"
                }
            );
        }
        l
    };
    let load_state = limits.as_ref().map(|l| match l.load_state() {
        LoadState::Unknown => "unknown",
        LoadState::Clean => "clean",
        LoadState::Disturbed(_) => "disturbed",
    });
    let described = backends();
    match args.format {
        ListFormat::Json => {
            let mut json = serde_json::json!({
            "environment": env,
            "fingerprint": env.fingerprint(),
            "machine_limits": limits,
            "machine_limits_cached": cached,
            "probe_load": load_state,
            "isa_usable": crate::isa::usable(),
            "data_dirs": data_dirs_json(&data),
            "hardware_counters": counters_line(),
            });
            // Each backend's keys (CUDA: `cuda`, `cuda_limits`) at the top level.
            for (_, value) in &described {
                if let (Some(all), Some(mine)) = (json.as_object_mut(), value.as_object()) {
                    all.extend(mine.clone());
                }
            }
            Ok(serde_json::to_string_pretty(&json)? + "\n")
        }
        ListFormat::Table => Ok(super::sysinfo_table::render_table(&env, limits.as_ref())
            + "\n"
            + &described.iter().flat_map(|(lines, _)| lines).map(|l| format!("{l}\n")).collect::<String>()
            + &format!("hardware counters: {}\n", counters_line())
            + "\n"
            + "data folders (--data-dir, else TFBENCH_DATA_DIR, else these; first match wins per file):\n"
            + &data.describe().iter().map(|l| format!("  {l}\n")).collect::<String>()),
    }
}

/// Whether `run` can read hardware counters here (`inside::counters`),
/// or why not: one line.
fn counters_line() -> String {
    match crate::inside::counters::availability() {
        Ok(()) => "available (perf_event_open; counted in an untimed call after each case's samples)".into(),
        Err(why) => format!("unavailable: {why}"),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_hook_parses_a_share_per_try_and_refuses_nonsense() {
        let s = LoadSource::parse("0.6, 0.25,unknown").expect("parses");
        assert_eq!(
            s,
            LoadSource::Injected {
                spec: "0.6, 0.25,unknown".into(),
                shares: vec![Some(0.6), Some(0.25), None]
            }
        );
        assert_eq!((s.injected(1), s.injected(2), s.injected(3)), (Some(0.6), Some(0.25), None));
        assert_eq!(s.injected(9), None, "the last entry repeats");
        assert!(s.readable(), "the first try has a reading");
        let one = LoadSource::parse("0").expect("parses");
        assert_eq!((one.injected(1), one.injected(5)), (Some(0.0), Some(0.0)));
        assert!(!LoadSource::parse("UNKNOWN").expect("parses").readable());
        for bad in ["lots", "-0.1", "NaN", "inf", "0.5,", "2000"] {
            let e = LoadSource::parse(bad).expect_err(bad).to_string();
            assert!(e.contains(PROBE_LOAD_VAR), "{e}");
        }
    }
}
