//! Allocation latency by size and allocator, the counting allocator's own
//! cost, tensor buffers (zeroed or not, aligned or not) and the share of
//! allocation in the time to use a large buffer.

use super::allocators::{self, BlockAlloc, Body, Leak, LeakMonitor};
use super::pool::TensorPool;
use super::{bytes_param, clock_overhead_ns, percentiles};
use crate::plan::Case;
use crate::suites::common::choice;
use crate::suites::{Throughput, Verification, Workload};
use crate::workload::Metric;
use anyhow::{Context, Result, ensure};
use std::hint::black_box;
use std::time::Instant;

/// Allocates, touches the first byte (so the block is real memory, as a
/// tensor would be) and frees, `iters` times.
struct AllocFree {
    size: usize,
    align: usize,
}

impl Body for AllocFree {
    #[inline]
    fn run<A: BlockAlloc>(&mut self, a: &mut A) -> Result<()> {
        let b = a.alloc(self.size, self.align, false)?;
        // SAFETY: the block is live and at least one byte long.
        unsafe { A::ptr(&b).write_volatile(1) };
        a.free(black_box(b))?;
        Ok(())
    }
}

/// Allocates `count` blocks at once, checks alignment and that no two
/// overlap, fills each with its own byte, reads every byte back, frees them.
fn check_blocks<A: BlockAlloc>(a: &mut A, size: usize, align: usize, count: usize) -> Result<()> {
    let mut blocks = Vec::with_capacity(count);
    for _ in 0..count {
        blocks.push(a.alloc(size, align, false)?);
    }
    let mut ranges: Vec<(usize, usize)> =
        blocks.iter().map(|b| (A::ptr(b) as usize, A::ptr(b) as usize + size)).collect();
    for &(start, _) in &ranges {
        ensure!(start % align == 0, "block at {start:#x} is not {align}-byte aligned");
    }
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        ensure!(w[0].1 <= w[1].0, "live blocks overlap: {:#x?} and {:#x?}", w[0], w[1]);
    }
    for (i, b) in blocks.iter().enumerate() {
        // SAFETY: live block of `size` bytes, no other reference to it.
        unsafe { std::ptr::write_bytes(A::ptr(b), i as u8 ^ 0xA5, size) };
    }
    for (i, b) in blocks.iter().enumerate() {
        // SAFETY: as above; written just before.
        let s = unsafe { std::slice::from_raw_parts(A::ptr(b), size) };
        let want = i as u8 ^ 0xA5;
        ensure!(s.iter().all(|&x| x == want), "block {i} of {size} B did not keep its contents");
    }
    for b in blocks {
        a.free(b)?;
    }
    Ok(())
}

/// Replays `body` through a counted copy of the allocator: every allocation
/// must be freed (counters are per instance, so the check is exact).
fn check_balanced(which: &str, body: &mut impl Body, reps: u64) -> Result<Leak> {
    let leak = allocators::leak_check(which, body, reps)?;
    ensure!(
        leak.allocs == 0 && leak.bytes == 0,
        "{which}: {} allocations ({} B) not freed",
        leak.allocs,
        leak.bytes
    );
    Ok(leak)
}

fn pool_blocks<A: BlockAlloc>(a: &A) -> u64 {
    a.pool_stats().map_or(0, |s| s.system_blocks)
}

/// `alloc` and `tracking_overhead`: one alloc/free pair per iteration.
struct AllocLoop<A> {
    a: A,
    which: &'static str,
    size: usize,
    leaks: LeakMonitor,
    /// Also compare with the counting wrapper's backend interleaved
    /// (tracking overhead).
    paired_with_backend: bool,
}

fn make_loop(which: &'static str, size: usize, paired: bool) -> Box<dyn Workload> {
    fn b<A: BlockAlloc + 'static>(a: A, which: &'static str, size: usize, paired: bool) -> Box<dyn Workload> {
        Box::new(AllocLoop { a, which, size, leaks: LeakMonitor::default(), paired_with_backend: paired })
    }
    match which {
        "pool" => b(TensorPool::default(), which, size, paired),
        "mimalloc" => b(allocators::mimalloc(), which, size, paired),
        "counting" => b(allocators::counting(), which, size, paired),
        "backend" => b(allocators::backend(), which, size, paired),
        _ => b(allocators::system(), which, size, paired),
    }
}

pub(crate) fn prepare_alloc(case: &Case) -> Result<Box<dyn Workload>> {
    let which = choice(case, "allocator", allocators::ALLOCATORS)?;
    Ok(make_loop(which, bytes_param(case, "size")?, false))
}

/// Valid `tracker` values of `tracking_overhead`.
pub(super) const TRACKERS: &[&str] = &["backend", "counting"];

pub(crate) fn prepare_tracking(case: &Case) -> Result<Box<dyn Workload>> {
    let which = choice(case, "tracker", TRACKERS)?;
    Ok(make_loop(which, bytes_param(case, "size")?, true))
}

/// Median ns of one alloc/free pair over `n` pairs, for `a`.
fn pair_ns<A: BlockAlloc>(a: &mut A, size: usize, n: u32) -> Result<f64> {
    let mut body = AllocFree { size, align: 64 };
    let t = Instant::now();
    for _ in 0..n {
        body.run(a)?;
    }
    Ok(t.elapsed().as_nanos() as f64 / n as f64)
}

impl<A: BlockAlloc> Workload for AllocLoop<A> {
    fn verify(&mut self) -> Result<Verification> {
        let count = ((256usize << 20) / self.size).clamp(2, 16);
        check_blocks(&mut self.a, self.size, 64, count)?;
        let reps = 8;
        check_balanced(self.which, &mut AllocFree { size: self.size, align: 64 }, reps)?;
        Ok(Verification {
            passed: true,
            reference: format!(
                "{count} live blocks written and read back; a counted replay of {reps} iterations"
            ),
            max_error: None,
            detail: format!(
                "{}: 64-byte aligned, no overlap, contents kept, every allocation freed",
                self.which
            ),
        })
    }

    fn throughput(&self) -> Vec<Throughput> {
        vec![Throughput::items(1.0), Throughput::bytes(self.size as f64)]
    }

    fn run(&mut self, iters: u64) -> Result<()> {
        // The leak check below reads the global counters, so this loop is
        // timed with counting on (the harness turns it off for samples).
        let _counted = crate::alloc::set_counting(true);
        let (a, size) = (&mut self.a, self.size);
        let blocks_before = pool_blocks(a);
        let mut body = AllocFree { size, align: 64 };
        let before = allocators::Counts::global();
        for _ in 0..iters {
            body.run(a)?;
        }
        let after = allocators::Counts::global();
        let mut leak = Leak::between(before, after, iters);
        leak.allocs -= pool_blocks(a) as i64 - blocks_before as i64;
        if crate::alloc::is_installed() && self.which != "counting" {
            leak.check("the allocation loop")?;
            self.leaks.total.add(leak);
        }
        Ok(())
    }

    fn metrics(&mut self) -> Vec<Metric> {
        let clock = clock_overhead_ns();
        let n = if self.size >= 1 << 20 { 200 } else { 2000 };
        let mut alloc_ns = Vec::with_capacity(n);
        let mut free_ns = Vec::with_capacity(n);
        for _ in 0..n {
            let t = Instant::now();
            let b = self.a.alloc(self.size, 64, false);
            let t_alloc = t.elapsed().as_nanos() as f64;
            let Ok(b) = b else { return Vec::new() };
            // SAFETY: live block, at least one byte.
            unsafe { A::ptr(&b).write_volatile(1) };
            let t = Instant::now();
            let freed = self.a.free(b);
            let t_free = t.elapsed().as_nanos() as f64;
            if freed.is_err() {
                return Vec::new();
            }
            alloc_ns.push((t_alloc - clock).max(0.0));
            free_ns.push((t_free - clock).max(0.0));
        }
        let mut m = percentiles("alloc_latency", &mut alloc_ns);
        m.extend(percentiles("free_latency", &mut free_ns));
        m.push(Metric::new("clock_overhead_subtracted", clock, "ns"));
        if let Some(s) = self.a.pool_stats() {
            m.push(Metric::new("hit_rate", s.hit_rate(), "ratio"));
        }
        if self.paired_with_backend {
            // Interleaved rounds, so drift hits both sides alike.
            let (mut with, mut without) = (Vec::new(), Vec::new());
            let mut sys = allocators::backend();
            for _ in 0..15 {
                let (Ok(w), Ok(s)) =
                    (pair_ns(&mut allocators::counting(), self.size, 500), pair_ns(&mut sys, self.size, 500))
                else {
                    return m;
                };
                with.push(w);
                without.push(s);
            }
            with.sort_by(f64::total_cmp);
            without.sort_by(f64::total_cmp);
            let (w, s) = (with[7], without[7]);
            m.push(Metric::new("counting_pair_ns", w, "ns"));
            m.push(Metric::new("backend_pair_ns", s, "ns"));
            m.push(Metric::new("tracking_overhead_ns", w - s, "ns"));
            m.push(Metric::new("tracking_overhead_pct", 100.0 * (w - s) / s, "%"));
        }
        m.extend(self.leaks.total.metrics());
        m
    }
}

/// `tensor_alloc`: an f32 buffer from the global allocator, zeroed or not,
/// 64-byte or naturally (4-byte) aligned, one value written per 4 KiB page so
/// the pages are really there (a `calloc`ed buffer defers that cost to here).
struct TensorAlloc {
    elements: usize,
    zeroed: bool,
    align: usize,
    leaks: LeakMonitor,
}

/// Valid `init` values of `tensor_alloc`.
pub(super) const INITS: &[&str] = &["uninit", "zeroed"];
/// Valid `align` values of `tensor_alloc`, in bytes.
pub(super) const ALIGNS: &[&str] = &["4", "64"];

pub(crate) fn prepare_tensor_alloc(case: &Case) -> Result<Box<dyn Workload>> {
    let zeroed = choice(case, "init", INITS)? == "zeroed";
    let align = match choice(case, "align", ALIGNS)? {
        "64" => 64,
        _ => 4,
    };
    let elements = case.usize("elements")?;
    ensure!(elements > 0, "case {}: `elements` must be positive", case.id);
    Ok(Box::new(TensorAlloc { elements, zeroed, align, leaks: LeakMonitor::default() }))
}

const PAGE_F32: usize = 1024;

impl TensorAlloc {
    fn layout(&self) -> Result<std::alloc::Layout> {
        std::alloc::Layout::from_size_align(self.elements * 4, self.align).context("tensor layout")
    }
    /// Allocates, writes a value per page, checks them, frees; returns the sum.
    fn once(&self, check_zero: bool) -> Result<f32> {
        let layout = self.layout()?;
        // SAFETY: non-zero size (elements > 0).
        let p =
            unsafe { if self.zeroed { std::alloc::alloc_zeroed(layout) } else { std::alloc::alloc(layout) } };
        ensure!(!p.is_null(), "allocation of {} B failed", layout.size());
        let p = p.cast::<f32>();
        let mut result = Ok(0.0f32);
        if check_zero && self.zeroed {
            // SAFETY: zeroed allocation of `elements` f32 (all-zero bits are 0.0).
            let s = unsafe { std::slice::from_raw_parts(p, self.elements) };
            if let Some(i) = s.iter().position(|&x| x != 0.0) {
                result = Err(anyhow::anyhow!("zeroed buffer has {} at element {i}", s[i]));
            }
        }
        let mut sum = 0.0f32;
        for i in (0..self.elements).step_by(PAGE_F32) {
            // SAFETY: `i < elements`, inside the allocation.
            unsafe {
                p.add(i).write(1.0);
                sum += p.add(i).read();
            }
        }
        // SAFETY: allocated above with this layout.
        unsafe { std::alloc::dealloc(p.cast(), layout) };
        result.map(|_| sum)
    }
}

impl Workload for TensorAlloc {
    fn verify(&mut self) -> Result<Verification> {
        let sum = self.once(true)?;
        let pages = self.elements.div_ceil(PAGE_F32);
        ensure!(sum == pages as f32, "wrote {pages} pages, read back a sum of {sum}");
        let layout = self.layout()?;
        // SAFETY: non-zero size; freed right away.
        let p = unsafe { std::alloc::alloc(layout) };
        ensure!(
            !p.is_null() && (p as usize).is_multiple_of(self.align),
            "buffer not {}-byte aligned",
            self.align
        );
        // SAFETY: allocated just above with this layout.
        unsafe { std::alloc::dealloc(p, layout) };
        Ok(Verification::pass(format!(
            "{}{} pages written and read back, {}-byte alignment",
            if self.zeroed { "every element is 0.0 before writing; " } else { "" },
            pages,
            self.align
        )))
    }
    fn throughput(&self) -> Vec<Throughput> {
        vec![Throughput::items(1.0), Throughput::bytes(self.elements as f64 * 4.0)]
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        let mut monitor = std::mem::take(&mut self.leaks);
        let this = &*self;
        let r = monitor.observe(
            iters,
            || 0,
            || {
                for _ in 0..iters {
                    black_box(this.once(false)?);
                }
                Ok(())
            },
        );
        self.leaks = monitor;
        r
    }
    fn metrics(&mut self) -> Vec<Metric> {
        self.leaks.total.metrics()
    }
}

/// `alloc_overhead`: allocate, write every byte, free; the metric compares
/// it with writing the same block again while it is allocated and resident.
struct Overhead<A> {
    a: A,
    which: &'static str,
    size: usize,
    leaks: LeakMonitor,
}

pub(crate) fn prepare_overhead(case: &Case) -> Result<Box<dyn Workload>> {
    let which = choice(case, "allocator", allocators::ALLOCATORS)?;
    let size = bytes_param(case, "size")?;
    fn b<A: BlockAlloc + 'static>(a: A, which: &'static str, size: usize) -> Box<dyn Workload> {
        Box::new(Overhead { a, which, size, leaks: LeakMonitor::default() })
    }
    Ok(match which {
        "pool" => b(TensorPool::default(), which, size),
        "mimalloc" => b(allocators::mimalloc(), which, size),
        _ => b(allocators::system(), which, size),
    })
}

struct AllocTouch {
    size: usize,
}

impl Body for AllocTouch {
    #[inline]
    fn run<A: BlockAlloc>(&mut self, a: &mut A) -> Result<()> {
        let b = a.alloc(self.size, 64, false)?;
        // SAFETY: live block of `size` bytes.
        unsafe { std::ptr::write_bytes(A::ptr(&b), 0x5A, self.size) };
        a.free(black_box(b))?;
        Ok(())
    }
}

impl<A: BlockAlloc> Workload for Overhead<A> {
    fn verify(&mut self) -> Result<Verification> {
        check_blocks(&mut self.a, self.size, 64, 2)?;
        check_balanced(self.which, &mut AllocTouch { size: self.size }, 3)?;
        Ok(Verification::pass(
            "2 live blocks written in full and read back; a counted replay frees everything",
        ))
    }
    fn throughput(&self) -> Vec<Throughput> {
        vec![Throughput::bytes(self.size as f64)]
    }
    fn run(&mut self, iters: u64) -> Result<()> {
        // The leak check below reads the global counters, so this loop is
        // timed with counting on (the harness turns it off for samples).
        let _counted = crate::alloc::set_counting(true);
        let before = pool_blocks(&self.a);
        let c = allocators::Counts::global();
        let mut body = AllocTouch { size: self.size };
        for _ in 0..iters {
            body.run(&mut self.a)?;
        }
        let mut leak = Leak::between(c, allocators::Counts::global(), iters);
        leak.allocs -= pool_blocks(&self.a) as i64 - before as i64;
        if crate::alloc::is_installed() {
            leak.check("the allocate-and-write loop")?;
            self.leaks.total.add(leak);
        }
        Ok(())
    }
    fn metrics(&mut self) -> Vec<Metric> {
        // Per round, on one block: allocate, write it (first touch: page
        // faults when the allocator handed out fresh memory), write it again
        // (resident), free. Overhead = allocate + free + (first - second
        // write). Comparing two writes of the same block keeps placement,
        // page size and cache state alike; an earlier version compared with
        // a separate resident buffer and read -16% to +27% from that alone.
        // Medians over rounds that fill about 0.4 s (15 to 400).
        let rounds = ((0.4e9 / (self.size as f64 / 4.0).max(1.0)) as usize).clamp(15, 400);
        let (mut calls, mut first, mut second) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..rounds {
            let t0 = Instant::now();
            let Ok(b) = self.a.alloc(self.size, 64, false) else { return Vec::new() };
            let t1 = Instant::now();
            // SAFETY: live block of `size` bytes.
            unsafe { std::ptr::write_bytes(A::ptr(&b), 0x5A, self.size) };
            let t2 = Instant::now();
            // SAFETY: as above.
            unsafe { std::ptr::write_bytes(black_box(A::ptr(&b)), 0xA5, self.size) };
            let t3 = Instant::now();
            if self.a.free(black_box(b)).is_err() {
                return Vec::new();
            }
            let t4 = Instant::now();
            let ns = |d: std::time::Duration| d.as_nanos() as f64;
            calls.push(ns(t1 - t0) + ns(t4 - t3));
            first.push(ns(t2 - t1));
            second.push(ns(t3 - t2));
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (c, f, t) = (median(&mut calls), median(&mut first), median(&mut second));
        let overhead = c + (f - t);
        let mut m = vec![
            Metric::new("touch_resident_ns", t, "ns"),
            Metric::new("first_touch_ns", f, "ns"),
            Metric::new("alloc_free_calls_ns", c, "ns"),
            Metric::new("alloc_overhead_pct", 100.0 * overhead / t, "%"),
            Metric::new("overhead_rounds", rounds as f64, ""),
        ];
        m.extend(self.leaks.total.metrics());
        m
    }
}
