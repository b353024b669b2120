//! The one raw-pointer wrapper that lets parallel tasks write disjoint parts
//! of one output buffer (rayon closures must be `Send + Sync`, and a bare
//! `*mut T` is neither).

/// A raw pointer that may cross threads. Whoever builds one guarantees that
/// the tasks sharing it write disjoint elements and that the buffer
/// outlives them; each use site states why in its `SAFETY` comment.
#[derive(Clone, Copy)]
pub(crate) struct SendPtr<T>(pub(crate) *mut T);

// SAFETY: the pointer itself is only an address; the disjoint-writes
// contract above, upheld at every `unsafe` dereference, makes sharing sound.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}

impl<T> SendPtr<T> {
    /// The pointer; a method so closures capture the whole (Send) wrapper
    /// rather than its non-Send field (edition 2021 disjoint captures).
    #[inline(always)]
    pub(crate) fn get(self) -> *mut T {
        self.0
    }
}
