//! Work under a device profile: `capped` (tfbench's matrix-vector product,
//! an on-device decoder's step, with the profile's threads, ISA cap and
//! memory budget), `sustained` (the same for a set duration, throughput per
//! window) and `thermal_simulated` (the same under the profile's simulated
//! RC model and governor). A GEMV and not a GEMM: tfbench's GEMM is the
//! `gemm` crate's, which dispatches on the CPU itself and ignores the ISA
//! cap, so it could not be held to a phone's 128-bit vectors.

use super::profile::{self, Profile};
use super::thermal;
use crate::backend::cpu::{Context, Threads};
use crate::isa;
use crate::kernels::{self, Layout};
use crate::plan::{Case, ParamValue};
use crate::suites::{Metric, Throughput, Verification, Workload, skip};
use anyhow::{Result, bail};
use std::time::{Duration, Instant};

/// The threads a profile case asks for: its `threads` (a count, or `all`
/// of the cores `powersave` selects), refused beyond those cores.
pub fn requested_threads(case: &Case, p: &Profile) -> Result<usize> {
    let cores = p.cores(case.usize("powersave")?)?;
    match case.params.get("threads") {
        None => Ok(cores),
        Some(ParamValue::Str(s)) if s == "all" => Ok(cores),
        Some(ParamValue::Int(n)) if *n >= 1 && *n as usize <= cores => Ok(*n as usize),
        Some(other) => bail!(
            "case {}: threads = {other}: {}'s selected cores number {cores} (powersave {})",
            case.id,
            p.name,
            case.usize("powersave")?
        ),
    }
}

/// The pool a profile case runs in: exactly its threads where this machine
/// has them (else one; `prepare` then refuses the case with the figures).
pub fn threads_of(case: &Case) -> Result<Threads> {
    let p = Profile::find(&case.str("profile")?)?;
    let n = requested_threads(case, &p)?;
    Ok(Threads::Exactly(if n <= profile::machine().0 { n } else { 1 }))
}

/// tfbench's GEMV (`1 x K` times a `N x K` weight, as a linear layer
/// stores it) as the profile allows it.
pub struct ProfiledGemm {
    profile: Profile,
    ctx: Context,
    threads: usize,
    dims: (usize, usize, usize),
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
}

impl ProfiledGemm {
    /// Checks the profile against this machine and its budget against the
    /// buffers, then allocates them.
    pub fn new(case: &Case, ctx: &Context) -> Result<Self> {
        let profile = Profile::find(&case.str("profile")?)?;
        let threads = requested_threads(case, &profile)?;
        let d = case.shape("shape")?;
        let [m, k, n] = d[..] else { bail!("case {}: shape must be 1xKxN", case.id) };
        if m != 1 {
            bail!(
                "case {}: shape must be 1xKxN: a profile runs tfbench's GEMV, which honours the ISA cap (its GEMM, the gemm crate, does not)",
                case.id
            );
        }
        // The shape is checked first: a bad one is the case's error, not a skip.
        let (have_threads, have_bytes) = profile::machine();
        profile::check_machine(&profile, threads, have_threads, have_bytes).map_err(skip)?;
        let need = 4 * (m as u64 * k as u64 + k as u64 * n as u64 + m as u64 * n as u64);
        profile.check_budget(&format!("a {m}x{k}x{n} GEMV"), need).map_err(skip)?;
        if ctx.threads() != threads {
            bail!(
                "case {}: the execution context has {} threads, the profile asks {threads}",
                case.id,
                ctx.threads()
            );
        }
        let a = crate::util::uniform(m * k, -1.0, 1.0, 11);
        let b = crate::util::uniform(k * n, -1.0, 1.0, 12);
        Ok(Self { profile, ctx: ctx.clone(), threads, dims: (m, k, n), a, b, c: vec![0.0; m * n] })
    }

    /// One product, with the profile's threads and ISA cap.
    pub fn once(&mut self) {
        let _cap = isa::override_cap(self.profile.isa_cap());
        let (t, d) = (self.threads, self.dims);
        let (a, b, c) = (&self.a, &self.b, &mut self.c);
        self.ctx.install(|| kernels::matmul(t, d, a, b, Layout::NxK, c));
    }

    /// FLOPs of one product.
    pub fn flops(&self) -> f64 {
        let (m, k, n) = self.dims;
        2.0 * (m * k * n) as f64
    }

    /// Checks one product against the naive triple loop.
    pub fn verify(&mut self) -> Verification {
        self.once();
        let want = kernels::naive_matmul(self.dims, &self.a, &self.b, Layout::NxK);
        let k = self.dims.1 as f64;
        let mut v = Verification::compare(self.profile.note(self.threads), &self.c, &want, 1e-5 * k, 1e-4);
        v.detail = format!("naive triple loop: {}", v.detail);
        v
    }

    /// Work per second over `slice` of real time (whole products).
    pub fn rate_over(&mut self, slice: Duration) -> f64 {
        let t = Instant::now();
        let mut done = 0u64;
        while done == 0 || t.elapsed() < slice {
            self.once();
            done += 1;
        }
        done as f64 * self.flops() / t.elapsed().as_secs_f64()
    }

    fn figures(&self) -> Vec<Metric> {
        let (m, k, n) = self.dims;
        vec![
            Metric::new("profile_threads", self.threads as f64, ""),
            Metric::new("profile_isa_cap_level", self.profile.isa_cap() as u8 as f64, ""),
            Metric::new("profile_simd_bits", self.profile.simd.widest_bits as f64, "bits"),
            Metric::new("profile_budget_bytes", self.profile.memory.budget_bytes as f64, "B"),
            Metric::new("buffer_bytes", 4.0 * (m * k + k * n + m * n) as f64, "B"),
        ]
    }
}

/// What a profile benchmark does beside the GEMV itself.
#[derive(Clone, Copy, PartialEq)]
enum Study {
    None,
    Sustained { seconds: f64, window: f64, cooldown: f64 },
    Thermal { seconds: f64, windows: usize, slice: f64 },
}

/// A profile case.
pub struct Profiled {
    g: ProfiledGemm,
    study: Study,
}

/// Prepares `capped`, `sustained` or `thermal_simulated`.
pub fn prepare(case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    let secs = |key: &str| -> Result<f64> {
        match case.params.get(key) {
            Some(ParamValue::Int(v)) if *v >= 0 => Ok(*v as f64),
            Some(ParamValue::Float(v)) if *v >= 0.0 && v.is_finite() => Ok(*v),
            other => {
                bail!("case {}: `{key}` must be a non-negative number of seconds, got {other:?}", case.id)
            }
        }
    };
    let study = match case.benchmark.as_str() {
        "capped" => Study::None,
        "sustained" => {
            let (seconds, window) = (secs("seconds")?, secs("window")?);
            if window <= 0.0 || seconds < window {
                bail!("case {}: needs 0 < window <= seconds", case.id);
            }
            Study::Sustained { seconds, window, cooldown: secs("cooldown")? }
        }
        _ => {
            let windows = case.usize("windows")?;
            if windows == 0 {
                bail!("case {}: windows must be positive", case.id);
            }
            Study::Thermal { seconds: secs("seconds")?, windows, slice: secs("slice")? }
        }
    };
    Ok(Box::new(Profiled { g: ProfiledGemm::new(case, ctx)?, study }))
}

/// Throughput per window of `window` seconds over `seconds`, and the
/// verdicts: sustained/peak (mean over peak) and 3DMark's stability rule,
/// worst window >= 97% of the best.
pub fn sustained_metrics(rates: &[f64]) -> Vec<Metric> {
    let best = rates.iter().cloned().fold(0.0, f64::max);
    let worst = rates.iter().cloned().fold(f64::INFINITY, f64::min);
    let mean = rates.iter().sum::<f64>() / rates.len().max(1) as f64;
    let mut m: Vec<Metric> = rates
        .iter()
        .enumerate()
        .map(|(i, r)| Metric::new(format!("window_{i}_flops_per_s"), *r, "FLOP/s"))
        .collect();
    m.push(Metric::new("peak_flops_per_s", best, "FLOP/s"));
    m.push(Metric::new("sustained_peak_ratio", mean / best, "ratio"));
    m.push(Metric::new("worst_best_ratio", worst / best, "ratio"));
    m.push(Metric::new("stable", f64::from(worst >= 0.97 * best), ""));
    m
}

impl Profiled {
    fn study(&mut self) -> Result<Vec<Metric>> {
        match self.study {
            Study::None => Ok(Vec::new()),
            Study::Sustained { seconds, window, cooldown } => {
                std::thread::sleep(Duration::from_secs_f64(cooldown));
                let n = (seconds / window).round().max(1.0) as usize;
                let rates: Vec<f64> =
                    (0..n).map(|_| self.g.rate_over(Duration::from_secs_f64(window))).collect();
                Ok(sustained_metrics(&rates))
            }
            Study::Thermal { seconds, windows, slice } => {
                let t = self.g.profile.thermal.clone();
                let g = &mut self.g;
                let w = thermal::simulate(&t, windows, seconds / windows as f64, || {
                    Ok(g.rate_over(Duration::from_secs_f64(slice)))
                })?;
                let peak = w.iter().map(|w| w.throughput).fold(0.0, f64::max);
                let throttled = w.iter().position(|w| w.duty < 1.0);
                let mut m = vec![
                    Metric::new("simulated_peak_flops_per_s", peak, "FLOP/s"),
                    Metric::new(
                        "simulated_max_temp_c",
                        w.iter().map(|w| w.temp_c).fold(f64::MIN, f64::max),
                        "C",
                    ),
                    Metric::new(
                        "simulated_throttled_fraction",
                        w.iter().filter(|w| w.duty < 1.0).count() as f64 / w.len() as f64,
                        "ratio",
                    ),
                    Metric::new(
                        "simulated_seconds_to_throttle",
                        throttled.map_or(seconds, |i| (i as f64) * seconds / windows as f64),
                        "s",
                    ),
                ];
                // Temperature and delivered throughput at each tenth of the run.
                for q in 1..=10 {
                    let i = (q * w.len() / 10).saturating_sub(1);
                    m.push(Metric::new(format!("simulated_temp_c_at_{}pct", q * 10), w[i].temp_c, "C"));
                    m.push(Metric::new(
                        format!("simulated_flops_per_s_at_{}pct", q * 10),
                        w[i].throughput,
                        "FLOP/s",
                    ));
                }
                let tail = &w[w.len() * 2 / 3..];
                let sustained = tail.iter().map(|w| w.throughput).sum::<f64>() / tail.len().max(1) as f64;
                m.push(Metric::new("simulated_sustained_peak_ratio", sustained / peak, "ratio"));
                Ok(m)
            }
        }
    }
}

impl Workload for Profiled {
    fn verify(&mut self) -> Result<Verification> {
        Ok(self.g.verify())
    }
    fn throughput(&self) -> Vec<Throughput> {
        vec![Throughput::flops(self.g.flops())]
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        (0..iters).for_each(|_| self.g.once());
        Ok(())
    }
    fn metrics(&mut self) -> Vec<Metric> {
        let mut m = self.g.figures();
        match self.study() {
            Ok(s) => m.extend(s),
            Err(e) => eprintln!("{}: study not run: {e:#}", self.g.profile.name),
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stability_verdict_follows_the_97_percent_rule() {
        let get = |m: &[Metric], k: &str| m.iter().find(|x| x.name == k).map(|x| x.value).unwrap();
        let steady = sustained_metrics(&[100.0, 99.0, 98.0]);
        assert_eq!(get(&steady, "stable"), 1.0);
        assert!((get(&steady, "sustained_peak_ratio") - 0.99).abs() < 1e-12);
        let sagging = sustained_metrics(&[100.0, 96.0]);
        assert_eq!(get(&sagging, "stable"), 0.0);
        assert_eq!(get(&sagging, "worst_best_ratio"), 0.96);
        assert!(sagging.iter().any(|m| m.name == "window_1_flops_per_s"));
    }
}
