//! The workload vocabulary: what one benchmark case is to the harness, and
//! the plain data it reports. This module depends on nothing else in the
//! crate, so every stage (suites, harness, analysis, results, reports,
//! history) can speak it without importing another stage: suites produce
//! these types, everything downstream consumes them.
//!
//! - [`Workload`]: a prepared case (verify, throughput, run, metrics, sync,
//!   and the optional per-sample hooks and time limit);
//! - [`Verification`]: the self-check's outcome against a reference;
//! - [`Throughput`] / [`ThroughputKind`]: the work one iteration does;
//! - [`Metric`]: a named figure beside the timings;
//! - [`Roof`]: the limits of a device other than the CPU, for "% of peak"
//!   and the roofline class;
//! - [`SkipCase`] / [`skip`]: refusing a case on this machine.

use anyhow::Result;
use serde::{Deserialize, Serialize};

/// One runnable benchmark case, prepared and ready to be verified and timed.
pub trait Workload: Send {
    /// Checked once before timing against an independent reference. An `Err`
    /// (or a failed [`Verification`]) marks the case failed; it is never timed.
    fn verify(&mut self) -> Result<Verification>;
    /// Work done by one iteration (FLOPs, bytes, elements, items, tokens).
    fn throughput(&self) -> Vec<Throughput>;
    /// Run `iters` iterations back to back; the harness times the whole call.
    fn run(&mut self, iters: u64) -> Result<()>;
    /// Figures to report beside the timings (accuracy against f32, memory
    /// footprints, per-step latency percentiles gathered during `run`).
    /// Called once after the last measured round.
    fn metrics(&mut self) -> Vec<Metric> {
        Vec::new()
    }
    /// The roofline of the device this workload runs on, when that is not
    /// the CPU (whose limits the harness probes itself): its own probed peak
    /// rates for this case's kind of work. `None` (the default): the CPU's
    /// limits apply, or none are known.
    fn roof(&self) -> Option<Roof> {
        None
    }
    /// Waits until the work of the last `run` call has finished on its
    /// device; the harness calls it before reading the clock. A CPU workload
    /// is done when `run` returns (the default); a GPU workload synchronises
    /// its stream here, so asynchronous launches are never timed as free.
    fn sync(&mut self) -> Result<()> {
        Ok(())
    }
    /// Iterations every `run` call must do, instead of the count the harness
    /// calibrates: `Some(1)` makes each sample one iteration, so the hooks
    /// below bracket every iteration (an external process is one run per
    /// sample, as hyperfine times it). Warm-up batches use it too.
    fn fixed_iterations(&self) -> Option<u64> {
        None
    }
    /// Untimed work before every timed `run` call (warm-up, samples, the
    /// allocation pass): restoring an input the last call consumed, dropping
    /// caches. The harness reads the clock after it returns.
    fn before_sample(&mut self) -> Result<()> {
        Ok(())
    }
    /// Untimed work after every timed `run` call, once the clock was read;
    /// `measured` is true when that call's time became a sample (not warm-up
    /// or the allocation pass), so a workload can keep per-sample figures
    /// (CPU time, peak memory of a child) for [`Workload::metrics`].
    fn after_sample(&mut self, _measured: bool) -> Result<()> {
        Ok(())
    }
    /// The case's hard time budget (`--max-time`), given once before
    /// [`Workload::verify`]. A workload whose single call can block without
    /// end (an external process, a wait on a device) gives up by then with an
    /// error naming what hung; others ignore it (the default).
    fn set_time_limit(&mut self, _limit: std::time::Duration) {}
    /// Another copy of this prepared case in memory of its own: the same
    /// inputs bit for bit in new buffers, made faster than preparing the
    /// case again (a copy of each buffer, where preparing draws its inputs
    /// afresh). The harness spreads a case's samples over several copies
    /// (`--placements`), since where buffers land moves a case's speed; it
    /// verifies every copy as it verifies the first. `None` (the default):
    /// the harness prepares the case again for each copy where that is
    /// cheap, else takes every sample from the one copy.
    fn replicate(&self) -> Option<Box<dyn Workload>> {
        None
    }
}

/// Implements the named [`Workload`] methods of a wrapper by calling the
/// same method on its field `$field` (any [`Workload`], boxed or not).
/// Wrappers (the injection hooks, the mobile levels) change one or two
/// methods and pass the others through; naming them here keeps every
/// signature in one place, so a wrapper cannot drop a method by omission
/// the way hand-written forwarding dropped `roof` and `metrics`.
///
/// ```ignore
/// impl Workload for Wrapper {
///     fn verify(&mut self) -> Result<Verification> { ... }
///     fn run(&mut self, iters: u64) -> Result<()> { ... }
///     forward_workload!(inner: throughput, metrics, roof, sync);
/// }
/// ```
#[macro_export]
#[doc(hidden)]
macro_rules! forward_workload {
    ($field:tt: $($method:ident),+ $(,)?) => {
        $( $crate::forward_workload!(@one $field $method); )+
    };
    (@one $f:tt verify) => {
        fn verify(&mut self) -> ::anyhow::Result<$crate::workload::Verification> { self.$f.verify() }
    };
    (@one $f:tt throughput) => {
        fn throughput(&self) -> Vec<$crate::workload::Throughput> { self.$f.throughput() }
    };
    (@one $f:tt run) => {
        fn run(&mut self, iters: u64) -> ::anyhow::Result<()> { self.$f.run(iters) }
    };
    (@one $f:tt metrics) => {
        fn metrics(&mut self) -> Vec<$crate::workload::Metric> { self.$f.metrics() }
    };
    (@one $f:tt roof) => {
        fn roof(&self) -> Option<$crate::workload::Roof> { self.$f.roof() }
    };
    (@one $f:tt sync) => {
        fn sync(&mut self) -> ::anyhow::Result<()> { self.$f.sync() }
    };
    (@one $f:tt fixed_iterations) => {
        fn fixed_iterations(&self) -> Option<u64> { self.$f.fixed_iterations() }
    };
    (@one $f:tt before_sample) => {
        fn before_sample(&mut self) -> ::anyhow::Result<()> { self.$f.before_sample() }
    };
    (@one $f:tt after_sample) => {
        fn after_sample(&mut self, measured: bool) -> ::anyhow::Result<()> { self.$f.after_sample(measured) }
    };
    (@one $f:tt set_time_limit) => {
        fn set_time_limit(&mut self, limit: ::std::time::Duration) { self.$f.set_time_limit(limit) }
    };
}

/// The error a suite's `prepare` returns to refuse a case on this machine
/// (too big for its memory, no GPU, an absent input file). The case is
/// reported as skipped with this reason, not as failed, and the run goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkipCase(pub String);

impl std::fmt::Display for SkipCase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SkipCase {}

/// Refuses the case being prepared with `reason` (see [`SkipCase`]).
pub fn skip(reason: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(SkipCase(reason.into()))
}

/// The outcome of a workload's self-check against an independent reference.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Verification {
    /// Whether the result matched the reference within tolerance.
    pub passed: bool,
    /// What the result was checked against (e.g. "naive triple loop, 64x64").
    pub reference: String,
    /// Largest error observed, in the units of `detail`, when meaningful.
    pub max_error: Option<f64>,
    /// Human-readable detail, e.g. the tolerance, or why it failed.
    pub detail: String,
}

impl Verification {
    /// A passed check against `reference`.
    pub fn pass(reference: impl Into<String>) -> Self {
        Self { passed: true, reference: reference.into(), max_error: None, detail: String::new() }
    }

    /// A check that passed when `ok`, against `reference`, with `detail`
    /// (what was compared, or why it failed).
    pub fn check(reference: impl Into<String>, ok: bool, detail: impl Into<String>) -> Self {
        Self { passed: ok, reference: reference.into(), max_error: None, detail: detail.into() }
    }

    /// Whether `got` equals `want` (exact results: integers, hashes,
    /// strings); a mismatch shows both.
    pub fn equal<T: PartialEq + std::fmt::Debug>(reference: impl Into<String>, got: &T, want: &T) -> Self {
        let ok = got == want;
        let detail =
            if ok { format!("equal to {want:?}") } else { format!("got {got:?}, expected {want:?}") };
        Self::check(reference, ok, detail)
    }

    /// Compares `got` with `want` element-wise under a mixed absolute/relative
    /// tolerance (`|g - w| <= atol + rtol * |w|`) and reports the worst error.
    pub fn compare(reference: impl Into<String>, got: &[f32], want: &[f32], atol: f64, rtol: f64) -> Self {
        let reference = reference.into();
        if got.len() != want.len() {
            return Self {
                passed: false,
                reference,
                max_error: None,
                detail: format!("length mismatch: got {} values, reference has {}", got.len(), want.len()),
            };
        }
        // Chunked and parallel: references of 16M-element cases are checked
        // in full, and this keeps that to a fraction of a second.
        const CHUNK: usize = 1 << 16;
        let check = |start: usize, got: &[f32], want: &[f32]| {
            let mut worst = 0.0f64;
            let mut first_bad: Option<(usize, f32, f32)> = None;
            for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
                let err = (g as f64 - w as f64).abs();
                // `g == w` first: equal infinities give a NaN difference but match.
                let ok = g == w || (g.is_nan() && w.is_nan()) || err <= atol + rtol * (w as f64).abs();
                if !ok {
                    first_bad.get_or_insert((start + i, g, w));
                }
                if !ok || (g != w && err > worst) {
                    worst = if err.is_nan() { f64::INFINITY } else { worst.max(err) };
                }
            }
            (worst, first_bad)
        };
        use rayon::prelude::*;
        let (worst, first_bad) = got
            .par_chunks(CHUNK)
            .zip(want.par_chunks(CHUNK))
            .enumerate()
            .map(|(k, (g, w))| check(k * CHUNK, g, w))
            .reduce(
                || (0.0, None),
                |a, b| {
                    let first = match (a.1, b.1) {
                        (Some(x), Some(y)) => Some(if x.0 <= y.0 { x } else { y }),
                        (x, y) => x.or(y),
                    };
                    (a.0.max(b.0), first)
                },
            );
        match first_bad {
            None => Self {
                passed: true,
                reference,
                max_error: Some(worst),
                detail: format!("{} values within atol {atol:e} + rtol {rtol:e}", got.len()),
            },
            Some((i, g, w)) => Self {
                passed: false,
                reference,
                max_error: Some(worst),
                detail: format!("value {i}: got {g}, reference {w} (atol {atol:e}, rtol {rtol:e})"),
            },
        }
    }

    /// Turns a failed verification into an error, keeping its detail.
    pub fn into_result(self) -> Result<Self> {
        if self.passed {
            Ok(self)
        } else {
            anyhow::bail!("verification against {} failed: {}", self.reference, self.detail)
        }
    }
}

/// Units of work one iteration performs; the harness turns them into rates.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum ThroughputKind {
    /// Floating-point operations (a fused multiply-add counts as two).
    Flops,
    /// Bytes moved to and from memory (reads plus writes).
    Bytes,
    /// Tensor elements produced.
    Elements,
    /// Generic items (e.g. sequences, requests).
    Items,
    /// Tokens processed or generated.
    Tokens,
}

impl ThroughputKind {
    /// Unit of the rate, e.g. "FLOP/s".
    pub fn rate_unit(self) -> &'static str {
        match self {
            Self::Flops => "FLOP/s",
            Self::Bytes => "B/s",
            Self::Elements => "elem/s",
            Self::Items => "items/s",
            Self::Tokens => "tokens/s",
        }
    }
}

/// Work done per iteration, of one kind.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Throughput {
    /// What is counted.
    pub kind: ThroughputKind,
    /// How many per iteration.
    pub per_iteration: f64,
}

impl Throughput {
    /// `n` floating-point operations per iteration.
    pub fn flops(n: f64) -> Self {
        Self { kind: ThroughputKind::Flops, per_iteration: n }
    }
    /// `n` bytes moved per iteration.
    pub fn bytes(n: f64) -> Self {
        Self { kind: ThroughputKind::Bytes, per_iteration: n }
    }
    /// `n` elements produced per iteration.
    pub fn elements(n: f64) -> Self {
        Self { kind: ThroughputKind::Elements, per_iteration: n }
    }
    /// `n` items per iteration.
    pub fn items(n: f64) -> Self {
        Self { kind: ThroughputKind::Items, per_iteration: n }
    }
    /// `n` tokens per iteration.
    pub fn tokens(n: f64) -> Self {
        Self { kind: ThroughputKind::Tokens, per_iteration: n }
    }
}

/// A named figure a workload reports beside its timings: an accuracy error,
/// a memory footprint, a per-step latency percentile, a hit rate.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Metric {
    /// Short snake_case name, e.g. `rmse`, `kv_cache_bytes`, `ttft_ns`.
    pub name: String,
    /// The value.
    pub value: f64,
    /// Unit of `value` (`ns`, `B`, `dB`, `%`, `ratio`, or empty for plain numbers).
    pub unit: String,
}

impl Metric {
    /// A metric with a unit.
    pub fn new(name: impl Into<String>, value: f64, unit: impl Into<String>) -> Self {
        Self { name: name.into(), value, unit: unit.into() }
    }
}

/// Peak rates of a device for one kind of work (a GPU's probed GEMM rate for
/// the case's dtype and its copy bandwidth, say): what a case's throughput
/// is a percentage of, and where its roofline ridge lies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Roof {
    /// Peak FLOP/s for this case's arithmetic.
    pub flops_per_sec: f64,
    /// Peak bytes/s for this case's memory traffic.
    pub bytes_per_sec: f64,
}
