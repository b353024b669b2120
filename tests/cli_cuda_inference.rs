//! The inference suite on CUDA through the real binary, on whatever this
//! machine has: `list --device cuda` shows the GPU cases (the CPU ids plus
//! `device=cuda:0`, and the GPU-only `decode_graph`); `run --device
//! cpu,cuda` runs the CPU cases and, with no usable GPU, skips every GPU
//! case with the driver's reason (exit 0, no panic). On a machine with a
//! GPU the same test requires every GPU case to pass its verification and
//! report its device time and per-token percentiles.

mod common;
use common::*;

#[test]
fn list_shows_the_gpu_inference_cases_with_the_cpu_ids() {
    let (r, v) = run_json(&["list", "--suite", "inference", "--device", "cuda", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let gpu = listed_ids(&v);
    assert!(gpu.iter().all(|id| id.ends_with(",device=cuda:0")), "{gpu:?}");
    for b in ["encoder", "prefill", "decode", "decode_graph"] {
        assert!(gpu.iter().any(|id| id.starts_with(&format!("inference/{b}/"))), "no {b} case");
    }
    assert!(!gpu.iter().any(|id| id.starts_with("inference/gguf/") || id.starts_with("inference/embed/")));
    // Every GPU case of a CPU benchmark is a CPU case with the device added.
    let (_, cpu) = run_json(&["list", "--suite", "inference", "--format", "json"]);
    let cpu = listed_ids(&cpu);
    assert!(!cpu.iter().any(|id| id.contains("decode_graph")), "decode_graph listed on the CPU");
    for id in gpu.iter().filter(|id| !id.starts_with("inference/decode_graph/")) {
        let plain = id.trim_end_matches(",device=cuda:0");
        assert!(cpu.iter().any(|c| c == plain), "{id} has no CPU twin");
    }
}

#[test]
fn run_on_cpu_and_cuda_skips_or_verifies_every_gpu_inference_case() {
    let no_gpu = no_gpu_reason();
    let filter = "inference/(encoder/batch=1,dtype=f32,layers=full,model=bert-tiny,seq=128,\
                  |prefill/batch=1,dtype=f32,layers=full,model=gpt2-tiny,prompt=32,\
                  |decode(_graph)?/batch=1,depth=32,dtype=(f32|f16|bf16),gen=32,layers=full,model=(gpt2-tiny|llama-tiny),)";
    let args = [
        "run",
        "--suite",
        "inference",
        "--no-probe",
        "--sample-size",
        "3",
        "--warm-up-time",
        "0.05",
        "--measurement-time",
        "0.1",
        "--device",
        "cpu,cuda",
        "--format",
        "json",
        filter,
    ];
    let (r, v) = run_json(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    let (cpu, gpu) = cpu_and_gpu_cases(&v, &no_gpu);
    for c in gpu.iter().filter(|_| no_gpu.is_none()) {
        let id = c["id"].as_str().unwrap();
        for m in ["cuda_event_ns", "setup_ns", "peak_device_bytes", "planned_device_bytes"] {
            assert!(metric(c, m).is_some(), "{id}: no {m}");
        }
        if id.contains("/decode") {
            assert!(metric(c, "tpot_p50_ns").is_some() && metric(c, "tpot_p99_ns").is_some(), "{id}");
            let graph = metric(c, "cuda_graph");
            assert_eq!(graph, Some(if id.contains("decode_graph") { 1.0 } else { 0.0 }), "{id}");
        }
        if id.contains("/prefill/") {
            assert!(metric(c, "ttft_p50_ns").is_some(), "{id}");
        }
    }
    // 1 encoder + 1 prefill + 4 decode (gpt2-tiny f32, llama-tiny f32/f16/bf16)
    // on the CPU; those plus 6 decode_graph on the GPU.
    assert_eq!((cpu, gpu.len()), (6, 12), "{}", r.stderr);
}

#[test]
fn quantized_weights_are_skipped_on_the_gpu_with_the_reason() {
    if no_gpu_reason().is_some() {
        // Without a GPU the driver's reason comes first (the test above).
        return;
    }
    let filter = "inference/decode/batch=1,depth=32,dtype=q4_0,gen=32,layers=full,model=llama-tiny,";
    let (r, v) = run_json(&[
        "run",
        "--suite",
        "inference",
        "--no-probe",
        "--device",
        "cuda",
        "--format",
        "json",
        filter,
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let c = &v["cases"][0];
    assert_eq!(c["status"]["state"], "skipped", "{c}");
    assert!(c["status"]["reason"].as_str().unwrap().contains("no GPU kernels"), "{c}");
}
