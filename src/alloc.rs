//! A counting global allocator: allocation count, bytes allocated, live and
//! peak bytes. The `tfbench` binary installs it; library users may too.
//!
//! Underneath the counters is a [`Backend`]: mimalloc by default, the system
//! allocator with `TFBENCH_ALLOCATOR=system`. The choice is read once, at the
//! process's first allocation, and never changes, so every block is freed by
//! the allocator that made it. mimalloc is the default because the
//! allocation-heavy workloads (the tokenizers crate above all) spent about a
//! third of their time in glibc's malloc: GPT-2 batch encode on one thread
//! ran about 1.5x faster with mimalloc underneath, in alternating runs of
//! the same code. Results record the backend (`environment.allocator`).
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
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU8, AtomicU64, Ordering::Relaxed};

/// The allocator under the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The C library's `malloc` (Rust's `System`).
    System,
    /// mimalloc, linked statically.
    Mimalloc,
}

impl Backend {
    /// The names `TFBENCH_ALLOCATOR` accepts, in [`Backend`] order.
    pub const NAMES: &'static [&'static str] = &["system", "mimalloc"];

    /// The name `TFBENCH_ALLOCATOR` takes for this backend.
    pub fn name(self) -> &'static str {
        match self {
            Backend::System => "system",
            Backend::Mimalloc => "mimalloc",
        }
    }

    /// Parses a `TFBENCH_ALLOCATOR` value.
    pub fn parse(s: &[u8]) -> Option<Backend> {
        match s {
            b"system" => Some(Backend::System),
            b"mimalloc" => Some(Backend::Mimalloc),
            _ => None,
        }
    }
}

/// The backend in force: 0 until the first allocation decides, then
/// 1 + the `Backend` (bit 7 set when the variable held an unknown value).
static BACKEND: AtomicU8 = AtomicU8::new(0);
const UNKNOWN_REQUEST: u8 = 0x80;

/// Reads `TFBENCH_ALLOCATOR` without allocating (this runs inside the
/// allocator, before `main`): an unknown value falls back to the default and
/// is remembered so the binary can refuse it with a clear message.
fn decide() -> u8 {
    // SAFETY: getenv only reads the environment block; the name is a valid
    // C string. Nothing in tfbench sets environment variables.
    let raw = unsafe { libc::getenv(c"TFBENCH_ALLOCATOR".as_ptr()) };
    let (backend, unknown) = if raw.is_null() {
        (Backend::Mimalloc, false)
    } else {
        // SAFETY: getenv returned a NUL-terminated string.
        let value = unsafe { std::ffi::CStr::from_ptr(raw) }.to_bytes();
        match Backend::parse(value) {
            Some(b) => (b, false),
            None if value.is_empty() => (Backend::Mimalloc, false),
            None => (Backend::Mimalloc, true),
        }
    };
    let code = (1 + backend as u8) | if unknown { UNKNOWN_REQUEST } else { 0 };
    match BACKEND.compare_exchange(0, code, Relaxed, Relaxed) {
        Ok(_) => code,
        Err(first) => first,
    }
}

#[inline]
fn state() -> u8 {
    match BACKEND.load(Relaxed) {
        0 => decide(),
        s => s,
    }
}

/// The allocator under the counters, fixed for the life of the process.
pub fn backend() -> Backend {
    if state() & !UNKNOWN_REQUEST == 1 { Backend::System } else { Backend::Mimalloc }
}

/// The value of `TFBENCH_ALLOCATOR` when it named no backend (the default
/// was used instead); the binary refuses to run with it.
pub fn unknown_backend_request() -> Option<String> {
    if state() & UNKNOWN_REQUEST == 0 {
        return None;
    }
    Some(std::env::var_os("TFBENCH_ALLOCATOR").map(|v| v.to_string_lossy().into_owned()).unwrap_or_default())
}

/// The [`backend`] without counters: what [`CountingAlloc`] forwards to.
#[derive(Debug, Clone, Copy, Default)]
pub struct BackendAlloc;

// SAFETY: every call goes to the one backend fixed for the process, so each
// block is freed (or resized) by the allocator that made it.
unsafe impl GlobalAlloc for BackendAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's layout.
        unsafe {
            match backend() {
                Backend::System => System.alloc(layout),
                Backend::Mimalloc => mimalloc::MiMalloc.alloc(layout),
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        unsafe {
            match backend() {
                Backend::System => System.alloc_zeroed(layout),
                Backend::Mimalloc => mimalloc::MiMalloc.alloc_zeroed(layout),
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this backend (it never changes) with `layout`.
        unsafe {
            match backend() {
                Backend::System => System.dealloc(ptr, layout),
                Backend::Mimalloc => mimalloc::MiMalloc.dealloc(ptr, layout),
            }
        }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as for `dealloc`; the caller upholds `realloc`'s contract.
        unsafe {
            match backend() {
                Backend::System => System.realloc(ptr, layout, new_size),
                Backend::Mimalloc => mimalloc::MiMalloc.realloc(ptr, layout, new_size),
            }
        }
    }
}

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

/// The [`backend`] allocator with counters. Install with
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

// SAFETY: every method forwards to `BackendAlloc` with the caller's layout
// and only updates counters, so its guarantees carry over unchanged.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's (valid, non-zero-size) layout.
        let p = unsafe { BackendAlloc.alloc(layout) };
        if !p.is_null() {
            on_alloc(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = unsafe { BackendAlloc.alloc_zeroed(layout) };
        if !p.is_null() {
            on_alloc(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by the backend with `layout` (via this type).
        unsafe { BackendAlloc.dealloc(ptr, layout) };
        on_free(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller upholds `realloc`'s contract; we forward it.
        let p = unsafe { BackendAlloc.realloc(ptr, layout, new_size) };
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

    #[test]
    fn backend_names_round_trip_and_unknown_names_are_refused() {
        for (i, name) in Backend::NAMES.iter().enumerate() {
            let b = Backend::parse(name.as_bytes()).expect("listed name parses");
            assert_eq!(b.name(), *name);
            assert_eq!(b as usize, i, "NAMES is in Backend order");
        }
        assert_eq!(Backend::parse(b"jemalloc"), None);
        assert_eq!(Backend::parse(b"System"), None);
        // The backend is the one the environment asked for, else mimalloc.
        let asked = std::env::var("TFBENCH_ALLOCATOR").ok().and_then(|v| Backend::parse(v.as_bytes()));
        assert_eq!(backend(), asked.unwrap_or(Backend::Mimalloc));
        // Huge alignments (the kernels' 2 MiB buffers) are honoured.
        let layout = Layout::from_size_align(4096, 2 << 20).expect("valid layout");
        // SAFETY: a non-zero-size layout; the block is freed with it below.
        let block = unsafe { BackendAlloc.alloc(layout) };
        assert!(!block.is_null() && (block as usize).is_multiple_of(2 << 20));
        // SAFETY: allocated just above by the same allocator and layout.
        unsafe { BackendAlloc.dealloc(block, layout) };
    }

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
