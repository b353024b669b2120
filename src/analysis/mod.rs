//! Raw samples -> estimates, intervals, outliers, rates, roofline class and
//! notes. Pure: no clocks, no I/O.

use crate::config::{OutlierPolicy, Settings};
use crate::harness::sampler::Measurement;
use crate::plan::ParamValue;
use crate::probe::MachineLimits;
use crate::results::{
    AllocStats, Bound, CaseResult, CaseStatus, Estimate, Estimates, OutlierCounts, SamplingInfo, StopReason,
    TargetCheck, ThroughputEstimate,
};
use crate::stats::{self, OutlierClass};
use crate::suites::{Limit, TargetMatch, TargetSpec};
use crate::workload::{Roof, Throughput, ThroughputKind};

/// IQR/median above this marks a case as noisy.
pub const NOISY_IQR_RATIO: f64 = 0.10;
/// A case achieving under this fraction of its roofline bound is latency-bound.
pub const LATENCY_BOUND_FRACTION: f64 = 0.10;

pub use crate::harness::runner::CaseOutcome;

pub mod roofline;
pub mod scaling;

/// Turns one case's raw outcome into its result.
pub fn analyze(o: &CaseOutcome, s: &Settings, limits: Option<&MachineLimits>) -> CaseResult {
    // The probed limits are the CPU's: a CPU case gets its cache-aware roof
    // (the level holding its working set, or FMA); a case on another device
    // (a GPU) is measured against that device's own roof, which its
    // workload reports from the device's probe (none: no "% of peak", no
    // roofline class).
    let mut case_roof = match (o.case.device, limits) {
        (crate::backend::Device::Cpu, Some(l)) => {
            let threads = match o.case.params.get("threads") {
                Some(ParamValue::Int(n)) if *n >= 1 => *n as usize,
                _ => l.threads,
            };
            let work = if roofline::bytes_are_traffic(&o.case.suite, &o.case.benchmark) {
                roofline::Work::of(&o.throughput, &o.metrics)
            } else {
                roofline::Work::default()
            };
            roofline::cpu_roof(l, threads, &work)
        }
        _ => None,
    };
    let roof = match &case_roof {
        Some(r) => Some(Roof { flops_per_sec: r.peak_flops, bytes_per_sec: r.bandwidth }),
        None if o.case.device != crate::backend::Device::Cpu => o.roof,
        None => None,
    };
    let samples: Vec<_> = o.measurements.iter().flat_map(|m| m.samples.iter().copied()).collect();
    let mut r = CaseResult {
        id: o.case.id.clone(),
        suite: o.case.suite.clone(),
        benchmark: o.case.benchmark.clone(),
        params: o.case.params.clone(),
        status: match (&o.failure, &o.skipped) {
            (Some((phase, reason)), _) => CaseStatus::Failed { phase: phase.clone(), reason: reason.clone() },
            (None, Some(reason)) => CaseStatus::Skipped { reason: reason.clone() },
            (None, None) => CaseStatus::Ok,
        },
        verification: o.verification.clone(),
        sampling: sampling_info(&o.measurements),
        samples,
        estimates: None,
        outliers: None,
        throughput: Vec::new(),
        alloc: merge_alloc(&o.measurements),
        bound: None,
        notes: Vec::new(),
        metrics: o.metrics.clone(),
        roof: None,
        scaling: None,
        inside: inside_of(o),
    };
    if let Some(i) = &r.inside {
        if i.profile.is_some() {
            r.notes.push("profiled while measured: the sampler's overhead is in these timings".into());
        }
        if let Some(c) = &i.counters {
            r.notes.push(c.brief());
        }
    }
    if r.status != CaseStatus::Ok || r.samples.is_empty() {
        return r;
    }
    let per_iter: Vec<f64> = r.samples.iter().map(|x| x.per_iter()).collect();
    let (_, classes) = stats::tukey(&per_iter);
    let mut counts = OutlierCounts::default();
    for c in &classes {
        match c {
            OutlierClass::LowSevere => counts.low_severe += 1,
            OutlierClass::LowMild => counts.low_mild += 1,
            OutlierClass::HighMild => counts.high_mild += 1,
            OutlierClass::HighSevere => counts.high_severe += 1,
            OutlierClass::Normal => {}
        }
    }
    let mut analysed = per_iter.clone();
    if s.outliers == OutlierPolicy::Remove && counts.total() > 0 && counts.total() < per_iter.len() {
        analysed = per_iter
            .iter()
            .zip(&classes)
            .filter(|(_, c)| **c == OutlierClass::Normal)
            .map(|(x, _)| *x)
            .collect();
        counts.removed = per_iter.len() - analysed.len();
        r.notes.push(format!(
            "{} outlier sample(s) removed before analysis (--outliers remove)",
            counts.removed
        ));
    }
    let Some(est) = estimates(&analysed, s, &o.case.id) else { return r };
    if est.iqr_over_median > NOISY_IQR_RATIO {
        r.notes.push(format!("noisy: IQR is {:.0}% of the median", est.iqr_over_median * 100.0));
    }
    if let Some(info) = &r.sampling {
        match info.stopped_by {
            StopReason::MaxTime => r.notes.push(format!(
                "max-time cut sampling: {} of {} samples",
                info.samples, info.requested_samples
            )),
            StopReason::MeasurementTime if info.samples < info.requested_samples => r.notes.push(format!(
                "measurement time allowed {} of {} samples",
                info.samples, info.requested_samples
            )),
            _ => {}
        }
    }
    let suspect = r.sampling.as_ref().and_then(|i| i.timing_suspect.as_deref());
    r.notes.extend(screen_notes(&o.measurements, suspect));
    r.throughput = o
        .throughput
        .iter()
        .map(|t| {
            let peak = match &case_roof {
                Some(cr) => roofline::attainable(cr, t.kind),
                None => roof.and_then(|r| peak_for(t.kind, r)),
            };
            rate(t, &est.median, peak)
        })
        .collect();
    if let Some(cr) = case_roof.as_mut() {
        r.notes.extend(roofline::judge(cr, r.throughput.iter().filter_map(|t| t.pct_of_peak)));
    }
    r.roof = case_roof;
    r.bound = roof.and_then(|roof| classify_roof(&o.throughput, est.median.point, roof));
    // A CPU case's % of peak and class from a probe taken while other work
    // ran (used for this run only, never cached) must not read as clean.
    let from_probe = r.bound.is_some() || r.throughput.iter().any(|t| t.pct_of_peak.is_some());
    if o.case.device == crate::backend::Device::Cpu && from_probe {
        r.notes.extend(limits.and_then(MachineLimits::disturbed_note));
    }
    r.outliers = Some(counts);
    r.estimates = Some(est);
    r
}

fn sampling_info(ms: &[Measurement]) -> Option<SamplingInfo> {
    let last = ms.last()?;
    Some(SamplingInfo {
        warm_up_ns: ms.iter().map(|m| m.warm_up_ns).sum(),
        iterations_per_sample: last.iterations_per_sample,
        samples: ms.iter().map(|m| m.samples.len()).sum(),
        requested_samples: ms.iter().map(|m| m.requested).sum(),
        stopped_by: last.stopped_by,
        prepare_ns: ms.iter().map(|m| m.prepare_ns).sum(),
        verify_ns: ms.iter().map(|m| m.verify_ns).sum(),
        placements: ms.iter().map(|m| m.placements).max().filter(|&k| k > 1),
        timing_suspect: suspect_of(ms),
    })
}

/// Why some round's samples are suspect (see `harness::screen`), naming the
/// round when the case ran several.
fn suspect_of(ms: &[Measurement]) -> Option<String> {
    let rounds = ms.iter().filter_map(|m| Some((m.samples.first()?.round, m.screen.suspect.as_ref()?)));
    let all: Vec<String> =
        rounds.map(|(r, why)| if ms.len() > 1 { format!("round {r}: {why}") } else { why.clone() }).collect();
    (!all.is_empty()).then(|| all.join("; "))
}

/// Notes on screening: rounds measured again, and a suspect case.
fn screen_notes(ms: &[Measurement], suspect: Option<&str>) -> Vec<String> {
    let mut notes: Vec<String> = ms
        .iter()
        .filter_map(|m| m.screen.remeasured.as_ref())
        .map(|why| format!("measured again: {why}"))
        .collect();
    if let Some(why) = suspect {
        notes.push(format!("timing suspect, not compared: {why}"));
    }
    notes
}

/// The look inside the case its measurements took (the profile of its
/// first round, the counters of its last), `None` when nothing was taken.
fn inside_of(o: &CaseOutcome) -> Option<crate::inside::Inside> {
    let profile = o.measurements.iter().find_map(|m| m.inside.profile.clone());
    let counters = o.measurements.iter().rev().find_map(|m| m.inside.counters.clone());
    let inside = crate::inside::Inside { profile, counters, ..Default::default() };
    (!inside.is_empty()).then_some(inside)
}

fn merge_alloc(ms: &[Measurement]) -> Option<AllocStats> {
    let mut iters = 0.0;
    let mut out = AllocStats::default();
    for m in ms {
        let a = m.alloc.as_ref()?;
        let n: f64 = m.samples.iter().map(|x| x.iterations as f64).sum();
        out.allocs_per_iter += a.allocs_per_iter * n;
        out.bytes_per_iter += a.bytes_per_iter * n;
        out.peak_bytes = out.peak_bytes.max(a.peak_bytes);
        iters += n;
    }
    if iters == 0.0 {
        return None;
    }
    out.allocs_per_iter /= iters;
    out.bytes_per_iter /= iters;
    Some(out)
}

/// Estimates of per-iteration times (ns); `None` for no data.
pub fn estimates(x: &[f64], s: &Settings, id: &str) -> Option<Estimates> {
    let sum = stats::Summary::new(x)?;
    let mut sorted = x.to_vec();
    sorted.sort_by(f64::total_cmp);
    let level = s.confidence_level;
    let (mlo, mhi) = stats::median_ci(&sorted, level);
    // Seeded per case so the same samples always give the same interval.
    let (blo, bhi) = stats::bootstrap_mean_ci(x, level, s.bootstrap_resamples, s.seed ^ fnv1a(id));
    Some(Estimates {
        median: Estimate { point: sum.median, lower: mlo, upper: mhi, level },
        mean: Estimate { point: sum.mean, lower: blo, upper: bhi, level },
        std_dev: sum.std_dev,
        mad: sum.mad,
        min: sum.min,
        max: sum.max,
        p50: sum.median,
        p90: sum.p90,
        p99: sum.p99,
        iqr_over_median: if sum.median > 0.0 { (sum.q3 - sum.q1) / sum.median } else { 0.0 },
    })
}

fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3))
}

/// The CPU's DRAM roof from its probe: all cores, or one core for
/// `threads=1` cases (triad bandwidth: the probe's streaming figure).
fn cpu_roof(l: &MachineLimits, one_core: bool) -> Roof {
    if one_core {
        Roof { flops_per_sec: l.peak_flops_one_core, bytes_per_sec: l.triad_bandwidth_one_thread }
    } else {
        Roof { flops_per_sec: l.peak_flops_all_cores, bytes_per_sec: l.triad_bandwidth_all_threads }
    }
}

fn peak_for(kind: ThroughputKind, roof: Roof) -> Option<f64> {
    match kind {
        ThroughputKind::Flops => Some(roof.flops_per_sec),
        ThroughputKind::Bytes => Some(roof.bytes_per_sec),
        _ => None,
    }
    .filter(|&p| p > 0.0)
}

/// A throughput's rate at the median time, and its percentage of `peak`
/// (the rate its roof allows), when known.
fn rate(t: &Throughput, median: &Estimate, peak: Option<f64>) -> ThroughputEstimate {
    let per_sec = |ns: f64| if ns > 0.0 { t.per_iteration * 1e9 / ns } else { f64::INFINITY };
    let point = per_sec(median.point);
    ThroughputEstimate {
        kind: t.kind,
        per_iteration: t.per_iteration,
        // A longer time is a lower rate: the bounds swap.
        rate: Estimate {
            point,
            lower: per_sec(median.upper),
            upper: per_sec(median.lower),
            level: median.level,
        },
        pct_of_peak: peak.map(|p| point / p * 100.0),
    }
}

/// Roofline against the CPU's probed limits ([`classify_roof`]).
pub fn classify(decl: &[Throughput], median_ns: f64, l: &MachineLimits, one_core: bool) -> Option<Bound> {
    classify_roof(decl, median_ns, cpu_roof(l, one_core))
}

/// Roofline: compute- or memory-bound by arithmetic intensity against the
/// device's balance (peak FLOP/s over bandwidth); latency-bound when the
/// case reaches under 10% of the roof that should limit it (overheads, not
/// the device, set its time).
pub fn classify_roof(decl: &[Throughput], median_ns: f64, roof: Roof) -> Option<Bound> {
    let get = |k| decl.iter().find(|t| t.kind == k).map(|t| t.per_iteration).filter(|&v| v > 0.0);
    let flops = get(ThroughputKind::Flops);
    let bytes = get(ThroughputKind::Bytes);
    let peak = peak_for(ThroughputKind::Flops, roof)?;
    let bw = peak_for(ThroughputKind::Bytes, roof)?;
    let secs = median_ns / 1e9;
    let (bound, attainable_secs) = match (flops, bytes) {
        (Some(f), Some(b)) => {
            if f / b > peak / bw {
                (Bound::Compute, f / peak)
            } else {
                (Bound::Memory, b / bw)
            }
        }
        (Some(f), None) => (Bound::Compute, f / peak),
        (None, Some(b)) => (Bound::Memory, b / bw),
        (None, None) => return None,
    };
    Some(if attainable_secs < LATENCY_BOUND_FRACTION * secs { Bound::Latency } else { bound })
}

/// Evaluates the suites' performance targets against this run's results.
pub fn evaluate_targets(
    specs: &[TargetSpec],
    cases: &[CaseResult],
    limits: Option<&MachineLimits>,
) -> Vec<TargetCheck> {
    let Some(l) = limits else { return Vec::new() };
    let mut out = Vec::new();
    for spec in specs {
        let Ok(re) = regex::Regex::new(spec.case_pattern) else { continue };
        let matched: Vec<&CaseResult> = cases.iter().filter(|c| re.is_match(&c.id)).collect();
        // A case's rate of the spec's kind; a failed case has none, and under
        // `Every` counts as 0 so the target is not met.
        let rate = |c: &CaseResult| {
            if c.status.is_failed() {
                return None;
            }
            c.throughput.iter().find(|t| t.kind == spec.kind).map(|t| t.rate.point)
        };
        let pick = match spec.matching {
            TargetMatch::Fastest => {
                matched.iter().filter_map(|c| rate(c).map(|r| (*c, r))).max_by(|a, b| a.1.total_cmp(&b.1))
            }
            TargetMatch::Every => matched
                .iter()
                .filter(|c| c.status.is_failed() || rate(c).is_some())
                .map(|c| (*c, rate(c).unwrap_or(0.0)))
                .min_by(|a, b| a.1.total_cmp(&b.1)),
        };
        let Some((case, measured)) = pick else { continue };
        let name = match spec.matching {
            TargetMatch::Fastest => spec.name.to_string(),
            TargetMatch::Every => format!("{}; slowest of {} cases", spec.name, matched.len()),
        };
        let limit = match spec.limit {
            Limit::PeakFlopsAllCores => l.peak_flops_all_cores,
            Limit::PeakFlopsOneCore => l.peak_flops_one_core,
            Limit::TriadAllThreads => l.triad_bandwidth_all_threads,
            Limit::TriadOneThread => l.triad_bandwidth_one_thread,
        };
        let ratio = measured / limit;
        // No code outruns the FMA peak: a case that seems to exposes a
        // probe taken while the machine was busy. Bandwidth gets no such
        // bound: a kernel may stream better than the triad probe does.
        let peak_flops = matches!(spec.limit, Limit::PeakFlopsAllCores | Limit::PeakFlopsOneCore);
        let caveat = (peak_flops && ratio > 1.0).then(|| {
            format!(
                "no verdict: {} ran at {:.0}% of the probed FMA peak, which no code can do, so the probe ran while the \
                 machine was busy; re-probe on a quiet machine (tfbench sysinfo --probe)",
                case.id,
                ratio * 100.0
            )
        });
        // A disturbed probe's limits read low, so its ratios read high: a
        // "met" cannot be trusted, while "not met" stands (the true limit is
        // higher still, and the true ratio lower).
        let caveat = caveat.or_else(|| {
            let crate::probe::LoadState::Disturbed(share) = l.load_state() else { return None };
            (ratio >= spec.required).then(|| {
                format!(
                    "no verdict: the probe ran while other work took {:.0}% of a core, so its limit reads low and \
                     the ratio high; re-probe on a quiet machine (tfbench sysinfo --probe)",
                    share * 100.0
                )
            })
        });
        out.push(TargetCheck {
            name,
            case_id: case.id.clone(),
            measured,
            limit,
            unit: spec.kind.rate_unit().to_string(),
            ratio,
            required: spec.required,
            met: ratio >= spec.required && caveat.is_none(),
            caveat,
        });
    }
    out
}

#[cfg(test)]
mod tests;
