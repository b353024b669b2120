//! Neural-network layer kernels beyond the transformer's own (the `nn`
//! suite times them; models may call them): convolution ([`conv`], im2col +
//! GEMM and direct, NCHW and NHWC in [`conv_nhwc`]), pooling ([`pool`]), channel normalisations ([`chnorm`]:
//! batch, group, instance), recurrent layers ([`rnn`]: RNN, LSTM, GRU) and
//! attention with the scores materialised or tiled ([`attention`]). Each
//! file carries its f64 reference and unit tests against it.

pub mod attention;
pub mod chnorm;
pub mod conv;
pub mod conv_nhwc;
pub mod pool;
pub mod rnn;
