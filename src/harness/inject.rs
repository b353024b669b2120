//! The fault-injection test hook: `TFBENCH_INJECT_SLOWDOWN='REGEX=FACTOR'`.
//!
//! Cases whose id matches `REGEX` do `FACTOR - 1` more real work per
//! iteration: after each timed call of the workload, a compute loop runs for
//! that fraction of the call's own duration, inside the timed region. It
//! exists to test the regression detector end to end (does a 10% slowdown
//! on five cases get flagged?), never to measure anything. A run with it
//! records the spec in its environment, warns on stderr, notes it on every
//! affected case, and every comparison that reads such a run says so.

use crate::workload::{Throughput, Verification, Workload};
use anyhow::{Result, bail};
use regex::Regex;
use std::time::Instant;

/// The environment variable of the hook.
pub const VAR: &str = "TFBENCH_INJECT_SLOWDOWN";
/// The companion hook: cases whose id matches this regex panic when run, so
/// tests can check that one failing case never loses the others.
pub const PANIC_VAR: &str = "TFBENCH_INJECT_PANIC";

/// The panic hook's pattern from the environment (`Ok(None)` when unset).
pub fn panic_from_env() -> Result<Option<Regex>> {
    match std::env::var(PANIC_VAR) {
        Ok(s) if !s.trim().is_empty() => {
            Regex::new(s.trim()).map(Some).map_err(|e| anyhow::anyhow!("{PANIC_VAR}={s:?}: bad regex: {e}"))
        }
        _ => Ok(None),
    }
}

/// A workload that panics when run (the [`PANIC_VAR`] test hook).
pub struct Panicking(pub Box<dyn Workload>);

impl Workload for Panicking {
    fn verify(&mut self) -> Result<Verification> {
        self.0.verify()
    }
    fn throughput(&self) -> Vec<Throughput> {
        self.0.throughput()
    }
    fn run(&mut self, _iters: u64) -> Result<()> {
        panic!("injected panic ({PANIC_VAR} test hook)");
    }
    fn set_time_limit(&mut self, limit: std::time::Duration) {
        self.0.set_time_limit(limit)
    }
}

/// A parsed injection: which cases, and by how much.
#[derive(Debug, Clone)]
pub struct Injection {
    /// The text as given, recorded in the results.
    pub spec: String,
    /// Cases whose id matches are slowed.
    pub pattern: Regex,
    /// Time factor, > 1.
    pub factor: f64,
}

impl Injection {
    /// Parses `REGEX=FACTOR` (the last `=` splits, so the regex may hold `=`).
    pub fn parse(spec: &str) -> Result<Self> {
        let Some((pattern, factor)) = spec.rsplit_once('=') else {
            bail!("{VAR}={spec:?}: expected REGEX=FACTOR, e.g. 'tensor/unary/op=relu=1.10'");
        };
        let factor: f64 = factor.trim().parse().map_err(|_| {
            anyhow::anyhow!("{VAR}={spec:?}: the factor {factor:?} is not a number (e.g. 1.10)")
        })?;
        if !(factor.is_finite() && factor > 1.0 && factor <= 100.0) {
            bail!(
                "{VAR}={spec:?}: the factor must be in (1, 100], e.g. 1.10 for 10% more work, got {factor}"
            );
        }
        let pattern = Regex::new(pattern).map_err(|e| anyhow::anyhow!("{VAR}={spec:?}: bad regex: {e}"))?;
        Ok(Self { spec: spec.to_string(), pattern, factor })
    }

    /// Whether case `id` is slowed.
    pub fn applies_to(&self, id: &str) -> bool {
        self.pattern.is_match(id)
    }
}

/// The hook from the environment: `Ok(None)` when unset or empty, an error
/// naming the variable when malformed.
pub fn from_env() -> Result<Option<Injection>> {
    match std::env::var(VAR) {
        Ok(s) if !s.trim().is_empty() => Injection::parse(s.trim()).map(Some),
        _ => Ok(None),
    }
}

/// A workload that does `factor - 1` more work per call of `run`.
pub struct Slowed {
    inner: Box<dyn Workload>,
    extra: f64,
    sink: f64,
}

impl Slowed {
    /// Wraps `inner` with `factor` (> 1) times its work.
    pub fn new(inner: Box<dyn Workload>, factor: f64) -> Self {
        Self { inner, extra: factor - 1.0, sink: 1.0 }
    }
}

impl Workload for Slowed {
    fn verify(&mut self) -> Result<Verification> {
        self.inner.verify()
    }
    fn throughput(&self) -> Vec<Throughput> {
        self.inner.throughput()
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        let t0 = Instant::now();
        self.inner.run(iters)?;
        let target = t0.elapsed().mul_f64(self.extra);
        let t1 = Instant::now();
        // Real arithmetic (a dependent multiply-add chain), checked against
        // the clock every 256 steps, for `extra` times the call's duration.
        let mut x = self.sink;
        while t1.elapsed() < target {
            for _ in 0..256 {
                x = std::hint::black_box(x * 0.999_999_9 + 1e-7);
            }
        }
        self.sink = x;
        Ok(())
    }
    fn metrics(&mut self) -> Vec<crate::results::Metric> {
        self.inner.metrics()
    }
    fn sync(&mut self) -> Result<()> {
        self.inner.sync()
    }
    fn roof(&self) -> Option<crate::workload::Roof> {
        self.inner.roof()
    }
    fn fixed_iterations(&self) -> Option<u64> {
        self.inner.fixed_iterations()
    }
    fn before_sample(&mut self) -> Result<()> {
        self.inner.before_sample()
    }
    fn after_sample(&mut self, measured: bool) -> Result<()> {
        self.inner.after_sample(measured)
    }
    fn set_time_limit(&mut self, limit: std::time::Duration) {
        self.inner.set_time_limit(limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_or_name_the_problem() {
        let i = Injection::parse("tensor/unary/op=relu=1.10").unwrap();
        assert_eq!(i.factor, 1.10);
        assert!(i.applies_to("tensor/unary/op=relu,size=16M") && !i.applies_to("tensor/unary/op=gelu"));
        for bad in ["nofactor", "x=abc", "x=0.9", "x=1", "(=1.1"] {
            let e = Injection::parse(bad).unwrap_err().to_string();
            assert!(e.contains(VAR), "{bad}: {e}");
        }
    }

    /// Spins 200 us per iteration and adds up how long its own calls took.
    struct Sleepy(std::sync::Arc<std::sync::Mutex<std::time::Duration>>);
    impl Workload for Sleepy {
        fn verify(&mut self) -> Result<Verification> {
            Ok(Verification::pass("none"))
        }
        fn throughput(&self) -> Vec<Throughput> {
            vec![]
        }
        fn run(&mut self, iters: u64) -> Result<()> {
            let start = Instant::now();
            for _ in 0..iters {
                let t = Instant::now();
                while t.elapsed().as_micros() < 200 {}
            }
            *self.0.lock().unwrap() += start.elapsed();
            Ok(())
        }
    }

    #[test]
    fn slowed_workload_adds_the_factor_of_its_own_time() {
        // Against the inner workload's own time, not a second run's: on a
        // shared host two runs differ, but the wrapper spins until the extra
        // share of the call it just made has passed, so the bound is exact.
        let inner = std::sync::Arc::new(std::sync::Mutex::new(std::time::Duration::ZERO));
        let mut slowed = Slowed::new(Box::new(Sleepy(inner.clone())), 1.5);
        let t = Instant::now();
        for _ in 0..5 {
            slowed.run(20).unwrap();
        }
        let total = t.elapsed().as_secs_f64();
        let own = inner.lock().unwrap().as_secs_f64();
        assert!(total >= 1.5 * own, "total {total} s, inner {own} s");
        assert!(own > 0.0 && slowed.sink.is_finite());
    }
}
