//! Compute kernels shared by suites (inference, quantization, training):
//! one place for the fast f32 GEMM so suites never carry copies of it.
//!
//! Suites that add kernels other suites need (int8 / 4-bit weight GEMV,
//! fused norms) put them here, each with unit tests against a naive loop.

pub mod buffer;
mod gemm;
mod gemv;
pub mod openblas;
pub mod sgemm;
pub(crate) mod simd;
pub(crate) mod workers;
pub(crate) use simd::simd_dispatch;
pub mod quant;

pub use gemm::{Layout, matmul, matmul_into, naive_matmul};
