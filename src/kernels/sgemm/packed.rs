//! A matrix packed once into the microkernel's B-panel format, for operands
//! that are multiplied many times (a model's weights).
//!
//! [`super::matmul_into`] repacks B on every call: for a linear layer at a
//! few hundred tokens that reads and writes the whole weight matrix once more
//! per product, about a quarter of the time of a BERT forward pass under the
//! `gemm` crate, which does the same. A [`PackedB`] pays that once, at load.
//!
//! Layout: `k` is cut into blocks of `KC` steps; block `pc` starts at float
//! `pc * npad` (`npad` = `n` rounded up to whole `NR`-column panels) and
//! holds its panels one after another, panel `jp` being `kc x NR` floats
//! (`kc` steps of `NR` consecutive columns, zero past column `n`). Every
//! panel is contiguous and so is each block, so a pass over the matrix is
//! one sequential stream, which is what a decode step (one activation row,
//! bound by memory bandwidth) wants too: rows up to [`SMALL_M`] use a
//! streaming kernel on the same panels, so no second copy is kept.

use super::kernel::{self, MR, NR};
use super::pack::{self, View};
use super::{KC, Line, Shared, chunk};
use crate::kernels::buffer::HugeBuf;
use rayon::prelude::*;
use std::cell::RefCell;

/// Rows of A packed per block (the A block is reread from L2 once per
/// group of B panels).
const MC: usize = 32 * MR;
/// B panels that stay in L2 while every A panel of the block passes over
/// them: 16 x 32 columns x 384 steps x 4 bytes = 768 KiB.
const GROUP: usize = 16;
/// Up to this many rows of A use the streaming kernel (the register tile
/// would waste most of its 12 rows).
pub const SMALL_M: usize = 4;
/// Below this many multiply-adds one thread is faster than two.
const PAR_MIN_MKN: usize = 1 << 18;

/// Column panels per task when A is packed once and shared: 4 x 32 columns,
/// whose B panels (4 x 48 KiB per k block) stay in L2 while every A panel
/// passes; 6 tasks at BERT-base's width of 768, 24 at its FFN's 3072.
const TASK_PANELS: usize = 4;
/// Weight bytes per task of a decode-step product (see `matmul_bias_into`).
const STREAM_TASK_BYTES: usize = 384 << 10;
/// Largest k block of packed A (floats) shared by the tasks: 128 Ki floats
/// (512 KiB, up to 336 rows) stay in L2 beside a task's B panels while the
/// task's tiles reread them. Taller A (1024 rows: 1.5 MiB per block) was
/// reread from L3 by every 4-panel task, and 1024^3 ran slower than with
/// the per-thread blocks below, which keep a 384-row A block and 16 B panels
/// in L2.
const SHARED_A_BLOCK: usize = 1 << 17;

thread_local! {
    /// Packed A block per thread, reused across calls.
    static A_BLOCK: RefCell<Vec<Line>> = const { RefCell::new(Vec::new()) };
    /// The whole packed A, shared with the tasks of one call (see
    /// [`PackedB::shared_a`]); owned by the calling thread, reused.
    static A_SHARED: RefCell<HugeBuf<Line>> = const { RefCell::new(HugeBuf::empty()) };
}

/// The bias row of a product (null for none), shared by the tasks.
#[derive(Clone, Copy)]
struct Bias(*const f32);
// SAFETY: only read, and the slice outlives the tasks of the call.
unsafe impl Send for Bias {}
unsafe impl Sync for Bias {}

impl Bias {
    /// The bias of column panel `jp`, added in the first `k` block only
    /// (null otherwise, or when there is no bias).
    fn panel(self, pc: usize, jp: usize) -> *const f32 {
        if self.0.is_null() || pc > 0 { std::ptr::null() } else { self.0.wrapping_add(jp * NR) }
    }
}

/// `B` (`k x n`) packed for the AVX-512 microkernel; built from a linear
/// layer's `[n x k]` (`[out, in]`) weight.
pub struct PackedB {
    k: usize,
    n: usize,
    npad: usize,
    /// On huge pages: every product rereads the panels, and with 4 KiB
    /// pages each reread missed the TLB page after page.
    data: HugeBuf<Line>,
}

impl std::fmt::Debug for PackedB {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PackedB({} x {})", self.k, self.n)
    }
}

impl PackedB {
    /// Packs `w`, stored `[n x k]` row-major, as the `k x n` operand `w^T`.
    /// `None` when the CPU lacks AVX-512 (see [`super::available`]): the
    /// caller keeps the plain matrix and another GEMM.
    ///
    /// # Panics
    /// When `w.len() != n * k`.
    pub fn from_nxk(w: &[f32], n: usize, k: usize) -> Option<Self> {
        assert_eq!(w.len(), n * k, "PackedB: weight is not {n}x{k}");
        if !super::available() {
            return None;
        }
        let npad = n.next_multiple_of(NR);
        let mut data = HugeBuf::filled((k * npad).div_ceil(16), Line([0.0; 16]));
        // SAFETY: Line is 16 plain f32s; the slice covers the allocation.
        let flat: &mut [f32] =
            unsafe { std::slice::from_raw_parts_mut(data.as_mut_ptr() as *mut f32, data.len() * 16) };
        let src = View { ptr: w.as_ptr(), rs: k, cs: 1 };
        if k > 0 {
            flat[..k * npad].par_chunks_mut(KC * npad).enumerate().for_each(|(bi, block)| {
                let (pc, kc) = (bi * KC, block.len() / npad);
                for (jp, panel) in block.chunks_mut(NR * kc).enumerate() {
                    let cols = NR.min(n - jp * NR);
                    // SAFETY: AVX-512 is present (checked above); the panel
                    // holds kc * NR floats; rows jp*NR.. +cols, columns
                    // pc.. +kc of the n x k source lie inside `w`.
                    unsafe { pack::pack_panel::<NR>(panel.as_mut_ptr(), src, jp * NR, pc, cols, kc) };
                }
            });
        }
        Some(Self { k, n, npad, data })
    }

    /// Inner dimension (the layer's input features).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Columns (the layer's output features).
    pub fn n(&self) -> usize {
        self.n
    }

    /// Bytes held, padding included.
    pub fn bytes(&self) -> usize {
        self.data.len() * std::mem::size_of::<Line>()
    }

    fn floats(&self) -> &[f32] {
        // SAFETY: Line is 16 plain f32s.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr() as *const f32, self.data.len() * 16) }
    }

    /// Index of element `(p, j)` of the `k x n` operand.
    fn index(&self, p: usize, j: usize) -> usize {
        let pc = p / KC * KC;
        let kc = KC.min(self.k - pc);
        pc * self.npad + (j / NR) * NR * kc + (p - pc) * NR + j % NR
    }

    /// Row `j` of the original `[n x k]` matrix (an embedding lookup when
    /// the LM head is tied to the token embedding).
    ///
    /// # Panics
    /// When `j >= n` or `out.len() != k`.
    pub fn row_into(&self, j: usize, out: &mut [f32]) {
        assert!(j < self.n && out.len() == self.k, "PackedB::row_into: row {j} of {}x{}", self.n, self.k);
        let f = self.floats();
        out.iter_mut().enumerate().for_each(|(p, o)| *o = f[self.index(p, j)]);
    }

    /// The original `[n x k]` matrix.
    pub fn to_nxk(&self) -> Vec<f32> {
        let (k, n) = (self.k, self.n);
        let mut out = vec![0.0; n * k];
        if k == 0 {
            return out;
        }
        // Panel by panel: sequential reads, each step scattered over NR rows.
        let f = self.floats();
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            for (jp, panel) in f[pc * self.npad..][..kc * self.npad].chunks(NR * kc).enumerate() {
                for (p, step) in panel.chunks(NR).enumerate() {
                    for (l, &v) in step.iter().enumerate().take(n.saturating_sub(jp * NR)) {
                        out[(jp * NR + l) * k + pc + p] = v;
                    }
                }
            }
        }
        out
    }

    /// `c[m x n] (+)= a[m x k] * B` on up to `threads` tasks of the current
    /// rayon pool, adding to `c` when `accumulate`.
    ///
    /// # Panics
    /// When a slice length does not match its shape.
    pub fn matmul_into(&self, threads: usize, m: usize, a: &[f32], c: &mut [f32], accumulate: bool) {
        self.matmul_bias_into(threads, m, a, None, c, accumulate);
    }

    /// [`Self::matmul_into`] plus `bias` (`n` floats) added to every row of
    /// the product, in the kernel's store (a linear layer's bias, without a
    /// second pass over C).
    ///
    /// # Panics
    /// When a slice length does not match its shape.
    pub fn matmul_bias_into(
        &self,
        threads: usize,
        m: usize,
        a: &[f32],
        bias: Option<&[f32]>,
        c: &mut [f32],
        accumulate: bool,
    ) {
        let (k, n) = (self.k, self.n);
        assert_eq!(a.len(), m * k, "PackedB::matmul_into: A is not {m}x{k}");
        assert_eq!(c.len(), m * n, "PackedB::matmul_into: C is not {m}x{n}");
        if let Some(b) = bias {
            assert_eq!(b.len(), n, "PackedB::matmul_bias_into: bias is not {n} long");
        }
        if m == 0 || n == 0 {
            return;
        }
        if k == 0 {
            if !accumulate {
                c.fill(0.0);
            }
            if let Some(b) = bias {
                c.chunks_mut(n).for_each(|row| row.iter_mut().zip(b).for_each(|(v, &x)| *v += x));
            }
            return;
        }
        let bias = Bias(bias.map_or(std::ptr::null(), <[f32]>::as_ptr));
        let jpanels = self.npad / NR;
        let tasks = if m * k * n < PAR_MIN_MKN { 1 } else { threads.clamp(1, jpanels.max(m.div_ceil(MR))) };
        let cp = Shared(c.as_mut_ptr());
        if tasks > 1
            && m > SMALL_M
            && m.next_multiple_of(MR) * KC <= SHARED_A_BLOCK
            && jpanels >= 2 * TASK_PANELS
            && threads >= crate::backend::cpu::current_threads()
            // SAFETY: AVX-512 is present (a PackedB exists); c is m x n.
            && unsafe { self.shared_a(threads, m, a, cp, accumulate, bias) }
        {
            return;
        }
        if tasks > 1 && m <= SMALL_M && threads >= crate::backend::cpu::current_threads() {
            // A decode step streams the weights once: hand the panels out in
            // slices of about 384 KiB under work stealing rather than one
            // range per thread, so a core slowed by a neighbour streams less.
            let per = (STREAM_TASK_BYTES / (4 * NR * k)).max(1);
            (0..jpanels.div_ceil(per)).into_par_iter().for_each(|t| {
                let cols = t * per..((t + 1) * per).min(jpanels);
                // SAFETY: AVX-512 is present; each task writes only its own
                // column panels of C, which `cp` covers.
                unsafe { self.stream(m, a, cp, cols, accumulate, bias) };
            });
            return;
        }
        let run = |t: usize| {
            // Split the columns when every task gets a couple of panels
            // (the usual case: n is a layer width), else the rows.
            let (rows, cols) = if m <= SMALL_M || jpanels >= 2 * tasks {
                (0..m, chunk(jpanels, tasks, t))
            } else {
                let r = chunk(m.div_ceil(MR), tasks, t);
                (r.start * MR..(r.end * MR).min(m), 0..jpanels)
            };
            // SAFETY: AVX-512 is present (a PackedB exists); each task writes
            // only its own rows x column panels of C, which `cp` covers.
            unsafe {
                if m <= SMALL_M {
                    self.stream(m, a, cp, cols, accumulate, bias);
                } else {
                    self.tiles(a, cp, rows, cols, accumulate, bias);
                }
            }
        };
        if tasks == 1 {
            run(0);
        } else {
            (0..tasks).into_par_iter().for_each(run);
        }
    }

    /// The whole product with A packed once, in parallel, into a buffer all
    /// tasks read, then tasks of up to [`TASK_PANELS`] column panels (and,
    /// on many threads, a group of A panels: [`super::split::Grid`]) handed
    /// out by rayon's work stealing. Splitting the columns statically, one range per
    /// thread, had every thread pack all of A, and a thread slowed by a
    /// neighbour on a shared host held the whole product up. False, doing
    /// nothing, when the calling thread's buffer is already in use (a nested
    /// call); the caller then takes the per-task path.
    ///
    /// # Safety
    /// AVX-512F; `c` covers `m x n` and nothing else writes it meanwhile.
    unsafe fn shared_a(
        &self,
        threads: usize,
        m: usize,
        a: &[f32],
        c: Shared,
        accumulate: bool,
        bias: Bias,
    ) -> bool {
        let (k, n) = (self.k, self.n);
        let ipanels = m.div_ceil(MR);
        let jpanels = self.npad / NR;
        A_SHARED.with(|cell| {
            let Ok(mut buf) = cell.try_borrow_mut() else { return false };
            #[cfg(test)]
            tests::SHARED_CALLS.with(|n| n.set(n.get() + 1));
            // Block pc of A starts at float pc * ipanels * MR; panel ip of the
            // block at + ip * MR * kc.
            let need = (ipanels * MR * k).div_ceil(16);
            if buf.len() < need {
                // Powers of two: a few regrowths at most as shapes grow.
                *buf = HugeBuf::filled(need.next_power_of_two(), Line([0.0; 16]));
            }
            let ap = Shared(buf.as_mut_ptr() as *mut f32);
            let av = View { ptr: a.as_ptr(), rs: k, cs: 1 };
            let blocks = k.div_ceil(KC);
            (0..blocks * ipanels).into_par_iter().for_each(|i| {
                let (pc, ip) = (i / ipanels * KC, i % ipanels);
                let kc = KC.min(k - pc);
                // SAFETY: panel (pc, ip) lies inside the buffer and is this
                // task's alone; rows ip*MR.. and columns pc.. +kc lie inside A.
                unsafe {
                    pack::pack_panel::<MR>(
                        ap.at(pc * ipanels * MR + ip * MR * kc),
                        av,
                        ip * MR,
                        pc,
                        MR.min(m - ip * MR),
                        kc,
                    )
                };
            });
            let bf = Shared(self.floats().as_ptr() as *mut f32);
            // Rows are cut too when the columns alone give too few tasks
            // for the threads (see `split`).
            let grid = super::split::Grid::new(ipanels, jpanels, threads, TASK_PANELS);
            (0..grid.tasks()).into_par_iter().for_each(|t| {
                let (rows, cols) = grid.task(t);
                for pc in (0..k).step_by(KC) {
                    let kc = KC.min(k - pc);
                    let load_c = accumulate || pc > 0;
                    for ip in rows.clone() {
                        for jp in cols.clone() {
                            // SAFETY: A panel (pc, ip) was packed above (the
                            // first pass has finished); B panel (pc, jp) holds
                            // kc x NR floats; the C tile is this task's.
                            unsafe {
                                kernel::tile(
                                    kc,
                                    ap.at(pc * ipanels * MR + ip * MR * kc),
                                    bf.at(pc * self.npad + jp * NR * kc),
                                    c.at(ip * MR * n + jp * NR),
                                    n,
                                    MR.min(m - ip * MR),
                                    NR.min(n - jp * NR),
                                    load_c,
                                    bias.panel(pc, jp),
                                )
                            };
                        }
                    }
                }
            });
            true
        })
    }

    /// Rows `rows` of C over column panels `cols`, through the register
    /// tile: A is packed block by block into a per-thread buffer, B panels
    /// are read in place.
    ///
    /// # Safety
    /// AVX-512F; `c` covers `m x n` and this call alone writes the given
    /// rows x panels.
    unsafe fn tiles(
        &self,
        a: &[f32],
        c: Shared,
        rows: std::ops::Range<usize>,
        cols: std::ops::Range<usize>,
        accumulate: bool,
        bias: Bias,
    ) {
        let (k, n) = (self.k, self.n);
        let av = View { ptr: a.as_ptr(), rs: k, cs: 1 };
        let bf = self.floats().as_ptr();
        A_BLOCK.with_borrow_mut(|ws| {
            // Always the largest block: a size that depended on `k` would
            // regrow (allocate) whenever a thread first met a longer `k`.
            let need = (MC * KC).div_ceil(16);
            if ws.len() < need {
                *ws = vec![Line([0.0; 16]); need];
            }
            let ap = ws.as_mut_ptr() as *mut f32;
            for ic in rows.clone().step_by(MC) {
                let mc = MC.min(rows.end - ic);
                let ipanels = mc.div_ceil(MR);
                for pc in (0..k).step_by(KC) {
                    let kc = KC.min(k - pc);
                    for ip in 0..ipanels {
                        // SAFETY: the buffer holds MC x KC floats; rows
                        // ic + ip*MR.. and columns pc.. +kc lie inside A.
                        unsafe {
                            pack::pack_panel::<MR>(
                                ap.add(ip * MR * kc),
                                av,
                                ic + ip * MR,
                                pc,
                                MR.min(mc - ip * MR),
                                kc,
                            )
                        };
                    }
                    let load_c = accumulate || pc > 0;
                    for g in cols.clone().step_by(GROUP) {
                        for ip in 0..ipanels {
                            for jp in g..(g + GROUP).min(cols.end) {
                                // SAFETY: panel (pc, jp) holds kc x NR floats
                                // at pc*npad + jp*NR*kc; the C tile is this
                                // task's and inside m x n.
                                unsafe {
                                    kernel::tile(
                                        kc,
                                        ap.add(ip * MR * kc),
                                        bf.add(pc * self.npad + jp * NR * kc),
                                        c.0.add((ic + ip * MR) * n + jp * NR),
                                        n,
                                        MR.min(mc - ip * MR),
                                        NR.min(n - jp * NR),
                                        load_c,
                                        bias.panel(pc, jp),
                                    )
                                };
                            }
                        }
                    }
                }
            }
        });
    }

    /// `m <= SMALL_M` rows of C over column panels `cols`: each block of
    /// `k` is one sequential stream over this task's panels.
    ///
    /// # Safety
    /// As for [`Self::tiles`].
    unsafe fn stream(
        &self,
        m: usize,
        a: &[f32],
        c: Shared,
        cols: std::ops::Range<usize>,
        accumulate: bool,
        bias: Bias,
    ) {
        let (k, n) = (self.k, self.n);
        let bf = self.floats().as_ptr();
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            let load_c = accumulate || pc > 0;
            for jp in cols.clone() {
                let (b, cc) = (bf.wrapping_add(pc * self.npad + jp * NR * kc), c.0.wrapping_add(jp * NR));
                let (ap, w, bs) = (a.as_ptr().wrapping_add(pc), NR.min(n - jp * NR), bias.panel(pc, jp));
                // SAFETY: as in `tiles`; A rows hold k >= pc + kc floats.
                unsafe {
                    match m {
                        1 => kernel::stream::<1>(kc, ap, k, b, cc, n, w, load_c, bs),
                        2 => kernel::stream::<2>(kc, ap, k, b, cc, n, w, load_c, bs),
                        3 => kernel::stream::<3>(kc, ap, k, b, cc, n, w, load_c, bs),
                        _ => kernel::stream::<4>(kc, ap, k, b, cc, n, w, load_c, bs),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{Layout, naive_matmul};

    #[test]
    fn packed_products_match_the_triple_loop_at_every_edge() {
        if !super::super::available() {
            eprintln!("no AVX-512: PackedB declines, nothing to test");
            assert!(PackedB::from_nxk(&[0.0; 4], 2, 2).is_none());
            return;
        }
        let shapes = [
            (1, 1, 1),
            (1, 5, 33),
            (2, 384, 64),
            (3, 385, 31),
            (4, 800, 70),
            (5, 17, 32),
            (12, 64, 96),
            (13, 777, 65),
            (40, 1000, 33),
            (400, 70, 130),
            // Wide enough for the shared-A path (>= 2 x TASK_PANELS panels).
            (5, 384, 256),
            (40, 1000, 300),
            (130, 800, 257),
            // Too tall for the shared A block: per-thread blocks again.
            (350, 100, 300),
            // Decode-step rows over enough weights for work-stolen slices.
            (1, 2000, 200),
            (3, 1000, 700),
        ];
        for &(m, k, n) in &shapes {
            let a = crate::util::randn(m * k, (m + 7 * k) as u64);
            let w = crate::util::randn(n * k, (n * 3 + k) as u64);
            let b = PackedB::from_nxk(&w, n, k).expect("AVX-512 present");
            assert_eq!(b.to_nxk(), w, "{n}x{k}: unpacking is not the identity");
            let want = naive_matmul((m, k, n), &a, &w, Layout::NxK);
            let abs = naive_matmul(
                (m, k, n),
                &a.iter().map(|x| x.abs()).collect::<Vec<_>>(),
                &w.iter().map(|x| x.abs()).collect::<Vec<_>>(),
                Layout::NxK,
            );
            let bias = crate::util::randn(n, 11);
            for threads in [1, 2, 3] {
                for (accumulate, with_bias) in [(false, false), (true, false), (false, true), (true, true)] {
                    let c0 = crate::util::randn(m * n, 9);
                    let mut c = if accumulate { c0.clone() } else { vec![f32::NAN; m * n] };
                    if with_bias {
                        b.matmul_bias_into(threads, m, &a, Some(&bias), &mut c, accumulate);
                    } else {
                        b.matmul_into(threads, m, &a, &mut c, accumulate);
                    }
                    for i in 0..m * n {
                        let base =
                            if accumulate { c0[i] } else { 0.0 } + if with_bias { bias[i % n] } else { 0.0 };
                        let tol = 4.0 * (k as f32).sqrt() * f32::EPSILON * (abs[i] + base.abs()) + 1e-30;
                        assert!(
                            (c[i] - (want[i] + base)).abs() <= tol,
                            "{m}x{k}x{n} t{threads} acc={accumulate} bias={with_bias} [{i}]: {} vs {}",
                            c[i],
                            want[i] + base
                        );
                    }
                }
            }
        }
    }

    thread_local! {
        /// Calls that took the shared-A path on this thread (tests check it
        /// is exercised). Per thread: other tests run products of their own
        /// at the same time, on other threads.
        pub(super) static SHARED_CALLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    #[test]
    fn the_shared_a_path_is_taken_on_wide_products_and_matches_the_per_task_path() {
        let (m, k, n) = (70, 900, 520);
        let a = crate::util::randn(m * k, 1);
        let w = crate::util::randn(n * k, 2);
        let bias = crate::util::randn(n, 3);
        let Some(b) = PackedB::from_nxk(&w, n, k) else {
            eprintln!("no AVX-512: PackedB declines, nothing to test");
            return;
        };
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().expect("a pool");
        // Calls counted on the pool thread that makes the product.
        let shared_calls = |f: &mut (dyn FnMut() + Send)| {
            pool.install(|| {
                let before = SHARED_CALLS.with(|n| n.get());
                f();
                SHARED_CALLS.with(|n| n.get()) - before
            })
        };
        let mut shared = vec![0.0; m * n];
        let taken = shared_calls(&mut || b.matmul_bias_into(3, m, &a, Some(&bias), &mut shared, false));
        assert_eq!(taken, 1, "shared path not taken");
        // Fewer threads than the pool: the per-task path, same numbers (the
        // same tiles in the same k order).
        let mut per_task = vec![0.0; m * n];
        let taken = shared_calls(&mut || b.matmul_bias_into(2, m, &a, Some(&bias), &mut per_task, false));
        assert_eq!(taken, 0);
        assert_eq!(shared, per_task);
    }

    #[test]
    fn rows_are_read_back_from_the_panels() {
        let (n, k) = (70, 400);
        let w = crate::util::randn(n * k, 4);
        let Some(b) = PackedB::from_nxk(&w, n, k) else { return };
        let mut row = vec![0.0; k];
        for j in [0, 31, 32, 69] {
            b.row_into(j, &mut row);
            assert_eq!(row, w[j * k..(j + 1) * k]);
        }
        assert!(b.bytes() >= n * k * 4);
    }
}
