//! Pure statistics. STUB: being written.
