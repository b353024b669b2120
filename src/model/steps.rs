//! Per-step latencies of generation (time to first token, time per output
//! token), as a serving engine records them: a fixed-capacity ring of step
//! times and its percentiles. The CPU cases fill it from the host clock, the
//! GPU cases (`cuda/timer.rs`) from CUDA events.

use crate::workload::Metric;

/// Step times kept for percentiles (the most recent ones once full); the
/// buffer is reserved in `prepare` so recording never allocates.
const MAX_STEPS: usize = 1 << 16;

/// Step latencies in nanoseconds, a fixed-capacity ring (the GPU cases
/// record theirs from CUDA events into the same summary).
pub struct Steps {
    ns: Vec<f64>,
    next: usize,
}

impl Steps {
    /// An empty ring, its buffer reserved.
    pub fn new() -> Self {
        Self { ns: Vec::with_capacity(MAX_STEPS), next: 0 }
    }
    /// Records one step's latency (overwriting the oldest once full).
    pub fn push(&mut self, v: f64) {
        if self.ns.len() < MAX_STEPS {
            self.ns.push(v);
        } else {
            self.ns[self.next] = v;
            self.next = (self.next + 1) % MAX_STEPS;
        }
    }
    /// `{prefix}_p50/p90/p99/mean_ns` and `{prefix}_count` of the steps
    /// recorded (nothing when none were).
    pub fn summary(&self, prefix: &str) -> Vec<Metric> {
        let mut s = self.ns.clone();
        s.sort_by(f64::total_cmp);
        if s.is_empty() {
            return Vec::new();
        }
        let mean = s.iter().sum::<f64>() / s.len() as f64;
        vec![
            Metric::new(format!("{prefix}_p50_ns"), percentile(&s, 50.0), "ns"),
            Metric::new(format!("{prefix}_p90_ns"), percentile(&s, 90.0), "ns"),
            Metric::new(format!("{prefix}_p99_ns"), percentile(&s, 99.0), "ns"),
            Metric::new(format!("{prefix}_mean_ns"), mean, "ns"),
            Metric::new(format!("{prefix}_count"), s.len() as f64, ""),
        ]
    }
}

impl Default for Steps {
    fn default() -> Self {
        Self::new()
    }
}

/// Nearest-rank percentile of sorted values (`q` in 0..=100).
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((q / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
