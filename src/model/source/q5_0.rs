//! llama.cpp's Q5_0 blocks rewritten as Q8_0 blocks, exactly.
//!
//! A Q5_0 block is 32 values `d * (q - 16)` with `q` a 5-bit code (`d` an
//! f16, the low 4 bits in `qs`, the fifth in the 32-bit `qh`); a Q8_0 block
//! is 32 values `d * c` with `c` a signed byte. So `c = q - 16` (in
//! -16..=15) and the same `d` give the same values bit for bit, and a Q8_0
//! dot product against Q8_0-quantized activations (Q5_0's `vec_dot_type` in
//! ggml too) sums the very same integers as llama.cpp's Q5_0 x Q8_0 dot.
//! The runtime's Q8_0 kernels (every ISA) thus run Q5_0 tensors, the format
//! llama.cpp's K-quant mixes fall back to for rows whose width is not a
//! multiple of 256 (Gemma 3 270M's 640), at 34 bytes per block instead of 22.

use anyhow::{Result, bail};

/// Bytes of one Q5_0 block: f16 scale, 4 bytes of fifth bits, 16 of nibbles.
pub const Q5_0_BLOCK: usize = 22;
/// Bytes of one Q8_0 block: f16 scale, 32 signed codes.
pub const Q8_0_BLOCK: usize = 34;

/// The Q8_0 encoding of `bytes`, a whole number of Q5_0 blocks.
pub fn to_q8_0(bytes: &[u8]) -> Result<Vec<u8>> {
    if !bytes.len().is_multiple_of(Q5_0_BLOCK) {
        bail!("{} bytes are not a whole number of Q5_0 blocks ({Q5_0_BLOCK} bytes each)", bytes.len());
    }
    let mut out = Vec::with_capacity(bytes.len() / Q5_0_BLOCK * Q8_0_BLOCK);
    for b in bytes.chunks_exact(Q5_0_BLOCK) {
        out.extend_from_slice(&b[..2]);
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let qs = &b[6..];
        // ggml's dequantize_row_q5_0: value j from the low nibble of qs[j]
        // and bit j of qh, value j + 16 from the high nibble and bit j + 16.
        let code = |j: usize| -> u8 {
            let (nib, bit) =
                if j < 16 { (qs[j] & 0x0f, (qh >> j) & 1) } else { (qs[j - 16] >> 4, (qh >> j) & 1) };
            ((nib as i32 | (bit as i32) << 4) - 16) as i8 as u8
        };
        out.extend((0..32).map(code));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    /// ggml's scalar `dequantize_row_q5_0`, transcribed.
    fn dequant_q5_0(b: &[u8]) -> Vec<f32> {
        let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let mut y = vec![0.0; 32];
        for j in 0..16 {
            let xh0 = (((qh >> j) << 4) & 0x10) as u8;
            let xh1 = ((qh >> (j + 12)) & 0x10) as u8;
            let x0 = ((b[6 + j] & 0x0f) | xh0) as i32 - 16;
            let x1 = ((b[6 + j] >> 4) | xh1) as i32 - 16;
            y[j] = x0 as f32 * d;
            y[j + 16] = x1 as f32 * d;
        }
        y
    }

    #[test]
    fn q8_0_encoding_holds_the_same_values() {
        let mut bytes = Vec::new();
        let mut s = 0x9e37_79b9u32;
        for blk in 0..8 {
            bytes.extend_from_slice(
                &f16::from_f32(0.01 * (blk as f32 + 1.0) * if blk % 2 == 0 { 1.0 } else { -1.0 })
                    .to_le_bytes(),
            );
            for _ in 0..20 {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                bytes.push((s >> 24) as u8);
            }
        }
        // Extreme codes: every fifth bit set / clear with nibbles 15 / 0.
        bytes.extend_from_slice(&f16::from_f32(1.0).to_le_bytes());
        bytes.extend_from_slice(&[0xff; 4]);
        bytes.extend_from_slice(&[0xff; 16]);
        bytes.extend_from_slice(&f16::from_f32(1.0).to_le_bytes());
        bytes.extend_from_slice(&[0; 20]);
        let q8 = to_q8_0(&bytes).unwrap();
        assert_eq!(q8.len(), bytes.len() / Q5_0_BLOCK * Q8_0_BLOCK);
        for (a, b) in bytes.chunks(Q5_0_BLOCK).zip(q8.chunks(Q8_0_BLOCK)) {
            let d = f16::from_le_bytes([b[0], b[1]]).to_f32();
            let got: Vec<f32> = b[2..].iter().map(|&c| c as i8 as f32 * d).collect();
            assert_eq!(got, dequant_q5_0(a));
        }
        let last = &q8[q8.len() - 2 * Q8_0_BLOCK..];
        assert!(last[2..Q8_0_BLOCK].iter().all(|&c| c as i8 == 15));
        assert!(last[Q8_0_BLOCK + 2..].iter().all(|&c| c as i8 == -16));
        assert!(to_q8_0(&bytes[..21]).is_err());
    }
}
