//! Canaries: two fixed workloads timed before every case of a run, so that
//! a comparison can see how fast the machine itself was (see
//! `compare::drift`). They never change with the code under test: a
//! dependent chain of multiply-adds (the core's speed) and a sweep over a
//! buffer larger than the caches (memory bandwidth, what a noisy neighbour
//! takes first). Together they cost about 2 ms before each case. (A core
//! taken by another process is not theirs to see: they run on the free
//! one. `harness::load` reads that from the kernel instead.)

use crate::results::{CanaryKind, CanarySample};
use std::sync::OnceLock;
use std::time::Instant;

/// Steps of the compute canary's dependent multiply-add chain.
const COMPUTE_STEPS: usize = 100_000;
/// Bytes swept by the memory canary: past the last-level cache of the
/// machines tfbench runs on (the buffer is allocated once per process).
const MEMORY_BYTES: usize = 16 << 20;

fn buffer() -> &'static [f64] {
    static BUF: OnceLock<Vec<f64>> = OnceLock::new();
    BUF.get_or_init(|| (0..MEMORY_BYTES / 8).map(|i| (i % 1024) as f64).collect())
}

/// One pass of the compute canary; returns its result so it cannot be
/// optimised away.
fn compute() -> f64 {
    let mut x = std::hint::black_box(1.0f64);
    for _ in 0..COMPUTE_STEPS {
        x = x.mul_add(0.999_999_9, 1e-7);
    }
    x
}

/// One pass of the memory canary (a sum of the whole buffer).
fn memory() -> f64 {
    let b = std::hint::black_box(buffer());
    // Four accumulators so the sweep is bound by bandwidth, not by the
    // latency of one addition chain.
    let mut acc = [0.0f64; 4];
    for chunk in b.chunks_exact(4) {
        for (a, v) in acc.iter_mut().zip(chunk) {
            *a += v;
        }
    }
    acc.iter().sum()
}

/// Times each canary once before `case` in `round` and returns the
/// samples. The results are checked against their closed forms, so a
/// canary that computed something else would never pass as a timing.
pub fn sample(round: u32, case: &str) -> Vec<CanarySample> {
    let mut out = Vec::with_capacity(2);
    let mut push = |kind, t: Instant| {
        out.push(CanarySample {
            kind,
            round,
            nanos: t.elapsed().as_nanos() as f64,
            case: Some(case.to_string()),
        })
    };
    let t = Instant::now();
    let c = std::hint::black_box(compute());
    push(CanaryKind::Compute, t);
    let t = Instant::now();
    let m = std::hint::black_box(memory());
    push(CanaryKind::Memory, t);
    assert!(c.is_finite() && (m - expected_memory_sum()).abs() < 1.0, "canary computed a wrong result");
    out
}

/// The memory canary's exact sum: every block of 1024 values sums to
/// 1023 * 1024 / 2.
fn expected_memory_sum() -> f64 {
    let n = MEMORY_BYTES / 8;
    (n / 1024) as f64 * (1023.0 * 1024.0 / 2.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canaries_compute_their_closed_forms_and_time_positive() {
        assert_eq!(memory(), expected_memory_sum());
        // x_{k+1} = a x_k + b converges to b / (1 - a) = 1 from x_0 = 1: stays 1.
        assert!((compute() - 1.0).abs() < 1e-9);
        let s = sample(3, "s/b/x=1");
        assert!(s.iter().all(|c| c.round == 3 && c.nanos > 0.0 && c.case.as_deref() == Some("s/b/x=1")));
        assert_eq!((s[0].kind, s[1].kind), (CanaryKind::Compute, CanaryKind::Memory));
        assert_eq!(s.len(), 2);
    }
}
