//! Harness settings and config files (TOML or YAML), layered as
//! defaults < `--quick` profile < config file < suite section < CLI flags.

use serde::{Deserialize, Serialize};

/// What to do with outlier samples.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum OutlierPolicy {
    /// Classify and report outliers, analyse all samples.
    #[default]
    Keep,
    /// Drop severe and mild outliers before the analysis, and say how many.
    Remove,
}

/// Most copies `placements` may ask for (see [`Settings::placements`]).
pub const MAX_PLACEMENTS: usize = 16;

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
    /// Copies of each eligible CPU case to hold and take samples from in
    /// turn, so a run's median averages over where buffers land in memory
    /// (see `harness::placement`); 1 prepares each case once. Absent in
    /// results written before it existed: 1.
    #[serde(default = "one_placement")]
    pub placements: usize,
}

fn one_placement() -> usize {
    1
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
            placements: 1,
        }
    }
}

impl Settings {
    /// Checks every value is in range; the error names the key and the range.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let pos = |x: f64| x.is_finite() && x > 0.0;
        let max = MAX_PLACEMENTS;
        if !(1..=max).contains(&self.placements) {
            return Err(("placements", format!("must be 1 to {max}, got {}", self.placements)));
        }
        if self.sample_size < 2 {
            return Err(("sample_size", format!("must be at least 2, got {}", self.sample_size)));
        }
        if !(self.warm_up_time.is_finite() && self.warm_up_time >= 0.0) {
            return Err(("warm_up_time", format!("must be >= 0 seconds, got {}", self.warm_up_time)));
        }
        if !pos(self.measurement_time) {
            return Err(("measurement_time", format!("must be > 0 seconds, got {}", self.measurement_time)));
        }
        if let Some(m) = self.max_time.filter(|&m| !pos(m)) {
            return Err(("max_time", format!("must be > 0 seconds, got {m}")));
        }
        if let Some(p) = self.target_precision.filter(|&p| !(pos(p) && p < 100.0)) {
            return Err(("target_precision", format!("must be a percentage in (0, 100), got {p}")));
        }
        if !(self.confidence_level > 0.0 && self.confidence_level < 1.0) {
            return Err((
                "confidence_level",
                format!("must be in (0, 1), e.g. 0.95, got {}", self.confidence_level),
            ));
        }
        if self.bootstrap_resamples < 100 {
            return Err((
                "bootstrap_resamples",
                format!("must be at least 100, got {}", self.bootstrap_resamples),
            ));
        }
        Ok(())
    }
}

mod file;
mod locate;
mod resolve;

pub use file::{
    ConfigFile, LoadedConfig, OneOrMany, PartialSettings, RunSection, SuiteSection, load, parse_toml,
    parse_yaml,
};
pub use locate::line_col;
pub use resolve::{
    CliOverrides, ModelFileTests, Resolved, Shard, default_threads, resolve, resolve_in, resolve_model,
};

/// The `--quick` profile, shipped as `configs/quick.toml`.
pub const QUICK_PROFILE: &str = include_str!("../../configs/quick.toml");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_from_before_placements_read_as_one() {
        let mut v = serde_json::to_value(Settings::default()).unwrap();
        v.as_object_mut().unwrap().remove("placements");
        let s: Settings = serde_json::from_value(v).unwrap();
        assert_eq!(s.placements, 1);
        let bad = Settings { placements: 0, ..Default::default() };
        assert_eq!(bad.validate().unwrap_err().0, "placements");
        let too_many = Settings { placements: MAX_PLACEMENTS + 1, ..Default::default() };
        assert!(too_many.validate().is_err());
    }
}
