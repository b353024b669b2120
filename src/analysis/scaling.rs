//! Many-core scaling: a thread sweep (`--threads 1,2,4`) turned into
//! speed-up and parallel efficiency per step, and Gunther's Universal
//! Scalability Law fitted to the speed-ups,
//!
//! `C(n) = n / (1 + sigma (n - 1) + kappa n (n - 1))`,
//!
//! where `sigma` is contention (the serialised share; with `kappa = 0` this
//! is Amdahl's law) and `kappa` coherency (the cost of threads exchanging
//! data, which makes throughput fall past `sqrt((1 - sigma) / kappa)`).
//! Thread counts are taken relative to the sweep's smallest step.
//!
//! The fit is linear least squares on Gunther's linearisation,
//! `n / C(n) - 1 = sigma (n - 1) + kappa n (n - 1)`, with both terms kept
//! non-negative (a negative one is set to 0 and the other refitted alone);
//! R^2 is reported on the speed-ups themselves. Pure: no clocks, no I/O.

use crate::plan::ParamValue;
use crate::results::{CaseResult, ScalingPoint, UslFit};
use std::collections::BTreeMap;

/// The USL's speed-up at relative size `n`.
pub fn usl(n: f64, sigma: f64, kappa: f64) -> f64 {
    n / (1.0 + sigma * (n - 1.0) + kappa * n * (n - 1.0))
}

/// Fits the USL to `(n, speedup)` points (`n` relative to the base, the
/// base itself `(1, 1)`); `None` with fewer than two points beyond the base
/// or data that fix neither term.
pub fn fit_usl(points: &[(f64, f64)]) -> Option<UslFit> {
    let pts: Vec<(f64, f64, f64)> = points
        .iter()
        .filter(|(n, s)| *n > 1.0 && s.is_finite() && *s > 0.0)
        .map(|&(n, s)| (n - 1.0, n * (n - 1.0), n / s - 1.0))
        .collect();
    if pts.len() < 2 {
        return None;
    }
    let (mut s11, mut s12, mut s22, mut s1y, mut s2y) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for &(x1, x2, y) in &pts {
        s11 += x1 * x1;
        s12 += x1 * x2;
        s22 += x2 * x2;
        s1y += x1 * y;
        s2y += x2 * y;
    }
    let det = s11 * s22 - s12 * s12;
    let (mut sigma, mut kappa) = if det.abs() > 1e-12 * s11 * s22 {
        ((s1y * s22 - s2y * s12) / det, (s2y * s11 - s1y * s12) / det)
    } else {
        (s1y / s11, 0.0)
    };
    if kappa < 0.0 {
        (sigma, kappa) = (s1y / s11, 0.0);
    }
    if sigma < 0.0 {
        (sigma, kappa) = (0.0, (s2y / s22).max(0.0));
    }
    if !(sigma.is_finite() && kappa.is_finite()) {
        return None;
    }
    let mean = points.iter().map(|p| p.1).sum::<f64>() / points.len() as f64;
    let (mut ss_res, mut ss_tot) = (0.0, 0.0);
    for &(n, s) in points {
        ss_res += (s - usl(n, sigma, kappa)).powi(2);
        ss_tot += (s - mean).powi(2);
    }
    let r_squared = if ss_tot > 0.0 { 1.0 - ss_res / ss_tot } else { 1.0 };
    let peak_threads = (kappa > 0.0).then(|| ((1.0 - sigma).max(0.0) / kappa).sqrt());
    Some(UslFit { sigma, kappa, r_squared, peak_threads })
}

/// A case id without its `threads=` parameter: the key the steps of one
/// sweep share (suite, benchmark, every other parameter, device).
pub fn sweep_group(id: &str) -> String {
    let Some((head, params)) = id.rsplit_once('/') else { return id.to_string() };
    if !params.contains('=') {
        return id.to_string();
    }
    let kept: Vec<&str> = params.split(',').filter(|p| !p.starts_with("threads=")).collect();
    if kept.is_empty() { head.to_string() } else { format!("{head}/{}", kept.join(",")) }
}

/// Fills [`CaseResult::scaling`] for every measured case whose sweep group
/// has at least two thread counts: speed-up and efficiency over the
/// group's smallest step, and the group's USL fit (from three steps on).
pub fn attach(cases: &mut [CaseResult]) {
    // group -> (threads, median ns, index)
    let mut groups: BTreeMap<String, Vec<(usize, f64, usize)>> = BTreeMap::new();
    for (i, c) in cases.iter().enumerate() {
        let Some(ParamValue::Int(t)) = c.params.get("threads") else { continue };
        let Some(median) = c.estimates.as_ref().map(|e| e.median.point).filter(|m| *m > 0.0) else {
            continue;
        };
        if *t >= 1 && !c.status.is_failed() {
            groups.entry(sweep_group(&c.id)).or_default().push((*t as usize, median, i));
        }
    }
    for (group, mut steps) in groups {
        steps.sort_by_key(|s| s.0);
        steps.dedup_by_key(|s| s.0);
        if steps.len() < 2 {
            continue;
        }
        let (base_threads, base_ns, _) = steps[0];
        let points: Vec<(f64, f64)> =
            steps.iter().map(|&(t, ns, _)| (t as f64 / base_threads as f64, base_ns / ns)).collect();
        let fit = if steps.len() >= 3 { fit_usl(&points) } else { None };
        for (&(threads, _, i), &(n, speedup)) in steps.iter().zip(&points) {
            cases[i].scaling = Some(ScalingPoint {
                group: group.clone(),
                threads,
                base_threads,
                speedup,
                efficiency: speedup / n,
                fit,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn exact_usl_data_gives_back_its_parameters() {
        for (sigma, kappa) in [(0.05, 0.002), (0.1, 0.0), (0.0, 0.01), (0.3, 0.05)] {
            let pts: Vec<(f64, f64)> =
                [1.0, 2.0, 4.0, 8.0, 16.0, 32.0].iter().map(|&n| (n, usl(n, sigma, kappa))).collect();
            let fit = fit_usl(&pts).expect("fit");
            assert!(close(fit.sigma, sigma, 1e-9) && close(fit.kappa, kappa, 1e-9), "{fit:?}");
            assert!(fit.r_squared > 0.999_999, "{fit:?}");
            match fit.peak_threads {
                Some(p) => assert!(close(p, ((1.0 - sigma) / kappa).sqrt(), 1e-6), "{fit:?}"),
                None => assert_eq!(kappa, 0.0),
            }
        }
    }

    #[test]
    fn amdahl_data_fits_with_zero_coherency() {
        // Amdahl with a 10% serial share, measured with 1% noise.
        let noise = [1.01, 0.99, 1.005, 0.995, 1.0];
        let pts: Vec<(f64, f64)> = [1.0, 2.0, 4.0, 8.0, 16.0]
            .iter()
            .zip(noise)
            .map(|(&n, e)| (n, e * n / (1.0 + 0.1 * (n - 1.0))))
            .collect();
        let fit = fit_usl(&pts).expect("fit");
        assert!(close(fit.sigma, 0.1, 0.02), "{fit:?}");
        assert!(fit.kappa < 0.002, "{fit:?}");
        // Perfect scaling: both terms 0, never peaks.
        let linear: Vec<(f64, f64)> = [1.0, 2.0, 4.0].iter().map(|&n| (n, n)).collect();
        let fit = fit_usl(&linear).expect("fit");
        assert_eq!((fit.sigma, fit.kappa, fit.peak_threads), (0.0, 0.0, None));
        // Super-linear steps would need negative terms: both are clamped.
        let superlinear: Vec<(f64, f64)> = [1.0, 2.0, 4.0].iter().map(|&n| (n, 1.2 * n)).collect();
        let fit = fit_usl(&superlinear).expect("fit");
        assert!(fit.sigma >= 0.0 && fit.kappa >= 0.0, "{fit:?}");
        assert!(fit_usl(&[(1.0, 1.0), (2.0, 1.8)]).is_none(), "one step beyond the base fixes nothing");
    }

    #[test]
    fn groups_drop_only_the_threads_parameter() {
        assert_eq!(
            sweep_group("tensor/matmul/impl=gemm,shape=8x8x8,threads=4"),
            "tensor/matmul/impl=gemm,shape=8x8x8"
        );
        assert_eq!(sweep_group("s/b/threads=2"), "s/b");
        assert_eq!(sweep_group("s/b/n=1,threads=2,device=cuda:0"), "s/b/n=1,device=cuda:0");
        assert_eq!(sweep_group("s/b"), "s/b");
    }

    #[test]
    fn a_sweep_gets_speedups_efficiencies_and_a_fit() {
        let mut cases = crate::report::fixture().cases;
        let template = cases.remove(0);
        let (sigma, kappa) = (0.05, 0.01);
        let mut sweep: Vec<CaseResult> = [1i64, 2, 4, 8]
            .iter()
            .map(|&t| {
                let mut c = template.clone();
                c.params.insert("threads".into(), ParamValue::Int(t));
                c.id = format!("tensor/matmul/shape=256x256x256,threads={t}");
                let e = c.estimates.as_mut().expect("measured");
                e.median.point = 1000.0 / usl(t as f64, sigma, kappa);
                c
            })
            .collect();
        attach(&mut sweep);
        let p = sweep[2].scaling.as_ref().expect("a step of the sweep");
        assert_eq!((p.group.as_str(), p.threads, p.base_threads), ("tensor/matmul/shape=256x256x256", 4, 1));
        assert!(close(p.speedup, usl(4.0, sigma, kappa), 1e-9));
        assert!(close(p.efficiency, p.speedup / 4.0, 1e-12));
        let fit = p.fit.expect("four steps");
        assert!(close(fit.sigma, sigma, 1e-6) && close(fit.kappa, kappa, 1e-6), "{fit:?}");
        assert_eq!(sweep[0].scaling.as_ref().map(|p| p.speedup), Some(1.0));
        // A lone thread count is no sweep.
        let mut lone = vec![template];
        attach(&mut lone);
        assert!(lone[0].scaling.is_none());
    }
}
