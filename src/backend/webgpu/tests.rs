//! The backend on this machine. Without the `webgpu` feature every call is
//! refused naming the feature; with it and no adapter (no Vulkan driver),
//! the refusal names the missing adapter and its fix; with one (lavapipe
//! from mesa-vulkan-drivers, or a GPU), every kernel runs and verifies.
//! A test that cannot run says why on stderr and checks that reason.

use super::*;
use crate::backend::Device;

/// Adapter 0, or `None` after printing and checking why there is none.
fn adapter_or_skip(test: &str) -> Option<AdapterInfo> {
    match adapter(0) {
        Ok(a) => Some(a),
        Err(why) => {
            eprintln!("{test}: skipped: {why}");
            assert!(why.starts_with("webgpu:0: "), "{why}");
            if cfg!(feature = "webgpu") {
                assert!(why.contains("no WebGPU adapter") && why.contains("mesa-vulkan-drivers"), "{why}");
            } else {
                assert!(why.contains("built without the `webgpu` feature"), "{why}");
            }
            None
        }
    }
}

#[test]
fn availability_names_the_device_and_what_is_missing() {
    assert!(WebGpuBackend.availability(Device::Cpu).unwrap_err().contains("cpu is not a WebGPU device"));
    let past = Device::WebGpu(999).availability().unwrap_err();
    assert!(past.starts_with("webgpu:999"), "{past}");
    let add = Op::Add { n: 4 };
    let load = |n: u32| Program::load(n, add, &[&[0.0; 4], &[0.0; 4]]).err().map(|e| e.to_string());
    match adapters() {
        Err(why) => {
            if cfg!(feature = "webgpu") {
                panic!("with the feature, listing adapters never fails: {why}");
            }
            assert!(why.contains("built without the `webgpu` feature") && why.contains("--features webgpu"));
            assert!(past.contains(&why), "{past}");
            assert!(load(0).unwrap().contains("webgpu:0: this tfbench was built without"));
        }
        Ok(list) if list.is_empty() => {
            eprintln!("no WebGPU adapter here: {NO_ADAPTER}");
            assert!(past.contains(NO_ADAPTER), "{past}");
            assert!(load(0).unwrap().contains("no WebGPU adapter"));
        }
        Ok(list) => {
            assert!(past.contains("does not exist") && past.contains(&list[0].line()), "{past}");
            assert!(load(999).unwrap().contains("webgpu:999 does not exist"));
            // Numbered in order, real GPUs before CPU-emulated ones.
            for (i, a) in list.iter().enumerate() {
                eprintln!("{}", a.line());
                assert_eq!(a.index as usize, i);
                assert_eq!(a.emulated, a.device_type == "CPU-emulated");
                assert!(Device::WebGpu(a.index).availability().is_ok());
            }
            let first_emulated = list.iter().position(|a| a.emulated).unwrap_or(list.len());
            assert!(list[first_emulated..].iter().all(|a| a.emulated), "{list:?}");
        }
    }
    // sysinfo always has a line for WebGPU, available or not, with the reason.
    let (lines, json) = WebGpuBackend.describe().unwrap();
    assert!(!lines.is_empty() && lines.iter().all(|l| l.starts_with("webgpu")), "{lines:?}");
    assert_eq!(json["available"], adapters().is_ok_and(|l| !l.is_empty()));
}

#[test]
fn the_environment_records_the_adapter_and_labels_emulation() {
    let env = WebGpuBackend.environment(&[Device::WebGpu(0), Device::Cpu]);
    let Some(a) = adapter_or_skip("the_environment_records_the_adapter_and_labels_emulation") else {
        assert!(env.is_empty(), "{env:?}");
        return;
    };
    assert_eq!(env.len(), 1);
    let g = &env[0];
    assert_eq!((g.device.as_str(), g.name.as_str()), ("webgpu:0", a.name.as_str()));
    assert!(g.api.as_deref().unwrap().contains(&a.backend), "{g:?}");
    let kind = g.kind();
    assert!(kind.contains(&a.name) && kind.contains("WebGPU"), "{kind}");
    assert_eq!(kind.contains("CPU-emulated"), a.emulated, "{kind}");
}

fn uniform(n: usize, seed: u64) -> Vec<f32> {
    crate::util::uniform(n, -1.0, 1.0, seed)
}

/// `op`'s inputs and its f64 reference.
fn reference(op: Op) -> (Vec<Vec<f32>>, Vec<f64>) {
    let inputs: Vec<Vec<f32>> =
        op.inputs().iter().enumerate().map(|(i, &n)| uniform(n, 7 + i as u64)).collect();
    let want = match op {
        Op::Add { .. } => inputs[0].iter().zip(&inputs[1]).map(|(&a, &b)| (a + b) as f64).collect(),
        Op::Gemm { m, k, n } => {
            let (a, b) = (&inputs[0], &inputs[1]);
            let mut c = vec![0f64; m * n];
            for i in 0..m {
                for p in 0..k {
                    for j in 0..n {
                        c[i * n + j] += a[i * k + p] as f64 * b[p * n + j] as f64;
                    }
                }
            }
            c
        }
        Op::Softmax { cols, .. } => inputs[0]
            .chunks(cols)
            .flat_map(|row| {
                let x: Vec<f64> = row.iter().map(|&v| 8.0 * v as f64).collect();
                let max = x.iter().cloned().fold(f64::MIN, f64::max);
                let sum: f64 = x.iter().map(|v| (v - max).exp()).sum();
                x.into_iter().map(move |v| (v - max).exp() / sum)
            })
            .collect(),
    };
    let mut inputs = inputs;
    if let Op::Softmax { .. } = op {
        // Rows spread over [-8, 8], as the suite's are over [-4, 4] and more.
        inputs[0].iter_mut().for_each(|v| *v *= 8.0);
    }
    (inputs, want)
}

#[test]
fn every_kernel_verifies_on_the_adapter_at_awkward_shapes() {
    let Some(a) = adapter_or_skip("every_kernel_verifies_on_the_adapter_at_awkward_shapes") else { return };
    let ops = [
        Op::Add { n: 1000 },
        Op::Add { n: 256 * 3 + 1 },
        Op::Gemm { m: 64, k: 64, n: 64 },
        // Edges in every direction: partial tiles of C and of K.
        Op::Gemm { m: 70, k: 33, n: 130 },
        Op::Gemm { m: 1, k: 1, n: 1 },
        Op::Softmax { rows: 3, cols: 50 },
        Op::Softmax { rows: 5, cols: 1000 },
    ];
    for op in ops {
        let (inputs, want) = reference(op);
        let refs: Vec<&[f32]> = inputs.iter().map(Vec::as_slice).collect();
        let mut p = Program::load(a.index, op, &refs).unwrap_or_else(|e| panic!("{op:?}: {e:#}"));
        assert!(p.phases().compile_ns > 0.0 && p.phases().upload_ns > 0.0, "{op:?}");
        assert_eq!(p.adapter(), &a);
        p.dispatch(2).unwrap();
        let got = p.read_output().unwrap();
        assert_eq!(got.len(), want.len(), "{op:?}");
        let (atol, rtol) = match op {
            Op::Add { .. } => (0.0, 0.0),
            Op::Gemm { k, .. } => (1e-5 * k as f64, 1e-4),
            Op::Softmax { .. } => (1e-7, 2e-5),
        };
        for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
            let err = (g as f64 - w).abs();
            assert!(err <= atol + rtol * w.abs(), "{op:?} [{i}]: got {g}, want {w} on {}", a.line());
        }
    }
}

#[cfg(feature = "webgpu")]
#[test]
fn a_broken_kernel_or_wrong_inputs_are_errors_not_panics() {
    let Some(a) = adapter_or_skip("a_broken_kernel_or_wrong_inputs_are_errors_not_panics") else { return };
    let add = Op::Add { n: 4 };
    let e = Program::load(a.index, add, &[&[0.0; 4]]).err().unwrap().to_string();
    assert!(e.contains("takes inputs of [4, 4] floats, got [4]"), "{e}");
    let broken = "@compute @workgroup_size(1) fn main() { let x: f32 = undefined_name; }";
    let e = Program::load_source(a.index, add, broken, &[&[0.0; 4], &[0.0; 4]]).err().unwrap().to_string();
    assert!(e.contains("the add kernel does not compile") && e.contains("undefined_name"), "{e}");
    // The device is still usable after the refusal.
    let mut p = Program::load(a.index, add, &[&[1.0; 4], &[2.0; 4]]).unwrap();
    p.dispatch(1).unwrap();
    assert_eq!(p.read_output().unwrap(), [3.0; 4]);
}
