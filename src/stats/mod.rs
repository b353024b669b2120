//! Pure statistics: summaries, confidence intervals, outliers and tests.
//!
//! Every function here is pure (seeded where random), takes plain slices of
//! `f64` and never panics on empty input: statistics of nothing are `NaN`
//! (documented per function). Inputs are assumed free of `NaN`; ordering uses
//! [`f64::total_cmp`] so a stray `NaN` cannot cause a panic, only a `NaN`-ish
//! result.
//!
//! - [`summary`]: [`quantile_sorted`] (R type 7), [`mean`], [`std_dev`],
//!   [`median`], [`mad`] and the one-pass-over-a-sorted-copy [`Summary`].
//! - [`ci`]: the distribution-free order-statistic interval for the median
//!   ([`median_ci`]) and seeded percentile-bootstrap intervals
//!   ([`bootstrap_mean_ci`], [`bootstrap_ratio_of_medians_ci`]).
//! - [`outliers`]: Tukey fences ([`tukey`]).
//! - [`hypothesis`]: the Mann-Whitney U test ([`mann_whitney_u`]) and
//!   Benjamini-Hochberg adjustment ([`benjamini_hochberg`]).
//! - [`exact`]: exact permutation p-values for small samples
//!   ([`mann_whitney_exact_p`]) and the paired Wilcoxon signed-rank test.
//! - [`hierarchical`]: the runs -> rounds -> samples bootstrap of a ratio of
//!   medians ([`hierarchical_ratio_ci`]).
//! - [`ttest`]: the one-sample t test and interval ([`one_sample_t`]) over
//!   a few per-round estimates.

pub mod ci;
pub mod exact;
pub mod hierarchical;
pub mod hypothesis;
pub mod outliers;
pub mod summary;
pub mod ttest;

pub use ci::{bootstrap_mean_ci, bootstrap_ratio_of_medians_ci, median_ci};
pub use exact::{EXACT_MAX_N, SignedRank, mann_whitney_exact_p, wilcoxon_signed_rank};
pub use hierarchical::{Levels, hierarchical_ratio_ci};
pub use hypothesis::{MannWhitney, benjamini_hochberg, mann_whitney_u};
pub use outliers::{OutlierClass, TukeyFences, tukey};
pub use summary::{Summary, log_ss, mad, mean, median, quantile_sorted, std_dev};
pub use ttest::{OneSampleT, blocked_t, one_sample_t};
