//! How a product's tiles are cut into tasks for many threads: M and N
//! together. A layer's GEMM in inference has about 128 rows (11 A panels of
//! 12) and 768 to 3072 columns (24 to 96 B panels of 32): cut by columns
//! alone into tasks of a few panels it gives 6 tasks at 768 columns, so 16
//! threads left 10 idle (BERT-base b1 s128 at 16 threads took 1.63x
//! PyTorch's time). The grids below also cut the rows, until there are at
//! least two tasks per thread (claimed or stolen, so a thread slowed by a
//! neighbour takes fewer), while each task stays small enough for L2: its
//! B panels are at most `col_panels` x 32 columns x one k block (192 KiB at
//! 4 panels and KC = 384). At two threads the grids are the ones the
//! kernels had before (columns only), which were tuned there.

use super::chunk;
use std::ops::Range;

/// A grid of `row_groups` x `col_tasks` tasks over `ipanels` A panels and
/// `jpanels` B panels; task `i` is row group `i / col_tasks` against
/// column task `i % col_tasks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grid {
    /// A panels (MR rows each) of the product.
    pub ipanels: usize,
    /// B panels (NR columns each) of the product.
    pub jpanels: usize,
    /// Near-equal contiguous groups the A panels are cut into.
    pub row_groups: usize,
    /// B panels per column task (the last may have fewer).
    pub col_panels: usize,
}

impl Grid {
    /// The grid for `threads` threads with column tasks of at most
    /// `col_panels` panels: columns first; rows cut only as far as it takes
    /// to give every thread two tasks; column tasks narrowed (down to one
    /// panel) only when even one A panel per row group leaves too few.
    pub fn new(ipanels: usize, jpanels: usize, threads: usize, col_panels: usize) -> Self {
        let (ipanels, jpanels) = (ipanels.max(1), jpanels.max(1));
        let want = 2 * threads.max(1);
        let mut cp = col_panels.clamp(1, jpanels);
        loop {
            let col_tasks = jpanels.div_ceil(cp);
            let row_groups = if col_tasks >= want { 1 } else { want.div_ceil(col_tasks).min(ipanels) };
            if row_groups * col_tasks >= want || cp == 1 {
                return Self { ipanels, jpanels, row_groups, col_panels: cp };
            }
            cp = cp.div_ceil(2);
        }
    }

    /// Column tasks per row group.
    pub fn col_tasks(&self) -> usize {
        self.jpanels.div_ceil(self.col_panels)
    }

    /// Tasks in all.
    pub fn tasks(&self) -> usize {
        self.row_groups * self.col_tasks()
    }

    /// Task `i`'s A panels and B panels.
    pub fn task(&self, i: usize) -> (Range<usize>, Range<usize>) {
        let (r, t) = (i / self.col_tasks(), i % self.col_tasks());
        let cols = t * self.col_panels..((t + 1) * self.col_panels).min(self.jpanels);
        (chunk(self.ipanels, self.row_groups, r), cols)
    }
}

/// A panels per compute task of the per-call driver (`Job::compute`), whose
/// column ranges are owned one per worker: `default` (tuned at two threads)
/// while that gives every thread two tasks, else fewer, down to one panel.
pub(crate) fn task_apanels(ipanels: usize, ranges: usize, threads: usize, default: usize) -> usize {
    let want = 2 * threads.max(1);
    let ranges = ranges.max(1);
    if ranges * ipanels.div_ceil(default.max(1)) >= want {
        return default.max(1);
    }
    let per_range = want.div_ceil(ranges);
    (ipanels / per_range).clamp(1, default.max(1))
}

/// Column ranges of the per-call driver: one per worker, each of at least
/// two panels, so a worker's B panels stay in its L2 (one range when the
/// product is narrower than four panels).
pub(crate) fn ranges(jpanels: usize, threads: usize) -> usize {
    threads.clamp(1, (jpanels / 2).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every (A panel, B panel) pair in exactly one task.
    fn assert_partition(g: &Grid) {
        let mut seen = vec![0u8; g.ipanels * g.jpanels];
        for i in 0..g.tasks() {
            let (rows, cols) = g.task(i);
            assert!(!rows.is_empty() && !cols.is_empty(), "{g:?}: task {i} is empty");
            for ip in rows {
                for jp in cols.clone() {
                    seen[ip * g.jpanels + jp] += 1;
                }
            }
        }
        assert!(seen.iter().all(|&s| s == 1), "{g:?}: a tile is missed or covered twice");
    }

    #[test]
    fn inference_shapes_split_rows_and_columns_at_16_and_64_threads() {
        // 128 rows (11 A panels) at BERT-base's widths: 768, 2304, 3072.
        for jpanels in [24, 72, 96] {
            for threads in [16, 64] {
                let g = Grid::new(11, jpanels, threads, 4);
                assert!(g.tasks() >= threads, "{g:?}: {} tasks for {threads} threads", g.tasks());
                assert!(g.col_panels <= 4, "tasks stay L2-sized");
                assert_partition(&g);
            }
        }
        let g = Grid::new(11, 24, 16, 4);
        assert_eq!((g.row_groups, g.col_panels, g.tasks()), (6, 4, 36));
        let g = Grid::new(11, 24, 64, 4);
        assert_eq!((g.row_groups, g.col_panels, g.tasks()), (11, 2, 132));
    }

    #[test]
    fn two_threads_keep_the_column_split_and_tiny_products_stay_whole() {
        assert_eq!(Grid::new(11, 24, 2, 4), Grid { ipanels: 11, jpanels: 24, row_groups: 1, col_panels: 4 });
        let g = Grid::new(1, 1, 64, 4);
        assert_eq!(g.tasks(), 1);
        assert_partition(&g);
        for (ip, jp, t) in [(3, 5, 7), (100, 3, 16), (7, 200, 64), (1, 9, 16)] {
            assert_partition(&Grid::new(ip, jp, t, 4));
        }
    }

    #[test]
    fn the_driver_cuts_rows_finer_only_where_threads_need_it() {
        assert_eq!(ranges(24, 2), 2);
        assert_eq!(ranges(24, 16), 12);
        assert_eq!(ranges(3, 16), 1);
        assert_eq!(task_apanels(11, 2, 2, 8), 8, "two threads: as tuned");
        let (r, ta) = (ranges(24, 16), task_apanels(11, ranges(24, 16), 16, 8));
        assert!(r * 11usize.div_ceil(ta) >= 16, "{r} ranges x {ta}-panel tasks");
        let (r, ta) = (ranges(24, 64), task_apanels(11, ranges(24, 64), 64, 8));
        assert_eq!(ta, 1);
        assert!(r * 11 >= 64);
    }
}
