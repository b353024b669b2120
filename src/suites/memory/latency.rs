//! Pointer chasing: the load-to-use latency of one dependent load per cache
//! line, in a random cycle over a working set, so neither the prefetchers
//! nor out-of-order execution can hide it. Over a sweep of working-set
//! sizes the curve steps up where each cache level ends; `cache_levels`
//! finds those steps and sets them beside the sizes sysfs reports.
//!
//! Pages are the default 4 KiB ones, so large working sets also pay TLB
//! misses, as tensors in ordinary allocations do.

use super::bandwidth::caches;
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload, skip};
use crate::workload::Metric;
use anyhow::{Result, ensure};
use rand::RngExt;
use std::time::Instant;

/// usize slots per 64-byte line: one pointer per line.
const LINE: usize = 8;

/// A random cyclic permutation (Sattolo) of the lines of `bytes`: slot
/// `LINE * i` holds the slot of the line visited after line `i`.
pub(crate) fn cycle(bytes: usize, seed: u64) -> Vec<usize> {
    let lines = (bytes / 64).max(2);
    let mut order: Vec<usize> = (0..lines).collect();
    let mut rng = crate::util::rng(seed);
    for i in (1..lines).rev() {
        let j = rng.random_range(0..i);
        order.swap(i, j);
    }
    let mut next = vec![0usize; lines * LINE];
    for w in 0..lines {
        next[order[w] * LINE] = order[(w + 1) % lines] * LINE;
    }
    next
}

/// Follows `n` links from `p`; returns where it stopped.
#[inline(never)]
fn chase(next: &[usize], mut p: usize, n: u64) -> usize {
    for _ in 0..n {
        p = next[p];
    }
    p
}

/// Checks `next` is one cycle through every line: `lines` steps from the
/// start visit each line once and come back.
fn check_cycle(next: &[usize]) -> Result<()> {
    let lines = next.len() / LINE;
    let mut seen = vec![false; lines];
    let mut p = 0;
    for step in 0..lines {
        ensure!(p % LINE == 0 && p < next.len(), "step {step}: link {p} is not a line start");
        ensure!(!seen[p / LINE], "line {} visited twice after {step} steps", p / LINE);
        seen[p / LINE] = true;
        p = next[p];
    }
    ensure!(p == 0, "the chain does not close after {lines} steps");
    Ok(())
}

fn too_big(bytes: usize) -> Result<()> {
    let avail = crate::env::Environment::gather().available_memory_bytes.unwrap_or(u64::MAX) as usize;
    if bytes > avail / 4 {
        return Err(skip(format!(
            "{} MiB working set needs more than a quarter of the available memory",
            bytes >> 20
        )));
    }
    Ok(())
}

/// `latency`: one iteration is one dependent load, so the reported time per
/// iteration is the latency, with the harness's interval.
struct Latency {
    next: Vec<usize>,
    p: usize,
}

pub(crate) fn prepare_latency(case: &Case) -> Result<Box<dyn Workload>> {
    let bytes = super::bytes_param(case, "size")?;
    ensure!(bytes >= 128, "case {}: `size` must be at least two 64-byte lines", case.id);
    too_big(bytes)?;
    Ok(Box::new(Latency { next: cycle(bytes, crate::suites::common::seed(case)), p: 0 }))
}

impl Workload for Latency {
    fn verify(&mut self) -> Result<Verification> {
        check_cycle(&self.next)?;
        // Warm the working set into whatever cache holds it.
        self.p = chase(&self.next, 0, (self.next.len() / LINE) as u64 * 2);
        Ok(Verification::pass(format!(
            "the chain visits each of {} lines once and closes",
            self.next.len() / LINE
        )))
    }
    fn throughput(&self) -> Vec<Throughput> {
        vec![Throughput::items(1.0)]
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        self.p = std::hint::black_box(chase(&self.next, self.p, iters));
        Ok(())
    }
    fn metrics(&mut self) -> Vec<Metric> {
        vec![Metric::new("working_set_bytes", (self.next.len() * 8) as f64, "B")]
    }
}

/// A rise between neighbouring points above this ratio can be part of a
/// step; smaller ones are plateau noise.
pub(crate) const RISE: f64 = 1.15;
/// A step (a run of rises) counts as a cache level's end when the curve
/// climbs by at least this ratio over it.
pub(crate) const MIN_STEP: f64 = 1.4;

/// Where the latency curve steps up: sizes ascending, `ns` per size. The
/// curve is first smoothed with a median of three neighbours (one noisy point
/// cannot make or break a step); then each maximal run of consecutive rises
/// above `rise` is a candidate step, kept when the curve climbs by at least
/// `min_step` from its first point to its last. A level ends at the last size
/// before each kept step.
pub(crate) fn level_ends(sizes: &[usize], ns: &[f64], rise: f64, min_step: f64) -> Vec<usize> {
    let n = ns.len().min(sizes.len());
    let smooth: Vec<f64> = (0..n)
        .map(|i| {
            if i == 0 || i + 1 == n {
                return ns[i];
            }
            let mut w = [ns[i - 1], ns[i], ns[i + 1]];
            w.sort_by(f64::total_cmp);
            w[1]
        })
        .collect();
    let mut ends = Vec::new();
    let mut i = 0;
    while i + 1 < n {
        if smooth[i + 1] > smooth[i] * rise {
            let start = i;
            while i + 1 < n && smooth[i + 1] > smooth[i] * rise {
                i += 1;
            }
            if smooth[i] >= smooth[start] * min_step {
                ends.push(sizes[start]);
            }
        } else {
            i += 1;
        }
    }
    ends
}

/// The median of `v` (sorted in place); NaN when empty.
fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 { v[m] } else { (v[m - 1] + v[m]) / 2.0 }
}

/// `cache_levels`: the whole curve, two points per octave from 4 KiB to
/// 64 MiB, then one per octave up to twice the L3 (at least 64 MiB, at most
/// 256 MiB). An iteration follows 4 x 512 links at every point (after an
/// untimed full lap of chains up to 8 MiB, so they are warm); the curve is
/// the median over the runs of 512 (the last [`KEEP`] per point), which a few
/// runs slowed by other tenants or sped by a lucky cache state do not move.
struct Levels {
    sizes: Vec<usize>,
    cycles: Vec<Vec<usize>>,
    pos: Vec<usize>,
    runs: Vec<Vec<f64>>,
    next: usize,
    /// Largest chain warmed by a full untimed lap before it is timed.
    warm_limit: usize,
}

/// Runs kept per point (a ring: the most recent ones).
const KEEP: usize = 256;

const LINKS: u64 = 2048;

pub(crate) fn prepare_levels(case: &Case) -> Result<Box<dyn Workload>> {
    let (_, _, l3) = caches();
    let top = (2 * l3.unwrap_or(32 << 20) as usize).clamp(64 << 20, 256 << 20);
    let mut sizes = Vec::new();
    let mut s = 4096usize;
    while s <= top {
        sizes.push(s);
        // Two points per octave where caches end; one in DRAM, where the
        // cycles are big to build and the curve is flat.
        if s < 64 << 20 {
            sizes.push(s * 3 / 2);
        }
        s *= 2;
    }
    sizes.retain(|&x| x <= top);
    too_big(sizes.iter().sum())?;
    let seed = crate::suites::common::seed(case);
    let cycles: Vec<Vec<usize>> = sizes.iter().map(|&b| cycle(b, seed ^ b as u64)).collect();
    let n = sizes.len();
    let warm_limit = (l3.unwrap_or(32 << 20) as usize).min(8 << 20);
    Ok(Box::new(Levels { sizes, cycles, pos: vec![0; n], runs: vec![Vec::new(); n], next: 0, warm_limit }))
}

impl Workload for Levels {
    fn verify(&mut self) -> Result<Verification> {
        for c in &self.cycles {
            check_cycle(c)?;
        }
        // Synthetic curve with known steps: the detector must find them.
        let sizes = [1, 2, 3, 4, 5, 6, 7];
        let ns = [1.0, 1.05, 4.0, 4.1, 4.2, 12.0, 12.5];
        let found = level_ends(&sizes, &ns, RISE, MIN_STEP);
        ensure!(found == [2, 5], "step detector found {found:?} on a curve with steps after 2 and 5");
        Ok(Verification::pass(format!(
            "{} chains each visit every line once and close; the step detector finds known steps",
            self.cycles.len()
        )))
    }
    fn throughput(&self) -> Vec<Throughput> {
        vec![Throughput::items((self.sizes.len() as u64 * LINKS) as f64)]
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            for i in 0..self.cycles.len() {
                // The other points evicted this one since its last visit, and
                // 2048 links touch only part of a big cycle: without an
                // untimed full lap first, a 384 KiB chain (inside L2) read
                // as DRAM. Chains over 8 MiB stay cold: on this VM the L3
                // does not hold them anyway (2 MiB and up read ~150-180 ns,
                // DRAM latency), and warming up to 64 MiB made one
                // iteration of this case take 5 s instead of well under 1 s.
                if self.sizes[i] <= self.warm_limit {
                    let lap = self.cycles[i].len() as u64;
                    self.pos[i] = std::hint::black_box(chase(&self.cycles[i], self.pos[i], lap));
                }
                for _ in 0..4 {
                    let t = Instant::now();
                    self.pos[i] = std::hint::black_box(chase(&self.cycles[i], self.pos[i], LINKS / 4));
                    let ns = t.elapsed().as_nanos() as f64 / (LINKS / 4) as f64;
                    let runs = &mut self.runs[i];
                    if runs.len() < KEEP {
                        runs.push(ns);
                    } else {
                        runs[self.next % KEEP] = ns;
                    }
                }
            }
            self.next += 1;
        }
        Ok(())
    }
    fn metrics(&mut self) -> Vec<Metric> {
        let curve: Vec<f64> = self.runs.iter().map(|r| median(&mut r.clone())).collect();
        if curve.iter().any(|x| x.is_nan()) {
            return Vec::new(); // never run
        }
        let mut m: Vec<Metric> = self
            .sizes
            .iter()
            .zip(&curve)
            .map(|(s, ns)| Metric::new(format!("latency_ns_at_{}", human(*s)), *ns, "ns"))
            .collect();
        let ends = level_ends(&self.sizes, &curve, RISE, MIN_STEP);
        let (l1, l2, l3) = caches();
        for (k, (name, sysfs)) in [("l1", l1), ("l2", l2), ("l3", l3)].into_iter().enumerate() {
            if let Some(&end) = ends.get(k) {
                m.push(Metric::new(format!("{name}_end_detected_bytes"), end as f64, "B"));
            }
            if let Some(v) = sysfs {
                m.push(Metric::new(format!("{name}_bytes_sysfs"), v as f64, "B"));
            }
        }
        m.push(Metric::new("levels_detected", ends.len() as f64, ""));
        m
    }
}

fn human(b: usize) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}MiB", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{}KiB", b >> 10)
    } else {
        format!("{b}B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycles_visit_every_line_once() {
        for bytes in [128, 4096, 100_000] {
            let c = cycle(bytes, 3);
            check_cycle(&c).unwrap();
            assert_eq!(chase(&c, 0, (c.len() / LINE) as u64), 0);
        }
        let mut broken = cycle(4096, 1);
        let first = broken[0];
        broken[first] = first; // a self loop cuts the chain short
        assert!(check_cycle(&broken).is_err());
    }

    #[test]
    fn level_ends_on_constructed_curves() {
        let sizes: Vec<usize> = (0..10).map(|i| 1 << i).collect();
        let flat = [1.0; 10];
        assert!(level_ends(&sizes, &flat, RISE, MIN_STEP).is_empty());
        // A step spread over two points counts once, at its start.
        let ns = [1.0, 1.0, 1.0, 2.0, 4.0, 4.0, 4.1, 20.0, 20.0, 21.0];
        assert_eq!(level_ends(&sizes, &ns, RISE, MIN_STEP), vec![4, 64]);
        assert_eq!(human(48 << 10), "48KiB");
        assert_eq!(human(3 << 20), "3MiB");
    }

    /// This VM's hierarchy (L1d 48 KiB, L2 2 MiB, L3 105 MiB shared with the
    /// host), sampled two points per octave with plateau noise of up to
    /// +-6%, one point tripled by interference inside L2, one point halved
    /// inside L3, and a gradual rise into DRAM.
    #[test]
    fn level_ends_on_a_noisy_synthetic_hierarchy() {
        let mut sizes = Vec::new();
        let mut s = 4096usize;
        while s <= 128 << 20 {
            sizes.push(s);
            sizes.push(s * 3 / 2);
            s *= 2;
        }
        let clean = |b: usize| match b {
            b if b <= 48 << 10 => 1.3,
            b if b <= 2 << 20 => 4.5,
            b if b <= 64 << 20 => 22.0,
            b if b <= 96 << 20 => 40.0,
            _ => 95.0,
        };
        // Deterministic noise, alternating in sign and size.
        let noise = [1.0, 1.05, 0.96, 1.06, 0.97, 1.02, 0.94, 1.04];
        let mut ns: Vec<f64> = sizes.iter().enumerate().map(|(i, &b)| clean(b) * noise[i % 8]).collect();
        let at = |b: usize| sizes.iter().position(|&x| x == b).unwrap();
        ns[at(512 << 10)] *= 3.0; // a spike inside L2
        ns[at(16 << 20)] *= 0.5; // a dip inside L3
        let ends = level_ends(&sizes, &ns, RISE, MIN_STEP);
        assert_eq!(ends, vec![48 << 10, 2 << 20, 64 << 20], "{ends:?}");
        // The old detector (raw curve, any rise over 25% starts a step) is
        // fooled by the spike and the dip.
        let naive: Vec<usize> = (0..ns.len() - 1)
            .filter(|&i| ns[i + 1] > ns[i] * 1.25 && (i == 0 || ns[i] <= ns[i - 1] * 1.25))
            .map(|i| sizes[i])
            .collect();
        assert!(naive.len() > 3, "{naive:?}");
        let mut v = vec![3.0, 1.0, 2.0];
        assert_eq!(median(&mut v), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
