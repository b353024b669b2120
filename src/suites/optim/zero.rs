//! ZeRO data-parallel optimizer sharding, simulated in one process.
//!
//! Each of N ranks is a task on an N-thread rayon pool with its own buffers;
//! collectives are real copies between those buffers, phase by phase (the
//! end of a parallel loop is the barrier). Every rank starts from the same
//! weights and produces its own gradient (the "backward output", an input
//! here, outside the ranks' accounted memory: real ZeRO streams it in
//! buckets). The averaged gradient is `sum over ranks in rank order * 1/N`
//! everywhere, so every stage must reproduce one unsharded AdamW on that
//! average bit for bit.

use super::optimizers::{Kind, Optimizer};
use crate::plan::Case;
use crate::suites::{Throughput, Verification, Workload};
use crate::workload::Metric;
use anyhow::{Result, bail};
use rayon::prelude::*;
use std::ops::Range;

/// One simulated rank's persistent buffers.
struct Rank {
    /// Full parameters (stages 0-2) or the rank's shard (stage 3).
    params: Vec<f32>,
    /// Full reduced gradient (stages 0-1) or the shard (stages 2-3).
    grads: Vec<f32>,
    /// AdamW over everything (stage 0) or the shard (stages 1-3).
    opt: Optimizer,
}

struct ZeroWorkload {
    stage: usize,
    n: usize,
    ranks: Vec<Rank>,
    /// Each rank's local (unreduced) gradient.
    local: Vec<Vec<f32>>,
    pool: rayon::ThreadPool,
    /// Allocator-measured persistent bytes per rank.
    rank_bytes: Option<Vec<usize>>,
    /// Stage 3: peak transient bytes of one step, per rank.
    gather_peak: Option<usize>,
    init: Vec<f32>,
}

/// Prepares a `zero` case (`stage`, `ranks`, `params`).
pub(crate) fn prepare(case: &Case) -> Result<Box<dyn Workload>> {
    let stage = case.usize("stage")?;
    if stage > 3 {
        bail!("case {}: `stage` = {stage} is not valid; valid: 0, 1, 2, 3", case.id);
    }
    let world = super::positive(case, "ranks")?;
    let n = super::positive(case, "params")?;
    if world > n {
        bail!("case {}: more ranks ({world}) than parameters ({n})", case.id);
    }
    // Baseline per rank: params, grads, m, v; plus every rank's local gradient.
    super::ensure_memory(4.0 * n as f64 * (4.0 * world as f64 + world as f64 + 1.0))?;
    let seed = super::seed(case);
    let init = crate::util::randn(n, seed);
    let local: Vec<Vec<f32>> = (0..world)
        .map(|r| {
            let mut g = crate::util::randn(n, seed ^ (r as u64 + 1));
            g.iter_mut().for_each(|x| *x *= 1e-2);
            g
        })
        .collect();
    // The pool starts after the measurement: its threads allocate as they start.
    let mut w = ZeroWorkload {
        stage,
        n,
        ranks: Vec::new(),
        local,
        pool: rayon::ThreadPoolBuilder::new().num_threads(1).build()?,
        rank_bytes: None,
        gather_peak: None,
        init,
    };
    let mut measured = Vec::new();
    for r in 0..world {
        let (rank, bytes) = super::live_delta(|| w.new_rank(r));
        w.ranks.push(rank);
        measured.extend(bytes);
    }
    w.rank_bytes = (measured.len() == world).then_some(measured);
    w.pool = rayon::ThreadPoolBuilder::new().num_threads(world).build()?;
    Ok(Box::new(w))
}

/// Rank `r`'s shard of `n` values over `world` ranks.
fn shard(n: usize, world: usize, r: usize) -> Range<usize> {
    let s = n.div_ceil(world);
    (r * s).min(n)..((r + 1) * s).min(n)
}

impl ZeroWorkload {
    fn world(&self) -> usize {
        self.local.len()
    }

    fn new_rank(&self, r: usize) -> Rank {
        let own = shard(self.n, self.world(), r);
        let h = Kind::AdamW.default_hyper();
        let params = if self.stage == 3 { self.init[own.clone()].to_vec() } else { self.init.clone() };
        let grads = vec![0.0; if self.stage >= 2 { own.len() } else { self.n }];
        let opt = Optimizer::new(Kind::AdamW, h, if self.stage == 0 { self.n } else { own.len() });
        Rank { params, grads, opt }
    }

    /// Persistent bytes a rank of this stage must hold.
    fn expected_rank_bytes(&self, r: usize) -> usize {
        let (n, s) = (self.n, shard(self.n, self.world(), r).len());
        4 * match self.stage {
            0 => 4 * n,
            1 => n + n + 2 * s,
            2 => n + s + 2 * s,
            _ => 4 * s,
        }
    }

    /// One data-parallel step: collectives and update; stage 3 ends with
    /// the all-gather a forward pass would do, into a temporary.
    fn step(&mut self) {
        let (stage, n, world) = (self.stage, self.n, self.world());
        let inv = 1.0 / world as f32;
        let local = &self.local;
        let ranks = &mut self.ranks;
        self.pool.install(|| {
            // Reduce-scatter: rank r sums its shard over all ranks, in rank order.
            ranks.par_iter_mut().enumerate().with_max_len(1).for_each(|(r, rank)| {
                let own = shard(n, world, r);
                let dst = if stage >= 2 { &mut rank.grads[..] } else { &mut rank.grads[own.clone()] };
                reduce_into(dst, local, own);
                dst.iter_mut().for_each(|x| *x *= inv);
            });
            if stage <= 1 {
                all_gather(ranks.iter_mut().map(|r| &mut r.grads[..]).collect(), n, world);
            }
            ranks.par_iter_mut().enumerate().with_max_len(1).for_each(|(r, rank)| {
                let own = shard(n, world, r);
                match stage {
                    0 => rank.opt.step_fused(&mut rank.params, &rank.grads),
                    1 => rank.opt.step_fused(&mut rank.params[own.clone()], &rank.grads[own]),
                    2 => rank.opt.step_fused(&mut rank.params[own], &rank.grads),
                    _ => rank.opt.step_fused(&mut rank.params, &rank.grads),
                }
            });
            if stage == 1 || stage == 2 {
                all_gather(ranks.iter_mut().map(|r| &mut r.params[..]).collect(), n, world);
            }
            if stage == 3 {
                let shards: Vec<&[f32]> = ranks.iter().map(|r| &r.params[..]).collect();
                // Every rank holds its gathered copy at the same time, as
                // during a real ZeRO-3 forward; then they are released.
                let fulls: Vec<Vec<f32>> =
                    (0..world).into_par_iter().with_max_len(1).map(|_| shards.concat()).collect();
                std::hint::black_box(&fulls);
            }
        });
    }

    /// What rank `r` holds as the full parameter vector.
    fn full_params(&self, r: usize) -> Vec<f32> {
        if self.stage == 3 {
            self.ranks.iter().flat_map(|k| k.params.iter().copied()).collect()
        } else {
            self.ranks[r].params.clone()
        }
    }
}

/// `dst = sum over ranks q (in order) of local[q][range]`.
fn reduce_into(dst: &mut [f32], local: &[Vec<f32>], range: Range<usize>) {
    dst.copy_from_slice(&local[0][range.clone()]);
    for q in &local[1..] {
        dst.iter_mut().zip(&q[range.clone()]).for_each(|(d, &x)| *d += x);
    }
}

/// All-gather of full-length buffers: every rank copies each other rank's
/// own shard into its buffer. Shards are split out of each buffer so the
/// owners' shards are shared reads while the other ranges are written.
fn all_gather(bufs: Vec<&mut [f32]>, n: usize, world: usize) {
    let s = n.div_ceil(world);
    let mut owned: Vec<&[f32]> = Vec::with_capacity(world);
    let mut targets: Vec<Vec<(usize, &mut [f32])>> = Vec::with_capacity(world);
    for (r, buf) in bufs.into_iter().enumerate() {
        let mut mine = Vec::new();
        for (q, chunk) in buf.chunks_mut(s).enumerate() {
            if q == r {
                owned.push(chunk);
            } else {
                mine.push((q, chunk));
            }
        }
        targets.push(mine);
    }
    targets.into_par_iter().with_max_len(1).for_each(|mine| {
        for (q, dst) in mine {
            dst.copy_from_slice(owned[q]);
        }
    });
}

impl Workload for ZeroWorkload {
    fn verify(&mut self) -> Result<Verification> {
        let world = self.world();
        if let Some(b) = &self.rank_bytes {
            for (r, &got) in b.iter().enumerate() {
                let want = self.expected_rank_bytes(r);
                if !super::bytes_match(got, want) {
                    bail!("rank {r} holds {got} bytes by the allocator, stage {} needs {want}", self.stage);
                }
            }
        }
        // The unsharded optimizer on the rank-averaged gradient.
        let inv = 1.0 / world as f32;
        let mut avg = vec![0.0f32; self.n];
        for i in 0..self.n {
            let mut s = self.local[0][i];
            for q in &self.local[1..] {
                s += q[i];
            }
            avg[i] = s * inv;
        }
        let mut p = self.init.clone();
        let mut o = Optimizer::new(Kind::AdamW, Kind::AdamW.default_hyper(), self.n);
        for k in 0..3 {
            o.step_fused(&mut p, &avg);
            if k == 0 && self.stage == 3 {
                let (_, peak) = super::peak_during(|| self.step());
                self.gather_peak = peak.map(|b| b / world);
            } else {
                self.step();
            }
        }
        for r in 0..world {
            let got = self.full_params(r);
            if let Some(i) = got.iter().zip(&p).position(|(a, b)| a.to_bits() != b.to_bits()) {
                return Ok(Verification {
                    passed: false,
                    reference: "unsharded AdamW on the averaged gradient, bit for bit".into(),
                    max_error: Some((got[i] - p[i]).abs() as f64),
                    detail: format!("rank {r}, parameter {i}: {} vs {}", got[i], p[i]),
                });
            }
            let own = if self.stage == 0 { 0..self.n } else { shard(self.n, world, r) };
            let m = &self.ranks[r].opt.a;
            if m.iter().zip(&o.a[own]).any(|(a, b)| a.to_bits() != b.to_bits()) {
                bail!("rank {r}: first moment differs from the unsharded optimizer's");
            }
        }
        if let Some(peak) = self.gather_peak {
            // Each rank's gathered copy is n floats; allow rayon's own bookkeeping.
            let want = 4 * self.n;
            if peak + super::ALLOC_SLACK < want || peak > want + want / 8 + super::ALLOC_SLACK {
                bail!("stage 3 transient peak {peak} B per rank, expected about {want}");
            }
        }
        Ok(Verification {
            passed: true,
            reference: "unsharded AdamW on the rank-averaged gradient, bit for bit, 3 steps".into(),
            max_error: Some(0.0),
            detail: format!(
                "{world} ranks simulated in-process; all params and moments identical{}",
                if self.rank_bytes.is_some() { "; per-rank bytes = stage formula" } else { "" }
            ),
        })
    }

    fn throughput(&self) -> Vec<Throughput> {
        let (n, w) = (self.n as f64, self.world() as f64);
        // reduce-scatter reads every local gradient once and writes n;
        // an all-gather reads and writes (w-1)/w of n per rank.
        let reduce = 4.0 * n * (w + 1.0);
        let gather = 8.0 * n * (w - 1.0);
        let update = 28.0 * n * if self.stage == 0 { w } else { 1.0 };
        let bytes = match self.stage {
            0 | 1 => reduce + 2.0 * gather + update,
            2 => reduce + gather + update,
            _ => reduce + update + 8.0 * n * w,
        };
        vec![Throughput::elements(n), Throughput::bytes(bytes)]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        for _ in 0..iters {
            self.step();
        }
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        let mut m = vec![Metric::new("ranks_simulated_in_process", self.world() as f64, "")];
        let baseline = 16.0 * self.n as f64;
        if let Some(b) = &self.rank_bytes {
            let max = b.iter().copied().max().unwrap_or(0) as f64;
            m.push(Metric::new("per_rank_bytes", max, "B"));
            m.push(Metric::new("unsharded_per_rank_bytes", baseline, "B"));
            m.push(Metric::new("per_rank_vs_unsharded", max / baseline, "ratio"));
        }
        if let Some(p) = self.gather_peak {
            m.push(Metric::new("stage3_gather_peak_per_rank_bytes", p as f64, "B"));
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::ParamValue;

    #[test]
    fn every_stage_matches_the_unsharded_optimizer_bit_for_bit() {
        for stage in 0..4 {
            for ranks in [1, 3, 4] {
                let params = [("stage", stage), ("ranks", ranks), ("params", 10_001)]
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), ParamValue::Int(v)))
                    .collect();
                let mut w = prepare(&Case::new("optim", "zero", params)).unwrap();
                let v = w.verify().unwrap();
                assert!(v.passed, "stage {stage} ranks {ranks}: {}", v.detail);
                w.run(1).unwrap();
            }
        }
    }

    #[test]
    fn shards_cover_the_vector() {
        for (n, w) in [(10, 3), (8, 8), (7, 4)] {
            let total: usize = (0..w).map(|r| shard(n, w, r).len()).sum();
            assert_eq!(total, n);
        }
    }
}
