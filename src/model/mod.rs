//! The model runtime: transformer models as a serving engine would drive
//! them, written once and used by the inference suite (and the serving
//! scenarios to come). It knows nothing of suites, plans or cases: a
//! benchmark describes its cases and asks this module for models, forward
//! passes and memory plans.
//!
//! | file | what it holds |
//! |---|---|
//! | `config.rs` | the catalogue of shapes ([`config::ModelConfig`], presets) shared by the suites |
//! | `transformer.rs` | one transformer configured by shape (BERT, GPT-2, LLaMA) and its encoder pass |
//! | `decode.rs` | the decoder's step written once: `Model::decode` and the ragged batch share its layer step, the cache layout its one varying part |
//! | `ops.rs`, `linear.rs` | attention, norms, activations, RoPE; linear layers over every weight storage |
//! | `workspace.rs` | the buffers of a forward pass and the KV cache, sized once |
//! | `lowbit.rs` | the int8 KV cache (one scale per token and head) and the W8A8 layers' model tests |
//! | `generate.rs` | prefill in bounded chunks and greedy decoding on the CPU |
//! | `ragged.rs` | one decode step of sequences at different positions (continuous batching), f32 or int8 caches |
//! | `loader.rs`, `weights.rs` | a model from named tensors: seeded random or a BERT safetensors file; the memory plan |
//! | `reference.rs` | the independent f64 forward pass results are checked against |
//! | `steps.rs` | per-step latencies (time to first token, time per output token) |
//! | `gguf/` | the strict GGUF reader |
//! | `tokenizer/` | tokenizers from model files (a GGUF's `tokenizer.ggml.*`, a `tokenizer.json`) |
//! | `source/` | a model file of the user's: [`open`] a GGUF file or a Hugging Face directory, describe and load it |
//! | `cuda/` | the forward passes on CUDA GPUs (through [`crate::backend::cuda`]) |
//!
//! It depends only on the kernel library, the backends and the workload
//! vocabulary; nothing below it (kernels, backends, statistics) imports it.

pub mod config;
#[cfg(all(feature = "cuda", feature = "models"))]
pub mod cuda;
#[cfg(feature = "models")]
pub mod decode;
#[cfg(feature = "models")]
pub mod generate;
#[cfg(feature = "models")]
pub mod gguf;
#[cfg(feature = "models")]
pub mod linear;
#[cfg(feature = "models")]
pub mod loader;
#[cfg(feature = "models")]
pub mod lowbit;
#[cfg(feature = "models")]
pub mod ops;
#[cfg(feature = "models")]
pub mod ragged;
#[cfg(feature = "models")]
pub mod reference;
#[cfg(feature = "models")]
pub mod source;
#[cfg(feature = "models")]
pub mod steps;
#[cfg(feature = "models")]
pub mod tokenizer;
#[cfg(feature = "models")]
pub mod transformer;
#[cfg(feature = "models")]
pub mod weights;
#[cfg(feature = "models")]
pub mod workspace;

#[cfg(feature = "models")]
pub use source::open;

/// Bytes of memory available to a model: `TFBENCH_MEM_AVAILABLE_GIB` (tests
/// use it to play a smaller machine), else MemAvailable.
pub fn available_bytes() -> Option<f64> {
    std::env::var("TFBENCH_MEM_AVAILABLE_GIB")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .map(|g| g * (1u64 << 30) as f64)
        .or_else(|| crate::util::mem_available().map(|b| b as f64))
}

/// Seeded random token ids in `[1, vocab)`, so prompts are never one token.
pub fn random_ids(n: usize, vocab: usize, seed: u64) -> Vec<u32> {
    crate::util::uniform(n, 1.0, vocab as f32, seed)
        .iter()
        .map(|&x| (x as usize).clamp(1, vocab - 1) as u32)
        .collect()
}

/// Index of the largest value (the first on ties): greedy sampling.
pub fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best
}
