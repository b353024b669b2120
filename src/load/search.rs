//! The peak-QPS search of the server scenario, after LoadGen's
//! `FindPeakPerformance`: bracket the highest valid rate (double from the
//! start while runs are valid, halve while they are not), then bisect the
//! bracket, each step a whole run judged valid or invalid against the bounds.

use anyhow::Result;
use serde::Serialize;

/// One step of the search.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    /// The rate tried (queries per second).
    pub qps: f64,
    /// Whether the run kept its bounds.
    pub valid: bool,
    /// Why not, when invalid.
    pub why: Vec<String>,
}

/// The search's result.
#[derive(Debug, Clone, Serialize)]
pub struct Peak {
    /// The highest valid rate found (`None`: none was valid).
    pub qps: Option<f64>,
    /// The lowest invalid rate found (`None`: every rate tried was valid).
    pub first_invalid: Option<f64>,
    /// Every step in order.
    pub steps: Vec<Step>,
    /// Whether the bracket closed to the tolerance within the step limit.
    pub converged: bool,
}

/// Searches from `start` until the bracket `[valid, invalid]` is narrower
/// than `tolerance` (relative) or `max_steps` runs were made; `try_rate(q)`
/// runs the scenario at `q` and returns why it was invalid (empty: valid).
pub fn find_peak(
    start: f64,
    tolerance: f64,
    max_steps: usize,
    mut try_rate: impl FnMut(f64) -> Result<Vec<String>>,
) -> Result<Peak> {
    let mut steps = Vec::new();
    let mut probe = |q: f64, steps: &mut Vec<Step>| -> Result<bool> {
        let why = try_rate(q)?;
        let valid = why.is_empty();
        steps.push(Step { qps: q, valid, why });
        Ok(valid)
    };
    let (mut lo, mut hi) = (None::<f64>, None::<f64>);
    let mut q = start;
    // Bracket: 1/16 of the start is the floor (below it, a run of a few
    // queries at such a rate takes minutes; a server invalid there needs a
    // lower --qps to start from).
    while steps.len() < max_steps {
        if probe(q, &mut steps)? {
            lo = Some(q);
            if hi.is_some() {
                break;
            }
            q *= 2.0;
        } else {
            hi = Some(q);
            if lo.is_some() || q / 2.0 < start / 16.0 {
                break;
            }
            q /= 2.0;
        }
    }
    // Bisect.
    while let (Some(l), Some(h)) = (lo, hi) {
        if (h - l) / l <= tolerance || steps.len() >= max_steps {
            break;
        }
        let mid = 0.5 * (l + h);
        if probe(mid, &mut steps)? {
            lo = Some(mid);
        } else {
            hi = Some(mid);
        }
    }
    let converged = matches!((lo, hi), (Some(l), Some(h)) if (h - l) / l <= tolerance);
    Ok(Peak { qps: lo, first_invalid: hi, steps, converged })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn threshold(t: f64) -> impl FnMut(f64) -> Result<Vec<String>> {
        move |q| Ok(if q <= t { vec![] } else { vec!["over".into()] })
    }

    #[test]
    fn finds_the_threshold_from_below_and_above() {
        for start in [0.5, 7.0, 100.0] {
            let p = find_peak(start, 0.05, 30, threshold(7.3)).unwrap();
            let q = p.qps.unwrap();
            assert!(q <= 7.3 && q > 7.3 / 1.05, "start {start}: peak {q}");
            assert!(p.converged && p.first_invalid.unwrap() > 7.3);
            assert!(p.steps.iter().all(|s| s.valid == (s.qps <= 7.3)));
        }
    }

    #[test]
    fn step_limit_and_hopeless_servers_end_the_search() {
        let p = find_peak(1.0, 0.001, 4, threshold(1e9)).unwrap();
        assert_eq!(p.steps.len(), 4);
        assert!(!p.converged && p.first_invalid.is_none() && p.qps == Some(8.0));
        let p = find_peak(1.0, 0.05, 50, threshold(0.0)).unwrap();
        assert!(p.qps.is_none() && !p.converged);
        assert!(p.steps.len() < 15);
    }
}
