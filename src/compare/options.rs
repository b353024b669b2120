//! The options of a comparison, its verdicts and the rule that decides
//! them (see the parent module's docs for the rule in words).

use crate::results::Estimate;
use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// Thresholds and statistics settings of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareOptions {
    /// Significance level for the Benjamini-Hochberg q-value.
    pub alpha: f64,
    /// Per-case significance level on the raw p-value (see the module docs).
    #[serde(default = "default_case_alpha")]
    pub case_alpha: f64,
    /// Half-width of the noise band around a ratio of 1, as a fraction.
    pub noise_threshold: f64,
    /// A case's band is at least this many times its learned run-to-run spread.
    #[serde(default = "default_noise_k")]
    pub noise_k: f64,
    /// A regression whose point change exceeds this fraction gates.
    pub max_regression: f64,
    /// Memory growth beyond this fraction gates.
    pub max_memory_regression: f64,
    /// Confidence level of the ratio interval.
    pub confidence_level: f64,
    /// Bootstrap resamples for the ratio interval.
    pub resamples: usize,
    /// Base seed of the bootstrap (mixed with each case id).
    pub seed: u64,
    /// Fewest samples per side for a verdict other than "too few samples".
    #[serde(default = "default_min_samples")]
    pub min_samples: usize,
    /// Run-to-run spread (log scale, e.g. 0.01 for 1%) assumed for a side
    /// that replicated nothing above its samples, when history has none.
    #[serde(default = "default_assumed_run_spread")]
    pub assumed_run_spread: f64,
    /// Divide every ratio by the machine's measured drift (labelled).
    #[serde(default)]
    pub normalize: bool,
    /// Half-width of the band of instruction counts (fraction): a count
    /// that changed by more is a change (`compare::counts`).
    #[serde(default = "default_count_band")]
    pub count_band: f64,
}

fn default_count_band() -> f64 {
    0.01
}

fn default_case_alpha() -> f64 {
    0.001
}
fn default_noise_k() -> f64 {
    3.0
}
fn default_min_samples() -> usize {
    5
}
fn default_assumed_run_spread() -> f64 {
    0.01
}

impl Default for CompareOptions {
    fn default() -> Self {
        Self {
            alpha: 0.01,
            case_alpha: default_case_alpha(),
            noise_threshold: 0.02,
            noise_k: default_noise_k(),
            max_regression: 0.05,
            max_memory_regression: 0.20,
            confidence_level: 0.95,
            resamples: 10_000,
            seed: crate::config::Settings::default().seed,
            min_samples: default_min_samples(),
            assumed_run_spread: default_assumed_run_spread(),
            normalize: false,
            count_band: default_count_band(),
        }
    }
}

impl CompareOptions {
    /// Checks every value is in range; the error names the option.
    pub fn validate(&self) -> Result<()> {
        let fraction = |x: f64| x.is_finite() && x >= 0.0;
        if !(self.alpha > 0.0 && self.alpha < 1.0) {
            bail!("alpha must be in (0, 1), e.g. 0.01, got {}", self.alpha);
        }
        if !(self.case_alpha >= 0.0 && self.case_alpha < 1.0) {
            bail!("case alpha must be in [0, 1), e.g. 0.001, got {}", self.case_alpha);
        }
        if !fraction(self.noise_threshold) || self.noise_threshold >= 1.0 {
            bail!("noise threshold must be a fraction in [0, 1), e.g. 0.02, got {}", self.noise_threshold);
        }
        if !fraction(self.noise_k) {
            bail!("noise k must be a number >= 0, e.g. 3, got {}", self.noise_k);
        }
        if !fraction(self.max_regression) {
            bail!("max regression must be a fraction >= 0, e.g. 0.05, got {}", self.max_regression);
        }
        if !fraction(self.max_memory_regression) {
            bail!(
                "max memory regression must be a fraction >= 0, e.g. 0.2, got {}",
                self.max_memory_regression
            );
        }
        if !(self.confidence_level > 0.0 && self.confidence_level < 1.0) {
            bail!("confidence level must be in (0, 1), e.g. 0.95, got {}", self.confidence_level);
        }
        if !fraction(self.count_band) || self.count_band >= 1.0 {
            bail!("count band must be a fraction in [0, 1), e.g. 0.01, got {}", self.count_band);
        }
        if self.resamples == 0 {
            bail!("bootstrap resamples must be at least 1");
        }
        if !fraction(self.assumed_run_spread) {
            bail!("assumed run spread must be a fraction >= 0, got {}", self.assumed_run_spread);
        }
        Ok(())
    }
}

/// Outcome of comparing one case (see the module docs for the rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Significantly faster, beyond the band (and the machine's drift).
    Improved,
    /// Significantly slower, beyond the band (and the machine's drift).
    Regressed,
    /// The whole interval lies inside the band: no change shown.
    Unchanged,
    /// The data cannot tell: no evidence either way.
    Inconclusive,
    /// Fewer samples than [`CompareOptions::min_samples`] on a side.
    TooFewSamples,
}

impl Verdict {
    /// The words: `improved`, `regressed`, `unchanged`, `inconclusive`,
    /// `too few samples`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Improved => "improved",
            Self::Regressed => "regressed",
            Self::Unchanged => "unchanged",
            Self::Inconclusive => "inconclusive",
            Self::TooFewSamples => "too few samples",
        }
    }

    /// The rule of the module docs with the plain band and no drift:
    /// significance is `q < alpha` alone.
    pub fn decide(q: f64, ratio: &Estimate, opts: &CompareOptions) -> Verdict {
        Self::judge(
            &Judgement { p: 1.0, q, ratio: *ratio, band: opts.noise_threshold, envelope: (1.0, 1.0) },
            opts,
        )
    }

    /// The full rule of the module docs (sample counts are checked by the
    /// caller).
    pub fn judge(j: &Judgement, opts: &CompareOptions) -> Verdict {
        let (low, high) = (1.0 - j.band, 1.0 + j.band);
        let significant = j.q < opts.alpha || j.p < opts.case_alpha;
        let r = &j.ratio;
        if significant && r.lower > j.envelope.1 * high {
            Verdict::Regressed
        } else if significant && r.upper < j.envelope.0 * low {
            Verdict::Improved
        } else if r.lower >= low && r.upper <= high {
            Verdict::Unchanged
        } else {
            Verdict::Inconclusive
        }
    }
}

/// What one case's verdict is decided on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Judgement {
    /// Raw p-value.
    pub p: f64,
    /// Benjamini-Hochberg q-value.
    pub q: f64,
    /// `new / old` with its interval.
    pub ratio: Estimate,
    /// The case's band half-width (fraction).
    pub band: f64,
    /// The machine's drift envelope, `(1, 1)` when the drift is inside the band.
    pub envelope: (f64, f64),
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the two sides were measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// Two stored result sets, measured at different times.
    #[default]
    Stored,
    /// Two builds run alternately on one machine in one job (`tfbench ab`).
    Paired,
}
