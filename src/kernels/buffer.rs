//! Large operand buffers backed by transparent huge pages where the OS
//! offers them.
//!
//! A GEMM rereads each packed weight panel once per block of activation
//! rows, and a model's weights (hundreds of MB) are far more 4 KiB pages than
//! the TLB holds: with 4 KiB pages every pass over a panel misses the TLB on
//! every page. Measured here in interleaved runs (`TFBENCH_HUGE_PAGES=0` vs
//! on): a packed 128x3072x768 product on one core ran at 84 and 82 GFLOP/s
//! on 4 KiB pages, 109 and 106 on huge pages; 1024^3 did not change, and
//! BERT-base wall times moved less than this shared host's noise. Linux's
//! default THP mode is `madvise` (huge pages only where a
//! program asks), so [`HugeBuf`] asks: it aligns buffers of 2 MiB or more to
//! 2 MiB and calls `madvise(MADV_HUGEPAGE)` before the first touch. NumPy does
//! the same for its arrays. It is a hint: where the kernel declines (THP
//! `never`, no free huge pages, not Linux) the buffer works on 4 KiB pages.

use std::alloc::Layout;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// Huge page size on x86-64 and aarch64 Linux (the THP size).
pub const HUGE_PAGE: usize = 2 << 20;

/// A fixed-length, heap-allocated slice of `T` whose whole 2 MiB chunks are
/// offered to the kernel for transparent huge pages (see the module docs).
/// Allocated through the global allocator, so allocation counting sees it.
pub struct HugeBuf<T: Copy> {
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: HugeBuf owns its elements like a Box<[T]>.
unsafe impl<T: Copy + Send> Send for HugeBuf<T> {}
// SAFETY: shared access only hands out &[T].
unsafe impl<T: Copy + Sync> Sync for HugeBuf<T> {}

impl<T: Copy> HugeBuf<T> {
    /// An empty buffer (no allocation).
    pub const fn empty() -> Self {
        Self { ptr: NonNull::dangling(), len: 0 }
    }

    /// `len` copies of `value`.
    ///
    /// # Panics
    /// When `len * size_of::<T>()` overflows `isize` (as `vec!` does); aborts
    /// on allocation failure like every std collection.
    pub fn filled(len: usize, value: T) -> Self {
        let ptr = Self::alloc_advised(len);
        // SAFETY: the allocation holds `len` elements; each is written once
        // before any read (T: Copy has no drop glue to run on the old bytes).
        unsafe {
            for i in 0..len {
                ptr.as_ptr().add(i).write(value);
            }
        }
        Self { ptr, len }
    }

    /// A copy of `src`.
    pub fn from_slice(src: &[T]) -> Self {
        let ptr = Self::alloc_advised(src.len());
        // SAFETY: a fresh allocation of src.len() elements cannot overlap src.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), ptr.as_ptr(), src.len()) };
        Self { ptr, len: src.len() }
    }

    /// Uninitialised room for `len` elements, huge pages requested
    /// (dangling when it holds no bytes).
    fn alloc_advised(len: usize) -> NonNull<T> {
        let Some(layout) = Self::layout(len) else { return NonNull::dangling() };
        // SAFETY: the layout has non-zero size (checked in `layout`).
        let raw = unsafe { std::alloc::alloc(layout) } as *mut T;
        let Some(ptr) = NonNull::new(raw) else { std::alloc::handle_alloc_error(layout) };
        advise_huge(ptr.as_ptr() as *mut u8, layout.size());
        ptr
    }

    /// The allocation layout for `len` elements, `None` when it holds no
    /// bytes (no allocation).
    fn layout(len: usize) -> Option<Layout> {
        let bytes = len.checked_mul(size_of::<T>()).expect("HugeBuf: size overflows usize");
        if bytes == 0 {
            return None;
        }
        // Below one huge page, cache-line alignment is all a kernel needs.
        let align = if bytes >= HUGE_PAGE { HUGE_PAGE } else { 64.max(align_of::<T>()) };
        Some(Layout::from_size_align(bytes, align).expect("HugeBuf: size overflows isize"))
    }
}

impl<T: Copy> Drop for HugeBuf<T> {
    fn drop(&mut self) {
        if let Some(layout) = Self::layout(self.len) {
            // SAFETY: allocated in `filled` with this very layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr() as *mut u8, layout) };
        }
    }
}

impl<T: Copy> Deref for HugeBuf<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` holds `len` initialised elements (or is dangling
        // with len 0, which from_raw_parts allows).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> DerefMut for HugeBuf<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, and `&mut self` is unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Copy> Clone for HugeBuf<T> {
    fn clone(&self) -> Self {
        Self::from_slice(self)
    }
}

impl<T: Copy + std::fmt::Debug> std::fmt::Debug for HugeBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HugeBuf(len {})", self.len)
    }
}

/// Asks for huge pages over the whole 2 MiB chunks of `[ptr, ptr + bytes)`.
/// Must run before the memory is first touched: pages already faulted in
/// stay 4 KiB until khugepaged (maybe) merges them.
fn advise_huge(ptr: *mut u8, bytes: usize) {
    #[cfg(target_os = "linux")]
    if huge_pages_wanted() {
        let start = (ptr as usize).next_multiple_of(HUGE_PAGE);
        let end = (ptr as usize + bytes) / HUGE_PAGE * HUGE_PAGE;
        if end > start {
            // SAFETY: the range lies inside our own live allocation; the
            // advice changes no contents. Failure (THP compiled out, or
            // `never`) only means 4 KiB pages, so the result is ignored.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (ptr, bytes);
}

/// False when the environment sets `TFBENCH_HUGE_PAGES=0`: an A/B switch to
/// measure what huge pages are worth on a machine (read once per process).
pub fn huge_pages_wanted() -> bool {
    static WANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WANTED.get_or_init(|| std::env::var_os("TFBENCH_HUGE_PAGES").is_none_or(|v| v != "0"))
}

/// The kernel's transparent-huge-page mode (`always`, `madvise` or `never`),
/// `None` where it is not readable (not Linux, no THP).
pub fn thp_mode() -> Option<String> {
    let text = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    active_mode(&text).map(str::to_string)
}

/// The active mode of a sysfs choice list: the bracketed word of
/// `always [madvise] never`.
fn active_mode(text: &str) -> Option<&str> {
    let start = text.find('[')? + 1;
    let end = start + text[start..].find(']')?;
    Some(&text[start..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_hold_their_values_at_every_size() {
        for len in [0usize, 1, 3, 1000, HUGE_PAGE / 4 - 1, HUGE_PAGE / 4 + 5, 3 * HUGE_PAGE / 4] {
            let mut b = HugeBuf::filled(len, 1.5f32);
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 1.5));
            if len > 0 {
                b[len - 1] = 2.0;
                assert_eq!(b[len - 1], 2.0);
                let align = if len * 4 >= HUGE_PAGE { HUGE_PAGE } else { 64 };
                assert_eq!(b.as_ptr() as usize % align, 0, "len {len}");
            }
            let c = b.clone();
            assert_eq!(&c[..], &b[..]);
        }
    }

    #[test]
    fn from_slice_copies_and_empty_slices_work() {
        let src: Vec<u16> = (0..5000).collect();
        assert_eq!(&HugeBuf::from_slice(&src)[..], &src[..]);
        assert!(HugeBuf::<u8>::from_slice(&[]).is_empty());
    }

    #[test]
    fn thp_mode_reads_the_bracketed_word() {
        assert_eq!(active_mode("always [madvise] never\n"), Some("madvise"));
        assert_eq!(active_mode("[always] madvise never"), Some("always"));
        assert_eq!(active_mode("always madvise never"), None);
        assert_eq!(active_mode("always [madvise"), None);
        // Where the file exists, this machine's mode is one of the three.
        if let Some(mode) = thp_mode() {
            assert!(["always", "madvise", "never"].contains(&mode.as_str()), "{mode}");
        }
    }
}
