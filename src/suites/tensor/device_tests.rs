//! The suite's GPU cases on whatever this machine has, through the CUDA
//! backend's tensor ops (`crate::backend::ops`): without a usable GPU every
//! one is skipped with the backend's reason (never failed, never a panic);
//! with one, every benchmark and op runs on small sizes and verifies.

use super::GPU_ONLY;
use super::TensorSuite;
use crate::backend::ops::{Fill, Output, ReduceOp, TensorOp, TensorWork};
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

/// What a correct device brings back for `work`, computed on the host by
/// the CPU suite's own kernels (a GEMM by f64 dot products rounded as its
/// dtype stores C), so every description's check is exercised without a
/// GPU.
enum HostOutput {
    Values(Vec<f32>),
    Sum(f64, f64),
    Max(f32, Option<u64>),
    Bytes(Vec<u8>),
}

impl HostOutput {
    fn as_output(&self) -> Output<'_> {
        match self {
            Self::Values(v) => Output::Values(v),
            &Self::Sum(value, levels) => Output::Sum { value, levels },
            &Self::Max(value, index) => Output::Max { value, index },
            Self::Bytes(b) => Output::Bytes(b),
        }
    }

    /// The same output with one value wrong (by far more than any
    /// tolerance), which every check must refuse.
    fn corrupted(&self) -> Self {
        match self {
            Self::Values(v) => {
                let mut v = v.clone();
                let i = v.len() / 2;
                v[i] = if v[i] == 0.0 { 1.0 } else { -3.0 * v[i] + 1.0 };
                Self::Values(v)
            }
            &Self::Sum(s, levels) => Self::Sum(s + 1.0 + s.abs() * 1e-3, levels),
            &Self::Max(v, None) => Self::Max(v - 1.0, None),
            &Self::Max(v, Some(i)) => Self::Max(v, Some(i + 1)),
            Self::Bytes(b) => {
                let mut b = b.clone();
                let i = b.len() - 1;
                b[i] ^= 0x10;
                Self::Bytes(b)
            }
        }
    }
}

fn host_output(work: &TensorWork) -> HostOutput {
    use super::{elementwise, reduction, unary};
    let v = &work.inputs.values;
    let values = |f: &dyn Fn(&mut [f32]), n: usize| {
        let mut out = vec![f32::NAN; n];
        f(&mut out);
        HostOutput::Values(out)
    };
    match work.op {
        TensorOp::Fill { value: Fill::Zeros, len } => HostOutput::Values(vec![0.0; len]),
        TensorOp::Fill { value: Fill::Ones, len } => HostOutput::Values(vec![1.0; len]),
        TensorOp::Fill { value: Fill::Randn { seed }, len } => {
            HostOutput::Values(crate::util::randn(len, seed))
        }
        TensorOp::Binary(op) => values(&|o| elementwise::binary(op, o, &v[0], &v[1]), v[0].len()),
        TensorOp::BroadcastAdd { .. } => values(&|o| elementwise::broadcast_add(o, &v[0], &v[1]), v[0].len()),
        TensorOp::Unary(op) => values(&|o| unary::unary(op, o, &v[0]), v[0].len()),
        TensorOp::Reduce { op, cols, .. } => {
            let x = &v[0];
            // The CPU sum's addition levels, from its own error bound.
            let levels = reduction::sum_error_bound(x.len(), 1.0) / (f32::EPSILON as f64 / 2.0);
            match op {
                ReduceOp::Sum => HostOutput::Sum(reduction::sum(x) as f64, levels),
                ReduceOp::Mean => HostOutput::Sum((reduction::sum(x) / x.len() as f32) as f64, levels),
                ReduceOp::Max => HostOutput::Max(reduction::max(x), None),
                ReduceOp::Argmax => {
                    let i = reduction::argmax(x);
                    HostOutput::Max(x[i], Some(i as u64))
                }
                ReduceOp::Softmax => values(&|o| reduction::softmax(o, x, cols), x.len()),
                ReduceOp::LayerNorm => values(&|o| reduction::layernorm(o, x, &v[1], &v[2], cols), x.len()),
            }
        }
        TensorOp::Gemm { dtype, batch, m, k, n, .. } => {
            let mut c = Vec::with_capacity(batch * m * n);
            for t in 0..batch {
                let (a, b) = (&v[0][t * m * k..(t + 1) * m * k], &v[1][t * k * n..(t + 1) * k * n]);
                for i in 0..m {
                    for j in 0..n {
                        c.push(dtype.store(super::reference::dot_entry(a, b, k, n, i, j).0 as f32));
                    }
                }
            }
            HostOutput::Values(c)
        }
        TensorOp::Transfer { .. } => HostOutput::Bytes(work.inputs.bytes.clone()),
        TensorOp::Launch { value, .. } => HostOutput::Values(vec![value]),
    }
}

/// Every GPU case's description (its inputs, work counts and check) on the
/// host: the check passes the right answer, refuses a wrong one and an
/// output of the wrong kind, and the declared work is the CPU case's where
/// the benchmark has one. Runs with or without a GPU.
#[test]
fn every_gpu_description_accepts_the_right_answer_and_refuses_a_wrong_one() {
    let mut checked = 0;
    for case in gpu_cases(0) {
        let work = super::describe(&case).unwrap_or_else(|e| panic!("{}: {e:#}", case.id));
        assert_eq!(work.id, case.id);
        assert!(!work.throughput.is_empty(), "{}", case.id);
        let right = host_output(&work);
        let v = work.verify(right.as_output());
        assert!(v.passed, "{}: {} {}", case.id, v.reference, v.detail);
        let wrong = match (&right, work.op) {
            // randn's check is statistical (its value-by-value check is the
            // backend's twin): shifted values must fail it.
            (HostOutput::Values(v), TensorOp::Fill { value: Fill::Randn { .. }, .. }) => {
                HostOutput::Values(v.iter().map(|x| x + 0.5).collect())
            }
            _ => right.corrupted(),
        };
        let v = work.verify(wrong.as_output());
        assert!(!v.passed, "{}: a wrong answer passed: {} {}", case.id, v.reference, v.detail);
        let other = match right {
            HostOutput::Bytes(_) => HostOutput::Values(vec![0.0]),
            _ => HostOutput::Bytes(vec![0]),
        };
        assert!(!work.verify(other.as_output()).passed, "{}: an output of another kind passed", case.id);
        if !GPU_ONLY.contains(&case.benchmark.as_str()) {
            let cpu = crate::suites::prepare_standalone(&TensorSuite, &case.clone().on(Device::Cpu)).unwrap();
            assert_eq!(cpu.throughput(), work.throughput, "{}: the CPU case counts other work", case.id);
        }
        checked += 1;
    }
    assert!(checked > 60, "only {checked} descriptions");
}
