//! Packing into the microkernel's panel formats. A packed A panel holds, for
//! each of `kc` steps, the MR values of one column of an MR-row strip of A; a
//! packed B panel holds, per step, the NR values of one row of an NR-column
//! strip of B. Strips past the matrix edge are padded with zeros, so the
//! microkernel always runs whole panels and never reads out of bounds.

/// A strided read-only view of a matrix: element `(r, c)` is at
/// `ptr[r * rs + c * cs]`.
#[derive(Clone, Copy)]
pub(super) struct View {
    /// First element.
    pub ptr: *const f32,
    /// Row stride in elements.
    pub rs: usize,
    /// Column stride in elements.
    pub cs: usize,
}

// SAFETY: a view is only read, and the matrices it points into outlive the
// scoped threads that read them.
unsafe impl Send for View {}
unsafe impl Sync for View {}

/// Packs `w` lines into a `kc x W` panel: `dst[p * W + l] = line_l[p]`
/// where line `l` starts at `src + l * ld` and runs contiguously over `p`
/// (the rows of A, or the columns of B stored as `[n x k]`). Lines `w..W`
/// are zero.
///
/// # Safety
/// `dst` holds `kc * W` floats; each of the `w <= W` lines holds `kc`
/// floats.
#[inline(always)]
pub(super) unsafe fn pack_lines<const W: usize>(dst: *mut f32, src: *const f32, ld: usize, w: usize, kc: usize) {
    // SAFETY: the caller guarantees both extents.
    unsafe {
        if w < W {
            std::ptr::write_bytes(dst, 0, kc * W);
        }
        // Blocks of 8 steps keep the 8 x w reads in a few cache lines per
        // line and the writes in one contiguous stretch.
        let mut p0 = 0;
        while p0 < kc {
            let pe = (p0 + 8).min(kc);
            for l in 0..w {
                let s = src.add(l * ld);
                for p in p0..pe {
                    *dst.add(p * W + l) = *s.add(p);
                }
            }
            p0 = pe;
        }
    }
}

/// Packs `w` columns of `kc` contiguous rows into a `kc x W` panel:
/// `dst[p * W + j] = src[p * ld + j]` (B stored as `[k x n]`); columns
/// `w..W` are zero.
///
/// # Safety
/// `dst` holds `kc * W` floats; the source rows hold `w` floats each.
#[inline(always)]
pub(super) unsafe fn pack_rows<const W: usize>(dst: *mut f32, src: *const f32, ld: usize, w: usize, kc: usize) {
    // SAFETY: the caller guarantees both extents.
    unsafe {
        for p in 0..kc {
            let d = dst.add(p * W);
            std::ptr::copy_nonoverlapping(src.add(p * ld), d, w);
            if w < W {
                std::ptr::write_bytes(d.add(w), 0, W - w);
            }
        }
    }
}

/// Packs the `h x kc` block of `v` starting at `(r0, c0)` as a panel of
/// width `W` along the rows (`w = h` lines of the panel are rows of `v`).
/// Picks the contiguous path from the strides.
///
/// # Safety
/// As for [`pack_lines`] / [`pack_rows`], with the block inside `v`.
#[inline(always)]
pub(super) unsafe fn pack_panel<const W: usize>(dst: *mut f32, v: View, r0: usize, c0: usize, h: usize, kc: usize) {
    // SAFETY: the caller guarantees the block is inside the view.
    unsafe {
        let src = v.ptr.add(r0 * v.rs + c0 * v.cs);
        if v.cs == 1 {
            pack_lines::<W>(dst, src, v.rs, h, kc);
        } else if v.rs == 1 {
            pack_rows::<W>(dst, src, v.cs, h, kc);
        } else {
            if h < W {
                std::ptr::write_bytes(dst, 0, kc * W);
            }
            for p in 0..kc {
                for l in 0..h {
                    *dst.add(p * W + l) = *src.add(l * v.rs + p * v.cs);
                }
            }
        }
    }
}
