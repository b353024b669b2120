//! tfbench's own packed f32 GEMM for AVX-512, BLIS-style: `C (+)= A op(B)`.
//!
//! Loops, outermost first: `NC` columns of C; up to `KC_MAX` steps of the
//! inner dimension (B's `kc x NC` block packed into NR-column panels, sized
//! to stay in L2); `MC` rows (A's `MC x kc` block packed into MR-row panels);
//! then one MR-row A panel (kept in L1) against every NR-column B panel
//! streamed from L2, each a [`kernel::tile`] call on a 12 x 32 register tile.
//! This is BLIS's order for its 32 x 12 Skylake-X kernel, transposed: the
//! broadcast operand stays in L1, the vector operand streams. Measured on
//! the 2-core AVX-512 dev machine (1024^3, one thread, best of several runs
//! in thread CPU time, the machine being loaded) it beat the opposite order
//! (B panel in L1, A streaming) by about 15%, and KC = 384 beat 256 and 512
//! then; with two pooled threads 512 won later (see `KC_MAX`).
//!
//! Threading: the caller's thread plus `threads - 1` persistent workers
//! ([`super::workers`], which spin briefly between calls instead of being
//! spawned per call) pack each block together, meet at a barrier, compute
//! its tiles, and meet again before the next block is packed; packed data
//! is shared, never duplicated, and nothing nests inside rayon's pool. Work is claimed, not
//! assigned: panels to pack and tasks of tiles are taken from atomic
//! counters, each worker first from the column range it owns (so its B
//! panels stay in its L2), then from the others'. On a shared host one core
//! often runs slower than the other for a while, and a helper thread starts
//! 0.1-0.3 ms after the call; with fixed halves the faster worker then waited
//! at every barrier (measured: 1.3-3.8 ms of 28 ms of thread time per
//! 1024^3 product on two threads). Claiming made the median two-thread
//! product 1-17% faster at 512^3 to 2048^3 (never slower, 3 in-process
//! alternating runs of 30) and left one thread unchanged.
//!
//! Products with at most [`small::ROWS`] rows of A (decode steps) skip all
//! of this and read B where it lies ([`small`]).

mod avx2;
mod kernel;
mod pack;
mod packed;
mod small;
mod split;

pub use packed::{PackedB, SMALL_M};

use super::Layout;
use super::buffer::HugeBuf;
use super::workers::{self, SpinBarrier};
use kernel::{MR, NR};
use pack::View;
use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Inner-dimension block of [`PackedB`]'s panels: an `MR x KC` A panel
/// (18 KiB) stays in the 48 KiB L1 while B panels stream past it; longer
/// blocks also mean fewer passes over C.
const KC: usize = 384;
/// Longest inner-dimension block of the per-call driver, which cuts `k`
/// into equal blocks ([`k_block`]): a 24 KiB A panel still leaves half of
/// L1 to the streaming B panels. In one process, alternating with KC = 384
/// on 2 threads, 1024^3 ran 3-6% faster (medians, 4 runs of 100 calls);
/// one thread, and products with shorter k, were level within the noise.
const KC_MAX: usize = 512;
/// The driver's inner-dimension block for a product with inner dimension
/// `k`: `k` cut into the fewest blocks of at most [`KC_MAX`], all equal but
/// the last (lengths rounded up to 8 steps), so no block is a short tail
/// that costs a whole pass over C for a few steps.
fn k_block(k: usize) -> usize {
    let blocks = k.div_ceil(KC_MAX).max(1);
    k.div_ceil(blocks).next_multiple_of(8).min(k).max(1)
}

/// Rows per A block, a whole number of MR-row panels. A panels are read
/// once per block from wherever they are, so this only bounds the workspace
/// (8 MiB at `KC_MAX`).
const MC: usize = 340 * MR;
/// Columns per B block, a whole number of NR-column panels: `KC_MAX x NC`
/// floats (2 MiB) fill the 2 MiB L2 of one core, half of it per core when
/// two threads split the block's columns.
const NC: usize = 32 * NR;
/// Below this many multiply-adds one thread is faster than waking others.
const PAR_MIN_MKN: usize = 1 << 20;
/// A panels per compute task (96 rows): small enough that a worker done
/// with its own columns finds tasks left to take, large enough that a task
/// reuses its B panels over many rows.
const TASK_APANELS: usize = 8;
/// Panels claimed per packing step.
const PACK_CLAIM: usize = 2;

/// The CPU features the kernel is compiled for (pack.rs's panel packers
/// also enable AVX2).
pub const FEATURES: [crate::isa::Feature; 2] = [crate::isa::Feature::Avx512f, crate::isa::Feature::Avx2];

/// True when the AVX-512 kernel may run here (the CPU has AVX-512F and
/// `TFBENCH_MAX_ISA` allows it); otherwise callers must use another GEMM.
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        crate::isa::has_all(&FEATURES)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// True when [`matmul_into`] runs here: the AVX-512 kernel, or on a CPU
/// (or under a `TFBENCH_MAX_ISA` cap) with AVX2 and FMA only, the AVX2
/// one ([`avx2`]). [`PackedB`] still needs AVX-512 ([`available`]).
pub fn runs_here() -> bool {
    available() || avx2::available()
}

/// Why [`matmul_into`] cannot run here, naming the missing features;
/// `None` when it can.
pub fn unavailable_reason() -> Option<String> {
    if runs_here() {
        return None;
    }
    Some(
        crate::isa::unavailable(&avx2::FEATURES).unwrap_or_else(|| "no AVX2 kernel for this CPU".to_string()),
    )
}

/// The instruction set [`matmul_into`] dispatches to here: `avx512`,
/// `avx2`, or `none`.
pub fn dispatch_isa() -> &'static str {
    if available() {
        "avx512"
    } else if avx2::available() {
        "avx2"
    } else {
        "none"
    }
}

/// 64-byte aligned storage unit, so packed panels start on cache lines and
/// the kernel can use aligned loads.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

thread_local! {
    /// Packing workspace reused across calls from the same thread: large
    /// allocations would otherwise be page-faulted in on every call.
    static WORKSPACE: RefCell<HugeBuf<Line>> = const { RefCell::new(HugeBuf::empty()) };
}

/// A mutable pointer shared by the workers; each writes disjoint parts.
#[derive(Clone, Copy)]
struct Shared(*mut f32);
// SAFETY: workers write disjoint panels / tiles, separated by barriers from
// the reads of other workers.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    /// The pointer `i` floats on. A method, so that closures capture the
    /// whole (Sync) wrapper rather than its raw-pointer field.
    fn at(self, i: usize) -> *mut f32 {
        self.0.wrapping_add(i)
    }
}

/// `c[m x n] (+)= a[m x k] * op(b)` on `threads` threads (the caller's plus
/// pooled workers), adding to `c` when `accumulate`: the AVX-512 kernel, or
/// the AVX2 one where only AVX2 and FMA may run. Returns false, touching
/// nothing, when neither can (see [`runs_here`]).
///
/// # Panics
/// When a slice length does not match its shape.
pub fn matmul_into(
    threads: usize,
    (m, k, n): (usize, usize, usize),
    a: &[f32],
    b: &[f32],
    layout: Layout,
    c: &mut [f32],
    accumulate: bool,
) -> bool {
    assert_eq!(a.len(), m * k, "sgemm: A is not {m}x{k}");
    assert_eq!(b.len(), k * n, "sgemm: B does not hold {k}x{n}");
    assert_eq!(c.len(), m * n, "sgemm: C is not {m}x{n}");
    let wide = available();
    if !wide && !avx2::available() {
        return false;
    }
    if m == 0 || n == 0 {
        return true;
    }
    if k == 0 {
        if !accumulate {
            c.fill(0.0);
        }
        return true;
    }
    let av = View { ptr: a.as_ptr(), rs: k, cs: 1 };
    // B seen transposed, as an n x k matrix: row j holds column j of B.
    let bv = match layout {
        Layout::KxN => View { ptr: b.as_ptr(), rs: 1, cs: n },
        Layout::NxK => View { ptr: b.as_ptr(), rs: k, cs: 1 },
    };
    if !wide {
        avx2::matmul(threads, (m, k, n), av, bv, c, accumulate);
        return true;
    }
    let threads = if m * k * n < PAR_MIN_MKN { 1 } else { threads.max(1) };
    if m <= small::ROWS {
        // SAFETY: available() checked AVX-512F; the asserts checked the shapes.
        unsafe { small::matmul(threads, (m, k, n), a, b, layout, c, accumulate) };
        return true;
    }
    // Whole panels: a ragged last block still packs full MR / NR panels.
    let (kc_step, mc_max, nc_max) =
        (k_block(k), MC.min(m).next_multiple_of(MR), NC.min(n).next_multiple_of(NR));
    let b_len = kc_step * nc_max;
    let a_len = mc_max * kc_step;
    WORKSPACE.with_borrow_mut(|ws| {
        let need = (b_len + a_len).div_ceil(16);
        if ws.len() < need {
            // Powers of two: a thread meeting ever larger products regrows
            // (allocates) a few times at most, not once per new shape.
            *ws = HugeBuf::filled(need.next_power_of_two(), Line([0.0; 16]));
        }
        let base = ws.as_mut_ptr() as *mut f32;
        // SAFETY: the workspace holds b_len + a_len floats, the B part first
        // (b_len is a multiple of NR = 32, so the A part stays aligned).
        let (bp, ap) = (Shared(base), Shared(unsafe { base.add(b_len) }));
        let need = n.div_ceil(NC) * k.div_ceil(kc_step) * (1 + 2 * threads);
        // On the stack for most products: small GEMMs (attention heads) are
        // called many times, and one allocation per call would show.
        let stack: [AtomicUsize; 64] = std::array::from_fn(|_| AtomicUsize::new(0));
        let heap: Vec<AtomicUsize>;
        let claims = if need <= stack.len() {
            &stack[..need]
        } else {
            heap = (0..need).map(|_| AtomicUsize::new(0)).collect();
            &heap[..]
        };
        let job = Job {
            m,
            k,
            n,
            kc_step,
            a: av,
            b: bv,
            c: Shared(c.as_mut_ptr()),
            ldc: n,
            accumulate,
            ap,
            bp,
            threads,
            claims,
        };
        if threads == 1 {
            job.work(0, None);
        } else {
            let barrier = SpinBarrier::new(threads);
            workers::run(threads, &|t| job.work(t, Some(&barrier)));
        }
    });
    true
}

/// One GEMM call's shared state.
struct Job<'a> {
    m: usize,
    k: usize,
    n: usize,
    /// Inner-dimension block ([`k_block`]).
    kc_step: usize,
    a: View,
    b: View,
    c: Shared,
    ldc: usize,
    accumulate: bool,
    /// Packed A block (MC x kc_step).
    ap: Shared,
    /// Packed B block (kc_step x NC).
    bp: Shared,
    threads: usize,
    /// Work counters, `1 + 2 * threads` per (column block, k block): A
    /// panels packed, then per column range (see [`Job::ranges`]) its B
    /// panels packed and its compute tasks taken. Fresh per block; only a
    /// very tall A (several A blocks) resets them, between barriers.
    claims: &'a [AtomicUsize],
}

/// Claims `step` items at a time from `counter` below `len`, calling `f` on
/// each claimed range until none are left.
fn claim_all(counter: &AtomicUsize, len: usize, step: usize, mut f: impl FnMut(std::ops::Range<usize>)) {
    loop {
        let start = counter.fetch_add(step, Ordering::Relaxed);
        if start >= len {
            return;
        }
        f(start..(start + step).min(len));
    }
}

/// The `t`-th of `parts` near-equal contiguous chunks of `0..len`.
fn chunk(len: usize, parts: usize, t: usize) -> std::ops::Range<usize> {
    (len * t / parts)..(len * (t + 1) / parts)
}

impl Job<'_> {
    /// Column ranges a block of `jpanels` B panels is cut into: up to one
    /// per worker, each of at least two panels (worker `t` owns range `t`;
    /// with more workers than ranges, worker `t` starts at range `t %
    /// ranges`), else one range of all panels.
    fn ranges(&self, jpanels: usize) -> usize {
        split::ranges(jpanels, self.threads)
    }

    /// Worker `t` drains the counters of its own range first, then what is
    /// left of the others', `step` items at a time: `counters[r]` counts the
    /// items claimed in range `r`, which holds `len(r)` items.
    fn claim_ranges(
        &self,
        t: usize,
        counters: &[AtomicUsize],
        len: impl Fn(usize) -> usize,
        step: usize,
        mut f: impl FnMut(usize, std::ops::Range<usize>),
    ) {
        let ranges = counters.len();
        for r in (0..ranges).map(|i| (t + i) % ranges) {
            claim_all(&counters[r], len(r), step, |items| f(r, items));
        }
    }

    /// Worker `t`'s share of the whole product; `barrier` is None alone.
    fn work(&self, t: usize, barrier: Option<&SpinBarrier>) {
        let sync = || {
            if let Some(b) = barrier {
                b.wait();
            }
        };
        let (m, k, n, nt) = (self.m, self.k, self.n, self.threads);
        let per_block = 1 + 2 * nt;
        let mut block = 0;
        for jc in (0..n).step_by(NC) {
            let nc = NC.min(n - jc);
            let jpanels = nc.div_ceil(NR);
            let ranges = self.ranges(jpanels);
            for pc in (0..k).step_by(self.kc_step) {
                let kc = self.kc_step.min(k - pc);
                let claims = &self.claims[block * per_block..(block + 1) * per_block];
                block += 1;
                let (a_claims, b_claims, tasks) =
                    (&claims[0], &claims[1..1 + ranges], &claims[1 + nt..1 + nt + ranges]);
                // A worker packs its own range's B panels first, so they
                // are in its L2 when it computes with them.
                self.claim_ranges(
                    t,
                    b_claims,
                    |r| chunk(jpanels, ranges, r).len(),
                    PACK_CLAIM,
                    |r, panels| {
                        let first = chunk(jpanels, ranges, r).start;
                        for jp in panels.start + first..panels.end + first {
                            let w = NR.min(nc - jp * NR);
                            // SAFETY: panel jp of the B block lies inside the
                            // workspace; rows jc + jp*NR .. + w of B^T, columns
                            // pc .. pc + kc, lie inside B; each panel is
                            // claimed by one worker.
                            unsafe {
                                pack::pack_panel::<NR>(
                                    self.bp.at(jp * NR * kc),
                                    self.b,
                                    jc + jp * NR,
                                    pc,
                                    w,
                                    kc,
                                )
                            };
                        }
                    },
                );
                // The A block holds every row (MC >= m for all but very
                // tall A), packed once per k block and shared.
                for ic in (0..m).step_by(MC) {
                    let mc = MC.min(m - ic);
                    claim_all(a_claims, mc.div_ceil(MR), PACK_CLAIM, |panels| {
                        for ip in panels {
                            let h = MR.min(mc - ip * MR);
                            // SAFETY: as for B, with the A block and rows of A.
                            unsafe {
                                pack::pack_panel::<MR>(
                                    self.ap.at(ip * MR * kc),
                                    self.a,
                                    ic + ip * MR,
                                    pc,
                                    h,
                                    kc,
                                )
                            };
                        }
                    });
                    // Publishes this B block (with the first A block) and A.
                    sync();
                    self.compute(t, tasks, (ic, mc), (jc, nc), kc, self.accumulate || pc > 0);
                    // Nobody repacks A (or B) while another still reads it.
                    sync();
                    if ic + MC < m {
                        // The next A block reuses the A and task counters,
                        // reset while nobody claims: between two barriers.
                        if t == 0 {
                            a_claims.store(0, Ordering::Relaxed);
                            tasks.iter().for_each(|c| c.store(0, Ordering::Relaxed));
                        }
                        sync();
                    }
                }
            }
        }
    }

    /// The tiles of one packed (A block, B block) pair, as tasks of
    /// [`TASK_APANELS`] A panels against one column range (one counter per
    /// range in `tasks`), claimed own range first.
    fn compute(
        &self,
        t: usize,
        tasks: &[AtomicUsize],
        (ic, mc): (usize, usize),
        (jc, nc): (usize, usize),
        kc: usize,
        load_c: bool,
    ) {
        let (ipanels, jpanels) = (mc.div_ceil(MR), nc.div_ceil(NR));
        let ranges = tasks.len();
        // Finer row tasks where the ranges alone leave threads idle.
        let task_apanels = split::task_apanels(ipanels, ranges, self.threads, TASK_APANELS);
        let per_range = ipanels.div_ceil(task_apanels);
        self.claim_ranges(
            t,
            tasks,
            |_| per_range,
            1,
            |r, task| {
                let js = chunk(jpanels, ranges, r);
                for ip in task.start * task_apanels..(task.end * task_apanels).min(ipanels) {
                    let rows = MR.min(mc - ip * MR);
                    for jp in js.clone() {
                        let cols = NR.min(nc - jp * NR);
                        // SAFETY: the packed panels hold kc steps; the tile
                        // (ic + ip*MR, jc + jp*NR) of rows x cols is inside C,
                        // and its task was claimed by this worker alone.
                        unsafe {
                            kernel::tile(
                                kc,
                                self.ap.at(ip * MR * kc),
                                self.bp.at(jp * NR * kc),
                                self.c.at((ic + ip * MR) * self.ldc + jc + jp * NR),
                                self.ldc,
                                rows,
                                cols,
                                load_c,
                                std::ptr::null(),
                            )
                        };
                    }
                }
            },
        );
    }
}

#[cfg(test)]
mod tests;
