//! Seeded arrival schedules of the server scenario: Poisson arrivals at a
//! target rate, or gamma inter-arrivals of a chosen burstiness (`vllm bench
//! serve`'s `--burstiness`: shape `b`, scale `1 / (qps * b)`, so the mean gap
//! stays `1 / qps`; `b = 1` is the exponential gap of a Poisson process,
//! `b < 1` burstier, `b > 1` more regular). The same seed gives the same
//! schedule, so two runs (or two servers) see the same load.

use anyhow::{Result, bail};
use rand_distr::{Distribution, Gamma};

/// Send times in seconds from the start of the run, `n` of them, first at
/// the first drawn gap (LoadGen's server scenario does not send at t = 0).
pub fn arrivals(n: usize, qps: f64, burstiness: f64, seed: u64) -> Result<Vec<f64>> {
    if !(qps.is_finite() && qps > 0.0) {
        bail!("qps must be a positive number, got {qps}");
    }
    if !(burstiness.is_finite() && burstiness > 0.0) {
        bail!("burstiness must be a positive number, got {burstiness}");
    }
    let gap = Gamma::new(burstiness, 1.0 / (qps * burstiness)).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut rng = crate::util::rng(seed);
    let mut t = 0.0;
    Ok((0..n)
        .map(|_| {
            t += gap.sample(&mut rng);
            t
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_schedule_other_seed_other_schedule() {
        let a = arrivals(500, 8.0, 1.0, 7).unwrap();
        let b = arrivals(500, 8.0, 1.0, 7).unwrap();
        let c = arrivals(500, 8.0, 1.0, 8).unwrap();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert!(a.windows(2).all(|w| w[1] >= w[0]), "send times never go back");
    }

    /// The mean gap is 1/qps (within 5% over 20 000 arrivals: the standard
    /// error of the mean is 1/sqrt(20000 * b) of it, under 1%), and the
    /// spread follows the burstiness: coefficient of variation 1/sqrt(b).
    #[test]
    fn mean_rate_and_spread_follow_qps_and_burstiness() {
        for (qps, b) in [(5.0, 1.0), (40.0, 0.5), (2.0, 4.0)] {
            let t = arrivals(20_000, qps, b, 3).unwrap();
            let gaps: Vec<f64> = std::iter::once(t[0]).chain(t.windows(2).map(|w| w[1] - w[0])).collect();
            let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
            let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
            let rate = 1.0 / mean;
            assert!((rate / qps - 1.0).abs() < 0.05, "qps {qps} b {b}: measured rate {rate}");
            let cv = var.sqrt() / mean;
            let want = 1.0 / b.sqrt();
            assert!((cv / want - 1.0).abs() < 0.1, "qps {qps} b {b}: cv {cv}, want {want}");
        }
    }

    #[test]
    fn zero_or_negative_rates_are_refused() {
        assert!(arrivals(3, 0.0, 1.0, 1).is_err());
        assert!(arrivals(3, -1.0, 1.0, 1).is_err());
        assert!(arrivals(3, 1.0, 0.0, 1).is_err());
        assert!(arrivals(3, f64::NAN, 1.0, 1).is_err());
    }
}
