//! Compute kernels shared by suites (tensor, inference, quantization,
//! training): every numeric kernel lives here once, so the tensor suite
//! times the very code the models run and suites never carry copies.
//!
//! - [`activation`]: scalar `exp`, `ln`, `tanh`, sigmoid, SiLU, `erf`, GELU.
//! - [`norm`], [`softmax`]: row kernels built on the lane sums of `reduce`.
//! - GEMM ([`matmul`], [`sgemm`], [`openblas`]) and quantized kernels ([`quant`]).
//! - GPU kernels live with their backend (`crate::backend::cuda::kernels`).
//! - [`nn`]: convolution, pooling, channel norms, recurrent cells, attention.
//! - [`fft`], [`sparse`]: multi-dimensional FFTs over rustfft/realfft, and
//!   sparse matrices (COO/CSR/CSC building, conversion, parallel SpMV/SpMM).
//! - [`cuda`]: the GPU kernels (NVRTC sources, launch shapes, cuBLAS GEMM calls).
//!
//! Suites that add kernels other suites need put them here, each with unit
//! tests against an f64 or naive reference beside it.

pub mod activation;
pub mod buffer;
pub mod fft;

mod gemm;
mod gemv;
pub mod nn;
pub mod norm;
pub mod openblas;
mod ptr;
pub(crate) mod reduce;
pub mod sgemm;
pub(crate) mod simd;
pub mod softmax;
pub mod sparse;
pub mod vmath;
pub(crate) mod workers;
pub(crate) use simd::simd_dispatch;
pub mod quant;

pub use gemm::{Layout, matmul, matmul_into, naive_matmul};
pub(crate) use ptr::SendPtr;
