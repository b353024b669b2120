//! Several placements of one case in memory, rotated sample by sample.
//!
//! Where a case's buffers land decides how fast it runs when they are about
//! the size of a core's caches: in one process, ten preparations of
//! `binary/op=add,shape=500x500` (two threads, 3 MB) held at once ran at
//! medians 15.6 to 21.1 us (CV 6-9%), and `reduction/op=sum,shape=1000x1000`
//! at 56 to 72 us. A process that prepares a case once measures one of those
//! placements for all its samples, so two runs (or the two builds of an `ab`
//! round) differ by the luck of the draw, not by their code; the same spread
//! shows between fresh processes. Guest huge pages did not remove it (on a
//! VM the host's pages decide the physical placement), nor did turning
//! address-space randomisation off.
//!
//! So the harness can prepare a case `placements` times, keep every copy
//! alive (so each gets memory of its own) and take each sample from the next
//! copy in turn: a run's median then averages over that many placements
//! instead of drawing one (Curtsinger and Berger's Stabilizer, ASPLOS 2013,
//! randomises layout for the same reason). Over 10 fresh processes, the
//! spread of the median fell from 4.2% to 2.5% (`add 500x500`) and from 9.9%
//! to 3.9% (`sum 1000x1000`) with 4 placements.
//!
//! Only cases for which extra copies are cheap and placement can matter are
//! spread: CPU cases without fixed iterations (an external process has no
//! buffers of ours to place) that either copy themselves
//! ([`Workload::replicate`]: a copy of each buffer) and move at most
//! [`MAX_REPLICATED_BYTES`] per iteration, the copies fitting in a quarter
//! of the memory available, or else move at most [`MAX_BYTES`] and were
//! prepared in at most [`MAX_PREPARE`] (each copy is prepared again).
//!
//! The large cases need it as much: on one thread, the round medians of
//! `unary/op=sqrt 16M` (128 MiB per iteration), each round on buffers of
//! its own, spread by 2-8% while one round's samples agreed within 2-3%;
//! four copies per round brought that to 1-2% and its learned band from
//! 24.8% to 2.3% (docs/verdicts.md, 2026-11-27). Re-preparing them would
//! cost 0.2-1.5 s a copy (drawing 16M seeded inputs), copying their
//! buffers 20-60 ms.

use crate::backend::Device;
use crate::backend::cpu::Context;
use crate::plan::Case;
use crate::suites::Suite;
use crate::workload::{Metric, Roof, SkipCase, Throughput, ThroughputKind, Verification, Workload};
use anyhow::{Result, bail};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

/// Most placements a case may be spread over (the setting's own bound).
pub use crate::config::MAX_PLACEMENTS;

/// Largest declared bytes per iteration of a spread case: larger working
/// sets stream from memory, where placement moved round medians by 1.5-2%,
/// and each copy costs that much memory again.
pub const MAX_BYTES: f64 = 32.0 * 1024.0 * 1024.0;

/// Longest first preparation of a spread case that is prepared again for
/// each copy: each extra copy costs about as long again, every round.
pub const MAX_PREPARE: Duration = Duration::from_millis(50);

/// Largest declared bytes per iteration of a case spread by copying its
/// buffers ([`Workload::replicate`]): a 4096x4096 f32 binary op (192 MiB)
/// fits, four copies of it 768 MiB.
pub const MAX_REPLICATED_BYTES: f64 = 256.0 * 1024.0 * 1024.0;

/// The most bytes per iteration a case moves (its declared bytes throughput).
fn bytes_of(w: &dyn Workload) -> f64 {
    w.throughput()
        .iter()
        .filter(|t| t.kind == ThroughputKind::Bytes)
        .map(|t| t.per_iteration)
        .fold(0.0, f64::max)
}

/// `first` (case `case` of `suite`, prepared in `prepare_time`) and further
/// copies (up to `placements` in all: prepared the same way, or copies of
/// its buffers, see the module docs), when `placements > 1` and the case is
/// eligible; else `first` alone. Returns the workload and how many
/// placements it spans. A copy that fails to prepare, is refused or panics
/// fails the case, as the first would have.
pub fn spread(
    first: Box<dyn Workload>,
    placements: usize,
    prepare_time: Duration,
    suite: &dyn Suite,
    case: &Case,
    ctx: &Context,
) -> Result<(Box<dyn Workload>, usize)> {
    spread_with(first, placements, prepare_time, case.device == Device::Cpu, || copy_of(suite, case, ctx))
}

/// Another copy of `case`: the suite's refusal or panic becomes an error.
fn copy_of(suite: &dyn Suite, case: &Case, ctx: &Context) -> Result<Box<dyn Workload>> {
    match catch_unwind(AssertUnwindSafe(|| suite.prepare(case, ctx))) {
        Ok(Ok(w)) => Ok(w),
        Ok(Err(e)) if e.downcast_ref::<SkipCase>().is_some() => {
            bail!("another placement of the case was refused: {e:#}")
        }
        Ok(Err(e)) => Err(e.context("preparing another placement of the case")),
        Err(p) => bail!(
            "preparing another placement of the case panicked: {}",
            super::runner::panic_message(p.as_ref())
        ),
    }
}

/// [`spread`] with the copies from `more`.
fn spread_with(
    first: Box<dyn Workload>,
    placements: usize,
    prepare_time: Duration,
    on_cpu: bool,
    more: impl FnMut() -> Result<Box<dyn Workload>>,
) -> Result<(Box<dyn Workload>, usize)> {
    spread_in(first, placements, prepare_time, on_cpu, crate::util::mem_available(), more)
}

/// [`spread_with`] with `available` bytes of memory free (`None`: unknown).
fn spread_in(
    first: Box<dyn Workload>,
    placements: usize,
    prepare_time: Duration,
    on_cpu: bool,
    available: Option<u64>,
    mut more: impl FnMut() -> Result<Box<dyn Workload>>,
) -> Result<(Box<dyn Workload>, usize)> {
    let k = placements.min(MAX_PLACEMENTS);
    if k < 2 || !on_cpu || first.fixed_iterations().is_some() {
        return Ok((first, 1));
    }
    let bytes = bytes_of(first.as_ref());
    // The copies' memory: the declared traffic of an iteration is about the
    // size of the case's buffers (inputs read once, output written once).
    let extra = bytes * (k - 1) as f64;
    let fits = available.is_none_or(|a| extra <= a as f64 / 4.0);
    let mut copies = Vec::with_capacity(k);
    if bytes <= MAX_REPLICATED_BYTES
        && fits
        && let Some(copy) = first.replicate()
    {
        copies.push(copy);
        while copies.len() < k - 1 {
            copies.push(first.replicate().ok_or_else(|| anyhow::anyhow!("the case stopped copying itself"))?);
        }
    } else if bytes <= MAX_BYTES && prepare_time <= MAX_PREPARE {
        for _ in 1..k {
            copies.push(more()?);
        }
    } else {
        return Ok((first, 1));
    }
    copies.insert(0, first);
    Ok((Box::new(Rotating { copies, current: 0 }), k))
}

/// Copies of one case, each sample (warm-up batches too) taken from the
/// next copy in turn.
struct Rotating {
    copies: Vec<Box<dyn Workload>>,
    current: usize,
}

impl Workload for Rotating {
    /// Every copy verifies; the first failure is the answer.
    fn verify(&mut self) -> Result<Verification> {
        let k = self.copies.len();
        let mut first = None;
        for w in &mut self.copies {
            let v = w.verify()?;
            if !v.passed {
                return Ok(v);
            }
            first.get_or_insert(v);
        }
        let mut v = first.expect("a spread workload has copies");
        v.reference = format!("{} (each of {k} placements)", v.reference);
        Ok(v)
    }
    fn throughput(&self) -> Vec<Throughput> {
        self.copies[0].throughput()
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        self.copies[self.current].run(iters)
    }
    /// The first copy's figures (the copies run the same case).
    fn metrics(&mut self) -> Vec<Metric> {
        self.copies[0].metrics()
    }
    fn roof(&self) -> Option<Roof> {
        self.copies[0].roof()
    }
    fn sync(&mut self) -> Result<()> {
        self.copies[self.current].sync()
    }
    fn fixed_iterations(&self) -> Option<u64> {
        None
    }
    /// Moves to the next copy, then runs its own hook.
    fn before_sample(&mut self) -> Result<()> {
        self.current = (self.current + 1) % self.copies.len();
        self.copies[self.current].before_sample()
    }
    fn after_sample(&mut self, measured: bool) -> Result<()> {
        self.copies[self.current].after_sample(measured)
    }
    fn set_time_limit(&mut self, limit: Duration) {
        for w in &mut self.copies {
            w.set_time_limit(limit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A workload that records which copy ran, with `bytes` per iteration.
    struct Probe {
        id: usize,
        bytes: f64,
        log: Arc<Mutex<Vec<usize>>>,
        fail_verify: bool,
        fixed: Option<u64>,
    }

    impl Workload for Probe {
        fn verify(&mut self) -> Result<Verification> {
            Ok(Verification::check("probe", !self.fail_verify, format!("copy {}", self.id)))
        }
        fn throughput(&self) -> Vec<Throughput> {
            vec![Throughput::bytes(self.bytes)]
        }
        fn run(&mut self, _iters: u64) -> Result<()> {
            self.log.lock().unwrap().push(self.id);
            Ok(())
        }
        fn fixed_iterations(&self) -> Option<u64> {
            self.fixed
        }
    }

    fn probes(bytes: f64, log: &Arc<Mutex<Vec<usize>>>) -> impl FnMut() -> Result<Box<dyn Workload>> {
        let log = log.clone();
        let mut next = 0;
        move || {
            next += 1;
            Ok(Box::new(Probe { id: next, bytes, log: log.clone(), fail_verify: false, fixed: None }))
        }
    }

    fn first(bytes: f64, log: &Arc<Mutex<Vec<usize>>>) -> Box<dyn Workload> {
        Box::new(Probe { id: 0, bytes, log: log.clone(), fail_verify: false, fixed: None })
    }

    #[test]
    fn samples_rotate_over_every_copy() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let (mut w, k) = spread_with(first(1e6, &log), 3, Duration::ZERO, true, probes(1e6, &log)).unwrap();
        assert_eq!(k, 3);
        let v = w.verify().unwrap();
        assert!(v.passed && v.reference.contains("each of 3 placements"), "{v:?}");
        for _ in 0..6 {
            w.before_sample().unwrap();
            w.run(10).unwrap();
        }
        assert_eq!(*log.lock().unwrap(), vec![1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn only_cheap_small_cpu_cases_are_spread() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let fast = Duration::from_millis(1);
        let one = |w: Result<(Box<dyn Workload>, usize)>| w.unwrap().1;
        assert_eq!(one(spread_with(first(1e6, &log), 1, fast, true, probes(1e6, &log))), 1, "placements = 1");
        assert_eq!(one(spread_with(first(1e6, &log), 4, fast, false, probes(1e6, &log))), 1, "a GPU case");
        assert_eq!(
            one(spread_with(first(64e6, &log), 4, fast, true, probes(64e6, &log))),
            1,
            "64 MB per iteration"
        );
        let slow = MAX_PREPARE + Duration::from_millis(1);
        assert_eq!(
            one(spread_with(first(1e6, &log), 4, slow, true, probes(1e6, &log))),
            1,
            "slow to prepare"
        );
        let process =
            Box::new(Probe { id: 0, bytes: 0.0, log: log.clone(), fail_verify: false, fixed: Some(1) });
        assert_eq!(one(spread_with(process, 4, fast, true, probes(0.0, &log))), 1, "fixed iterations");
        assert_eq!(one(spread_with(first(1e6, &log), 99, fast, true, probes(1e6, &log))), MAX_PLACEMENTS);
        assert!(log.lock().unwrap().is_empty(), "nothing ran");
    }

    #[test]
    fn a_copy_that_fails_to_verify_fails_the_case() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut made = 0;
        let l2 = log.clone();
        let more = move || -> Result<Box<dyn Workload>> {
            made += 1;
            Ok(Box::new(Probe { id: made, bytes: 1.0, log: l2.clone(), fail_verify: made == 2, fixed: None }))
        };
        let (mut w, _) = spread_with(first(1.0, &log), 3, Duration::ZERO, true, more).unwrap();
        let v = w.verify().unwrap();
        assert!(!v.passed && v.detail == "copy 2", "{v:?}");
        let failing = spread_with(first(1.0, &log), 3, Duration::ZERO, true, || anyhow::bail!("no memory"));
        assert!(failing.err().unwrap().to_string().contains("no memory"));
    }

    /// A large workload that copies itself: each copy gets the next id.
    struct Copying {
        id: usize,
        bytes: f64,
        made: Arc<Mutex<usize>>,
        log: Arc<Mutex<Vec<usize>>>,
    }

    impl Workload for Copying {
        fn verify(&mut self) -> Result<Verification> {
            Ok(Verification::pass("copying probe"))
        }
        fn throughput(&self) -> Vec<Throughput> {
            vec![Throughput::bytes(self.bytes)]
        }
        fn run(&mut self, _iters: u64) -> Result<()> {
            self.log.lock().unwrap().push(self.id);
            Ok(())
        }
        fn replicate(&self) -> Option<Box<dyn Workload>> {
            let mut made = self.made.lock().unwrap();
            *made += 1;
            Some(Box::new(Copying {
                id: *made,
                bytes: self.bytes,
                made: self.made.clone(),
                log: self.log.clone(),
            }))
        }
    }

    #[test]
    fn large_cases_that_copy_themselves_are_spread_over_copies_when_memory_allows() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let copying = |bytes: f64| -> Box<dyn Workload> {
            Box::new(Copying { id: 0, bytes, made: Arc::new(Mutex::new(0)), log: log.clone() })
        };
        let never = || -> Result<Box<dyn Workload>> { panic!("a copying case is not prepared again") };
        let slow = Duration::from_secs(1);
        let gib = Some(16u64 << 30);
        // 128 MiB a copy, prepared slowly: three copies of its buffers.
        let (mut w, k) = spread_in(copying(128.0 * 1048576.0), 4, slow, true, gib, never).unwrap();
        assert_eq!(k, 4);
        for _ in 0..4 {
            w.before_sample().unwrap();
            w.run(1).unwrap();
        }
        assert_eq!(*log.lock().unwrap(), vec![1, 2, 3, 0]);
        let one = |w: Result<(Box<dyn Workload>, usize)>| w.unwrap().1;
        // Three more copies must fit in a quarter of what is available.
        assert_eq!(one(spread_in(copying(128.0 * 1048576.0), 4, slow, true, Some(1 << 30), never)), 1);
        assert_eq!(one(spread_in(copying(2.0 * MAX_REPLICATED_BYTES), 4, slow, true, gib, never)), 1);
        assert_eq!(one(spread_in(copying(64.0 * 1048576.0), 4, slow, false, gib, never)), 1, "a GPU case");
        assert_eq!(one(spread_in(copying(64.0 * 1048576.0), 1, slow, true, gib, never)), 1, "placements = 1");
        // A small case that copies itself is copied too, even when it
        // would have been cheap to prepare again.
        let (_, k) = spread_in(copying(1e6), 3, Duration::ZERO, true, gib, never).unwrap();
        assert_eq!(k, 3);
    }
}
