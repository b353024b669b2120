//! Neural-network layer kernels beyond the transformer's own (the `nn`
//! suite times them; models may call them): convolution ([`conv`], im2col +
//! GEMM and direct, NCHW and NHWC in [`conv_nhwc`], Winograd F(4x4, 3x3) in
//! [`winograd`]), pooling ([`pool`]), channel normalisations ([`chnorm`]:
//! batch, group, instance), recurrent layers ([`rnn`]: RNN, LSTM, GRU) and
//! attention with the scores materialised or tiled ([`attention`]). Each
//! file carries its f64 reference and unit tests against it.

pub mod attention;
pub mod chnorm;
pub mod conv;
pub mod conv_nhwc;
pub mod pool;
pub mod rnn;
pub mod winograd;

use crate::kernels::{Layout, sgemm};

/// `c[m x n] (+)= a[m x k] * op(b)`: on one thread through tfbench's own
/// packed GEMM ([`sgemm`]: AVX-512, or AVX2 where that is all the CPU or
/// `TFBENCH_MAX_ISA` allows; the `gemm` crate where neither runs), on more
/// through the `gemm` crate's rayon split of the current pool. The nn
/// kernels call it with `threads = 1` from inside their own parallel loops
/// (blocks of attention, tiles of a convolution), where sgemm runs on the
/// caller's thread and packs into that thread's reused workspace: no nested
/// pool, no allocation per call. sgemm's own threading (persistent workers
/// that spin at barriers) was not used: on the shared 2-core host at load
/// 12 it made ResNet-50's 1x1 layer at batch 1 run 19 ms against the
/// `gemm` crate's 1.4 ms.
pub(crate) fn gemm(
    threads: usize,
    dims: (usize, usize, usize),
    a: &[f32],
    b: &[f32],
    layout: Layout,
    c: &mut [f32],
    accumulate: bool,
) {
    if threads > 1 || !sgemm::matmul_into(1, dims, a, b, layout, c, accumulate) {
        crate::kernels::matmul_into(threads, dims, a, b, layout, c, accumulate);
    }
}
