//! Free-extent bookkeeping for the pool's large blocks: arenas (one system
//! allocation each) are carved into blocks best-fit, a block is split when
//! the rest is worth keeping, and a freed block merges with free neighbours
//! in the same arena, so memory freed by differently sized tensors serves
//! the next request whole instead of sitting in the wrong size class.
//!
//! This works on addresses only (no memory is touched), so its behaviour can
//! be tested on constructed states; the pool owns the system calls.

/// A remainder smaller than this stays with the block it was cut from (a
/// page: smaller crumbs would only lengthen the free list).
pub const MIN_SPLIT: usize = 4096;

/// Arenas and their free extents. Both lists are sorted vectors: a pool has
/// tens to hundreds of extents, where a scan is fast, and a vector's memory
/// stays put once grown, so the pool's bookkeeping does not allocate in a
/// steady state (the leak watch would see tree nodes come and go).
#[derive(Debug, Default)]
pub struct Extents {
    /// (base, length) of every arena, by base.
    arenas: Vec<(usize, usize)>,
    /// (start, length) of every free extent, by start.
    free: Vec<(usize, usize)>,
}

impl Extents {
    /// Registers a new arena `[base, base + len)`, all free.
    pub fn add_arena(&mut self, base: usize, len: usize) {
        let i = self.arenas.partition_point(|&(b, _)| b < base);
        self.arenas.insert(i, (base, len));
        let i = self.free.partition_point(|&(a, _)| a < base);
        self.free.insert(i, (base, len));
    }

    /// Best fit for `bytes`: the smallest free extent that holds it (the
    /// lowest address among equals), split when the rest is at least
    /// [`MIN_SPLIT`]. Returns (start, length given).
    pub fn take(&mut self, bytes: usize) -> Option<(usize, usize)> {
        let mut best: Option<usize> = None;
        for (i, &(_, len)) in self.free.iter().enumerate() {
            if len >= bytes && best.is_none_or(|b| len < self.free[b].1) {
                best = Some(i);
                if len == bytes {
                    break;
                }
            }
        }
        let i = best?;
        let (addr, len) = self.free[i];
        if len - bytes >= MIN_SPLIT {
            self.free[i] = (addr + bytes, len - bytes);
            Some((addr, bytes))
        } else {
            self.free.remove(i);
            Some((addr, len))
        }
    }

    /// Returns `[addr, addr + len)` to the free extents, merged with a free
    /// neighbour on either side that lies in the same arena (arenas are
    /// separate system allocations even when they happen to touch).
    pub fn give(&mut self, addr: usize, len: usize) {
        let (base, arena_len) = self.arena_of(addr);
        let i = self.free.partition_point(|&(a, _)| a < addr);
        let end = addr + len;
        let merge_prev = i > 0 && addr > base && {
            let (p, plen) = self.free[i - 1];
            p + plen == addr
        };
        let merge_next = i < self.free.len() && end < base + arena_len && self.free[i].0 == end;
        match (merge_prev, merge_next) {
            (true, true) => {
                self.free[i - 1].1 += len + self.free[i].1;
                self.free.remove(i);
            }
            (true, false) => self.free[i - 1].1 += len,
            (false, true) => self.free[i] = (addr, len + self.free[i].1),
            (false, false) => self.free.insert(i, (addr, len)),
        }
    }

    /// Removes every arena that is entirely free and returns them (base,
    /// length) for the caller to give back to the system.
    pub fn take_free_arenas(&mut self) -> Vec<(usize, usize)> {
        let free = &self.free;
        let whole = |&(b, l): &(usize, usize)| free.binary_search(&(b, l)).is_ok();
        let out: Vec<(usize, usize)> = self.arenas.iter().copied().filter(whole).collect();
        if !out.is_empty() {
            self.arenas.retain(|a| !out.contains(a));
            self.free.retain(|e| !out.contains(e));
        }
        out
    }

    /// Removes and returns every arena, free or not (the pool is dropping).
    pub fn drain_arenas(&mut self) -> Vec<(usize, usize)> {
        self.free.clear();
        std::mem::take(&mut self.arenas)
    }

    /// Lengths of the free extents, in address order.
    pub fn free_sizes(&self) -> impl Iterator<Item = usize> + '_ {
        self.free.iter().map(|&(_, l)| l)
    }

    /// Number of arenas.
    #[cfg(test)]
    pub fn arenas(&self) -> usize {
        self.arenas.len()
    }

    fn arena_of(&self, addr: usize) -> (usize, usize) {
        // Every block handed out lies in an arena, so one starts at or below it.
        let i = self.arenas.partition_point(|&(b, _)| b <= addr);
        if i == 0 { (addr, usize::MAX - addr) } else { self.arenas[i - 1] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free(e: &Extents) -> Vec<(usize, usize)> {
        e.free.clone()
    }

    #[test]
    fn best_fit_splits_and_freeing_coalesces() {
        let mut e = Extents::default();
        e.add_arena(1 << 20, 1 << 20);
        e.add_arena(8 << 20, 300_000);
        // Best fit: the 300 000 B arena, not the 1 MiB one.
        assert_eq!(e.take(200_000), Some((8 << 20, 200_000)));
        assert_eq!(free(&e), vec![(1 << 20, 1 << 20), ((8 << 20) + 200_000, 100_000)]);
        // Split from the low end of the 1 MiB arena, three blocks in a row.
        let base = 1 << 20;
        let a = e.take(256 << 10).unwrap();
        let b = e.take(256 << 10).unwrap();
        let c = e.take(256 << 10).unwrap();
        assert_eq!((a.0, b.0, c.0), (base, base + (256 << 10), base + (512 << 10)));
        // Freeing the middle one leaves a hole between live blocks...
        e.give(b.0, b.1);
        assert!(free(&e).contains(&(b.0, 256 << 10)));
        // ...which merges with its left neighbour once that is freed...
        e.give(a.0, a.1);
        assert!(free(&e).contains(&(base, 512 << 10)));
        // ...and with both sides when the last block goes: one extent again.
        e.give(c.0, c.1);
        assert!(free(&e).contains(&(base, 1 << 20)));
        assert_eq!(e.free.len(), 2, "{:?}", free(&e));
    }

    #[test]
    fn small_remainders_stay_with_the_block() {
        let mut e = Extents::default();
        e.add_arena(0, 100_000);
        // 100 000 - 98 000 < MIN_SPLIT: the whole arena is given.
        assert_eq!(e.take(98_000), Some((0, 100_000)));
        assert_eq!(e.take(64), None);
        e.give(0, 100_000);
        assert_eq!(e.take(100_001), None);
    }

    #[test]
    fn touching_arenas_do_not_merge_and_free_arenas_are_returned() {
        let mut e = Extents::default();
        e.add_arena(0, 65536);
        e.add_arena(65536, 65536); // touches the first one
        let a = e.take(65536).unwrap();
        let b = e.take(65536).unwrap();
        e.give(a.0, a.1);
        e.give(b.0, b.1);
        assert_eq!(free(&e), vec![(0, 65536), (65536, 65536)], "no extent crosses an arena edge");
        assert_eq!(e.take(65537), None);
        let c = e.take(4096).unwrap();
        assert_eq!(e.take_free_arenas(), vec![(65536, 65536)], "only the untouched arena is free");
        assert_eq!(e.arenas(), 1);
        e.give(c.0, c.1);
        assert_eq!(e.take_free_arenas(), vec![(0, 65536)]);
        assert_eq!((e.arenas(), e.free_sizes().count()), (0, 0));
    }
}
