use super::*;
use crate::kernels::quant::w4a8::ActLayout;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// A tensor from ggml's bytes (the reader under test lives in `linear/ggml.rs`;
/// this is the plain field split of `block_q6_K`).
fn from_blocks(raw: &[Vec<u8>]) -> Q6KTensor {
    let mut t = Q6KTensor::zeros(1, QK_K * raw.len()).unwrap();
    for (b, blk) in raw.iter().enumerate() {
        assert_eq!(blk.len(), BLOCK_BYTES);
        t.ql[b * QL_BYTES..(b + 1) * QL_BYTES].copy_from_slice(&blk[..QL_BYTES]);
        t.qh[b * QH_BYTES..(b + 1) * QH_BYTES].copy_from_slice(&blk[QL_BYTES..QL_BYTES + QH_BYTES]);
        for j in 0..SCALES {
            t.scales[b * SCALES + j] = blk[QL_BYTES + QH_BYTES + j] as i8;
        }
        t.d[b] = f16::from_bits(u16::from_le_bytes([blk[208], blk[209]]));
    }
    t
}

/// ggml's own decoding (the `gguf` package, tests/fixtures/q6k_gguf.json,
/// scripts/q6k_reference.py) of generated blocks: every value bit for bit.
#[test]
fn dequantizes_bit_for_bit_as_ggml() {
    let fx: serde_json::Value =
        serde_json::from_str(include_str!("../../../../tests/fixtures/q6k_gguf.json")).unwrap();
    let raw: Vec<Vec<u8>> =
        fx["blocks_hex"].as_array().unwrap().iter().map(|v| hex(v.as_str().unwrap())).collect();
    let want: Vec<u32> =
        fx["values_f32_bits"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    let t = from_blocks(&raw);
    let mut got = vec![0.0f32; QK_K * raw.len()];
    t.dequantize_range(0, raw.len(), &mut got);
    assert_eq!(want.len(), got.len());
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.to_bits(), *w, "value {i}: {g} vs ggml {}", f32::from_bits(*w));
    }
}

#[test]
fn code_packing_is_lossless_and_follows_ggml() {
    let q: Vec<u8> = (0..QK_K).map(|i| ((i * 37 + 11) % 64) as u8).collect();
    let (mut ql, mut qh) = ([0u8; QL_BYTES], [0u8; QH_BYTES]);
    pack_codes(&q, &mut ql, &mut qh);
    assert_eq!(unpack_codes(&ql, &qh).to_vec(), q);
    // ggml: value 64 + l of the first half is the high nibble of ql[l] and
    // bits 4..6 of qh[l % 32].
    for l in 0..64 {
        let v = q[64 + l];
        assert_eq!(ql[l] >> 4, v & 15);
        assert_eq!((qh[l % 32] >> (4 + 2 * (l / 32))) & 3, v >> 4);
    }
}

#[test]
fn round_trip_error_is_within_one_step() {
    let (rows, cols) = (3, 512);
    let x: Vec<f32> = (0..rows * cols).map(|i| ((i * 7919 % 1000) as f32 / 250.0 - 2.0).powi(3)).collect();
    let mut t = Q6KTensor::zeros(rows, cols).unwrap();
    t.quantize_from(&x);
    let mut back = vec![0.0; x.len()];
    t.dequantize_range(0, rows * cols / QK_K, &mut back);
    for (i, (a, b)) in x.iter().zip(&back).enumerate() {
        let blk = i / QK_K;
        let step = (t.d[blk].to_f32() * t.scales[blk * SCALES + (i % QK_K) / 16] as f32).abs();
        // Half a step, except where a value of the other sign meets code 31
        // (32 steps, or 32.25 when a scale of +128 is stored as 127).
        assert!((a - b).abs() <= step * 1.3 + 1e-6 * a.abs(), "[{i}] {a} -> {b} (step {step})");
    }
    assert_eq!(t.storage_bytes() * 8 * 32, rows * cols * 210, "6.5625 bits per weight");
    assert!(Q6KTensor::zeros(1, 300).is_err());
    let mut z = Q6KTensor::zeros(1, 256).unwrap();
    z.quantize_from(&[0.0; 256]);
    let mut back = [1.0f32; 256];
    z.dequantize_range(0, 1, &mut back);
    assert!(back.iter().all(|&v| v == 0.0));
}

/// The integer dot on both paths against an f64 sum over the dequantized
/// weights and the Q8 activations it multiplies.
#[test]
fn int8_dot_matches_the_dequantized_product_on_every_path() {
    let (n, k) = (5, 768);
    let w: Vec<f32> = (0..n * k).map(|i| ((i * 104_729 % 2003) as f32 / 1001.0 - 1.0).powi(3)).collect();
    let mut t = Q6KTensor::zeros(n, k).unwrap();
    t.quantize_from(&w);
    let mut deq = vec![0.0f32; n * k];
    t.dequantize_range(0, n * k / QK_K, &mut deq);
    let isas = crate::kernels::quant::DotIsa::available_all();
    for m in [1, 3, 8] {
        let x: Vec<f32> = (0..m * k).map(|i| (i * 7919 % 997) as f32 / 498.0 - 1.0).collect();
        let a = Q8Acts::new(&x, m, k, ActLayout::Natural, crate::kernels::quant::w4a8::ActQuant::Q8K);
        for r in 0..n {
            for &isa in &isas {
                let mut out = vec![0.0f32; m];
                dot_row(&t, r, &a, isa, &mut out);
                for (tok, &o) in out.iter().enumerate() {
                    let xa = a.dequantized(tok);
                    let (mut s, mut abs) = (0.0f64, 0.0f64);
                    for p in 0..k {
                        let v = deq[r * k + p] as f64 * xa[p] as f64;
                        s += v;
                        abs += v.abs();
                    }
                    assert!((o as f64 - s).abs() <= 1e-5 * abs, "m={m} r={r} tok={tok} {isa:?}: {o} vs {s}");
                }
            }
        }
    }
}
