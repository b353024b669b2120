//! tfbench's GPU kernels, written once: NVRTC sources of its own kernels
//! ([`source`]), their launch shapes ([`grid`]) and the cuBLAS GEMM calls
//! ([`gemm`]), and the transformer inference kernels ([`transformer`]).
//! The runtime that compiles and launches them (contexts, streams, module
//! cache, handles) is `crate::cuda`; the workloads that time them are in
//! the suites.

pub mod gemm;
pub mod grid;
pub mod source;
pub mod transformer;
