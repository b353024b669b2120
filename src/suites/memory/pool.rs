//! The tensor memory pool: size classes for small blocks, best-fit extents
//! with splitting and coalescing for large ones, every block 64-byte
//! aligned, and an optional budget capping the bytes taken from the system
//! (a request past it is refused with an error, after cached memory has been
//! given back).
//!
//! Small requests (up to [`SMALL_MAX`]) use classes: 64 bytes, then four
//! classes per doubling (80, 96, 112, 128, 160, ...), so rounding wastes under
//! a quarter of a request; each block is its own system allocation, cached per
//! class when freed. Large requests are rounded to 64 bytes and carved best-fit
//! from arenas (see [`super::extents`]): a freed block merges with its free
//! neighbours, so the memory of, say, a layer's freed temporaries can serve a
//! later tensor of a different size. When no free extent fits, the arenas that
//! are entirely free are given back and one new arena is taken, as large as
//! the request or their total, whichever is larger, so their bytes come back
//! as one piece instead of staying stranded beside the new arena.
//!
//! Large blocks the caller marks as scratch ([`TensorPool::alloc_scratch`]:
//! per-layer temporaries, freed before the next long-lived tensor is made)
//! are carved from arenas of their own, so a freed temporary never leaves a
//! hole between long-lived activations; the scratch arenas then coalesce into
//! room for the next large temporary. This lifetime hint is what lets the
//! pool stay compact on a transformer's allocation pattern: placement without
//! it cannot know which of two equal requests will outlive the other.
//!
//! The pool has one owner (`&mut self`), like a per-stream caching
//! allocator: no locks on the hot path, which is what lets reuse beat a
//! general-purpose allocator.

use super::extents::Extents;
use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

/// Alignment of every block: one cache line, also enough for AVX-512 loads.
pub const ALIGN: usize = 64;
/// Largest request served from a size class; larger ones use arenas.
pub const SMALL_MAX: usize = 64 << 10;
/// Arenas are whole pages.
const PAGE: usize = 4096;
/// Class marker of a block carved from a long-lived arena.
const LARGE: u16 = u16::MAX;
/// Class marker of a block carved from a scratch arena.
const SCRATCH: u16 = u16::MAX - 1;

/// Why the pool refused a request or a free.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// Serving the request would take the pool's held bytes past its budget,
    /// even after every cached block and free arena was released, and no free
    /// extent holds it.
    #[error(
        "pool budget exceeded: {requested} B requested ({class} B block) with {in_use} B in use and {held} B held, budget {budget} B"
    )]
    OverBudget {
        /// Bytes asked for.
        requested: usize,
        /// Bytes the request would occupy (its class, or the arena it needs).
        class: usize,
        /// Bytes held by live blocks at the time.
        in_use: usize,
        /// Bytes still held from the system after giving back what could be
        /// (live blocks plus free extents inside arenas that hold live blocks).
        held: usize,
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
    /// Bytes requested (the block may be larger).
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
    /// Bytes the block occupies (class size, or extent length for large).
    bytes: usize,
    live: bool,
    generation: u32,
    requested: usize,
}

/// Counters of a pool's life, for hit rate, utilization and fragmentation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PoolStats {
    /// Requests served from cached memory.
    pub hits: u64,
    /// Requests that had to take memory from the system.
    pub misses: u64,
    /// Requests refused for the budget.
    pub refusals: u64,
    /// Cached blocks and free arenas given back to make room under the budget.
    pub trimmed_blocks: u64,
    /// Bytes held from the system now (small blocks and whole arenas).
    pub held: usize,
    /// Bytes asked for by live blocks now.
    pub requested: usize,
    /// Bytes occupied by live blocks now (class sizes, extent lengths).
    pub in_use: usize,
    /// Highest `held` so far.
    pub peak_held: usize,
    /// Highest `requested` so far.
    pub peak_requested: usize,
    /// System allocations held now (small blocks plus arenas).
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
    /// that the program never needed at once, `1 - peak requested / peak held`
    /// (the two peaks may fall at different moments; this is Johnstone and
    /// Wilson's "memory at the point of maximum memory usage" measure, as a
    /// share of what was held). It counts rounding, split remainders too small
    /// to keep, and free memory no request could use.
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

/// The class index and size serving a small request of `size` bytes, or
/// `None` above [`SMALL_MAX`] (those are carved from arenas).
pub fn size_class(size: usize) -> Option<(u16, usize)> {
    if size <= 64 {
        return Some((0, 64));
    }
    if size > SMALL_MAX {
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
    extents: Extents,
    scratch: Extents,
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
        let classes = size_class(SMALL_MAX).map_or(0, |(c, _)| c as usize + 1);
        Self {
            id: NEXT_POOL.fetch_add(1, Ordering::Relaxed),
            budget,
            free: vec![Vec::new(); classes],
            extents: Extents::default(),
            scratch: Extents::default(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            stats: PoolStats::default(),
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> PoolStats {
        self.stats
    }

    /// Sizes of the free memory the pool holds (cached small blocks and free
    /// extents of arenas), for [`external_fragmentation`].
    pub fn free_block_sizes(&self) -> Vec<usize> {
        let mut out = Vec::new();
        for (c, list) in self.free.iter().enumerate() {
            out.extend(std::iter::repeat_n(class_bytes(c as u16), list.len()));
        }
        out.extend(self.extents.free_sizes());
        out.extend(self.scratch.free_sizes());
        out
    }

    /// The largest free extent in the arenas (0 when none).
    pub fn largest_free_extent(&self) -> usize {
        self.extents.free_sizes().chain(self.scratch.free_sizes()).max().unwrap_or(0)
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
        self.alloc_in(size, false)
    }

    /// Like [`alloc`](Self::alloc), for a temporary that will be freed before
    /// the next long-lived block is allocated: a large one is carved from the
    /// scratch arenas (small ones use the classes as usual).
    pub fn alloc_scratch(&mut self, size: usize) -> Result<Block, PoolError> {
        self.alloc_in(size, true)
    }

    fn extents_mut(&mut self, scratch: bool) -> &mut Extents {
        if scratch { &mut self.scratch } else { &mut self.extents }
    }

    fn alloc_in(&mut self, size: usize, scratch: bool) -> Result<Block, PoolError> {
        if size == 0 {
            return Err(PoolError::ZeroSize);
        }
        let (class, ptr, bytes) = match size_class(size) {
            Some((class, bytes)) => {
                if let Some(p) = self.free[class as usize].pop() {
                    self.stats.hits += 1;
                    (class, p, bytes)
                } else if !self.fits(self.stats.held, bytes)
                    && let Some((addr, len)) = self.extents.take(size.next_multiple_of(ALIGN))
                {
                    // At the budget, free arena space serves a small request
                    // too, rather than refusing it.
                    self.stats.hits += 1;
                    (LARGE, extent_ptr(addr, size)?, len)
                } else {
                    self.make_room(bytes, size)?;
                    let p = self.system_alloc(bytes)?;
                    self.stats.misses += 1;
                    (class, p, bytes)
                }
            }
            None => {
                let (ptr, bytes) = self.alloc_large(size, scratch)?;
                (if scratch { SCRATCH } else { LARGE }, ptr, bytes)
            }
        };
        let s = &mut self.stats;
        s.requested += size;
        s.in_use += bytes;
        s.live_blocks += 1;
        s.peak_requested = s.peak_requested.max(s.requested);
        let slot = Slot { ptr: ptr.as_ptr(), class, bytes, live: true, generation: 0, requested: size };
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

    /// A large block: best fit from the free extents (long-lived or
    /// scratch), else a new arena.
    fn alloc_large(&mut self, size: usize, scratch: bool) -> Result<(NonNull<u8>, usize), PoolError> {
        let want = size.checked_next_multiple_of(ALIGN).ok_or(PoolError::OutOfMemory(size))?;
        if let Some((addr, len)) = self.extents_mut(scratch).take(want) {
            self.stats.hits += 1;
            return Ok((extent_ptr(addr, size)?, len));
        }
        // Entirely free arenas are too small for this request one by one;
        // give them back and take one arena covering their total, so those
        // bytes stay usable as one piece rather than stranded.
        let mut merged = 0usize;
        for (base, len) in self.extents_mut(scratch).take_free_arenas() {
            if let Some(p) = NonNull::new(base as *mut u8) {
                self.system_free(p, len);
                merged += len;
            }
        }
        let need = want.checked_next_multiple_of(PAGE).ok_or(PoolError::OutOfMemory(size))?;
        let mut arena = need.max(merged);
        if !self.fits(self.stats.held, arena) {
            arena = need;
        }
        self.make_room(arena, size)?;
        let p = self.system_alloc(arena)?;
        let ext = self.extents_mut(scratch);
        ext.add_arena(p.as_ptr() as usize, arena);
        let (addr, len) = ext.take(want).ok_or(PoolError::OutOfMemory(size))?;
        self.stats.misses += 1;
        Ok((extent_ptr(addr, size)?, len))
    }

    /// Like [`alloc`](Self::alloc), with every byte zero. Reused blocks are
    /// cleared here, so unlike `calloc` the cost is paid up front.
    pub fn alloc_zeroed(&mut self, size: usize) -> Result<Block, PoolError> {
        let b = self.alloc(size)?;
        // SAFETY: the block is live and valid for `size` bytes.
        unsafe { std::ptr::write_bytes(b.as_ptr(), 0, size) };
        Ok(b)
    }

    /// Returns a block to its class's cache, or its extent to the free
    /// extents (merged with free neighbours).
    pub fn free(&mut self, block: Block) -> Result<(), PoolError> {
        if block.pool != self.id {
            return Err(PoolError::ForeignBlock);
        }
        let slot = match self.slots.get_mut(block.slot as usize) {
            Some(s) if s.live && s.generation == block.generation && s.ptr == block.ptr.as_ptr() => s,
            _ => return Err(PoolError::DoubleFree(block.len)),
        };
        slot.live = false;
        let (class, requested, bytes) = (slot.class, slot.requested, slot.bytes);
        self.free_slots.push(block.slot);
        let s = &mut self.stats;
        s.requested -= requested;
        s.in_use -= bytes;
        s.live_blocks -= 1;
        if class == LARGE || class == SCRATCH {
            self.extents_mut(class == SCRATCH).give(block.ptr.as_ptr() as usize, bytes);
        } else {
            self.free[class as usize].push(block.ptr);
        }
        Ok(())
    }

    /// Gives every cached small block and every entirely free arena back to
    /// the system.
    pub fn trim(&mut self) {
        for c in 0..self.free.len() {
            while let Some(p) = self.free[c].pop() {
                self.system_free(p, class_bytes(c as u16));
            }
        }
        let free = [self.extents.take_free_arenas(), self.scratch.take_free_arenas()];
        for (base, len) in free.into_iter().flatten() {
            if let Some(p) = NonNull::new(base as *mut u8) {
                self.system_free(p, len);
            }
        }
    }

    fn fits(&self, held: usize, bytes: usize) -> bool {
        held.checked_add(bytes).is_some_and(|t| t <= self.budget)
    }

    /// Releases free arenas, then cached blocks (largest classes first), until
    /// `bytes` more fit under the budget; refuses when even that is not enough.
    fn make_room(&mut self, bytes: usize, requested: usize) -> Result<(), PoolError> {
        if self.fits(self.stats.held, bytes) {
            return Ok(());
        }
        // Live blocks alone leave no room: releasing the cache cannot help.
        if self.fits(self.stats.in_use, bytes) {
            let free = [self.extents.take_free_arenas(), self.scratch.take_free_arenas()];
            for (base, len) in free.into_iter().flatten() {
                if let Some(p) = NonNull::new(base as *mut u8) {
                    self.system_free(p, len);
                    self.stats.trimmed_blocks += 1;
                }
            }
            for c in (0..self.free.len()).rev() {
                if self.fits(self.stats.held, bytes) {
                    return Ok(());
                }
                while let Some(p) = self.free[c].pop() {
                    self.system_free(p, class_bytes(c as u16));
                    self.stats.trimmed_blocks += 1;
                    if self.fits(self.stats.held, bytes) {
                        return Ok(());
                    }
                }
            }
        }
        self.stats.refusals += 1;
        Err(PoolError::OverBudget {
            requested,
            class: bytes,
            in_use: self.stats.in_use,
            held: self.stats.held,
            budget: self.budget,
        })
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

/// A pointer to an extent start (never null: extents lie inside arenas the
/// system allocator returned).
fn extent_ptr(addr: usize, size: usize) -> Result<NonNull<u8>, PoolError> {
    NonNull::new(addr as *mut u8).ok_or(PoolError::OutOfMemory(size))
}

impl Drop for TensorPool {
    fn drop(&mut self) {
        self.trim();
        // Blocks still live die with the pool: their handles can no longer be
        // freed into it (the id check), and their memory goes back here.
        for i in 0..self.slots.len() {
            let s = self.slots[i];
            if s.live
                && s.class != LARGE
                && s.class != SCRATCH
                && let Some(p) = NonNull::new(s.ptr)
            {
                self.system_free(p, s.bytes);
            }
            self.slots[i].live = false;
        }
        let all = [self.extents.drain_arenas(), self.scratch.drain_arenas()];
        for (base, len) in all.into_iter().flatten() {
            if let Some(p) = NonNull::new(base as *mut u8) {
                self.system_free(p, len);
            }
        }
    }
}

#[cfg(test)]
mod tests;
