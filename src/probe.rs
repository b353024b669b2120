//! Measured machine limits (`tfbench sysinfo --probe`), cached per machine.
//! STUB: being written.

use serde::{Deserialize, Serialize};

/// The machine's measured limits, used for "% of peak" and roofline.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MachineLimits {
    /// Machine fingerprint the probe belongs to.
    pub fingerprint: String,
    /// When the probe ran, RFC 3339 UTC.
    pub measured_at: String,
    /// Threads used for the all-core figures.
    pub threads: usize,
    /// Peak f32 FMA throughput on one core, FLOP/s.
    pub peak_flops_one_core: f64,
    /// Peak f32 FMA throughput on all cores, FLOP/s.
    pub peak_flops_all_cores: f64,
    /// STREAM copy bandwidth on one thread, bytes/s.
    pub copy_bandwidth_one_thread: f64,
    /// STREAM copy bandwidth on all threads, bytes/s.
    pub copy_bandwidth_all_threads: f64,
    /// STREAM triad bandwidth on one thread, bytes/s.
    pub triad_bandwidth_one_thread: f64,
    /// STREAM triad bandwidth on all threads, bytes/s.
    pub triad_bandwidth_all_threads: f64,
}
