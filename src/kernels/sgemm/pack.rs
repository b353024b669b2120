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
// call, which returns only when every worker reading them is done.
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
pub(super) unsafe fn pack_lines<const W: usize>(
    dst: *mut f32,
    src: *const f32,
    ld: usize,
    w: usize,
    kc: usize,
) {
    #[cfg(target_arch = "x86_64")]
    if W.is_multiple_of(4) {
        // SAFETY: the sgemm driver only runs on AVX-512F CPUs; extents as above.
        return unsafe { transpose_lines::<W>(dst, src, ld, w, kc) };
    }
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
pub(super) unsafe fn pack_rows<const W: usize>(
    dst: *mut f32,
    src: *const f32,
    ld: usize,
    w: usize,
    kc: usize,
) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the sgemm driver only runs on AVX-512F CPUs; extents as above.
    return unsafe { copy_rows::<W>(dst, src, ld, w, kc) };
    #[allow(unreachable_code)]
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
pub(super) unsafe fn pack_panel<const W: usize>(
    dst: *mut f32,
    v: View,
    r0: usize,
    c0: usize,
    h: usize,
    kc: usize,
) {
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

/// [`pack_lines`] as 4 x 4 transposes of 128-bit vectors: 4 lines by 4
/// steps per block, absent lines read as zeros; a scalar loop for the last
/// `kc % 4` steps, instead of one scalar load and store per element.
///
/// # Safety
/// As for [`pack_lines`], on an AVX-512F CPU.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f")]
unsafe fn transpose_lines<const W: usize>(dst: *mut f32, src: *const f32, ld: usize, w: usize, kc: usize) {
    use std::arch::x86_64::*;
    let k4 = kc / 4 * 4;
    for p in (0..k4).step_by(4) {
        for g in (0..W).step_by(4) {
            let mut r = [_mm_setzero_ps(); 4];
            for (l, x) in r.iter_mut().enumerate() {
                if g + l < w {
                    // SAFETY: line g + l exists and holds kc >= p + 4 floats.
                    *x = unsafe { _mm_loadu_ps(src.add((g + l) * ld + p)) };
                }
            }
            // 4 x 4 transpose: out[s] holds step p + s of lines g..g+4.
            let t0 = _mm_unpacklo_ps(r[0], r[1]);
            let t1 = _mm_unpacklo_ps(r[2], r[3]);
            let t2 = _mm_unpackhi_ps(r[0], r[1]);
            let t3 = _mm_unpackhi_ps(r[2], r[3]);
            let out =
                [_mm_movelh_ps(t0, t1), _mm_movehl_ps(t1, t0), _mm_movelh_ps(t2, t3), _mm_movehl_ps(t3, t2)];
            for (st, &o) in out.iter().enumerate() {
                // SAFETY: the panel holds kc * W floats; g + 4 <= W.
                unsafe { _mm_storeu_ps(dst.add((p + st) * W + g), o) };
            }
        }
    }
    for p in k4..kc {
        for l in 0..W {
            // SAFETY: as above, for the remaining steps.
            unsafe { *dst.add(p * W + l) = if l < w { *src.add(l * ld + p) } else { 0.0 } };
        }
    }
}

/// [`pack_rows`] with masked 512-bit copies (zeros past column `w`).
///
/// # Safety
/// As for [`pack_rows`], on an AVX-512F CPU.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn copy_rows<const W: usize>(dst: *mut f32, src: *const f32, ld: usize, w: usize, kc: usize) {
    use std::arch::x86_64::*;
    for p in 0..kc {
        for g in (0..W).step_by(16) {
            let lanes = (W - g).min(16);
            let valid = w.saturating_sub(g).min(lanes);
            let keep: __mmask16 = ((1u32 << lanes) - 1) as __mmask16;
            let load: __mmask16 = ((1u32 << valid) - 1) as __mmask16;
            // SAFETY: the load reads columns g.. g + valid <= w of row p; the
            // store stays inside the panel row.
            unsafe {
                let v = _mm512_maskz_loadu_ps(load, src.wrapping_add(p * ld + g));
                _mm512_mask_storeu_ps(dst.add(p * W + g), keep, v);
            }
        }
    }
}
