//! CUDA through the real binary, on whatever this machine has: `list`
//! shows the GPU cases, `run --device cpu,cuda` runs the CPU cases and, with
//! no usable GPU, skips every GPU case with the driver's reason (exit 0,
//! the reason in the JSON results); a GPU that does not exist is named; and
//! `sysinfo` lists the GPUs or says why there are none. On a machine with a
//! GPU the same test requires the GPU cases to pass their verification.

mod common;
use common::*;
use serde_json::Value;

fn cases(v: &Value) -> &Vec<Value> {
    v["cases"].as_array().expect("cases")
}

#[test]
fn list_shows_the_gpu_cases_with_device_ids() {
    let (r, v) = run_json(&["list", "--suite", "tensor", "--device", "cuda", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let ids = listed_ids(&v);
    assert_eq!(v["cases"].as_u64(), Some(ids.len() as u64));
    assert!(ids.len() > 50 && ids.iter().all(|id| id.ends_with("device=cuda:0")), "{ids:?}");
    for b in ["binary", "unary", "reduction", "gpu_gemm", "gpu_bmm", "transfer", "launch"] {
        assert!(ids.iter().any(|id| id.starts_with(&format!("tensor/{b}/"))), "no {b} case");
    }
    assert!(!ids.iter().any(|id| id.starts_with("tensor/matmul/")), "CPU GEMMs listed on the GPU");
    let (_, both) = run_json(&["list", "--suite", "tensor", "--device", "cpu,cuda", "--format", "json"]);
    let all = listed_ids(&both);
    let n_cpu = all.iter().filter(|id| !id.contains("device=")).count();
    assert!(n_cpu > 100 && all.len() == n_cpu + ids.len(), "{n_cpu} CPU cases of {}", all.len());
}

#[test]
fn run_on_cpu_and_cuda_skips_or_verifies_every_gpu_case() {
    let no_gpu = no_gpu_reason();
    let filter = "tensor/(binary/op=add,shape=100x100|reduction/op=sum,shape=1000x1000|gpu_gemm/dtype=(f32|bf16),shape=1024x1024x1024|launch/)";
    let (r, v) = suite_json("tensor", "5", &["--device", "cpu,cuda", filter]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    let (cpu, gpu) = cpu_and_gpu_cases(&v, &no_gpu);
    if no_gpu.is_none() {
        for c in &gpu {
            assert!(metric(c, "cuda_event_ns").is_some() && metric(c, "setup_ns").is_some(), "{}", c["id"]);
        }
    }
    assert_eq!((cpu, gpu.len()), (2, 6), "{}", r.stderr);
    // The results record the GPU the GPU cases ran on (none without one).
    let gpus = &v["environment"]["gpus"];
    match &no_gpu {
        Some(_) => assert!(gpus.is_null(), "{gpus}"),
        None => {
            let g = &gpus[0];
            assert_eq!(g["device"], "cuda:0", "{gpus}");
            assert!(
                g["name"].as_str().is_some_and(|n| !n.is_empty()) && g["memory_bytes"].as_u64() > Some(0),
                "{g}"
            );
        }
    }
}

#[test]
fn a_gpu_that_does_not_exist_is_named() {
    let (r, v) = suite_json("tensor", "5", &["--device", "cuda:7", "launch/"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    for c in cases(&v) {
        assert_eq!(c["status"]["state"], "skipped", "{c}");
        let why = c["status"]["reason"].as_str().unwrap();
        assert!(
            why.starts_with("cuda:7") && (why.contains("does not exist") || no_gpu_reason().is_some()),
            "{why}"
        );
    }
    assert_eq!(cases(&v).len(), 2);
}

#[test]
fn sysinfo_lists_gpus_or_says_why_not() {
    let r = tfbench(&["sysinfo"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("CUDA: driver "), "{}", r.stdout);
    match no_gpu_reason() {
        Some(why) => assert!(r.stdout.contains(&format!("no GPU: {why}")), "{}", r.stdout),
        None => assert!(r.stdout.contains("cuda:0: ") && r.stdout.contains("SMs"), "{}", r.stdout),
    }
}
