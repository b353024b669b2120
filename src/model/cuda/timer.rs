//! Per-step device times from CUDA events, for the latency percentiles
//! (`ttft_*`, `tpot_*`) that the CPU cases take from the host clock.
//!
//! An iteration records one event before its first step and one after each
//! step, all on the stream; a step's time is the time between consecutive
//! events, i.e. how long the stream took for it (its kernels, or the wait
//! for the host's launches when launching is the bottleneck, which is what
//! a user sees). Iterations queue back to back, so reading the events would
//! stall the stream; two sets alternate instead, and a set is read (after
//! waiting for its last event, normally long done) just before it is
//! reused, or at the end.

use crate::backend::cuda::Gpu;
use crate::model::steps::Steps;
use anyhow::Result;
use cudarc::driver::CudaEvent;

/// Two alternating sets of `steps + 1` timing events and the step times read.
pub(super) struct StepTimer {
    sets: [Vec<CudaEvent>; 2],
    pending: [bool; 2],
    cur: usize,
    next: usize,
    /// The step times collected so far.
    pub steps: Steps,
}

impl StepTimer {
    /// Events for iterations of `steps` steps.
    pub fn new(gpu: &Gpu, steps: usize) -> Result<Self> {
        let set = || (0..=steps).map(|_| gpu.timing_event()).collect::<Result<Vec<_>>>();
        Ok(Self { sets: [set()?, set()?], pending: [false; 2], cur: 0, next: 0, steps: Steps::new() })
    }

    /// Starts an iteration: reads the set about to be reused, then records
    /// the iteration's first event.
    pub fn begin(&mut self, gpu: &Gpu) -> Result<()> {
        self.collect(gpu, self.cur)?;
        self.next = 0;
        self.mark(gpu)
    }

    /// Records the end of a step.
    pub fn mark(&mut self, gpu: &Gpu) -> Result<()> {
        let ev = &self.sets[self.cur][self.next];
        ev.record(&gpu.stream).map_err(|e| gpu.err("event record", e))?;
        self.next += 1;
        Ok(())
    }

    /// Ends an iteration (its events are read later).
    pub fn end(&mut self) {
        self.pending[self.cur] = self.next == self.sets[self.cur].len();
        self.cur ^= 1;
    }

    /// Reads every set still pending (at the end of the case).
    pub fn finish(&mut self, gpu: &Gpu) -> Result<()> {
        // The older set first, so the steps stay in order.
        let (a, b) = (self.cur, self.cur ^ 1);
        self.collect(gpu, a)?;
        self.collect(gpu, b)
    }

    fn collect(&mut self, gpu: &Gpu, s: usize) -> Result<()> {
        if !std::mem::take(&mut self.pending[s]) {
            return Ok(());
        }
        let set = &self.sets[s];
        set[set.len() - 1].synchronize().map_err(|e| gpu.err("event synchronize", e))?;
        for w in set.windows(2) {
            let ms = w[0].elapsed_ms(&w[1]).map_err(|e| gpu.err("event elapsed", e))?;
            self.steps.push(ms as f64 * 1e6);
        }
        Ok(())
    }
}
