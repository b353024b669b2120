//! The suite's GPU cases on whatever this machine has, through the CUDA
//! backend's tensor ops (`crate::backend::ops`): without a usable GPU every
//! one is skipped with the backend's reason (never failed, never a panic);
//! with one, every benchmark and op runs on small sizes and verifies.

use super::GPU_ONLY;
use super::TensorSuite;
use crate::backend::{Device, DeviceKind};
use crate::plan::{Case, ParamValue, SuiteSpec, expand};
use crate::suites::{SkipCase, Suite};

/// Every default-grid case of the benchmarks that run on CUDA, on `cuda:n`,
/// with sizes shrunk so a GPU run of the test stays quick.
fn gpu_cases(n: u32) -> Vec<Case> {
    let mut spec = SuiteSpec::parse("tensor", TensorSuite.spec_toml()).unwrap();
    spec.benchmarks.retain(|b| TensorSuite.devices(&b.name).contains(&DeviceKind::Cuda));
    for b in &mut spec.benchmarks {
        for g in &mut b.grids {
            for (k, v) in g.iter_mut() {
                let small: Option<Vec<ParamValue>> = match (b.name.as_str(), k.as_str()) {
                    (_, "elements") => Some(vec![ParamValue::Int(1000), ParamValue::Int(1 << 17 | 3)]),
                    ("gpu_gemm", "shape") => {
                        Some(vec!["7x13x5".into(), "65x33x17".into(), "256x256x256".into()])
                    }
                    ("gpu_bmm", "shape") => Some(vec!["3x7x13x5".into(), "12x128x64x128".into()]),
                    (_, "shape") => Some(vec!["37x53".into(), "300x513".into(), "1x5".into()]),
                    (_, "bytes") => Some(vec![ParamValue::Int(4096), ParamValue::Int(1_000_003)]),
                    _ => None,
                };
                if let Some(s) = small {
                    *v = s;
                }
            }
        }
    }
    spec.benchmarks.iter().flat_map(|b| expand("tensor", b)).map(|c| c.on(Device::Cuda(n))).collect()
}

#[test]
fn gpu_cases_skip_with_the_drivers_reason_or_verify() {
    let cases = gpu_cases(0);
    assert!(cases.len() > 60, "only {} GPU cases", cases.len());
    assert!(cases.iter().all(|c| c.id.ends_with("device=cuda:0")), "{}", cases[0].id);
    match crate::backend::of(DeviceKind::Cuda).availability(Device::Cuda(0)) {
        Err(why) => {
            eprintln!("no GPU here, every case must skip: {why}");
            for case in &cases {
                let e = crate::suites::prepare_standalone(&TensorSuite, case)
                    .err()
                    .unwrap_or_else(|| panic!("{} prepared", case.id));
                let skip =
                    e.downcast_ref::<SkipCase>().unwrap_or_else(|| panic!("{}: failed: {e:#}", case.id));
                assert_eq!(skip.0, why, "{}", case.id);
            }
        }
        Ok(()) => {
            let mut ran = 0;
            for case in &cases {
                let mut w = match crate::suites::prepare_standalone(&TensorSuite, case) {
                    Ok(w) => w,
                    // Every default-grid case fits an H100; a smaller GPU
                    // may skip the largest with the figures.
                    Err(e) => {
                        let skip =
                            e.downcast_ref::<SkipCase>().unwrap_or_else(|| panic!("{}: {e:#}", case.id));
                        assert!(skip.0.contains("device memory"), "{}: skipped: {}", case.id, skip.0);
                        continue;
                    }
                };
                let v = w.verify().unwrap_or_else(|e| panic!("{}: {e:#}", case.id));
                assert!(v.passed, "{}: {} {}", case.id, v.reference, v.detail);
                for measured in [false, true, true] {
                    w.run(2).unwrap_or_else(|e| panic!("{}: {e:#}", case.id));
                    w.sync().unwrap();
                    w.after_sample(measured).unwrap();
                }
                let names: Vec<String> = w.metrics().into_iter().map(|m| m.name).collect();
                for want in ["setup_ns", "peak_device_bytes", "cuda_event_ns"] {
                    assert!(names.iter().any(|n| n == want), "{}: no {want} in {names:?}", case.id);
                }
                ran += 1;
            }
            assert!(ran > 50, "only {ran} GPU cases ran");
        }
    }
}

#[test]
fn a_missing_gpu_is_named_and_gpu_only_benchmarks_refuse_the_cpu() {
    let case = gpu_cases(7).into_iter().find(|c| c.benchmark == "gpu_gemm").unwrap();
    let e = crate::suites::prepare_standalone(&TensorSuite, &case)
        .err()
        .expect("cuda:7 exists on no test machine");
    let skip = e.downcast_ref::<SkipCase>().unwrap_or_else(|| panic!("failed instead of skipping: {e:#}"));
    assert!(skip.0.contains("cuda:7"), "{}", skip.0);
    for b in GPU_ONLY {
        let cpu = gpu_cases(0).into_iter().find(|c| c.benchmark == *b).unwrap().on(Device::Cpu);
        let err = crate::suites::prepare_standalone(&TensorSuite, &cpu).err().unwrap().to_string();
        assert!(err.contains("runs on CUDA GPUs only"), "{b}: {err}");
    }
}
