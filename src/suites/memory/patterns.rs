//! Allocation patterns replayed against each allocator (sequential, random,
//! transformer-like mixed) and the pool under a budget.
//!
//! A pattern is a list of operations generated once from the case's seed,
//! so every allocator replays exactly the same requests. The random pattern
//! has eight different lists used in turn, so a cache cannot just memorise
//! one sequence.

use super::allocators::{self, BlockAlloc, Body, Leak, LeakMonitor};
use super::pool::{PoolError, TensorPool, external_fragmentation};
use crate::model::config::ModelConfig;
use crate::plan::Case;
use crate::suites::common::{choice, seed};
use crate::suites::{Throughput, Verification, Workload};
use crate::workload::Metric;
use anyhow::{Result, bail, ensure};
use rand::RngExt;

/// One step of a pattern.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Op {
    /// Allocate `size` bytes into `slot`; `scratch` marks a temporary
    /// (freed before the next long-lived block), a hint only the pool uses.
    Alloc { slot: u32, size: usize, scratch: bool },
    /// Free the block in `slot`.
    Free { slot: u32 },
}

/// Operations plus the slot count they need and their peak requested bytes.
#[derive(Debug, Clone, Default)]
pub(crate) struct OpList {
    pub ops: Vec<Op>,
    pub slots: usize,
    pub peak: usize,
    pub allocs: usize,
}

impl OpList {
    fn build(ops: Vec<Op>) -> Self {
        let (mut live, mut peak, mut allocs, mut slots) = (0usize, 0usize, 0, 0usize);
        let mut sizes = std::collections::HashMap::new();
        for op in &ops {
            match *op {
                Op::Alloc { slot, size, .. } => {
                    live += size;
                    peak = peak.max(live);
                    allocs += 1;
                    slots = slots.max(slot as usize + 1);
                    sizes.insert(slot, size);
                }
                Op::Free { slot } => live -= sizes.remove(&slot).unwrap_or(0),
            }
        }
        Self { ops, slots, peak, allocs }
    }
}

/// Sizes 64 B to 1 MiB cycled, all allocated, then all freed in order.
pub(crate) fn sequential() -> OpList {
    let sizes = [64, 256, 1024, 4096, 16384, 65536, 262_144, 1 << 20];
    let n = 512u32;
    let mut ops: Vec<Op> = (0..n)
        .map(|i| Op::Alloc { slot: i, size: sizes[i as usize % sizes.len()], scratch: false })
        .collect();
    ops.extend((0..n).map(|slot| Op::Free { slot }));
    OpList::build(ops)
}

/// Seeded interleaved allocs and frees, sizes log-uniform in [64 B, 1 MiB],
/// at most 256 live; whatever is live at the end is freed.
pub(crate) fn random(seed: u64, steps: usize) -> OpList {
    let mut rng = crate::util::rng(seed);
    let mut live: Vec<u32> = Vec::new();
    let mut free_slots: Vec<u32> = (0..256).rev().collect();
    let mut ops = Vec::with_capacity(steps + 256);
    for _ in 0..steps {
        let alloc = live.is_empty() || (!free_slots.is_empty() && rng.random_bool(0.5));
        if alloc {
            let slot = free_slots.pop().unwrap_or(0);
            let size = (64.0 * 2f64.powf(rng.random::<f64>() * 14.0)) as usize;
            ops.push(Op::Alloc { slot, size, scratch: false });
            live.push(slot);
        } else {
            let slot = live.swap_remove(rng.random_range(0..live.len()));
            ops.push(Op::Free { slot });
            free_slots.push(slot);
        }
    }
    ops.extend(live.into_iter().map(|slot| Op::Free { slot }));
    OpList::build(ops)
}

/// One forward pass's allocations of a transformer (f32): per layer, the
/// activations kept for backward (residual stream, FFN input) and the
/// temporaries freed at the end of the layer (norm output, QKV, attention
/// scores and probabilities, attention output, FFN activation, FFN output);
/// then the logits; then the kept activations freed in reverse, as a
/// backward pass would. Weights are separate (long-lived, see `weights`).
pub(crate) fn mixed(m: &ModelConfig, batch: usize, seq: usize) -> OpList {
    let t = batch * seq;
    let (h, f) = (m.hidden * 4, m.ffn * 4);
    let kv = m.kv_heads * m.head_dim() * 4;
    let mut ops = Vec::new();
    let mut next = 0u32;
    let mut alloc = |ops: &mut Vec<Op>, size: usize, scratch: bool| {
        let slot = next;
        next += 1;
        ops.push(Op::Alloc { slot, size, scratch });
        slot
    };
    let (keep, temp) = (false, true);
    let mut kept = vec![alloc(&mut ops, t * h, keep)]; // embeddings
    for _ in 0..m.layers {
        let temps = [
            alloc(&mut ops, t * h, temp),                           // norm 1
            alloc(&mut ops, t * (h + 2 * kv), temp),                // qkv
            alloc(&mut ops, batch * m.heads * seq * seq * 4, temp), // scores
            alloc(&mut ops, batch * m.heads * seq * seq * 4, temp), // probabilities
            alloc(&mut ops, t * h, temp),                           // attention output
        ];
        kept.push(alloc(&mut ops, t * h, keep)); // residual after attention
        let n2 = alloc(&mut ops, t * h, temp);
        kept.push(alloc(&mut ops, t * f, keep)); // FFN up (kept for backward)
        let act = alloc(&mut ops, t * f, temp);
        let down = alloc(&mut ops, t * h, temp);
        kept.push(alloc(&mut ops, t * h, keep)); // residual after FFN
        for slot in temps.into_iter().chain([n2, act, down]) {
            ops.push(Op::Free { slot });
        }
    }
    let logits = alloc(&mut ops, t * m.vocab * 4, temp);
    ops.push(Op::Free { slot: logits });
    ops.extend(kept.into_iter().rev().map(|slot| Op::Free { slot }));
    OpList::build(ops)
}

/// Writes a tag at both ends of a fresh block; a block handed out twice
/// while live, or written past its end by a neighbour, breaks a tag.
fn tag(p: *mut u8, size: usize, tag: u64) {
    // SAFETY: live block of `size >= 16` bytes; unaligned writes allowed.
    unsafe {
        p.cast::<u64>().write_unaligned(tag);
        p.add(size - 8).cast::<u64>().write_unaligned(!tag);
    }
}

fn tag_ok(p: *mut u8, size: usize, tag: u64) -> bool {
    // SAFETY: as in `tag`.
    unsafe {
        p.cast::<u64>().read_unaligned() == tag && p.add(size - 8).cast::<u64>().read_unaligned() == !tag
    }
}

/// What a replay saw.
#[derive(Debug, Default, Clone, Copy)]
struct ReplayStats {
    refusals: u64,
    /// Sum over alloc steps of requested / held (pool only).
    util_sum: f64,
    util_n: u64,
}

/// Replays `list` through `a`, `live` holding the blocks by slot. With
/// `check`, tags every block and checks the tag when it is freed. A budget
/// refusal is counted (the pattern goes on without that block); any other
/// error stops the replay. With `hints`, scratch allocations go through
/// [`BlockAlloc::alloc_scratch`].
fn replay<A: BlockAlloc>(
    a: &mut A,
    live: &mut [Option<(A::Block, usize)>],
    list: &OpList,
    check: bool,
    sample_util: bool,
    hints: bool,
) -> Result<ReplayStats> {
    let mut st = ReplayStats::default();
    for (i, op) in list.ops.iter().enumerate() {
        match *op {
            Op::Alloc { slot, size, scratch } => {
                match if scratch && hints { a.alloc_scratch(size) } else { a.alloc(size, 64, false) } {
                    Ok(b) => {
                        if check {
                            tag(A::ptr(&b), size, (slot as u64) << 32 | i as u64);
                        }
                        live[slot as usize] = Some((b, i));
                        if sample_util && let Some(s) = a.pool_stats() {
                            st.util_sum += s.utilization();
                            st.util_n += 1;
                        }
                    }
                    Err(PoolError::OverBudget { .. }) => st.refusals += 1,
                    Err(e) => return Err(e.into()),
                }
            }
            Op::Free { slot } => {
                if let Some((b, at)) = live[slot as usize].take() {
                    if check {
                        let size = match list.ops[at] {
                            Op::Alloc { size, .. } => size,
                            Op::Free { .. } => 0,
                        };
                        ensure!(
                            tag_ok(A::ptr(&b), size, (slot as u64) << 32 | at as u64),
                            "block of {size} B (step {at}) was overwritten while live"
                        );
                    }
                    a.free(b)?;
                }
            }
        }
    }
    Ok(st)
}

/// A pattern replay through any allocator, for the counted leak check.
struct ReplayBody<'a> {
    lists: &'a [OpList],
    weights: &'a [usize],
}

impl Body for ReplayBody<'_> {
    fn run<A: BlockAlloc>(&mut self, a: &mut A) -> Result<()> {
        let mut w = Vec::new();
        for &s in self.weights {
            w.push(a.alloc(s, 64, false)?);
        }
        for list in self.lists {
            let mut live: Vec<Option<(A::Block, usize)>> = (0..list.slots).map(|_| None).collect();
            replay(a, &mut live, list, true, false, true)?;
        }
        for b in w {
            a.free(b)?;
        }
        Ok(())
    }
}

struct Pattern<A: BlockAlloc> {
    a: A,
    which: &'static str,
    name: &'static str,
    lists: Vec<OpList>,
    next: usize,
    live: Vec<Option<(A::Block, usize)>>,
    weight_sizes: Vec<usize>,
    weights: Vec<A::Block>,
    budget: Option<usize>,
    refusals: u64,
    iters: u64,
    leaks: LeakMonitor,
}

impl<A: BlockAlloc> Drop for Pattern<A> {
    fn drop(&mut self) {
        for (b, _) in self.live.iter_mut().filter_map(Option::take) {
            let _ = self.a.free(b);
        }
        for b in self.weights.drain(..) {
            let _ = self.a.free(b);
        }
    }
}

fn boxed<A: BlockAlloc + 'static>(
    mut a: A,
    which: &'static str,
    name: &'static str,
    lists: Vec<OpList>,
    weight_sizes: Vec<usize>,
    budget: Option<usize>,
) -> Result<Box<dyn Workload>> {
    let slots = lists.iter().map(|l| l.slots).max().unwrap_or(0);
    let mut weights = Vec::new();
    for &s in &weight_sizes {
        weights.push(a.alloc(s, 64, false)?);
    }
    let live = (0..slots).map(|_| None).collect();
    Ok(Box::new(Pattern {
        a,
        which,
        name,
        lists,
        next: 0,
        live,
        weight_sizes,
        weights,
        budget,
        refusals: 0,
        iters: 0,
        leaks: LeakMonitor::default(),
    }))
}

/// Valid `pattern` values.
pub(super) const PATTERNS: &[&str] = &["sequential", "random", "mixed"];

pub(crate) fn prepare_pattern(case: &Case) -> Result<Box<dyn Workload>> {
    let which = choice(case, "allocator", allocators::ALLOCATORS)?;
    let name = choice(case, "pattern", PATTERNS)?;
    let (lists, weights) = match name {
        "sequential" => (vec![sequential()], Vec::new()),
        "random" => ((0..8).map(|k| random(seed(case) ^ k, 2000)).collect(), Vec::new()),
        _ => {
            let m = ModelConfig::preset(&case.str("model")?)?;
            let dims = case.shape("shape")?;
            let &[batch, seq] = dims.as_slice() else {
                bail!("case {}: `shape` must be BATCHxSEQ, got {} dimensions", case.id, dims.len());
            };
            let weights = m.weights().iter().map(|w| w.numel() * 4).collect();
            (vec![mixed(&m, batch, seq)], weights)
        }
    };
    match which {
        "pool" => boxed(TensorPool::default(), which, name, lists, weights, None),
        "mimalloc" => boxed(allocators::mimalloc(), which, name, lists, weights, None),
        _ => boxed(allocators::system(), which, name, lists, weights, None),
    }
}

/// `pool_pressure`: random requests (4 KiB to 2 MiB, 70% allocations) until
/// `fill` percent of the budget is asked for, then everything is freed.
pub(crate) fn prepare_pressure(case: &Case) -> Result<Box<dyn Workload>> {
    let fill = case.usize("fill")?;
    let budget = super::bytes_param(case, "budget")?;
    ensure!((1..=1000).contains(&fill), "case {}: `fill` is a percentage of the budget, 1 to 1000", case.id);
    let target = budget as f64 * fill as f64 / 100.0;
    let mut rng = crate::util::rng(seed(case));
    let (mut ops, mut live, mut asked, mut next) = (Vec::new(), Vec::<(u32, usize)>::new(), 0usize, 0u32);
    while (asked as f64) < target {
        if live.is_empty() || rng.random_bool(0.7) {
            let size = (4096.0 * 2f64.powf(rng.random::<f64>() * 9.0)) as usize;
            ops.push(Op::Alloc { slot: next, size, scratch: false });
            live.push((next, size));
            asked += size;
            next += 1;
        } else {
            let (slot, size) = live.swap_remove(rng.random_range(0..live.len()));
            ops.push(Op::Free { slot });
            asked -= size;
        }
    }
    ops.extend(live.into_iter().map(|(slot, _)| Op::Free { slot }));
    boxed(TensorPool::new(budget), "pool", "pressure", vec![OpList::build(ops)], Vec::new(), Some(budget))
}

/// Pool fragmentation after the weights and three passes of every list on a
/// fresh pool that places scratch blocks like any other.
fn fragmentation_without_hints(lists: &[OpList], weights: &[usize]) -> Result<f64> {
    let mut pool = TensorPool::default();
    let mut w = Vec::new();
    for &s in weights {
        w.push(pool.alloc(s)?);
    }
    for list in lists.iter().cycle().take(3 * lists.len()) {
        let mut live: Vec<Option<(super::pool::Block, usize)>> = (0..list.slots).map(|_| None).collect();
        replay(&mut pool, &mut live, list, false, false, false)?;
    }
    for b in w {
        pool.free(b)?;
    }
    Ok(pool.stats().fragmentation())
}

impl<A: BlockAlloc> Pattern<A> {
    fn pool_blocks(&self) -> u64 {
        self.a.pool_stats().map_or(0, |s| s.system_blocks)
    }
}

impl<A: BlockAlloc> Workload for Pattern<A> {
    fn verify(&mut self) -> Result<Verification> {
        let lists: Vec<OpList> = self.lists.clone();
        let reference;
        if let Some(budget) = self.budget {
            // Replay on a fresh pool with the same budget, checking each
            // refusal was forced: the live blocks plus the request exceed it.
            let mut pool = TensorPool::new(budget);
            let list = &lists[0];
            let mut live: Vec<Option<(super::pool::Block, usize)>> = (0..list.slots).map(|_| None).collect();
            let mut refused = 0;
            for op in &list.ops {
                match *op {
                    Op::Alloc { slot, size, .. } => match pool.alloc(size) {
                        Ok(b) => live[slot as usize] = Some((b, 0)),
                        Err(PoolError::OverBudget { class, in_use, held, budget: b, .. }) => {
                            // Forced: after giving back all cached memory, what
                            // is still held plus the request exceeds the budget,
                            // and no free extent could have served it.
                            let s = pool.stats();
                            ensure!(
                                held + class > b && s.held == held && held >= in_use,
                                "refused {size} B with {held} B held ({in_use} B in use) under {b} B"
                            );
                            ensure!(
                                pool.largest_free_extent() < size,
                                "refused {size} B while a free extent of {} B could hold it",
                                pool.largest_free_extent()
                            );
                            refused += 1;
                        }
                        Err(e) => return Err(e.into()),
                    },
                    Op::Free { slot } => {
                        if let Some((b, _)) = live[slot as usize].take() {
                            pool.free(b)?;
                        }
                    }
                }
                ensure!(
                    pool.stats().held <= budget,
                    "pool holds {} B over its {budget} B budget",
                    pool.stats().held
                );
            }
            let needed_over = list.peak > budget;
            ensure!(
                !needed_over || refused > 0,
                "peak need {} B > budget {budget} B but nothing refused",
                list.peak
            );
            reference = format!(
                "fresh pool with the same budget: held never above {budget} B, {refused} refusals each forced (held after giving back the cache + request > budget, no free extent large enough)"
            );
        } else {
            reference = "tags at both ends of every block checked at its free".to_string();
        }
        // Warm the case's own allocator with every list (untimed), so the
        // pool's cache and bookkeeping reach their steady size here and the
        // leak watch on the timed loop sees only real leaks.
        for list in &lists {
            replay(&mut self.a, &mut self.live, list, true, false, true)?;
            ensure!(self.live.iter().all(Option::is_none), "blocks left live after a pass");
        }
        // A counted replay (tags checked) must free every allocation.
        let leak = allocators::leak_check(
            self.which,
            &mut ReplayBody { lists: &lists, weights: &self.weight_sizes },
            2,
        )?;
        ensure!(leak.allocs == 0, "{} allocations ({} B) not freed by the pattern", leak.allocs, leak.bytes);
        Ok(Verification {
            passed: true,
            reference: format!("{}; a counted replay of the {} pattern", reference, self.name),
            max_error: None,
            detail: format!(
                "{} ops, every allocation freed",
                lists.iter().map(|l| l.ops.len()).sum::<usize>()
            ),
        })
    }

    fn throughput(&self) -> Vec<Throughput> {
        let n = self.lists.iter().map(|l| l.allocs).sum::<usize>() as f64 / self.lists.len() as f64;
        vec![Throughput::items(n)]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        // The leak check below reads the global counters, so this loop is
        // timed with counting on (the harness turns it off for samples).
        let _counted = crate::alloc::set_counting(true);
        let (before, blocks) = (allocators::Counts::global(), self.pool_blocks());
        for _ in 0..iters {
            let list = &self.lists[self.next];
            self.next = (self.next + 1) % self.lists.len();
            let st = replay(&mut self.a, &mut self.live, list, false, false, true)?;
            self.refusals += st.refusals;
        }
        self.iters += iters;
        let mut leak = Leak::between(before, allocators::Counts::global(), iters);
        leak.allocs -= self.pool_blocks() as i64 - blocks as i64;
        if crate::alloc::is_installed() {
            leak.check("the pattern")?;
            self.leaks.total.add(leak);
        }
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        let peak =
            self.lists.iter().map(|l| l.peak).max().unwrap_or(0) + self.weight_sizes.iter().sum::<usize>();
        let mut m = vec![Metric::new("pattern_peak_requested_bytes", peak as f64, "B")];
        if let Some(s) = self.a.pool_stats() {
            m.push(Metric::new("hit_rate", s.hit_rate(), "ratio"));
            m.push(Metric::new("fragmentation", s.fragmentation(), "ratio"));
            m.push(Metric::new("peak_held_bytes", s.peak_held as f64, "B"));
            // One more (untimed) pass sampling requested / held at every allocation.
            let list = self.lists[self.next].clone();
            if let Ok(st) = replay(&mut self.a, &mut self.live, &list, false, true, true)
                && st.util_n > 0
            {
                m.push(Metric::new("utilization_mean", st.util_sum / st.util_n as f64, "ratio"));
            }
            if let Some(pool) = self.a.pool() {
                m.push(Metric::new(
                    "external_fragmentation",
                    external_fragmentation(&pool.free_block_sizes()),
                    "ratio",
                ));
            }
            // The same replay on a fresh pool that ignores the scratch hints,
            // so the hints' share of the figure is visible.
            let hinted = self
                .lists
                .iter()
                .flat_map(|l| &l.ops)
                .any(|op| matches!(op, Op::Alloc { scratch: true, .. }));
            if hinted && let Ok(f) = fragmentation_without_hints(&self.lists, &self.weight_sizes) {
                m.push(Metric::new("fragmentation_without_hints", f, "ratio"));
            }
        }
        if let Some(budget) = self.budget {
            let per = if self.iters == 0 { 0.0 } else { self.refusals as f64 / self.iters as f64 };
            m.push(Metric::new("refusals_per_iter", per, ""));
            if let Some(s) = self.a.pool_stats() {
                m.push(Metric::new("peak_held_over_budget", s.peak_held as f64 / budget as f64, "ratio"));
                m.push(Metric::new("trimmed_blocks", s.trimmed_blocks as f64, ""));
            }
        }
        m.extend(self.leaks.total.metrics());
        m
    }
}

#[cfg(test)]
mod tests;
