//! Host-side checks of the GPU inference code: the device memory plan and
//! its refusal, the tolerances and the byte conversions (the inference
//! suite's tests check that every GPU case is skipped, with the reason, on a
//! machine without a usable GPU).

use super::net::{from_device_bytes, to_device_bytes};
use super::*;
use crate::model::config::ModelConfig;

#[test]
fn device_plan_of_gpt2_in_f16_by_hand() {
    let cfg = ModelConfig::preset("gpt2").unwrap();
    let p = device_plan(&cfg, 2, 32, 1, 64);
    // Matrices and the token embedding at 2 bytes, the rest (positions,
    // norms, biases) at 4: counted from the tensor list directly.
    let (mut want, mut params) = (0.0, 0usize);
    for w in cfg.weights() {
        let el = if w.is_matrix() || w.name == "embed.tokens" { 2.0 } else { 4.0 };
        want += w.numel() as f64 * el;
        params += w.numel();
    }
    assert_eq!(params as u64, cfg.param_count());
    assert_eq!(p.weights, want);
    // 12 layers x (K + V) x 64 positions x 768 x 2 bytes.
    assert_eq!(p.kv_cache, (12 * 2 * 64 * 768 * 2) as f64);
    // x, xn, att, y, qkv (3h) and the FFN: 32 rows; last, pooled, logits: 1 sequence.
    let act = (32 * (4 * 768 + 3 * 768 + 3072 - 2 * 768 + 2 * 768) + 2 * 768 + 50257) as f64 * 2.0;
    assert_eq!(p.activations, act + (32 * 12 + 16) as f64);
    assert_eq!(p.workspace, BLAS_WORKSPACE as f64);
    assert_eq!(p.total(), p.weights + p.kv_cache + p.activations + p.workspace);
    // LLaMA adds its RoPE tables and the SwiGLU buffers.
    let l = ModelConfig::preset("llama-tiny").unwrap();
    let pl = device_plan(&l, 4, 8, 1, 0);
    assert!(pl.weights > l.param_count() as f64 * 4.0);
    assert_eq!(pl.kv_cache, 0.0);
}

#[test]
fn a_model_too_big_for_the_gpu_is_refused_with_the_figures() {
    let cfg = ModelConfig::preset("llama-13b").unwrap();
    let p = device_plan(&cfg, 4, 32, 1, 40);
    let gib = 1usize << 30;
    let why =
        device_refusal(&p, "cuda:0", 40 * gib, 80 * gib).expect("49 GiB of f32 weights do not fit in 36");
    assert!(why.starts_with("needs 4"), "{why}");
    for part in [
        "weights 4",
        "KV cache 0.0",
        "cuBLAS workspace 0.03",
        "cuda:0 has 40.00 GiB free of 80.00 GiB",
        "90%",
    ] {
        assert!(why.contains(part), "{part} missing: {why}");
    }
    assert_eq!(device_refusal(&p, "cuda:0", 70 * gib, 80 * gib), None);
    // bf16 halves the weights and fits.
    assert_eq!(device_refusal(&device_plan(&cfg, 2, 32, 1, 40), "cuda:0", 40 * gib, 80 * gib), None);
}

#[test]
fn only_the_float_dtypes_run_on_the_gpu() {
    use crate::model::linear::DType;
    assert_eq!(gemm_dtype(DType::F32), Ok(GemmDtype::F32));
    assert_eq!(gemm_dtype(DType::F16), Ok(GemmDtype::F16));
    assert_eq!(gemm_dtype(DType::BF16), Ok(GemmDtype::Bf16));
    let why = gemm_dtype(DType::Q4_0).unwrap_err();
    assert!(why.contains("q4_0") && why.contains("f32, f16, bf16"), "{why}");
    assert!(gemm_dtype(DType::Int8).is_err());
}

/// Values like logits: a spread of magnitudes around 1.
fn logits(n: usize, seed: u64) -> Vec<f32> {
    crate::util::randn(n, seed)
}

#[test]
fn tolerances_accept_the_dtypes_rounding_and_reject_wrong_results() {
    let want = logits(4096, 1);
    for (dt, noise) in [(GemmDtype::F32, 1e-5f32), (GemmDtype::F16, 2e-3), (GemmDtype::Bf16, 2e-2)] {
        let tol = Tolerance::of(dt);
        // Rounding to the type plus a few units of accumulated noise passes.
        let jitter = logits(4096, 2);
        let got: Vec<f32> = want.iter().zip(&jitter).map(|(&w, &j)| w + noise * j).collect();
        let c = tol.check("noisy", &got, &want).unwrap_or_else(|e| panic!("{dt:?}: {e}"));
        assert!(c.cosine > tol.min_cosine && c.max_error > 0.0);
        // A structural mistake (half the values from elsewhere) fails loudly.
        let mut wrong = want.clone();
        wrong[..2048].copy_from_slice(&logits(2048, 3));
        let e = tol.check("wrong", &wrong, &want).unwrap_err().to_string();
        assert!(e.contains("differs from the reference") && e.contains("cosine"), "{e}");
        // Non-finite output and a length mismatch fail too.
        let mut nan = want.clone();
        nan[7] = f32::NAN;
        assert!(tol.check("nan", &nan, &want).unwrap_err().to_string().contains("value 7"));
        assert!(tol.check("short", &want[1..], &want).is_err());
    }
    // bf16's bound is looser than f16's, which is looser than f32's.
    let (a, b, c) =
        (Tolerance::of(GemmDtype::F32), Tolerance::of(GemmDtype::F16), Tolerance::of(GemmDtype::Bf16));
    assert!(a.rel_to_max < b.rel_to_max && b.rel_to_max < c.rel_to_max);
    assert!(a.min_cosine > b.min_cosine && b.min_cosine > c.min_cosine);
    // A bf16-sized error is too big for f16.
    let got: Vec<f32> = want.iter().zip(logits(4096, 4)).map(|(&w, j)| w + 0.08 * j).collect();
    assert!(b.check("bf16-sized", &got, &want).is_err());
}

#[test]
fn device_bytes_round_trip_and_round_like_the_kernels() {
    let v = vec![1.0f32, -2.5, 3.0e-3, 65504.0, 1.0 + 1.0 / 2048.0];
    assert_eq!(from_device_bytes(GemmDtype::F32, &to_device_bytes(GemmDtype::F32, &v)), v);
    let h = from_device_bytes(GemmDtype::F16, &to_device_bytes(GemmDtype::F16, &v));
    assert_eq!(h.len(), v.len());
    assert_eq!(h[4], 1.0, "1 + 2^-11 is a tie in f16: rounds to even");
    let b = from_device_bytes(GemmDtype::Bf16, &to_device_bytes(GemmDtype::Bf16, &v));
    assert_eq!(b[0], 1.0);
    assert!((b[2] - 3.0e-3).abs() < 3.0e-3 / 128.0);
    // The kernels' bf16 rounding (add 0x7fff plus the lowest kept bit, shift)
    // is `half`'s round to nearest even.
    for x in logits(1000, 9) {
        let u = x.to_bits();
        let k = ((u + 0x7fff + ((u >> 16) & 1)) >> 16) as u16;
        assert_eq!(k, half::bf16::from_f32(x).to_bits(), "{x}");
    }
}
