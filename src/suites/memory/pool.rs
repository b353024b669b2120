//! A size-class tensor memory pool: freed blocks are kept per class and
//! handed out again, every block is 64-byte aligned, and an optional budget
//! caps the bytes taken from the system (a request past it is refused with
//! an error, after cached blocks have been given back).
//!
//! Classes: 64 bytes, then four classes per doubling (80, 96, 112, 128, 160,
//! ...), so rounding wastes under a quarter of a request (about a tenth on
//! average) and the power-of-two, 1.25x, 1.5x and 1.75x sizes transformer
//! tensors have are exact. Requests above [`MAX_CLASS`] bytes are taken from the
//! system at their page-rounded size and given back on free (not cached).
//!
//! The pool has one owner (`&mut self`), like a per-stream caching
//! allocator: no locks on the hot path, which is what lets reuse beat a
//! general-purpose allocator.

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// Alignment of every block: one cache line, also enough for AVX-512 loads.
pub const ALIGN: usize = 64;
/// Largest cached class (1 GiB); larger blocks go straight to the system.
pub const MAX_CLASS: usize = 1 << 30;
const HUGE: u16 = u16::MAX;

/// Why the pool refused a request or a free.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// Serving the request would take the pool's held bytes past its budget,
    /// even after every cached block was released.
    #[error(
        "pool budget exceeded: {requested} B requested (class {class} B) with {in_use} B in use, budget {budget} B"
    )]
    OverBudget {
        /// Bytes asked for.
        requested: usize,
        /// Bytes the request would occupy (its class size).
        class: usize,
        /// Bytes held by live blocks at the time.
        in_use: usize,
        /// The configured budget.
        budget: usize,
    },
    /// The system allocator returned null.
    #[error("the system allocator could not provide {0} B")]
    OutOfMemory(usize),
    /// The block was already freed (a stale handle).
    #[error("double free of a pool block ({0} B)")]
    DoubleFree(usize),
    /// The block belongs to another pool.
    #[error("block freed into a pool that did not allocate it")]
    ForeignBlock,
    /// A zero-byte request (no tensor has zero bytes of storage here).
    #[error("zero-byte allocation")]
    ZeroSize,
}

/// A live allocation. Not `Clone`: freeing consumes it, so a double free
/// cannot be written with safe code; the pool still checks at run time.
#[derive(Debug)]
pub struct Block {
    ptr: NonNull<u8>,
    len: usize,
    slot: u32,
    generation: u32,
    pool: u32,
}

// SAFETY: a Block is the unique handle to its memory; moving it to another
// thread moves that exclusive ownership with it.
unsafe impl Send for Block {}

impl Block {
    /// Start of the block (64-byte aligned, valid for `len()` bytes while live).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    /// Bytes requested (the class may be larger).
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the block has no bytes (never true: zero-size requests are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// A second handle to the same block, to test double-free detection.
    #[cfg(test)]
    pub(crate) fn duplicate_for_test(&self) -> Self {
        Self { ..*self }
    }
}

#[derive(Debug, Clone, Copy)]
struct Slot {
    ptr: *mut u8,
    class: u16,
    live: bool,
    generation: u32,
    requested: usize,
}

/// Counters of a pool's life, for hit rate, utilization and fragmentation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PoolStats {
    /// Requests served from a cached block.
    pub hits: u64,
    /// Requests that had to take memory from the system.
    pub misses: u64,
    /// Requests refused for the budget.
    pub refusals: u64,
    /// Cached blocks given back to the system to make room under the budget.
    pub trimmed_blocks: u64,
    /// Bytes held from the system now (live plus cached blocks, class sizes).
    pub held: usize,
    /// Bytes asked for by live blocks now.
    pub requested: usize,
    /// Class bytes of live blocks now.
    pub in_use: usize,
    /// Highest `held` so far.
    pub peak_held: usize,
    /// Highest `requested` so far.
    pub peak_requested: usize,
    /// Blocks taken from the system and not yet given back.
    pub system_blocks: u64,
    /// Live blocks.
    pub live_blocks: u64,
}

impl PoolStats {
    /// Share of requests served from the cache.
    pub fn hit_rate(&self) -> f64 {
        let n = self.hits + self.misses;
        if n == 0 { 0.0 } else { self.hits as f64 / n as f64 }
    }
    /// Bytes asked for over bytes held, now (1 = nothing wasted).
    pub fn utilization(&self) -> f64 {
        if self.held == 0 { 1.0 } else { self.requested as f64 / self.held as f64 }
    }
    /// The pool's fragmentation over its life: the share of the most it held
    /// that the program never needed at once, `1 - peak requested / peak held`.
    /// It counts class rounding and cached blocks no request could use.
    pub fn fragmentation(&self) -> f64 {
        if self.peak_held == 0 { 0.0 } else { 1.0 - self.peak_requested as f64 / self.peak_held as f64 }
    }
}

/// `1 - largest free block / free bytes`: 0 when all free memory is one
/// block (any request up to its size fits), near 1 when it is in crumbs.
pub fn external_fragmentation(free_blocks: &[usize]) -> f64 {
    let total: usize = free_blocks.iter().sum();
    match free_blocks.iter().max() {
        Some(&largest) if total > 0 => 1.0 - largest as f64 / total as f64,
        _ => 0.0,
    }
}

/// The class index and size serving a request of `size` bytes, or `None`
/// above [`MAX_CLASS`].
pub fn size_class(size: usize) -> Option<(u16, usize)> {
    if size <= 64 {
        return Some((0, 64));
    }
    if size > MAX_CLASS {
        return None;
    }
    let p = (usize::BITS - 1 - (size - 1).leading_zeros()) as usize; // 2^p < size <= 2^(p+1)
    let step = 1usize << (p - 2);
    let k = (size - (1 << p)).div_ceil(step); // 1..=4
    Some(((1 + (p - 6) * 4 + (k - 1)) as u16, (1 << p) + k * step))
}

fn class_bytes(class: u16) -> usize {
    if class == 0 {
        return 64;
    }
    let c = class as usize - 1;
    let p = 6 + c / 4;
    (1 << p) + (c % 4 + 1) * (1 << (p - 2))
}

static NEXT_POOL: AtomicU32 = AtomicU32::new(1);

/// The pool. Memory comes from the global allocator (so the harness's
/// counting allocator sees what the pool holds).
pub struct TensorPool {
    id: u32,
    budget: usize,
    free: Vec<Vec<NonNull<u8>>>,
    slots: Vec<Slot>,
    free_slots: Vec<u32>,
    stats: PoolStats,
}

// SAFETY: the pool exclusively owns every pointer it stores.
unsafe impl Send for TensorPool {}

impl Default for TensorPool {
    fn default() -> Self {
        Self::new(usize::MAX)
    }
}

impl TensorPool {
    /// A pool that never holds more than `budget` bytes (`usize::MAX`: no cap).
    pub fn new(budget: usize) -> Self {
        let classes = size_class(MAX_CLASS).map_or(0, |(c, _)| c as usize + 1);
        Self {
            id: NEXT_POOL.fetch_add(1, Ordering::Relaxed),
            budget,
            free: vec![Vec::new(); classes],
            slots: Vec::new(),
            free_slots: Vec::new(),
            stats: PoolStats::default(),
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> PoolStats {
        self.stats
    }

    /// Sizes of the cached (free) blocks, for [`external_fragmentation`].
    pub fn free_block_sizes(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for (c, list) in self.free.iter().enumerate() {
            out.extend(std::iter::repeat_n(class_bytes(c as u16), list.len()));
        }
        out
    }

    /// Starts a new peak window (peaks restart at the current levels), and
    /// zeroes the hit, miss and refusal counts.
    pub fn reset_counters(&mut self) {
        let s = &mut self.stats;
        s.peak_held = s.held;
        s.peak_requested = s.requested;
        s.hits = 0;
        s.misses = 0;
        s.refusals = 0;
        s.trimmed_blocks = 0;
    }

    /// A block of at least `size` bytes, 64-byte aligned, contents unspecified.
    pub fn alloc(&mut self, size: usize) -> Result<Block, PoolError> {
        if size == 0 {
            return Err(PoolError::ZeroSize);
        }
        let (class, bytes) = match size_class(size) {
            Some(c) => c,
            None => (HUGE, size.next_multiple_of(4096)),
        };
        let cached = if class == HUGE { None } else { self.free[class as usize].pop() };
        let ptr = match cached {
            Some(p) => {
                self.stats.hits += 1;
                p
            }
            None => {
                self.make_room(bytes, size)?;
                let p = self.system_alloc(bytes)?;
                self.stats.misses += 1;
                p
            }
        };
        let s = &mut self.stats;
        s.requested += size;
        s.in_use += bytes;
        s.live_blocks += 1;
        s.peak_requested = s.peak_requested.max(s.requested);
        let slot = Slot { ptr: ptr.as_ptr(), class, live: true, generation: 0, requested: size };
        let (index, generation) = match self.free_slots.pop() {
            Some(i) => {
                let old = &mut self.slots[i as usize];
                let generation = old.generation.wrapping_add(1);
                *old = Slot { generation, ..slot };
                (i, generation)
            }
            None => {
                self.slots.push(slot);
                ((self.slots.len() - 1) as u32, 0)
            }
        };
        Ok(Block { ptr, len: size, slot: index, generation, pool: self.id })
    }

    /// Like [`alloc`](Self::alloc), with every byte zero. Reused blocks are
    /// cleared here, so unlike `calloc` the cost is paid up front.
    pub fn alloc_zeroed(&mut self, size: usize) -> Result<Block, PoolError> {
        let b = self.alloc(size)?;
        // SAFETY: the block is live and valid for `size` bytes.
        unsafe { std::ptr::write_bytes(b.as_ptr(), 0, size) };
        Ok(b)
    }

    /// Returns a block to its class's cache (huge blocks go back to the system).
    pub fn free(&mut self, block: Block) -> Result<(), PoolError> {
        if block.pool != self.id {
            return Err(PoolError::ForeignBlock);
        }
        let slot = match self.slots.get_mut(block.slot as usize) {
            Some(s) if s.live && s.generation == block.generation && s.ptr == block.ptr.as_ptr() => s,
            _ => return Err(PoolError::DoubleFree(block.len)),
        };
        slot.live = false;
        let (class, requested) = (slot.class, slot.requested);
        self.free_slots.push(block.slot);
        let bytes = if class == HUGE { requested.next_multiple_of(4096) } else { class_bytes(class) };
        let s = &mut self.stats;
        s.requested -= requested;
        s.in_use -= bytes;
        s.live_blocks -= 1;
        if class == HUGE {
            self.system_free(block.ptr, bytes);
        } else {
            self.free[class as usize].push(block.ptr);
        }
        Ok(())
    }

    /// Gives every cached block back to the system.
    pub fn trim(&mut self) {
        for c in 0..self.free.len() {
            while let Some(p) = self.free[c].pop() {
                self.system_free(p, class_bytes(c as u16));
            }
        }
    }

    /// Releases cached blocks, largest classes first, until `bytes` more fit
    /// under the budget; refuses when even an empty cache is not enough.
    fn make_room(&mut self, bytes: usize, requested: usize) -> Result<(), PoolError> {
        let fits = |held: usize| held.checked_add(bytes).is_some_and(|t| t <= self.budget);
        if fits(self.stats.held) {
            return Ok(());
        }
        if !fits(self.stats.in_use) {
            self.stats.refusals += 1;
            return Err(PoolError::OverBudget {
                requested,
                class: bytes,
                in_use: self.stats.in_use,
                budget: self.budget,
            });
        }
        for c in (0..self.free.len()).rev() {
            while let Some(p) = self.free[c].pop() {
                self.system_free(p, class_bytes(c as u16));
                self.stats.trimmed_blocks += 1;
                if self.stats.held + bytes <= self.budget {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn system_alloc(&mut self, bytes: usize) -> Result<NonNull<u8>, PoolError> {
        let layout = Layout::from_size_align(bytes, ALIGN).map_err(|_| PoolError::OutOfMemory(bytes))?;
        // SAFETY: `bytes` is non-zero (every class is at least 64 bytes).
        let p = NonNull::new(unsafe { std::alloc::alloc(layout) }).ok_or(PoolError::OutOfMemory(bytes))?;
        let s = &mut self.stats;
        s.held += bytes;
        s.peak_held = s.peak_held.max(s.held);
        s.system_blocks += 1;
        Ok(p)
    }

    fn system_free(&mut self, p: NonNull<u8>, bytes: usize) {
        // SAFETY: `p` came from `system_alloc` with this size (checked when
        // the layout was built) and the same alignment, and is freed once.
        unsafe { std::alloc::dealloc(p.as_ptr(), Layout::from_size_align_unchecked(bytes, ALIGN)) };
        self.stats.held -= bytes;
        self.stats.system_blocks -= 1;
    }
}

impl Drop for TensorPool {
    fn drop(&mut self) {
        self.trim();
        // Blocks still live die with the pool: their handles can no longer be
        // freed into it (the id check), and their memory goes back here.
        for i in 0..self.slots.len() {
            let s = self.slots[i];
            if s.live {
                let bytes =
                    if s.class == HUGE { s.requested.next_multiple_of(4096) } else { class_bytes(s.class) };
                if let Some(p) = NonNull::new(s.ptr) {
                    self.system_free(p, bytes);
                }
                self.slots[i].live = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_sizes_with_bounded_waste() {
        assert_eq!(size_class(1), Some((0, 64)));
        assert_eq!(size_class(64), Some((0, 64)));
        assert_eq!(size_class(65), Some((1, 80)));
        assert_eq!(size_class(128), Some((4, 128)));
        assert_eq!(size_class(129), Some((5, 160)));
        assert_eq!(size_class(1 << 20), Some(size_class(1 << 20).unwrap()));
        assert_eq!(size_class(MAX_CLASS + 1), None);
        let mut last = (0u16, 64usize);
        for size in (1..5000).chain([393_216, 1 << 20, (1 << 20) + 1, 3 << 20, MAX_CLASS]) {
            let (c, bytes) = size_class(size).unwrap();
            assert!(bytes >= size && bytes % 16 == 0, "{size} -> {bytes}");
            assert!(size <= 64 || ((bytes - size) as f64) < 0.25 * size as f64, "{size} -> {bytes}");
            assert_eq!(class_bytes(c), bytes, "class {c}");
            if size < 5000 {
                assert!(c >= last.0 && (c > last.0 || bytes == last.1));
                last = (c, bytes);
            }
        }
        // BERT-base shapes at 128 tokens in f32 are exact: hidden, FFN,
        // attention scores (12 heads); QKV (3x hidden = 1.125 * 2^20) is not.
        assert_eq!(size_class(3 * 393_216).unwrap().1, 1_310_720);
        for s in [128 * 768 * 4, 128 * 3072 * 4, 12 * 128 * 128 * 4] {
            assert_eq!(size_class(s).unwrap().1, s);
        }
    }

    #[test]
    fn freed_blocks_are_reused_and_aligned() {
        let mut pool = TensorPool::default();
        let a = pool.alloc(1000).unwrap();
        let pa = a.as_ptr();
        assert_eq!(pa as usize % ALIGN, 0);
        pool.free(a).unwrap();
        let b = pool.alloc(1010).unwrap(); // same class (1024)
        assert_eq!(b.as_ptr(), pa, "the cached block is handed out again");
        let c = pool.alloc(3).unwrap();
        assert_ne!(c.as_ptr(), pa);
        assert_eq!(c.as_ptr() as usize % ALIGN, 0);
        let s = pool.stats();
        assert_eq!((s.hits, s.misses, s.live_blocks), (1, 2, 2));
        assert_eq!(s.requested, 1013);
        assert_eq!(s.held, 1024 + 64);
        pool.free(b).unwrap();
        pool.free(c).unwrap();
        assert_eq!(pool.stats().requested, 0);
        assert_eq!(pool.free_block_sizes().iter().sum::<usize>(), 1024 + 64);
        pool.trim();
        assert_eq!(pool.stats().held, 0);
        assert_eq!(pool.stats().system_blocks, 0);
    }

    #[test]
    fn huge_blocks_bypass_the_cache() {
        let mut pool = TensorPool::default();
        let b = pool.alloc(MAX_CLASS + 1).unwrap();
        assert_eq!(pool.stats().held, (MAX_CLASS + 1).next_multiple_of(4096));
        pool.free(b).unwrap();
        assert_eq!(pool.stats().held, 0);
    }

    #[test]
    fn double_free_and_foreign_blocks_are_refused() {
        let mut pool = TensorPool::default();
        let a = pool.alloc(256).unwrap();
        let stale = a.duplicate_for_test();
        pool.free(a).unwrap();
        assert_eq!(pool.free(stale), Err(PoolError::DoubleFree(256)));
        // The block went into the cache once, not twice.
        assert_eq!(pool.free_block_sizes(), vec![256]);
        // A stale handle whose slot was reused by a new block is still refused.
        let b = pool.alloc(256).unwrap();
        let stale = b.duplicate_for_test();
        pool.free(b).unwrap();
        let _c = pool.alloc(256).unwrap();
        assert!(matches!(pool.free(stale), Err(PoolError::DoubleFree(_))));
        let mut other = TensorPool::default();
        let d = other.alloc(64).unwrap();
        assert_eq!(pool.free(d), Err(PoolError::ForeignBlock));
        assert_eq!(pool.alloc(0).unwrap_err(), PoolError::ZeroSize);
    }

    #[test]
    fn budget_refuses_with_an_error_after_trimming_the_cache() {
        let mut pool = TensorPool::new(4096);
        let a = pool.alloc(2048).unwrap();
        let b = pool.alloc(1024).unwrap();
        pool.free(b).unwrap(); // 1024 cached, 3072 held
        // 2048 more needs the cached 1024 back: trimmed, then served.
        let c = pool.alloc(2048).unwrap();
        assert_eq!(pool.stats().trimmed_blocks, 1);
        assert_eq!(pool.stats().held, 4096);
        let err = pool.alloc(1).unwrap_err();
        assert!(matches!(err, PoolError::OverBudget { in_use: 4096, budget: 4096, .. }), "{err}");
        assert!(err.to_string().contains("budget"));
        assert_eq!(pool.stats().refusals, 1);
        pool.free(a).unwrap();
        pool.free(c).unwrap();
        assert!(pool.alloc(4096).is_ok(), "room again once blocks are freed");
    }

    #[test]
    fn zeroed_blocks_are_zero_even_when_reused() {
        let mut pool = TensorPool::default();
        let a = pool.alloc(512).unwrap();
        // SAFETY: live block of 512 bytes.
        unsafe { std::ptr::write_bytes(a.as_ptr(), 0xAB, 512) };
        pool.free(a).unwrap();
        let b = pool.alloc_zeroed(512).unwrap();
        // SAFETY: live block of 512 bytes.
        let bytes = unsafe { std::slice::from_raw_parts(b.as_ptr(), 512) };
        assert!(bytes.iter().all(|&x| x == 0));
        pool.free(b).unwrap();
    }

    #[test]
    fn fragmentation_metrics_on_a_constructed_state() {
        // Free memory in one block: nothing external; in four equal crumbs: 3/4.
        assert_eq!(external_fragmentation(&[4096]), 0.0);
        assert_eq!(external_fragmentation(&[1024; 4]), 0.75);
        assert_eq!(external_fragmentation(&[]), 0.0);
        assert!((external_fragmentation(&[3000, 1000]) - 0.25).abs() < 1e-12);
        // Pool state: 100 B asked for lands in a 112 B class; after freeing it
        // and asking for 1000 B, the pool holds 112 + 1024 for a peak need of 1000.
        let mut pool = TensorPool::default();
        let a = pool.alloc(100).unwrap();
        pool.free(a).unwrap();
        let b = pool.alloc(1000).unwrap();
        let s = pool.stats();
        assert_eq!((s.peak_requested, s.peak_held), (1000, 112 + 1024));
        assert!((s.fragmentation() - (1.0 - 1000.0 / 1136.0)).abs() < 1e-12);
        assert!((s.utilization() - 1000.0 / 1136.0).abs() < 1e-12);
        assert_eq!(pool.free_block_sizes(), vec![112]);
        pool.free(b).unwrap();
    }
}
