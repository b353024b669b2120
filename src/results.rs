//! The result model: what a run produced, as written to JSON (see
//! `docs/json-schema.md`). Analysis fills it; reports, baselines and
//! comparisons read it.

use crate::plan::ParamValue;
use crate::workload::{ThroughputKind, Verification};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the JSON layout below; bump it on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// Everything one `tfbench run` produced.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunReport {
    /// Layout version, [`SCHEMA_VERSION`] when written by this build.
    pub schema_version: u32,
    /// The tfbench version that produced the report.
    pub tfbench_version: String,
    /// When the run started, RFC 3339 in UTC.
    pub started_at: String,
    /// Wall time of the whole run in seconds (planning to last report).
    pub wall_time_secs: f64,
    /// The machine and toolchain the run happened on.
    pub environment: crate::env::Environment,
    /// The harness's own measurements and the settings in force.
    pub harness: HarnessInfo,
    /// The machine's measured limits, when a probe was cached (`sysinfo --probe`).
    pub machine_limits: Option<crate::probe::MachineLimits>,
    /// One entry per case, in plan order.
    pub cases: Vec<CaseResult>,
    /// Checks of the performance targets the run can evaluate (e.g. best GEMM
    /// as a fraction of peak FMA throughput).
    pub targets: Vec<TargetCheck>,
    /// A unique id of this run (`<start time>-<pid>-<random>`), so that a
    /// comparison can tell a run compared with itself; empty in files
    /// written before it existed.
    #[serde(default)]
    pub run_id: String,
    /// Canary timings taken between the cases: how fast the machine itself
    /// was while the run went on (see `harness::canary`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub canaries: Vec<CanarySample>,
    /// Other work's CPU use during every case-round, where the platform
    /// tells (Linux); empty in older results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub load: Vec<LoadSample>,
}

/// How much CPU other work took while one case-round ran
/// (`harness::load`): what `compare::disturbance` judges by.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LoadSample {
    /// The case.
    pub case: String,
    /// The round of the run.
    pub round: u32,
    /// Wall time from before the case's canaries to after its samples, ns.
    pub wall_ns: f64,
    /// CPU time other processes used on the CPUs this run may use, ns.
    pub others_ns: f64,
    /// Time the hypervisor gave other guests on those CPUs, ns.
    pub steal_ns: f64,
    /// CPUs this run may use.
    pub cpus: u32,
    /// The run's worker threads.
    pub threads: u32,
}

/// Which fixed canary workload a [`CanarySample`] timed.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum CanaryKind {
    /// A dependent chain of floating-point multiply-adds (core speed).
    Compute,
    /// A sweep over a buffer larger than the caches (memory bandwidth).
    Memory,
}

/// One timing of a canary workload.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CanarySample {
    /// Which canary.
    pub kind: CanaryKind,
    /// The round of the run it was taken in.
    pub round: u32,
    /// Nanoseconds for one pass of the canary.
    pub nanos: f64,
    /// The case it was timed before (absent in older results): a comparison sets aside a case's rounds that ran while
    /// the machine was disturbed (`compare::disturbance`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub case: Option<String>,
}

impl RunReport {
    /// Number of cases that failed (verification, error or panic).
    pub fn failed_count(&self) -> usize {
        self.cases.iter().filter(|c| c.status.is_failed()).count()
    }
}

/// Facts about the harness itself, measured once per run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HarnessInfo {
    /// Smallest non-zero step of the clock, in nanoseconds.
    pub timer_resolution_ns: f64,
    /// Cost of reading the clock once, in nanoseconds.
    pub timer_overhead_ns: f64,
    /// Cost of one iteration of an empty timed loop, in nanoseconds.
    pub empty_loop_ns_per_iter: f64,
    /// Minimum sample duration the calibration aimed for, in nanoseconds.
    pub min_sample_ns: f64,
    /// Worker threads in the rayon pool.
    pub threads: usize,
    /// Settings per suite, after layering defaults, profile, config and CLI.
    pub settings: BTreeMap<String, crate::config::Settings>,
}

/// Whether a case produced trustworthy numbers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum CaseStatus {
    /// Verified and measured.
    Ok,
    /// Failed in the named phase (prepare, verify, run, panic) with a reason.
    Failed {
        /// Phase that failed: `prepare`, `verify`, `warm_up`, `measure`.
        phase: String,
        /// What went wrong.
        reason: String,
    },
    /// Deliberately not run on this machine (too big for its memory, no GPU,
    /// a real input file that is absent); the reason says what would run.
    Skipped {
        /// Why the case was refused and what to do instead.
        reason: String,
    },
}

impl CaseStatus {
    /// True for [`CaseStatus::Failed`].
    pub fn is_failed(&self) -> bool {
        matches!(self, Self::Failed { .. })
    }
    /// True for [`CaseStatus::Skipped`].
    pub fn is_skipped(&self) -> bool {
        matches!(self, Self::Skipped { .. })
    }
}

pub use crate::workload::Metric;

/// One raw measurement: `iterations` back-to-back runs took `nanos`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Sample {
    /// Iterations timed together.
    pub iterations: u64,
    /// Elapsed wall-clock nanoseconds for all of them.
    pub nanos: f64,
    /// Which round of `--rounds` the sample came from (0-based).
    pub round: u32,
}

impl Sample {
    /// Nanoseconds per iteration.
    pub fn per_iter(&self) -> f64 {
        self.nanos / self.iterations as f64
    }
}

/// Per-iteration times of `samples` split by round (index `r` holds round
/// `r`; a round with no sample kept is empty), keeping the samples whose
/// index `keep` accepts. The one grouping the comparison and the history
/// both read rounds through.
pub fn per_iter_by_round(samples: &[Sample], mut keep: impl FnMut(usize) -> bool) -> Vec<Vec<f64>> {
    let rounds = samples.iter().map(|s| s.round).max().map_or(0, |m| m as usize + 1);
    let mut out = vec![Vec::new(); rounds];
    for (i, s) in samples.iter().enumerate() {
        if keep(i) {
            out[s.round as usize].push(s.per_iter());
        }
    }
    out
}

/// A point estimate with a confidence interval. A figure that could not be
/// computed is written as `null` (JSON has no NaN) and read back as NaN, so
/// such a file still loads.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Estimate {
    /// The estimate.
    #[serde(deserialize_with = "null_as_nan")]
    pub point: f64,
    /// Lower bound of the interval.
    #[serde(deserialize_with = "null_as_nan")]
    pub lower: f64,
    /// Upper bound of the interval.
    #[serde(deserialize_with = "null_as_nan")]
    pub upper: f64,
    /// Confidence level of the interval, e.g. 0.95.
    #[serde(deserialize_with = "null_as_nan")]
    pub level: f64,
}

/// Reads a number, or `null` (a statistic that could not be computed) as NaN.
fn null_as_nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// Statistics of the per-iteration time, in nanoseconds.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Estimates {
    /// Median with an order-statistic (distribution-free) interval: the headline.
    pub median: Estimate,
    /// Mean with a seeded percentile-bootstrap interval.
    pub mean: Estimate,
    /// Sample standard deviation.
    #[serde(deserialize_with = "null_as_nan")]
    pub std_dev: f64,
    /// Median absolute deviation (unscaled).
    #[serde(deserialize_with = "null_as_nan")]
    pub mad: f64,
    /// Fastest sample.
    #[serde(deserialize_with = "null_as_nan")]
    pub min: f64,
    /// Slowest sample.
    #[serde(deserialize_with = "null_as_nan")]
    pub max: f64,
    /// 50th percentile.
    #[serde(deserialize_with = "null_as_nan")]
    pub p50: f64,
    /// 90th percentile.
    #[serde(deserialize_with = "null_as_nan")]
    pub p90: f64,
    /// 99th percentile.
    #[serde(deserialize_with = "null_as_nan")]
    pub p99: f64,
    /// Interquartile range divided by the median.
    #[serde(deserialize_with = "null_as_nan")]
    pub iqr_over_median: f64,
}

/// Tukey-fence outlier counts (1.5x IQR mild, 3x IQR severe).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct OutlierCounts {
    /// Below the 3x IQR lower fence.
    pub low_severe: usize,
    /// Between the 3x and 1.5x lower fences.
    pub low_mild: usize,
    /// Between the 1.5x and 3x upper fences.
    pub high_mild: usize,
    /// Above the 3x IQR upper fence.
    pub high_severe: usize,
    /// Samples dropped from the analysis (`--outliers remove`), else 0.
    pub removed: usize,
}

impl OutlierCounts {
    /// All outliers, mild and severe, on both sides.
    pub fn total(&self) -> usize {
        self.low_severe + self.low_mild + self.high_mild + self.high_severe
    }
}

/// A rate derived from what the workload declared per iteration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ThroughputEstimate {
    /// What is counted.
    pub kind: ThroughputKind,
    /// Units per iteration, as declared by the workload.
    #[serde(deserialize_with = "null_as_nan")]
    pub per_iteration: f64,
    /// Units per second from the median time, with its interval.
    pub rate: Estimate,
    /// Rate as a percentage of the machine's probed peak for this kind, if
    /// probed: for a CPU case, of the attainable rate under its cache-aware
    /// roof ([`CaseRoof`]: FLOP/s against min(FMA peak, intensity x level
    /// bandwidth), B/s against the level's bandwidth); for a probe without
    /// levels, FLOP/s against FMA peak and B/s against DRAM triad.
    pub pct_of_peak: Option<f64>,
}

/// Allocation figures from the counting allocator, per timed iteration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct AllocStats {
    /// Allocations per iteration.
    pub allocs_per_iter: f64,
    /// Bytes allocated per iteration.
    pub bytes_per_iter: f64,
    /// Peak live bytes above the level at the start of the measured call.
    pub peak_bytes: u64,
}

/// Roofline classification of a case.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// Arithmetic intensity above the machine balance point.
    Compute,
    /// Arithmetic intensity below the machine balance point.
    Memory,
    /// Too short for either limit to matter (overheads dominate).
    Latency,
}

/// Why sampling of a case stopped.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The requested number of samples was collected.
    SampleSize,
    /// The measurement-time budget ran out before the sample count.
    MeasurementTime,
    /// The hard `--max-time` budget cut sampling.
    MaxTime,
    /// The CI half-width fell below `--target-precision`.
    TargetPrecision,
}

/// How a case was sampled.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SamplingInfo {
    /// Time spent warming up, in nanoseconds.
    pub warm_up_ns: f64,
    /// Iterations per sample chosen by calibration.
    pub iterations_per_sample: u64,
    /// Samples collected (all rounds).
    pub samples: usize,
    /// Samples requested (all rounds).
    pub requested_samples: usize,
    /// Why sampling stopped (last round).
    pub stopped_by: StopReason,
    /// Untimed setup: preparing the workload (inputs, buffers), ns, all rounds.
    #[serde(default)]
    pub prepare_ns: f64,
    /// Untimed self-check against the reference, ns, all rounds.
    #[serde(default)]
    pub verify_ns: f64,
    /// Copies of the case its samples were taken from in turn (the
    /// `placements` setting, where the case was eligible); absent: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placements: Option<usize>,
    /// Why the samples cannot be taken as they are, when the harness's
    /// screening caught them twice (`harness::screen`: samples on the
    /// scheduler's tick, or far from the warm-up); `compare` does not judge
    /// such a case. Absent: nothing was caught (and in results from before
    /// the screening).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing_suspect: Option<String>,
}

/// Everything about one case.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CaseResult {
    /// `suite/benchmark/param=value,...`
    pub id: String,
    /// Suite name.
    pub suite: String,
    /// Benchmark name within the suite.
    pub benchmark: String,
    /// Parameters of this case.
    pub params: BTreeMap<String, ParamValue>,
    /// Ok, or failed with a reason.
    pub status: CaseStatus,
    /// The self-check's outcome, if it ran.
    pub verification: Option<Verification>,
    /// How sampling went; absent when the case failed before measuring.
    pub sampling: Option<SamplingInfo>,
    /// Raw samples (iterations and nanoseconds), all rounds.
    pub samples: Vec<Sample>,
    /// Per-iteration time statistics.
    pub estimates: Option<Estimates>,
    /// Outlier classification.
    pub outliers: Option<OutlierCounts>,
    /// Rates with intervals.
    pub throughput: Vec<ThroughputEstimate>,
    /// Allocation figures.
    pub alloc: Option<AllocStats>,
    /// Roofline classification, when FLOPs or bytes are declared.
    pub bound: Option<Bound>,
    /// Warnings and remarks (noisy case, max-time cut, outliers removed, ...).
    pub notes: Vec<String>,
    /// Figures the workload reported beside its timings (accuracy, memory,
    /// per-step latencies); empty for most cases.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metrics: Vec<Metric>,
    /// The cache-aware roof this case was measured against (a CPU case with
    /// a probe that has per-level bandwidths); absent in older results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roof: Option<CaseRoof>,
    /// Where this case stands in a thread sweep (`--threads 1,2,4`): its
    /// speed-up and parallel efficiency over the sweep's first step, and
    /// the sweep's scalability fit; absent outside a sweep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scaling: Option<ScalingPoint>,
    /// A look inside the case (issue 50): instruction counts, hardware
    /// counters, a profile's files; absent when none was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inside: Option<crate::inside::Inside>,
}

/// The roof of the cache-aware roofline (Ilic, Pratas and Sousa, IEEE CAL
/// 2014) a case is measured against: the bandwidth of the smallest memory
/// level that holds its working set, or the FMA peak when the case's
/// arithmetic intensity puts it under the flat roof.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CaseRoof {
    /// `L1`, `L2`, `L3`, `DRAM` (a slanted, bandwidth roof) or `FMA` (the
    /// flat roof of peak f32 FMA throughput).
    pub name: String,
    /// The memory level that holds the working set, even under `FMA`.
    pub level: String,
    /// Threads the roof's figures are for (the case's `threads`, else the run's).
    pub threads: usize,
    /// Bytes the case touches per iteration (its `working_set_bytes`
    /// metric, else the bytes it declares per iteration); `None` when it
    /// declares neither (the roof is then DRAM's).
    pub working_set_bytes: Option<f64>,
    /// FLOP per byte, when the case declares both.
    pub intensity: Option<f64>,
    /// The level's bandwidth on these threads, bytes/s.
    pub bandwidth: f64,
    /// Peak f32 FMA throughput on these threads, FLOP/s.
    pub peak_flops: f64,
    /// The case's headline rate as a percentage of the roof above it.
    pub pct: Option<f64>,
    /// The percentage is above [`SUSPECT_PCT`]: no code outruns its roof,
    /// so the probe or the case's declared work is wrong (a measurement
    /// problem, not a success).
    #[serde(default)]
    pub suspect: bool,
}

/// A `% of peak` above this is a measurement problem: 5% above the roof
/// allows for the probe's own noise.
pub const SUSPECT_PCT: f64 = 105.0;

/// One step of a thread sweep.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ScalingPoint {
    /// The case id with `threads` left out: what the sweep's steps share.
    pub group: String,
    /// This step's threads.
    pub threads: usize,
    /// The sweep's first (smallest) step's threads, the base of the ratios.
    pub base_threads: usize,
    /// Median time of the base over this step's: how much faster it ran.
    pub speedup: f64,
    /// Speed-up per thread relative to the base: `speedup * base / threads`.
    pub efficiency: f64,
    /// The Universal Scalability Law fitted to the sweep, when it has at
    /// least three steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit: Option<UslFit>,
}

/// Gunther's Universal Scalability Law, `C(n) = n / (1 + sigma (n - 1) +
/// kappa n (n - 1))` (thread counts relative to the sweep's base), fitted by
/// least squares to the measured speed-ups.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct UslFit {
    /// Contention (the serial share: Amdahl's law when `kappa` is 0).
    pub sigma: f64,
    /// Coherency (the cost of threads agreeing with each other).
    pub kappa: f64,
    /// Coefficient of determination of the fit on the speed-ups.
    pub r_squared: f64,
    /// Threads at which the fitted speed-up peaks (`sqrt((1 - sigma) /
    /// kappa)`); `None` when kappa is 0 (it never peaks).
    pub peak_threads: Option<f64>,
}

/// One performance target the run can check, with the measured ratio.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TargetCheck {
    /// What is checked, e.g. "best GEMM 1024x1024x1024 vs probed FMA peak".
    pub name: String,
    /// The case that achieved the measured value.
    pub case_id: String,
    /// Measured rate.
    pub measured: f64,
    /// The limit it is compared with.
    pub limit: f64,
    /// Units of `measured` and `limit`.
    pub unit: String,
    /// measured / limit.
    pub ratio: f64,
    /// Required ratio.
    pub required: f64,
    /// ratio >= required, and the limit believable (see `caveat`).
    pub met: bool,
    /// Why the ratio gives no verdict, when it does not: a case measured
    /// above a probed compute peak shows that the probe ran while the
    /// machine was busy, so its limit (and any "met") is not to be trusted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caveat: Option<String>,
}

/// Preference order of throughput kinds for the headline rate: FLOPs, then
/// bytes, then elements, tokens and items.
fn kind_rank(kind: ThroughputKind) -> u8 {
    match kind {
        ThroughputKind::Flops => 0,
        ThroughputKind::Bytes => 1,
        ThroughputKind::Elements => 2,
        ThroughputKind::Tokens => 3,
        ThroughputKind::Items => 4,
    }
}

/// The case's headline rate: bytes/s for a memory-bound case; otherwise
/// FLOP/s if FLOPs are declared, else bytes/s,
/// else elements, tokens or items per second.
pub fn primary_throughput(case: &CaseResult) -> Option<&ThroughputEstimate> {
    // A memory-bound case is judged by its bandwidth, not its FLOP rate.
    if case.bound == Some(Bound::Memory)
        && let Some(t) = case.throughput.iter().find(|t| t.kind == ThroughputKind::Bytes)
    {
        return Some(t);
    }
    case.throughput.iter().min_by_key(|t| kind_rank(t.kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(iterations: u64, nanos: f64, round: u32) -> Sample {
        Sample { iterations, nanos, round }
    }

    #[test]
    fn per_iter_by_round_groups_in_round_order_and_keeps_empty_rounds() {
        // Round 1 ran no sample that is kept; rounds arrive interleaved.
        let samples = [s(2, 20.0, 2), s(1, 5.0, 0), s(4, 8.0, 1), s(1, 7.0, 0), s(1, 30.0, 2)];
        let all = per_iter_by_round(&samples, |_| true);
        assert_eq!(all, vec![vec![5.0, 7.0], vec![2.0], vec![10.0, 30.0]]);
        let kept = per_iter_by_round(&samples, |i| i != 2);
        assert_eq!(kept, vec![vec![5.0, 7.0], vec![], vec![10.0, 30.0]]);
        assert!(per_iter_by_round(&[], |_| true).is_empty());
    }
}
