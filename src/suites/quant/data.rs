//! Seeded test data with realistic shapes of distribution, and the accuracy
//! figures every quantized case reports against its f32 result.

use crate::util;
use crate::workload::Metric;
use anyhow::{Result, bail};
use rand::RngExt;
use rand_distr::{Distribution, StandardNormal};
use rayon::prelude::*;

/// Values per independently seeded chunk: data depends on the seed only.
const CHUNK: usize = 1 << 16;

/// How values are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dist {
    /// N(0, 1) times the scale.
    Normal,
    /// Student-t with 4 degrees of freedom (kurtosis like trained weights),
    /// scaled to unit variance, times the scale.
    Heavy,
    /// Normal, with about 1% of the columns (input channels) 20x larger:
    /// the outlier features of LLM activations (LLM.int8, SmoothQuant).
    Outlier,
}

/// Valid `dist` values.
pub(crate) const DISTS: &[&str] = &["normal", "heavy", "outlier"];

impl Dist {
    pub(crate) fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "normal" => Self::Normal,
            "heavy" => Self::Heavy,
            "outlier" => Self::Outlier,
            _ => bail!("unknown distribution `{s}`; valid: {}", DISTS.join(", ")),
        })
    }
}

/// Whether column `c` is an outlier channel for `seed` (about 1 in 100).
fn outlier_column(c: usize, seed: u64) -> bool {
    let h = (c as u64 ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h >> 40).is_multiple_of(100)
}

/// `rows * cols` values of `dist` times `scale`, row-major, from `seed`.
pub(crate) fn draw(dist: Dist, rows: usize, cols: usize, scale: f32, seed: u64) -> Vec<f32> {
    let n = rows * cols;
    let mut out = vec![0.0f32; n];
    // Unit-variance t(4) (its variance is 4 / (4 - 2) = 2), drawn as
    // z / sqrt(chi2_4 / 4) with chi2_4 = -2 ln(u1 u2): exact, and several
    // times cheaper than rand_distr's StudentT (a gamma rejection sampler).
    let t_scale = scale / 2f32.sqrt();
    out.par_chunks_mut(CHUNK).enumerate().for_each(|(k, c)| {
        let mut r = util::rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D).wrapping_add(k as u64));
        match dist {
            Dist::Heavy => c.iter_mut().for_each(|x| {
                let z: f32 = StandardNormal.sample(&mut r);
                // 1 - u keeps each uniform in (0, 1], so the logarithm is finite.
                let (u1, u2) = (1.0 - r.random::<f32>(), 1.0 - r.random::<f32>());
                let chi = (-0.5 * (u1 * u2).ln()).sqrt().max(1e-6);
                *x = z / chi * t_scale;
            }),
            Dist::Normal | Dist::Outlier => {
                c.iter_mut().for_each(|x| *x = StandardNormal.sample(&mut r));
                let base = k * CHUNK;
                for (i, x) in c.iter_mut().enumerate() {
                    let boost = dist == Dist::Outlier && outlier_column((base + i) % cols.max(1), seed);
                    *x *= if boost { 20.0 * scale } else { scale };
                }
            }
        }
    });
    out
}

/// Error of `got` against the f32 `reference`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Accuracy {
    pub rmse: f64,
    pub max_abs: f64,
    pub nmse: f64,
    pub cosine: f64,
    /// `None` when the result is exact (infinite SQNR).
    pub sqnr_db: Option<f64>,
}

/// Accuracy of `got` against `reference`, in f64, in parallel.
pub(crate) fn accuracy(reference: &[f32], got: &[f32]) -> Accuracy {
    assert_eq!(reference.len(), got.len(), "accuracy: length mismatch");
    // (sum err^2, max |err|, sum ref^2, sum got^2, sum ref*got)
    let z = (0.0, 0.0, 0.0, 0.0, 0.0);
    let (se, mx, sr, sg, sx) = reference
        .par_chunks(CHUNK)
        .zip(got.par_chunks(CHUNK))
        .map(|(r, g)| {
            let mut a = z;
            for (&r, &g) in r.iter().zip(g) {
                let (r, g) = (r as f64, g as f64);
                let e = g - r;
                a.0 += e * e;
                a.1 = f64::max(a.1, e.abs());
                a.2 += r * r;
                a.3 += g * g;
                a.4 += r * g;
            }
            a
        })
        .reduce(|| z, |a, b| (a.0 + b.0, a.1.max(b.1), a.2 + b.2, a.3 + b.3, a.4 + b.4));
    let n = reference.len().max(1) as f64;
    let denom = (sr * sg).sqrt();
    Accuracy {
        rmse: (se / n).sqrt(),
        max_abs: mx,
        nmse: if sr > 0.0 { se / sr } else { 0.0 },
        cosine: if denom > 0.0 { sx / denom } else { 1.0 },
        sqnr_db: if se > 0.0 && sr > 0.0 { Some(10.0 * (sr / se).log10()) } else { None },
    }
}

impl Accuracy {
    /// The figures as metrics, with `bits_per_weight` beside them.
    pub(crate) fn metrics(&self, bits_per_weight: f64) -> Vec<Metric> {
        let mut m = vec![
            Metric::new("rmse", self.rmse, ""),
            Metric::new("max_abs_error", self.max_abs, ""),
            Metric::new("nmse", self.nmse, "ratio"),
            Metric::new("cosine", self.cosine, "ratio"),
        ];
        if let Some(s) = self.sqnr_db {
            m.push(Metric::new("sqnr", s, "dB"));
        }
        m.push(Metric::new("bits_per_weight", bits_per_weight, "bits"));
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accuracy_matches_hand_computed_values() {
        let r = [1.0f32, -2.0, 2.0, 0.0];
        let g = [1.0f32, -2.0, 1.0, 1.0];
        let a = accuracy(&r, &g);
        assert!((a.rmse - (2.0f64 / 4.0).sqrt()).abs() < 1e-12);
        assert_eq!(a.max_abs, 1.0);
        assert!((a.nmse - 2.0 / 9.0).abs() < 1e-12);
        assert!((a.cosine - 7.0 / (9.0f64 * 7.0).sqrt()).abs() < 1e-12);
        assert!((a.sqnr_db.unwrap() - 10.0 * 4.5f64.log10()).abs() < 1e-12);
        assert_eq!(accuracy(&r, &r).sqnr_db, None);
    }

    #[test]
    fn distributions_have_their_shape_and_depend_only_on_the_seed() {
        let n = 1 << 18;
        let moments = |x: &[f32]| {
            let m2 = x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / x.len() as f64;
            let m4 = x.iter().map(|&v| (v as f64).powi(4)).sum::<f64>() / x.len() as f64;
            (m2, m4 / (m2 * m2))
        };
        let (v, k) = moments(&draw(Dist::Normal, 512, 512, 1.0, 1));
        assert!((v - 1.0).abs() < 0.02 && (k - 3.0).abs() < 0.1, "{v} {k}");
        let (v, k) = moments(&draw(Dist::Heavy, 512, 512, 1.0, 1));
        assert!((v - 1.0).abs() < 0.15 && k > 5.0, "heavy tail: variance {v}, kurtosis {k}");
        let o = draw(Dist::Outlier, 512, 512, 1.0, 1);
        let big =
            (0..512).filter(|&c| (0..512).map(|r| o[r * 512 + c].abs()).fold(0.0, f32::max) > 30.0).count();
        assert!((1..=20).contains(&big), "{big} outlier columns");
        assert_eq!(draw(Dist::Heavy, 64, 8, 1.0, 7), draw(Dist::Heavy, 64, 8, 1.0, 7));
        assert_eq!(n, 512 * 512);
    }
}
