//! Harness settings and config files (TOML or YAML), layered as
//! defaults < `--quick` profile < config file < suite section < CLI flags.

use serde::{Deserialize, Serialize};

/// What to do with outlier samples.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "snake_case")]
pub enum OutlierPolicy {
    /// Classify and report outliers, analyse all samples.
    #[default]
    Keep,
    /// Drop severe and mild outliers before the analysis, and say how many.
    Remove,
}

/// Complete harness settings for one suite.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Settings {
    /// Samples to collect per case.
    pub sample_size: usize,
    /// Warm-up time per case, seconds.
    pub warm_up_time: f64,
    /// Measurement budget per case, seconds.
    pub measurement_time: f64,
    /// Hard budget per case (warm-up + calibration + sampling), seconds.
    pub max_time: Option<f64>,
    /// Stop once the median's CI half-width is below this percent of it.
    pub target_precision: Option<f64>,
    /// Confidence level of every interval, in (0, 1).
    pub confidence_level: f64,
    /// Bootstrap resamples for the mean's interval.
    pub bootstrap_resamples: usize,
    /// Seed for data generation, bootstrap and shuffling.
    pub seed: u64,
    /// Outlier policy.
    pub outliers: OutlierPolicy,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            sample_size: 100,
            warm_up_time: 1.0,
            measurement_time: 3.0,
            max_time: None,
            target_precision: None,
            confidence_level: 0.95,
            bootstrap_resamples: 10_000,
            seed: 0x7f_b3_c4,
            outliers: OutlierPolicy::Keep,
        }
    }
}
