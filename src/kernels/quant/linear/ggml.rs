//! [`QMatrix::from_ggml`]: a matrix from the bytes of a ggml tensor (a GGUF
//! file's data) in its own format, codes copied as they are into the
//! kernels' structure-of-arrays storage: no dequantization, no
//! requantization, so the model runs on exactly the file's weights.

use super::*;

/// Bytes of one row of `cols` values in `format` as ggml stores it (array of
/// blocks), or an error when `cols` is not a whole number of blocks or the
/// format has no ggml layout.
pub fn ggml_row_bytes(format: WeightFormat, cols: usize) -> Result<usize> {
    let (block, bytes) = match format {
        WeightFormat::F32 => (1, 4),
        WeightFormat::F16 | WeightFormat::Bf16 => (1, 2),
        WeightFormat::Q8_0 => (QK, 34),
        WeightFormat::Q4_0 => (QK, 18),
        WeightFormat::Q4_1 => (QK, 20),
        WeightFormat::Q4K => (QK_K, super::super::kquant::BLOCK_BYTES),
        WeightFormat::Q6K => (QK_K, super::super::q6k::BLOCK_BYTES),
        f => bail!("{} has no ggml layout", f.name()),
    };
    if !cols.is_multiple_of(block) {
        bail!("{} rows must hold a multiple of {block} values, got {cols}", format.name());
    }
    Ok(cols / block * bytes)
}

fn f16_at(b: &[u8], i: usize) -> f16 {
    f16::from_bits(u16::from_le_bytes([b[i], b[i + 1]]))
}

impl QMatrix {
    /// A `[rows, cols]` matrix from `bytes` in ggml's layout of `format`
    /// (row-major array of blocks, little-endian). 4-bit formats decode with
    /// int8 activations as llama.cpp does (see [`QMatrix::with_f32_activations`]).
    pub fn from_ggml(format: WeightFormat, bytes: &[u8], rows: usize, cols: usize) -> Result<Self> {
        let need = ggml_row_bytes(format, cols)?
            .checked_mul(rows)
            .ok_or_else(|| anyhow::anyhow!("{rows}x{cols} overflows"))?;
        if bytes.len() != need {
            bail!("a {rows}x{cols} {} matrix is {need} bytes, got {}", format.name(), bytes.len());
        }
        let n = rows * cols;
        let store = match format {
            WeightFormat::F32 => Store::F32(
                bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            ),
            WeightFormat::F16 => Store::F16((0..n).map(|i| f16_at(bytes, 2 * i)).collect()),
            WeightFormat::Bf16 => Store::Bf16(
                (0..n)
                    .map(|i| bf16::from_bits(u16::from_le_bytes([bytes[2 * i], bytes[2 * i + 1]])))
                    .collect(),
            ),
            WeightFormat::Q8_0 | WeightFormat::Q4_0 | WeightFormat::Q4_1 => {
                let f = format.block().expect("block format");
                let mut t = BlockTensor::zeros(f, rows, cols)?;
                let (bb, cb) = (f.block_bytes(), f.code_bytes());
                let head = bb - cb;
                for (i, blk) in bytes.chunks_exact(bb).enumerate() {
                    t.scales[i] = f16_at(blk, 0);
                    if f == BlockFormat::Q4_1 {
                        t.mins[i] = f16_at(blk, 2);
                    }
                    t.qs[i * cb..(i + 1) * cb].copy_from_slice(&blk[head..]);
                }
                Store::Block(t)
            }
            WeightFormat::Q4K => {
                use super::super::kquant::{BLOCK_BYTES, QS_BYTES, SCALE_BYTES};
                let mut t = Q4KTensor::zeros(rows, cols)?;
                for (i, blk) in bytes.chunks_exact(BLOCK_BYTES).enumerate() {
                    t.d[i] = f16_at(blk, 0);
                    t.dmin[i] = f16_at(blk, 2);
                    t.scales[i * SCALE_BYTES..(i + 1) * SCALE_BYTES]
                        .copy_from_slice(&blk[4..4 + SCALE_BYTES]);
                    t.qs[i * QS_BYTES..(i + 1) * QS_BYTES].copy_from_slice(&blk[4 + SCALE_BYTES..]);
                }
                Store::Q4K(t)
            }
            WeightFormat::Q6K => {
                use super::super::q6k::{BLOCK_BYTES, QH_BYTES, QL_BYTES, SCALES};
                let mut t = Q6KTensor::zeros(rows, cols)?;
                for (i, blk) in bytes.chunks_exact(BLOCK_BYTES).enumerate() {
                    t.ql[i * QL_BYTES..(i + 1) * QL_BYTES].copy_from_slice(&blk[..QL_BYTES]);
                    t.qh[i * QH_BYTES..(i + 1) * QH_BYTES]
                        .copy_from_slice(&blk[QL_BYTES..QL_BYTES + QH_BYTES]);
                    for (j, s) in t.scales[i * SCALES..(i + 1) * SCALES].iter_mut().enumerate() {
                        *s = blk[QL_BYTES + QH_BYTES + j] as i8;
                    }
                    // ggml's block_q6_K ends with d.
                    t.d[i] = f16_at(blk, BLOCK_BYTES - 2);
                }
                Store::Q6K(t)
            }
            f => bail!("{} has no ggml layout", f.name()),
        };
        let act8 = act8_format(format);
        Ok(Self { rows, cols, format, store, act8, lanes: Default::default() })
    }

    /// The matrix back in ggml's byte layout (tests round-trip through it).
    pub fn to_ggml(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.storage_bytes());
        match &self.store {
            Store::F32(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
            Store::F16(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_bits().to_le_bytes())),
            Store::Bf16(v) => v.iter().for_each(|x| out.extend_from_slice(&x.to_bits().to_le_bytes())),
            Store::Block(t) => {
                let cb = t.format.code_bytes();
                for i in 0..t.scales.len() {
                    out.extend_from_slice(&t.scales[i].to_bits().to_le_bytes());
                    if t.format == BlockFormat::Q4_1 {
                        out.extend_from_slice(&t.mins[i].to_bits().to_le_bytes());
                    }
                    out.extend_from_slice(&t.qs[i * cb..(i + 1) * cb]);
                }
            }
            Store::Q4K(t) => {
                use super::super::kquant::{QS_BYTES, SCALE_BYTES};
                for i in 0..t.d.len() {
                    out.extend_from_slice(&t.d[i].to_bits().to_le_bytes());
                    out.extend_from_slice(&t.dmin[i].to_bits().to_le_bytes());
                    out.extend_from_slice(&t.scales[i * SCALE_BYTES..(i + 1) * SCALE_BYTES]);
                    out.extend_from_slice(&t.qs[i * QS_BYTES..(i + 1) * QS_BYTES]);
                }
            }
            Store::Q6K(t) => {
                use super::super::q6k::{QH_BYTES, QL_BYTES, SCALES};
                for i in 0..t.d.len() {
                    out.extend_from_slice(&t.ql[i * QL_BYTES..(i + 1) * QL_BYTES]);
                    out.extend_from_slice(&t.qh[i * QH_BYTES..(i + 1) * QH_BYTES]);
                    out.extend(t.scales[i * SCALES..(i + 1) * SCALES].iter().map(|&s| s as u8));
                    out.extend_from_slice(&t.d[i].to_bits().to_le_bytes());
                }
            }
            Store::Int8 { .. } | Store::Ternary(_) => {}
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every ggml format: quantized by the kernels, written in ggml's layout,
    /// read back: the same bytes and the same dequantized values; and ggml's
    /// layout itself checked on one hand-made Q4_1 block (d, m, then codes,
    /// value j in the low nibble of byte j, j + 16 in the high nibble).
    #[test]
    fn ggml_bytes_round_trip_and_follow_ggmls_layout() {
        let (rows, cols) = (3, 512);
        let w = crate::util::randn(rows * cols, 9);
        for f in [
            WeightFormat::F32,
            WeightFormat::F16,
            WeightFormat::Bf16,
            WeightFormat::Q8_0,
            WeightFormat::Q4_0,
            WeightFormat::Q4_1,
            WeightFormat::Q4K,
            WeightFormat::Q6K,
        ] {
            let q = QMatrix::quantize(f, &w, rows, cols).unwrap();
            let b = q.to_ggml();
            assert_eq!(b.len(), ggml_row_bytes(f, cols).unwrap() * rows, "{f:?}");
            let back = QMatrix::from_ggml(f, &b, rows, cols).unwrap();
            assert_eq!(back.to_ggml(), b, "{f:?}");
            assert_eq!(back.dequantize(), q.dequantize(), "{f:?}");
            assert!(QMatrix::from_ggml(f, &b[1..], rows, cols).is_err());
        }
        let mut blk = Vec::new();
        blk.extend_from_slice(&f16::from_f32(0.5).to_bits().to_le_bytes());
        blk.extend_from_slice(&f16::from_f32(-1.0).to_bits().to_le_bytes());
        blk.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let q = QMatrix::from_ggml(WeightFormat::Q4_1, &blk, 1, 32).unwrap();
        let want: Vec<f32> =
            (0..32).map(|i| if i < 16 { i as f32 } else { (31 - i) as f32 } * 0.5 - 1.0).collect();
        assert_eq!(q.dequantize(), want);
        assert!(ggml_row_bytes(WeightFormat::Q4_0, 33).is_err());
    }
}
