//! tfbench's GPU kernels, written once: NVRTC sources of its own kernels
//! ([`source`] for the tensor suite, [`transformer`] for inference), their
//! launch shapes ([`grid`]), the CPU replay of the `randn` kernel's
//! generator ([`random`]) and the cuBLAS GEMM calls ([`gemm`]). The runtime
//! that compiles and launches them (contexts, streams, module cache,
//! handles) is `crate::backend::cuda`; the workloads that time them are in the
//! suites.

pub mod gemm;
pub mod grid;
pub mod random;
pub mod source;
pub mod transformer;
