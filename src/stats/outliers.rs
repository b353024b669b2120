//! Tukey-fence outlier classification.

use super::summary::{quantile_sorted, sorted_copy};

/// Where a value falls relative to the Tukey fences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutlierClass {
    /// Below `Q1 - 3 IQR`.
    LowSevere,
    /// Below `Q1 - 1.5 IQR`, at or above `Q1 - 3 IQR`.
    LowMild,
    /// Within the 1.5 IQR fences (inclusive).
    Normal,
    /// Above `Q3 + 1.5 IQR`, at or below `Q3 + 3 IQR`.
    HighMild,
    /// Above `Q3 + 3 IQR`.
    HighSevere,
}

impl OutlierClass {
    /// True for every class but [`OutlierClass::Normal`].
    pub fn is_outlier(self) -> bool {
        self != OutlierClass::Normal
    }
}

/// Tukey fences: 1.5x (mild) and 3x (severe) the interquartile range
/// beyond the quartiles Q1 and Q3 (computed by
/// [`quantile_sorted`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TukeyFences {
    /// `Q1 - 3 IQR`.
    pub low_severe: f64,
    /// `Q1 - 1.5 IQR`.
    pub low_mild: f64,
    /// `Q3 + 1.5 IQR`.
    pub high_mild: f64,
    /// `Q3 + 3 IQR`.
    pub high_severe: f64,
}

impl TukeyFences {
    /// Fences from the quartiles of `x` (any order); all `NaN` when empty.
    pub fn new(x: &[f64]) -> TukeyFences {
        let sorted = sorted_copy(x);
        let q1 = quantile_sorted(&sorted, 0.25);
        let q3 = quantile_sorted(&sorted, 0.75);
        let iqr = q3 - q1;
        TukeyFences {
            low_severe: q1 - 3.0 * iqr,
            low_mild: q1 - 1.5 * iqr,
            high_mild: q3 + 1.5 * iqr,
            high_severe: q3 + 3.0 * iqr,
        }
    }

    /// Class of one value; a value exactly on a fence is not beyond it.
    pub fn classify(&self, v: f64) -> OutlierClass {
        if v < self.low_severe {
            OutlierClass::LowSevere
        } else if v < self.low_mild {
            OutlierClass::LowMild
        } else if v > self.high_severe {
            OutlierClass::HighSevere
        } else if v > self.high_mild {
            OutlierClass::HighMild
        } else {
            OutlierClass::Normal
        }
    }
}

/// Tukey fences of `x` and the class of every value, in input order.
///
/// Empty input gives `NaN` fences and no classes.
pub fn tukey(x: &[f64]) -> (TukeyFences, Vec<OutlierClass>) {
    let fences = TukeyFences::new(x);
    let classes = x.iter().map(|&v| fences.classify(v)).collect();
    (fences, classes)
}

#[cfg(test)]
mod tests {
    use super::OutlierClass::*;
    use super::*;

    #[test]
    fn one_value_in_each_class() {
        // Sorted: [-25, -10, 10, 11, 12, 13, 20, 40, 60]; n = 9 so Q1 = x[2]
        // = 10 and Q3 = x[6] = 20 exactly; IQR 10. Fences: -20, -5, 35, 50.
        let x = [12.0, 60.0, -10.0, 10.0, 40.0, 13.0, -25.0, 20.0, 11.0];
        let (f, c) = tukey(&x);
        assert_eq!(f, TukeyFences { low_severe: -20.0, low_mild: -5.0, high_mild: 35.0, high_severe: 50.0 });
        assert_eq!(c, vec![Normal, HighSevere, LowMild, Normal, HighMild, Normal, LowSevere, Normal, Normal]);
        assert_eq!(c.iter().filter(|k| k.is_outlier()).count(), 4);
    }

    #[test]
    fn values_on_a_fence_are_not_beyond_it() {
        // Same quartiles (10, 20), so the same fences; values sit exactly on
        // each fence: -20 is not below -20 (so only mild), -5 is not below
        // -5 (normal), 35 normal, 50 only mild.
        let x = [-20.0, -5.0, 10.0, 11.0, 12.0, 13.0, 20.0, 35.0, 50.0];
        let (f, c) = tukey(&x);
        assert_eq!((f.low_severe, f.low_mild, f.high_mild, f.high_severe), (-20.0, -5.0, 35.0, 50.0));
        assert_eq!(c, vec![LowMild, Normal, Normal, Normal, Normal, Normal, Normal, Normal, HighMild]);
    }

    #[test]
    fn constant_and_empty_data() {
        let (f, c) = tukey(&[3.0; 5]);
        assert_eq!(f.low_severe, 3.0);
        assert_eq!(f.high_severe, 3.0);
        assert!(c.iter().all(|&k| k == Normal));
        let (f, c) = tukey(&[]);
        assert!(f.low_mild.is_nan() && c.is_empty());
    }
}
