//! The cache-aware roofline (Ilic, Pratas and Sousa, "Cache-aware Roofline
//! model", IEEE Computer Architecture Letters, 2014): a CPU case is measured
//! against the bandwidth of the smallest memory level that holds its working
//! set (L1, L2, L3 or DRAM, as the probe measured them) or, when its
//! arithmetic intensity is high enough, against the flat FMA roof. A case
//! that fits in L2 is thus not credited with "300% of peak" for outrunning
//! DRAM, and one that still reads above its roof exposes a measurement
//! problem (a probe taken on a busy machine, a wrong declared work).
//!
//! Pure: no clocks, no I/O.

use crate::probe::{LevelBandwidth, MachineLimits};
use crate::results::{CaseRoof, SUSPECT_PCT};
use crate::workload::{Metric, Throughput, ThroughputKind};

/// What a case does per iteration, as far as the roofline is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Work {
    /// FLOP per iteration, when declared.
    pub flops: Option<f64>,
    /// Bytes moved per iteration, when declared.
    pub bytes: Option<f64>,
    /// Bytes the case touches: its `working_set_bytes` (or `working_set`)
    /// metric, else the bytes it moves per iteration.
    pub working_set: Option<f64>,
}

/// Benchmarks whose declared bytes are bytes allocated (or computed), not
/// bytes read or written: the memory suite's allocator and footprint
/// benchmarks. No bandwidth roof speaks of them.
const BYTES_NOT_MOVED: &[(&str, &str)] = &[
    ("memory", "alloc"),
    ("memory", "tracking_overhead"),
    ("memory", "tensor_alloc"),
    ("memory", "pattern"),
    ("memory", "pool_pressure"),
    ("memory", "footprint"),
];

/// Whether `suite/benchmark`'s declared bytes are memory traffic (see
/// [`BYTES_NOT_MOVED`]).
pub fn bytes_are_traffic(suite: &str, benchmark: &str) -> bool {
    !BYTES_NOT_MOVED.contains(&(suite, benchmark))
}

impl Work {
    /// From a case's declared throughputs and its metrics.
    pub fn of(decl: &[Throughput], metrics: &[Metric]) -> Self {
        let get = |k| decl.iter().find(|t| t.kind == k).map(|t| t.per_iteration).filter(|&v| v > 0.0);
        let (flops, bytes) = (get(ThroughputKind::Flops), get(ThroughputKind::Bytes));
        let reported = metrics
            .iter()
            .find(|m| (m.name == "working_set_bytes" || m.name == "working_set") && m.unit == "B")
            .map(|m| m.value)
            .filter(|v| v.is_finite() && *v > 0.0);
        Self { flops, bytes, working_set: reported.or(bytes) }
    }
}

/// A figure on `threads` threads from its one-thread value and its value on
/// the probe's `probe_threads`: linear in the threads up to the all-thread
/// figure (an upper bound, as a roof must be), the all-thread figure from
/// there on; never below the one-thread figure, since one of several
/// threads can always do what one thread did (an all-thread figure below it
/// comes from a probe that other work disturbed).
pub fn at_threads(one: f64, all: f64, probe_threads: usize, threads: usize) -> f64 {
    if threads <= 1 {
        one
    } else if threads >= probe_threads {
        all.max(one)
    } else {
        (one * threads as f64).min(all).max(one)
    }
}

/// The smallest level that holds `working_set` bytes on `threads` threads
/// (per-core levels add up); the last level (DRAM) when none does or the
/// working set is not known. `None` only when there are no levels.
pub fn level_for(
    levels: &[LevelBandwidth],
    working_set: Option<f64>,
    threads: usize,
) -> Option<&LevelBandwidth> {
    let Some(ws) = working_set else { return levels.last() };
    levels.iter().find(|l| l.capacity_for(threads).is_none_or(|c| ws <= c as f64)).or(levels.last())
}

/// The roof of a CPU case on `threads` threads doing `work`: the level that
/// holds its working set and that level's best bandwidth (read, copy or
/// triad), or `FMA` when its intensity times that bandwidth reaches the FMA
/// peak (or it declares FLOPs and no bytes). A probe without levels (cached
/// by an older tfbench) gives DRAM triad, the roof of every case before.
/// `None` for work that declares neither FLOPs nor bytes: no roof speaks
/// of it.
pub fn cpu_roof(l: &MachineLimits, threads: usize, work: &Work) -> Option<CaseRoof> {
    if work.flops.is_none() && work.bytes.is_none() {
        return None;
    }
    let threads = threads.max(1);
    // FMA units are per core: `k` threads on `k` cores can do k times one
    // core's peak, whatever a disturbed all-core probe read.
    let per_core = |one: f64| one * threads.min(l.cores.unwrap_or(1)).max(1) as f64;
    let peak = at_threads(l.peak_flops_one_core, l.peak_flops_all_cores, l.threads, threads)
        .max(per_core(l.peak_flops_one_core));
    let level_bw = |lv: &LevelBandwidth| {
        let bw = at_threads(lv.best_one_thread(), lv.best_all_threads(), l.threads, threads);
        if lv.per_core { bw.max(per_core(lv.best_one_thread())) } else { bw }
    };
    let (level, bandwidth) = match level_for(&l.levels, work.working_set, threads) {
        Some(lv) => (lv.level.clone(), blended(&l.levels, lv, work.working_set, threads, level_bw)),
        None => (
            "DRAM".to_string(),
            at_threads(l.triad_bandwidth_one_thread, l.triad_bandwidth_all_threads, l.threads, threads),
        ),
    };
    let intensity = work.flops.zip(work.bytes).map(|(f, b)| f / b);
    let compute = match (work.flops, intensity) {
        (Some(_), Some(ai)) => ai * bandwidth >= peak,
        (Some(_), None) => true,
        (None, _) => false,
    };
    Some(CaseRoof {
        name: if compute { "FMA".to_string() } else { level.clone() },
        level,
        threads,
        working_set_bytes: work.working_set,
        intensity,
        bandwidth,
        peak_flops: peak,
        pct: None,
        suspect: false,
    })
}

/// The bandwidth of `chosen` for a working set of `ws` bytes, counting the
/// share the smaller levels can hold at their own bandwidth: at best the
/// first L1-capacity bytes come from L1, the next from L2 up to its
/// capacity, and so on, the rest from `chosen`. An upper bound (as a roof
/// must be) that joins the levels' roofs without a step: 64 MiB copied on
/// a 32 MiB L3 ran at 117% of DRAM's roof, half of it served from L3.
fn blended(
    levels: &[LevelBandwidth],
    chosen: &LevelBandwidth,
    ws: Option<f64>,
    threads: usize,
    bw: impl Fn(&LevelBandwidth) -> f64,
) -> f64 {
    let Some(ws) = ws.filter(|w| *w > 0.0 && w.is_finite()) else { return bw(chosen) };
    let (mut left, mut held, mut secs) = (ws, 0.0f64, 0.0f64);
    for lv in levels {
        let cap = lv.capacity_for(threads).map_or(f64::INFINITY, |c| c as f64);
        let part = if lv.level == chosen.level { left } else { (cap - held).max(0.0).min(left) };
        secs += part / bw(lv);
        left -= part;
        held = held.max(cap);
        if lv.level == chosen.level || left <= 0.0 {
            break;
        }
    }
    if secs > 0.0 && secs.is_finite() { ws / secs } else { bw(chosen) }
}

/// The highest rate of `kind` the roof allows: FLOP/s under min(FMA peak,
/// intensity x bandwidth), B/s under min(bandwidth, FMA peak / intensity).
/// `None` for kinds a roofline says nothing about.
pub fn attainable(roof: &CaseRoof, kind: ThroughputKind) -> Option<f64> {
    let ai = roof.intensity.filter(|&ai| ai > 0.0 && ai.is_finite());
    let v = match kind {
        ThroughputKind::Flops => ai.map_or(roof.peak_flops, |ai| roof.peak_flops.min(ai * roof.bandwidth)),
        ThroughputKind::Bytes => ai.map_or(roof.bandwidth, |ai| roof.bandwidth.min(roof.peak_flops / ai)),
        _ => return None,
    };
    (v > 0.0 && v.is_finite()).then_some(v)
}

/// Records the case's percentage of its roof (`pct`, the highest of its
/// rates': a FLOP and a byte rate give the same one) and whether it is
/// [`SUSPECT_PCT`] or more; returns the note for a suspect one.
pub fn judge(roof: &mut CaseRoof, pcts: impl IntoIterator<Item = f64>) -> Option<String> {
    roof.pct = pcts.into_iter().filter(|p| p.is_finite()).reduce(f64::max);
    roof.suspect = false;
    let pct = roof.pct?;
    roof.suspect = pct > SUSPECT_PCT;
    roof.suspect.then(|| {
        format!(
            "measurement problem: {pct:.0}% of its {} roof, which no code passes: the probe ran while the machine \
             was busy, or the case's declared work or working set is off; re-probe on a quiet machine (tfbench \
             sysinfo --probe)",
            roof.name
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(name: &str, cap: Option<u64>, per_core: bool, one: f64, all: f64) -> LevelBandwidth {
        LevelBandwidth {
            level: name.into(),
            capacity_bytes: cap,
            per_core,
            capacity_source: "sysfs".into(),
            working_set_bytes: 0,
            read_one_thread: one,
            copy_one_thread: one * 0.5,
            triad_one_thread: one * 0.8,
            read_all_threads: all,
            copy_all_threads: all * 0.5,
            triad_all_threads: all * 0.8,
        }
    }

    /// A 2-thread machine: 100 GFLOP/s per core, L1 48 KiB and L2 1 MiB per
    /// core, L3 32 MiB shared.
    fn limits() -> MachineLimits {
        MachineLimits {
            fingerprint: "f".into(),
            measured_at: "t".into(),
            threads: 2,
            peak_flops_one_core: 100e9,
            peak_flops_all_cores: 200e9,
            copy_bandwidth_one_thread: 8e9,
            copy_bandwidth_all_threads: 12e9,
            triad_bandwidth_one_thread: 10e9,
            triad_bandwidth_all_threads: 15e9,
            load: None,
            levels: vec![
                level("L1", Some(48 << 10), true, 200e9, 400e9),
                level("L2", Some(1 << 20), true, 80e9, 160e9),
                level("L3", Some(32 << 20), false, 40e9, 60e9),
                level("DRAM", None, false, 12e9, 16e9),
            ],
            cores: None,
        }
    }

    fn work(flops: Option<f64>, bytes: Option<f64>, ws: Option<f64>) -> Work {
        Work { flops, bytes, working_set: ws.or(bytes) }
    }

    #[test]
    fn the_smallest_level_holding_the_working_set_is_the_roof() {
        let l = limits();
        let cases = [
            (32e3, 1, "L1"),
            (64e3, 1, "L2"),
            (64e3, 2, "L1"), // two cores hold twice the private caches
            (1.5e6, 1, "L3"),
            (1.5e6, 2, "L2"),
            (40e6, 2, "DRAM"),
        ];
        for (ws, threads, want) in cases {
            let r = cpu_roof(&l, threads, &work(None, Some(ws), None)).unwrap();
            assert_eq!((r.name.as_str(), r.level.as_str()), (want, want), "ws {ws} on {threads} threads");
        }
        // The level's best kernel (read here), at the case's threads.
        let r = cpu_roof(&l, 1, &work(None, Some(1e3), None)).unwrap();
        assert_eq!(r.bandwidth, 200e9);
        assert_eq!(cpu_roof(&l, 2, &work(None, Some(1e3), None)).unwrap().bandwidth, 400e9);
        // Bytes without a working set known: DRAM; neither FLOPs nor bytes: no roof.
        let w = Work { flops: None, bytes: Some(1e3), working_set: None };
        assert_eq!(cpu_roof(&l, 2, &w).unwrap().level, "DRAM");
        assert_eq!(cpu_roof(&l, 2, &Work::default()), None);
        assert!(!bytes_are_traffic("memory", "alloc") && bytes_are_traffic("memory", "bandwidth"));
    }

    #[test]
    fn high_intensity_is_under_the_fma_roof() {
        let l = limits();
        // A 1024^3 GEMM: 2.1 GFLOP over 12 MiB, intensity 170: FMA.
        let n = 1024.0f64;
        let r = cpu_roof(&l, 2, &work(Some(2.0 * n * n * n), Some(12.0 * n * n), None)).unwrap();
        assert_eq!((r.name.as_str(), r.level.as_str()), ("FMA", "L3"));
        assert_eq!(attainable(&r, ThroughputKind::Flops), Some(200e9));
        // Intensity 1 from L3 (60 GB/s; the share the two cores' L1 and L2
        // hold at their bandwidth): memory-bound, FLOP/s = B/s attainable.
        let r = cpu_roof(&l, 2, &work(Some(8e6), Some(8e6), None)).unwrap();
        assert_eq!(r.name, "L3");
        let (l1, l2) = (2.0 * 48.0 * 1024.0, 2.0 * 1024.0 * 1024.0);
        let want = 8e6 / (l1 / 400e9 + (l2 - l1) / 160e9 + (8e6 - l2) / 60e9);
        assert!((r.bandwidth - want).abs() < 1.0, "{} vs {want}", r.bandwidth);
        assert_eq!(attainable(&r, ThroughputKind::Flops), Some(r.bandwidth));
        assert_eq!(attainable(&r, ThroughputKind::Bytes), Some(r.bandwidth));
        // FLOPs without bytes: FMA; other kinds: no roof.
        assert_eq!(cpu_roof(&l, 1, &work(Some(1e9), None, None)).unwrap().name, "FMA");
        assert_eq!(attainable(&r, ThroughputKind::Tokens), None);
    }

    #[test]
    fn a_reported_working_set_wins_over_bytes_moved() {
        let m = vec![Metric::new("working_set_bytes", 24e3, "B")];
        let w = Work::of(&[Throughput::bytes(10e9)], &m);
        assert_eq!(w.working_set, Some(24e3));
        assert_eq!(cpu_roof(&limits(), 1, &w).unwrap().level, "L1");
        assert_eq!(Work::of(&[Throughput::bytes(10e9)], &[]).working_set, Some(10e9));
    }

    #[test]
    fn threads_between_one_and_all_scale_linearly_up_to_the_all_thread_figure() {
        assert_eq!(at_threads(10.0, 35.0, 4, 1), 10.0);
        assert_eq!(at_threads(10.0, 35.0, 4, 2), 20.0);
        assert_eq!(at_threads(10.0, 35.0, 4, 3), 30.0);
        assert_eq!(at_threads(10.0, 35.0, 4, 4), 35.0);
        assert_eq!(at_threads(10.0, 35.0, 4, 16), 35.0, "more threads than probed: the all-thread figure");
        assert_eq!(
            at_threads(10.0, 8.0, 4, 2),
            10.0,
            "a low all-thread figure never drops below one thread's"
        );
        assert_eq!(at_threads(10.0, 8.0, 4, 4), 10.0, "nor at the probe's own threads");
    }

    #[test]
    fn a_working_set_just_past_a_level_is_partly_served_by_it() {
        let l = limits();
        // 64 MiB on a 32 MiB L3: at best half from L3 (60 GB/s), half from
        // DRAM (16 GB/s), plus the small L1 and L2 shares.
        let ws = 64.0 * 1024.0 * 1024.0;
        let r = cpu_roof(&l, 2, &work(None, Some(ws), None)).unwrap();
        assert_eq!(r.name, "DRAM");
        assert!(r.bandwidth > 16e9 * 1.5 && r.bandwidth < 60e9, "{}", r.bandwidth);
        // Far past it, DRAM's own bandwidth; the roof rises without a step.
        let far = cpu_roof(&l, 2, &work(None, Some(1e12), None)).unwrap();
        assert!((far.bandwidth - 16e9).abs() < 0.01e9, "{}", far.bandwidth);
        let at = |ws: f64| cpu_roof(&l, 2, &work(None, Some(ws), None)).unwrap().bandwidth;
        let l3 = 32.0 * 1024.0 * 1024.0;
        assert!((at(l3) - at(l3 + 1.0)).abs() / at(l3) < 1e-3, "continuous at the L3 edge");
    }

    #[test]
    fn per_core_roofs_scale_with_the_cores_a_disturbed_probe_missed() {
        // Two cores whose all-thread figures read no more than one's.
        let mut l = limits();
        l.peak_flops_all_cores = l.peak_flops_one_core;
        l.levels[0].read_all_threads = l.levels[0].read_one_thread;
        let ws = Some(1e3);
        assert_eq!(cpu_roof(&l, 2, &work(Some(1e9), None, ws)).unwrap().peak_flops, 100e9, "cores unknown");
        l.cores = Some(2);
        let r = cpu_roof(&l, 2, &work(Some(1e9), None, ws)).unwrap();
        assert_eq!(r.peak_flops, 200e9, "FMA units are per core");
        assert_eq!(cpu_roof(&l, 2, &work(None, Some(1e3), None)).unwrap().bandwidth, 400e9, "so is L1");
        assert_eq!(cpu_roof(&l, 1, &work(Some(1e9), None, ws)).unwrap().peak_flops, 100e9);
        // A shared level is not scaled.
        l.levels[2].read_all_threads = l.levels[2].read_one_thread;
        l.levels[2].triad_all_threads = 0.0;
        l.levels[2].copy_all_threads = 0.0;
        assert_eq!(l.levels[2].best_all_threads(), 40e9);
    }

    #[test]
    fn a_probe_without_levels_falls_back_to_dram_triad() {
        let l = MachineLimits { levels: Vec::new(), ..limits() };
        let r = cpu_roof(&l, 2, &work(None, Some(1e3), None)).unwrap();
        assert_eq!((r.name.as_str(), r.bandwidth), ("DRAM", 15e9));
        assert_eq!(cpu_roof(&l, 1, &work(None, Some(1e3), None)).unwrap().bandwidth, 10e9);
    }

    #[test]
    fn above_105_percent_is_a_measurement_problem() {
        let mut r = cpu_roof(&limits(), 2, &work(None, Some(1e3), None)).unwrap();
        assert_eq!(judge(&mut r, [104.9]), None);
        assert_eq!((r.pct, r.suspect), (Some(104.9), false));
        let note = judge(&mut r, [90.0, 166.0]).expect("flagged");
        assert!(r.suspect && r.pct == Some(166.0));
        assert!(note.starts_with("measurement problem: 166% of its L1 roof"), "{note}");
        assert_eq!(judge(&mut r, []), None);
        assert_eq!((r.pct, r.suspect), (None, false));
    }
}
