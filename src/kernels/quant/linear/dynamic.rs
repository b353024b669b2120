//! [`DynamicLinear`], the W8A8 layer: per-channel int8 weights with
//! activations quantized per token on every call, on the int8 GEMM.

use super::*;

/// A W8A8 linear layer: int8 per-channel weights, activations quantized per
/// token on every call, the int8 GEMM, and one f32 rescale per output.
#[derive(Debug, Clone)]
pub struct DynamicLinear {
    /// Codes and row sums.
    pub weights: I8Weights,
    /// Per-output-channel weight scales.
    pub scales: Vec<f32>,
    /// Integer kernel used.
    pub path: Int8Path,
}

impl DynamicLinear {
    /// Quantizes `w` (`[rows, cols]`) per channel, symmetric.
    ///
    /// # Panics
    /// When `path` is not available on this CPU or `w` has the wrong length.
    pub fn new(w: &[f32], rows: usize, cols: usize, path: Int8Path) -> Self {
        assert!(path.available(), "int8 path {} is not available on this CPU", path.name());
        let t = int8::quantize(w, rows, cols, Scheme::Symmetric, Granularity::PerChannel);
        let scales = t.params.iter().map(|p| p.scale).collect();
        Self { weights: I8Weights::new(t.data, rows, cols), scales, path }
    }

    /// `y[m x rows] = x[m x cols] W^T`: quantize x per token, int8 GEMM,
    /// rescale by `scale_x[t] * scale_w[j]`.
    pub fn forward(&self, x: &[f32], m: usize, y: &mut [f32]) {
        let (k, n) = (self.weights.cols, self.weights.rows);
        assert_eq!(x.len(), m * k, "DynamicLinear: x is not {m}x{k}");
        assert_eq!(y.len(), m * n, "DynamicLinear: y is not {m}x{n}");
        let mut q = vec![0i8; m * k];
        let mut sx = vec![0.0f32; m];
        int8::quantize_per_token(x, k, &mut q, &mut sx);
        let mut acc = vec![0i32; m * n];
        gemm_i8(self.path, m, &q, &self.weights, &mut acc);
        for ((y, acc), &s) in y.chunks_mut(n).zip(acc.chunks(n)).zip(&sx) {
            for ((y, &a), &w) in y.iter_mut().zip(acc).zip(&self.scales) {
                *y = a as f32 * (s * w);
            }
        }
    }

    /// Bytes of codes and scales.
    pub fn storage_bytes(&self) -> usize {
        self.weights.data.len() + self.scales.len() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::data;
    use super::*;

    #[test]
    fn dynamic_linear_matches_its_integer_reference() {
        let (m, k, n) = (5, 256, 33);
        let w = data(n * k, 3);
        let x = data(m * k, 4);
        for path in Int8Path::ALL.into_iter().filter(|p| p.available()) {
            let l = DynamicLinear::new(&w, n, k, path);
            let mut y = vec![0.0; m * n];
            l.forward(&x, m, &mut y);
            let mut xq = vec![0i8; m * k];
            let mut sx = vec![0.0; m];
            int8::quantize_per_token(&x, k, &mut xq, &mut sx);
            for t in 0..m {
                for j in 0..n {
                    let acc: i32 =
                        (0..k).map(|p| xq[t * k + p] as i32 * l.weights.data[j * k + p] as i32).sum();
                    assert_eq!(y[t * n + j], acc as f32 * (sx[t] * l.scales[j]), "{}", path.name());
                }
            }
        }
    }
}
