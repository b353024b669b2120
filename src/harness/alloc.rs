//! A counting global allocator: allocation count, bytes allocated, live and
//! peak bytes. The `tfbench` binary installs it; library users may too.
//!
//! Counters are process-wide (not per thread) because rayon workers allocate
//! on behalf of the case being measured.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static FREES: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// The system allocator with counters. Install with
/// `#[global_allocator] static A: CountingAlloc = CountingAlloc;`.
pub struct CountingAlloc;

#[inline]
fn on_alloc(size: usize) {
    ALLOCS.fetch_add(1, Relaxed);
    BYTES.fetch_add(size as u64, Relaxed);
    let live = LIVE.fetch_add(size, Relaxed) + size;
    PEAK.fetch_max(live, Relaxed);
}

#[inline]
fn on_free(size: usize) {
    FREES.fetch_add(1, Relaxed);
    LIVE.fetch_sub(size, Relaxed);
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
    /// Bytes live now.
    pub live: usize,
}

/// Whether [`CountingAlloc`] is the global allocator: a fresh heap
/// allocation must move its counter. (Calling `CountingAlloc` directly, as
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
        live: LIVE.load(Relaxed),
    }
}

/// Starts a new peak window at the current live bytes; returns that level.
pub fn reset_peak() -> usize {
    let live = LIVE.load(Relaxed);
    PEAK.store(live, Relaxed);
    live
}

/// Highest live bytes since the last [`reset_peak`].
pub fn peak() -> usize {
    PEAK.load(Relaxed)
}
