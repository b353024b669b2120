//! A counting global allocator: allocation count, bytes allocated, live and
//! peak bytes. The `tfbench` binary installs it; library users may too.
//!
//! Counters are process-wide (not per thread) because rayon workers allocate
//! on behalf of the case being measured.
//!
//! Counting can be switched off ([`set_counting`]): the harness times samples
//! with counting off and counts allocations in a separate pass. Five shared
//! atomic read-modify-writes per allocation cost allocation-heavy code 40%
//! on one thread and made it slower on two threads than on one (the counter
//! cache lines bounce between cores), so counted samples would measure the
//! counter, not the workload. Switched off, each call pays one load of a
//! flag nobody writes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, Ordering::Relaxed};

static ENABLED: AtomicBool = AtomicBool::new(true);
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static FREES: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
/// Where the live level starts. A block allocated while counting was off and
/// freed while it is on takes the level below what was counted; the offset
/// keeps it positive, and only differences between readings mean anything.
const LIVE_ORIGIN: isize = 1 << 48;
static LIVE: AtomicIsize = AtomicIsize::new(LIVE_ORIGIN);
static PEAK: AtomicIsize = AtomicIsize::new(LIVE_ORIGIN);

/// The system allocator with counters. Install with
/// `#[global_allocator] static A: CountingAlloc = CountingAlloc;`.
pub struct CountingAlloc;

#[inline]
fn on_alloc(size: usize) {
    if !ENABLED.load(Relaxed) {
        return;
    }
    ALLOCS.fetch_add(1, Relaxed);
    BYTES.fetch_add(size as u64, Relaxed);
    let size = size as isize;
    let live = LIVE.fetch_add(size, Relaxed) + size;
    PEAK.fetch_max(live, Relaxed);
}

#[inline]
fn on_free(size: usize) {
    if !ENABLED.load(Relaxed) {
        return;
    }
    FREES.fetch_add(1, Relaxed);
    LIVE.fetch_sub(size as isize, Relaxed);
}

/// Restores the previous counting state when dropped (also on unwind, so a
/// panicking workload cannot leave counting off).
#[must_use = "counting returns to its previous state when the guard drops"]
#[derive(Debug)]
pub struct CountingGuard {
    was: bool,
}

impl Drop for CountingGuard {
    fn drop(&mut self) {
        ENABLED.store(self.was, Relaxed);
    }
}

/// Turns counting on or off until the returned guard drops. Allocations made
/// while it is off are not counted at all (nor their frees), so figures read
/// across a switch are meaningless; read them within one state.
pub fn set_counting(on: bool) -> CountingGuard {
    CountingGuard { was: ENABLED.swap(on, Relaxed) }
}

/// Whether allocations are being counted now (see [`set_counting`]).
pub fn counting() -> bool {
    ENABLED.load(Relaxed)
}

// SAFETY: every method forwards to `System` with the caller's layout and only
// updates counters, so `System`'s guarantees carry over unchanged.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's (valid, non-zero-size) layout.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            on_alloc(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            on_alloc(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout` (via this type).
        unsafe { System.dealloc(ptr, layout) };
        on_free(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller upholds `realloc`'s contract; we forward it.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // A realloc is one allocation of the new size and one free of the old.
            on_free(layout.size());
            on_alloc(new_size);
        }
        p
    }
}

/// Counter values at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AllocSnapshot {
    /// Allocations so far.
    pub allocs: u64,
    /// Frees so far.
    pub frees: u64,
    /// Bytes allocated so far.
    pub bytes: u64,
    /// Live-bytes level: bytes counted as allocated minus bytes counted as
    /// freed, plus a constant origin (see [`set_counting`]). Subtract two
    /// readings to get the live bytes gained between them.
    pub live: usize,
}

/// Whether [`CountingAlloc`] is the global allocator and counting is on: a
/// fresh heap allocation must move its counter. (Calling `CountingAlloc` directly, as
/// the memory suite does to time it, must not make this true.)
pub fn is_installed() -> bool {
    let before = ALLOCS.load(Relaxed);
    drop(std::hint::black_box(Box::new(0u64)));
    ALLOCS.load(Relaxed) != before
}

/// Reads the counters.
pub fn snapshot() -> AllocSnapshot {
    AllocSnapshot {
        allocs: ALLOCS.load(Relaxed),
        frees: FREES.load(Relaxed),
        bytes: BYTES.load(Relaxed),
        live: level(LIVE.load(Relaxed)),
    }
}

fn level(x: isize) -> usize {
    x.max(0) as usize
}

/// Starts a new peak window at the current live level; returns that level
/// (subtract it from [`peak`] for the peak bytes gained in the window).
pub fn reset_peak() -> usize {
    let live = LIVE.load(Relaxed);
    PEAK.store(live, Relaxed);
    level(live)
}

/// Highest live level since the last [`reset_peak`].
pub fn peak() -> usize {
    level(PEAK.load(Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The lib test binary installs `CountingAlloc` (lib.rs) and runs tests
    // one at a time, so these counters see only this test's allocations.

    #[test]
    fn counting_off_ignores_allocations_and_the_guard_restores_it() {
        assert!(is_installed());
        let before = snapshot();
        {
            let _off = set_counting(false);
            assert!(!counting() && !is_installed());
            drop(std::hint::black_box(vec![0u8; 4096]));
            assert_eq!(snapshot().allocs, before.allocs);
        }
        assert!(counting());
        let v = std::hint::black_box(vec![0u8; 4096]);
        let after = snapshot();
        assert_eq!(after.allocs, before.allocs + 1);
        assert_eq!(after.bytes, before.bytes + 4096);
        assert_eq!(after.live, before.live + 4096);
        drop(v);
        assert_eq!(snapshot().live, before.live);
    }

    #[test]
    fn guard_restores_counting_after_a_panic() {
        let r = std::panic::catch_unwind(|| {
            let _off = set_counting(false);
            panic!("workload failed");
        });
        assert!(r.is_err());
        assert!(counting());
    }

    #[test]
    fn a_block_freed_after_counting_resumed_only_lowers_the_level() {
        let off = set_counting(false);
        let v = std::hint::black_box(vec![0u8; 1 << 20]);
        drop(off);
        let before = snapshot().live;
        drop(v);
        // The free is counted, the allocation was not: the level drops by
        // the block, and peak windows after it still measure gains exactly.
        assert_eq!(snapshot().live, before - (1 << 20));
        let base = reset_peak();
        let w = std::hint::black_box(vec![0u8; 3000]);
        drop(w);
        assert_eq!(peak() - base, 3000);
    }
}
