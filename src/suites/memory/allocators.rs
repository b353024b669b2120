//! The allocators compared (the system allocator, the pool, mimalloc, the
//! harness's counting allocator) behind one small trait, a per-instance
//! counting wrapper for self-checks, and the leak detector.
//!
//! Alternatives are called directly through their `GlobalAlloc` impls, not
//! installed as the global allocator, so one binary compares them all and
//! the harness keeps counting its own allocations. Calls that bypass the
//! global allocator (mimalloc) are invisible to the harness's counters; the
//! workloads count those themselves.

use super::pool::{ALIGN, Block, PoolError, PoolStats, TensorPool};
use crate::alloc::{self as counting, CountingAlloc};
use anyhow::{Result, bail};
use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Allocator names a case may ask for.
pub const ALLOCATORS: &[&str] = &["system", "pool", "mimalloc"];

/// An allocator the workloads can drive: allocate a block, free it.
pub trait BlockAlloc: Send {
    /// The handle of a live block.
    type Block: Send;
    /// A block of `size` bytes aligned to `align` (the pool always gives 64).
    fn alloc(&mut self, size: usize, align: usize, zeroed: bool) -> Result<Self::Block, PoolError>;
    /// A block for a temporary (freed before the next long-lived block);
    /// only the pool uses the hint, placing it apart from long-lived blocks.
    fn alloc_scratch(&mut self, size: usize) -> Result<Self::Block, PoolError> {
        self.alloc(size, ALIGN, false)
    }
    /// Frees a block.
    fn free(&mut self, b: Self::Block) -> Result<(), PoolError>;
    /// Start of a live block.
    fn ptr(b: &Self::Block) -> *mut u8;
    /// The pool's counters, when this is the pool.
    fn pool_stats(&self) -> Option<PoolStats> {
        None
    }
    /// The pool itself, when this is the pool.
    fn pool(&mut self) -> Option<&mut TensorPool> {
        None
    }
}

/// A block from a `GlobalAlloc`: the pointer and the layout to free it with.
#[derive(Debug)]
pub struct RawBlock {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the handle is the unique owner of its memory.
unsafe impl Send for RawBlock {}

/// Any `GlobalAlloc`, called directly.
pub struct Direct<A: GlobalAlloc>(pub A);

impl<A: GlobalAlloc + Send> BlockAlloc for Direct<A> {
    type Block = RawBlock;
    #[inline]
    fn alloc(&mut self, size: usize, align: usize, zeroed: bool) -> Result<RawBlock, PoolError> {
        if size == 0 {
            return Err(PoolError::ZeroSize);
        }
        let layout = Layout::from_size_align(size, align).map_err(|_| PoolError::OutOfMemory(size))?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { if zeroed { self.0.alloc_zeroed(layout) } else { self.0.alloc(layout) } };
        NonNull::new(p).map(|ptr| RawBlock { ptr, layout }).ok_or(PoolError::OutOfMemory(size))
    }
    #[inline]
    fn free(&mut self, b: RawBlock) -> Result<(), PoolError> {
        // SAFETY: `b` came from this allocator with this layout, and freeing
        // consumes the only handle.
        unsafe { self.0.dealloc(b.ptr.as_ptr(), b.layout) };
        Ok(())
    }
    #[inline]
    fn ptr(b: &RawBlock) -> *mut u8 {
        b.ptr.as_ptr()
    }
}

impl BlockAlloc for TensorPool {
    type Block = Block;
    #[inline]
    fn alloc(&mut self, size: usize, align: usize, zeroed: bool) -> Result<Block, PoolError> {
        debug_assert!(align <= ALIGN);
        if zeroed { self.alloc_zeroed(size) } else { TensorPool::alloc(self, size) }
    }
    fn alloc_scratch(&mut self, size: usize) -> Result<Block, PoolError> {
        TensorPool::alloc_scratch(self, size)
    }
    #[inline]
    fn free(&mut self, b: Block) -> Result<(), PoolError> {
        TensorPool::free(self, b)
    }
    #[inline]
    fn ptr(b: &Block) -> *mut u8 {
        b.as_ptr()
    }
    fn pool_stats(&self) -> Option<PoolStats> {
        Some(self.stats())
    }
    fn pool(&mut self) -> Option<&mut TensorPool> {
        Some(self)
    }
}

/// The system allocator (glibc malloc), called directly.
pub fn system() -> Direct<System> {
    Direct(System)
}

/// mimalloc, called directly.
pub fn mimalloc() -> Direct<mimalloc::MiMalloc> {
    Direct(mimalloc::MiMalloc)
}

/// The allocator under the harness's counting wrapper (mimalloc unless
/// `TFBENCH_ALLOCATOR=system`), called directly.
pub fn backend() -> Direct<counting::BackendAlloc> {
    Direct(counting::BackendAlloc)
}

/// The harness's counting allocator, called directly (for its overhead).
pub fn counting() -> Direct<CountingAlloc> {
    Direct(CountingAlloc)
}

/// Allocation counters at one moment, from any source.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Allocations so far.
    pub allocs: u64,
    /// Frees so far.
    pub frees: u64,
    /// Bytes live now.
    pub live: u64,
}

impl Counts {
    /// The process-wide counters of the global (counting) allocator.
    pub fn global() -> Self {
        let s = counting::snapshot();
        Self { allocs: s.allocs, frees: s.frees, live: s.live as u64 }
    }
}

/// What leaked between two [`Counts`] over some iterations.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Leak {
    /// Allocations not matched by a free.
    pub allocs: i64,
    /// Live bytes gained.
    pub bytes: i64,
    /// Iterations observed.
    pub iters: u64,
}

impl Leak {
    /// The difference `after - before` over `iters` iterations.
    pub fn between(before: Counts, after: Counts, iters: u64) -> Self {
        let net = |c: Counts| c.allocs as i64 - c.frees as i64;
        Self { allocs: net(after) - net(before), bytes: after.live as i64 - before.live as i64, iters }
    }
    /// Adds another observation.
    pub fn add(&mut self, other: Leak) {
        self.allocs += other.allocs;
        self.bytes += other.bytes;
        self.iters += other.iters;
    }
    /// A leak is at least one unfreed allocation per iteration on average:
    /// an occasional allocation by another thread (counters are process-wide)
    /// stays below that, a leak in the loop body does not.
    pub fn is_leak(&self) -> bool {
        self.iters > 0 && self.allocs >= self.iters as i64
    }
    /// Unfreed allocations per iteration.
    pub fn allocs_per_iter(&self) -> f64 {
        if self.iters == 0 { 0.0 } else { self.allocs as f64 / self.iters as f64 }
    }
    /// Live bytes gained per iteration.
    pub fn bytes_per_iter(&self) -> f64 {
        if self.iters == 0 { 0.0 } else { self.bytes as f64 / self.iters as f64 }
    }
    /// An error when this is a leak, naming `what`.
    pub fn check(&self, what: &str) -> Result<()> {
        if self.is_leak() {
            bail!(
                "{what} leaks: {} allocations ({} B) not freed over {} iterations",
                self.allocs,
                self.bytes,
                self.iters
            );
        }
        Ok(())
    }
    /// `leaked_allocs_per_iter` and `leaked_bytes_per_iter` metrics.
    pub fn metrics(&self) -> Vec<crate::workload::Metric> {
        use crate::workload::Metric;
        vec![
            Metric::new("leaked_allocs_per_iter", self.allocs_per_iter(), ""),
            Metric::new("leaked_bytes_per_iter", self.bytes_per_iter(), "B"),
        ]
    }
}

/// Watches the global allocator's counters across a workload's `run` calls.
/// Memory the pool keeps cached is not a leak: the pool's own count of
/// system blocks is subtracted.
#[derive(Debug, Default)]
pub struct LeakMonitor {
    /// Everything observed so far.
    pub total: Leak,
}

impl LeakMonitor {
    /// Runs `body` (which does `iters` iterations) and fails if it leaked.
    /// `pool_blocks` reads how many system blocks the pool holds, if any.
    pub fn observe(
        &mut self,
        iters: u64,
        pool_blocks: impl Fn() -> u64,
        body: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let (before, pool_before) = (Counts::global(), pool_blocks());
        body()?;
        let (after, pool_after) = (Counts::global(), pool_blocks());
        let mut leak = Leak::between(before, after, iters);
        leak.allocs -= pool_after as i64 - pool_before as i64;
        if counting::is_installed() {
            leak.check("the benchmark loop")?;
            self.total.add(leak);
        }
        Ok(())
    }
}

/// A `GlobalAlloc` with counters of its own (not process-wide), so a
/// self-check can see exactly what one workload allocated and freed, even
/// through allocators the global counters never see.
pub struct Tracked<A> {
    inner: A,
    allocs: AtomicU64,
    frees: AtomicU64,
    live: AtomicU64,
}

impl<A> Tracked<A> {
    /// Wraps `inner` with zeroed counters.
    pub fn new(inner: A) -> Self {
        Self { inner, allocs: AtomicU64::new(0), frees: AtomicU64::new(0), live: AtomicU64::new(0) }
    }
    /// The counters now.
    pub fn counts(&self) -> Counts {
        Counts {
            allocs: self.allocs.load(Relaxed),
            frees: self.frees.load(Relaxed),
            live: self.live.load(Relaxed),
        }
    }
}

// SAFETY: every call forwards to `inner` with the caller's arguments and only
// updates counters, so `inner`'s guarantees carry over.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Tracked<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's valid layout.
        let p = unsafe { self.inner.alloc(layout) };
        if !p.is_null() {
            self.allocs.fetch_add(1, Relaxed);
            self.live.fetch_add(layout.size() as u64, Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { self.inner.alloc_zeroed(layout) };
        if !p.is_null() {
            self.allocs.fetch_add(1, Relaxed);
            self.live.fetch_add(layout.size() as u64, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller allocated `ptr` here with `layout`.
        unsafe { self.inner.dealloc(ptr, layout) };
        self.frees.fetch_add(1, Relaxed);
        self.live.fetch_sub(layout.size() as u64, Relaxed);
    }
}

/// A loop body that can run against any allocator, so a self-check can
/// replay a case's exact work through a counted copy of its allocator.
pub trait Body {
    /// One pass of the work, allocating and freeing through `a`.
    fn run<A: BlockAlloc>(&mut self, a: &mut A) -> Result<()>;
}

/// Runs `body` `reps` times through a counted instance of allocator `which`
/// (a fresh pool counts its own live blocks) and returns what stayed live.
pub fn leak_check(which: &str, body: &mut impl Body, reps: u64) -> Result<Leak> {
    fn direct<G: GlobalAlloc + Send>(g: G, body: &mut impl Body, reps: u64) -> Result<Leak> {
        let mut a = Direct(Tracked::new(g));
        let before = a.0.counts();
        for _ in 0..reps {
            body.run(&mut a)?;
        }
        Ok(Leak::between(before, a.0.counts(), reps))
    }
    match which {
        "pool" => {
            let mut pool = TensorPool::default();
            for _ in 0..reps {
                body.run(&mut pool)?;
            }
            let s = pool.stats();
            Ok(Leak { allocs: s.live_blocks as i64, bytes: s.requested as i64, iters: reps })
        }
        "mimalloc" => direct(mimalloc::MiMalloc, body, reps),
        "counting" => direct(CountingAlloc, body, reps),
        _ => direct(System, body, reps),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leak_detector_flags_a_deliberate_leak_and_passes_balanced_code() {
        let mut a = Direct(Tracked::new(System));
        let before = a.0.counts();
        for _ in 0..10 {
            let b = a.alloc(100, 8, false).unwrap();
            a.free(b).unwrap();
        }
        let ok = Leak::between(before, a.0.counts(), 10);
        assert!(!ok.is_leak() && ok.allocs == 0 && ok.bytes == 0, "{ok:?}");
        assert!(ok.check("balanced").is_ok());
        let before = a.0.counts();
        let mut kept = Vec::new();
        for i in 0..10 {
            let b = a.alloc(100, 8, false).unwrap();
            if i % 2 == 0 {
                a.free(b).unwrap();
            } else {
                kept.push(b); // the deliberate leak: half the blocks stay
            }
        }
        let leak = Leak::between(before, a.0.counts(), 5);
        assert!(leak.is_leak(), "{leak:?}");
        assert_eq!((leak.allocs, leak.bytes), (5, 500));
        let err = leak.check("leaky loop").unwrap_err().to_string();
        assert!(err.contains("leaky loop leaks: 5 allocations (500 B)"), "{err}");
        // One stray allocation over many iterations is not called a leak.
        assert!(!Leak { allocs: 1, bytes: 64, iters: 100 }.is_leak());
        for b in kept {
            a.free(b).unwrap();
        }
        assert_eq!(a.0.counts().live, 0);
    }

    #[test]
    fn every_allocator_returns_aligned_writable_blocks() {
        fn check<A: BlockAlloc>(mut a: A) {
            for size in [1, 64, 1000, 4096, 1 << 20] {
                for align in [8, 64] {
                    let b = a.alloc(size, align, true).unwrap();
                    let p = A::ptr(&b);
                    assert_eq!(p as usize % align, 0);
                    // SAFETY: live block of `size` zeroed bytes.
                    let s = unsafe { std::slice::from_raw_parts_mut(p, size) };
                    assert!(s.iter().all(|&x| x == 0));
                    s.fill(7);
                    a.free(b).unwrap();
                }
            }
        }
        check(system());
        check(mimalloc());
        check(counting());
        check(TensorPool::default());
    }
}
