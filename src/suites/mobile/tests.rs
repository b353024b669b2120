//! The suite's cases prepared, verified and measured briefly on this
//! machine (wasm cases in every runtime it has).

use super::*;
use crate::backend::{Device, WasmRuntime};
use crate::plan::{Case, ParamValue};
use crate::suites::{SkipCase, prepare_standalone};
use std::collections::BTreeMap;

fn case(bench: &str, params: &[(&str, ParamValue)]) -> Case {
    let p: BTreeMap<String, ParamValue> = params.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
    Case::new("mobile", bench, p)
}

fn s(v: &str) -> ParamValue {
    ParamValue::Str(v.into())
}

fn i(v: i64) -> ParamValue {
    ParamValue::Int(v)
}

fn metric(m: &[crate::suites::Metric], name: &str) -> f64 {
    m.iter().find(|x| x.name == name).unwrap_or_else(|| panic!("no metric {name}")).value
}

fn profiled(bench: &str, profile: &str, threads: ParamValue, extra: &[(&str, ParamValue)]) -> Case {
    let mut p =
        vec![("profile", s(profile)), ("powersave", i(0)), ("threads", threads), ("shape", s("1x24x16"))];
    p.extend(extra.iter().cloned());
    case(bench, &p)
}

#[test]
fn a_profile_caps_threads_and_says_what_it_cannot_emulate() {
    for name in profile::NAMES {
        let c = profiled("capped", name, i(1), &[]);
        assert_eq!(MobileSuite.threads(&c).unwrap(), Threads::Exactly(1));
        let mut w = prepare_standalone(&MobileSuite, &c).unwrap();
        let v = w.verify().unwrap();
        assert!(v.passed, "{name}: {}", v.detail);
        assert!(v.reference.contains("-emulated") && v.reference.contains("not emulated"), "{}", v.reference);
        w.run(2).unwrap();
        let m = w.metrics();
        assert_eq!(metric(&m, "profile_threads"), 1.0);
        assert_eq!(metric(&m, "profile_simd_bits"), 128.0);
    }
}

#[test]
fn profiles_beyond_this_machine_or_their_budget_are_skipped_with_the_figures() {
    let (have, _) = profile::machine();
    // pixel8's nine cores exceed any machine this runs on with fewer.
    let c = profiled("capped", "pixel8-emulated", s("all"), &[]);
    if have < 9 {
        let e = prepare_standalone(&MobileSuite, &c).err().expect("refused");
        let skip = e.downcast_ref::<SkipCase>().expect("a skip, not a failure").to_string();
        assert!(skip.contains("9 threads") && skip.contains(&format!("has {have}")), "{skip}");
    }
    // A GEMV whose buffers exceed the browser tab's 2 GiB budget.
    let big = case(
        "capped",
        &[
            ("profile", s("browser-tab-emulated")),
            ("powersave", i(0)),
            ("threads", i(1)),
            ("shape", s("1x40000x40000")),
        ],
    );
    let e = prepare_standalone(&MobileSuite, &big).err().expect("refused");
    let why = e.downcast_ref::<SkipCase>().expect("a skip").to_string();
    assert!(why.contains("MiB") && why.contains("budget is 2048 MiB"), "{why}");
    // A GEMM shape is refused: tfbench's GEMM ignores the ISA cap.
    let gemm = case(
        "capped",
        &[("profile", s("rpi5-emulated")), ("powersave", i(0)), ("threads", i(1)), ("shape", s("8x8x8"))],
    );
    assert!(prepare_standalone(&MobileSuite, &gemm).err().unwrap().to_string().contains("1xKxN"));
    let unknown = profiled("capped", "nokia-emulated", i(1), &[]);
    let e = prepare_standalone(&MobileSuite, &unknown).err().expect("refused").to_string();
    assert!(profile::NAMES.iter().all(|n| e.contains(n)), "{e}");
    // More threads than the selected cluster has: an error naming it.
    let little = case(
        "capped",
        &[
            ("profile", s("galaxy-a54-emulated")),
            ("powersave", i(1)),
            ("threads", i(5)),
            ("shape", s("1x8x8")),
        ],
    );
    let e = prepare_standalone(&MobileSuite, &little).err().expect("refused").to_string();
    assert!(e.contains("number 4"), "{e}");
}

#[test]
fn sustained_and_thermal_studies_report_their_verdicts() {
    let c = profiled(
        "sustained",
        "rpi5-emulated",
        i(1),
        &[("seconds", ParamValue::Float(0.2)), ("window", ParamValue::Float(0.05)), ("cooldown", i(0))],
    );
    let mut w = prepare_standalone(&MobileSuite, &c).unwrap();
    assert!(w.verify().unwrap().passed);
    let m = w.metrics();
    assert_eq!(m.iter().filter(|x| x.name.starts_with("window_")).count(), 4);
    let ratio = metric(&m, "worst_best_ratio");
    assert_eq!(metric(&m, "stable"), f64::from(ratio >= 0.97));
    let t = profiled(
        "thermal_simulated",
        "rpi5-emulated",
        i(1),
        &[("seconds", i(1200)), ("windows", i(40)), ("slice", ParamValue::Float(0.001))],
    );
    assert!(t.id.contains("thermal_simulated") && t.id.contains("rpi5-emulated"));
    let mut w = prepare_standalone(&MobileSuite, &t).unwrap();
    let m = w.metrics();
    // rpi5's model settles at 25 + 7 * 10 = 95 C at full duty, above its
    // 80 C limit: twenty minutes of model time throttle it.
    assert!(metric(&m, "simulated_throttled_fraction") > 0.0);
    assert!(metric(&m, "simulated_max_temp_c") < 81.0);
    assert!(metric(&m, "simulated_seconds_to_throttle") < 1200.0);
}

fn runtimes() -> Vec<WasmRuntime> {
    WasmRuntime::ALL.into_iter().filter(|r| r.availability().is_ok()).collect()
}

#[test]
fn wasm_kernels_verify_and_report_phases_ratios_and_speedups() {
    let shapes = [
        ("add", "n", s("1000")),
        ("mul", "n", i(1000)),
        ("dot", "n", i(1000)),
        ("dot_i8", "n", i(1000)),
        ("gelu", "n", i(1000)),
        ("gemm", "shape", s("16x8x24")),
        ("softmax", "rows", s("3x50")),
        ("layernorm", "rows", s("3x50")),
    ];
    for rt in runtimes() {
        for (op, key, size) in &shapes {
            for simd in ["scalar", "simd"] {
                let c = case("wasm_kernel", &[("op", s(op)), ("simd", s(simd)), (key, size.clone())])
                    .on(Device::Wasm(rt));
                let mut w =
                    prepare_standalone(&MobileSuite, &c).unwrap_or_else(|e| panic!("{}: {e:#}", c.id));
                let v = w.verify().unwrap();
                assert!(v.passed, "{}: {}", c.id, v.detail);
                w.run(3).unwrap();
                if *op == "gemm" || *op == "dot_i8" {
                    let m = w.metrics();
                    assert!(
                        metric(&m, "compile_ns") > 0.0 && metric(&m, "wasm_native_ratio") > 0.0,
                        "{}",
                        c.id
                    );
                    assert_eq!(m.iter().any(|x| x.name == "simd_speedup"), simd == "simd", "{}", c.id);
                }
            }
        }
        // A shape the SIMD GEMM cannot tile is refused before it traps.
        let bad = case("wasm_kernel", &[("op", s("gemm")), ("simd", s("simd")), ("shape", s("3x3x3"))])
            .on(Device::Wasm(rt));
        assert!(prepare_standalone(&MobileSuite, &bad).err().unwrap().to_string().contains("multiple of 4"));
    }
    // On the CPU the benchmark says where it runs.
    let cpu = case("wasm_kernel", &[("op", s("add")), ("simd", s("scalar")), ("n", i(8))]);
    assert!(prepare_standalone(&MobileSuite, &cpu).err().unwrap().to_string().contains("--device wasm"));
}

#[test]
fn wasm_memory_patterns_verify_in_every_runtime() {
    for rt in runtimes() {
        for (pattern, key, size) in [
            ("grow", "pages", 4),
            ("copy_in", "bytes", 100_000),
            ("copy_out", "bytes", 100_000),
            ("bump", "steps", 300),
            ("freelist", "steps", 300),
            ("ceiling", "", 0),
        ] {
            let mut p = vec![("pattern", s(pattern))];
            if !key.is_empty() {
                p.push((key, i(size)));
            }
            let c = case("wasm_memory", &p).on(Device::Wasm(rt));
            let mut w = prepare_standalone(&MobileSuite, &c).unwrap_or_else(|e| panic!("{}: {e:#}", c.id));
            let v = w.verify().unwrap();
            assert!(v.passed, "{}: {} {}", c.id, v.reference, v.detail);
            w.run(5).unwrap();
            let m = w.metrics();
            assert!(metric(&m, "compile_ns") > 0.0);
            if pattern == "bump" || pattern == "freelist" {
                assert!(metric(&m, "arena_bytes") > 0.0);
            }
        }
        // Growing past the 1 GiB limit makes the instance afresh, and counts
        // it: 1 + 8192 pages fit, the second and third grows start afresh.
        let c = case("wasm_memory", &[("pattern", s("grow")), ("pages", i(8192))]).on(Device::Wasm(rt));
        let mut w = prepare_standalone(&MobileSuite, &c).unwrap();
        w.run(3).unwrap();
        assert_eq!(metric(&w.metrics(), "reinstantiations"), 2.0);
    }
}

#[test]
fn levels_run_on_the_model_runtime_with_accuracy_against_o0() {
    let mut kv = Vec::new();
    for level in levels::LEVELS {
        let c =
            case("levels", &[("level", s(level)), ("model", s("gpt2-tiny")), ("depth", i(4)), ("gen", i(2))]);
        let want = if *level == "O0" { Threads::Exactly(1) } else { Threads::Run };
        assert_eq!(MobileSuite.threads(&c).unwrap(), want);
        let mut w = prepare_standalone(&MobileSuite, &c).unwrap_or_else(|e| panic!("{level}: {e:#}"));
        let v = w.verify().unwrap();
        assert!(v.passed && v.reference.starts_with(level), "{level}: {} {}", v.reference, v.detail);
        w.run(1).unwrap();
        let m = w.metrics();
        assert!(metric(&m, "model_bytes") > 0.0 && metric(&m, "tpot_p90_ns") > 0.0, "{level}");
        if *level != "O0" {
            let cos = metric(&m, "vs_o0_cosine");
            assert!(cos > 0.9 && cos <= 1.0 + 1e-9, "{level}: cosine {cos}");
        }
        kv.push(metric(&m, "kv_cache_bytes"));
    }
    // O3's int8 cache is smaller than the f32 cache of O0-O2 (by less than
    // 3.8x here: it also holds one layer's f32 keys and values, and
    // gpt2-tiny has two layers; `model::lowbit`'s test has the 1B model's).
    assert!(kv[3] < kv[2] && kv[0] == kv[2], "{kv:?}");
    let bad =
        case("levels", &[("level", s("O9")), ("model", s("gpt2-tiny")), ("depth", i(4)), ("gen", i(2))]);
    assert!(prepare_standalone(&MobileSuite, &bad).err().unwrap().to_string().contains("O0, O1, O2, O3"));
}

#[test]
fn levels_run_encoders_and_a_profile_with_its_threads_and_cap() {
    for level in levels::LEVELS {
        let c = case("levels", &[("level", s(level)), ("encoder", s("mobilebert-size")), ("seq", i(16))]);
        let mut w = prepare_standalone(&MobileSuite, &c).unwrap_or_else(|e| panic!("{level}: {e:#}"));
        let v = w.verify().unwrap();
        assert!(v.passed && v.detail.contains("hidden states"), "{level}: {} {}", v.reference, v.detail);
        w.run(1).unwrap();
        let m = w.metrics();
        assert!(metric(&m, "forward_p50_ns") > 0.0 && metric(&m, "kv_cache_bytes") == 0.0, "{level}");
    }
    let c = case(
        "levels",
        &[
            ("level", s("O3")),
            ("model", s("llama-tiny")),
            ("profile", s("rpi5-emulated")),
            ("depth", i(4)),
            ("gen", i(2)),
        ],
    );
    let want = profile::machine().0.min(4);
    assert_eq!(MobileSuite.threads(&c).unwrap(), Threads::Exactly(want));
    let mut w = prepare_standalone(&MobileSuite, &c).unwrap();
    let v = w.verify().unwrap();
    assert!(v.passed && v.reference.contains("rpi5-emulated"), "{}", v.reference);
    assert!(
        v.detail.contains("fits rpi5's memory budget") && v.detail.contains("int8 KV cache vs f32"),
        "{}",
        v.detail
    );
}

/// The ~1B decoder on the 4 GB board's profile, from the plan alone (no
/// model is built): O0 refused with the figures, O3 fits and says so.
#[cfg(feature = "models")]
#[test]
fn the_1b_decoder_fits_the_4_gib_profile_at_o3_and_not_at_o0() {
    let one_b = |level: &str| {
        let c = case(
            "levels",
            &[
                ("level", s(level)),
                ("model", s("tinyllama-1.1b")),
                ("profile", s("rpi5-emulated")),
                ("depth", i(16)),
                ("gen", i(4)),
            ],
        );
        let (setup, _, _) = levels::setup(&c, 2).unwrap();
        let plan = setup.plan();
        (super::level_run::check_budget(&setup, &plan), plan)
    };
    let (o0, plan0) = one_b("O0");
    let why = o0.unwrap_err().downcast_ref::<SkipCase>().expect("a skip").to_string();
    assert!(plan0.weights > 4.0e9 && why.contains("rpi5's memory budget is 3072.0 MiB"), "{why}");
    assert!(why.contains("refused before allocating") && why.contains("KV cache"), "{why}");
    // Where this machine has the memory, O3's plan fits the profile and says so.
    if crate::model::available_bytes().is_some_and(|a| a > 4e9) {
        let (o3, plan3) = one_b("O3");
        let fits = o3.unwrap();
        assert!(plan3.total() < 3.0 * (1u64 << 30) as f64 && plan3.weights < 0.7e9, "{plan3:?}");
        assert!(fits.contains("fits rpi5's memory budget") && fits.contains("model 5"), "{fits}");
    }
}

fn adapt_case(latency_ms: f64, memory_mib: f64) -> Case {
    case(
        "adapt",
        &[
            ("profile", s("rpi5-emulated")),
            ("model", s("gpt2-tiny")),
            ("depth", i(8)),
            ("gen", i(2)),
            ("latency_ms", ParamValue::Float(latency_ms)),
            ("memory_mib", ParamValue::Float(memory_mib)),
            ("min_cosine", ParamValue::Float(0.9)),
        ],
    )
}

#[test]
fn adaptation_chooses_a_measured_configuration_and_lists_every_candidate() {
    let c = adapt_case(10_000.0, 0.0);
    let mut w = match prepare_standalone(&MobileSuite, &c) {
        Err(e) if e.downcast_ref::<SkipCase>().is_some() && !cfg!(feature = "models") => return,
        other => other.unwrap(),
    };
    let v = w.verify().unwrap();
    assert!(v.passed, "{}", v.detail);
    assert!(
        v.reference.contains("adaptation chose") && v.reference.contains("rpi5-emulated"),
        "{}",
        v.reference
    );
    let (have, _) = profile::machine();
    let n = adapt::candidates(4.min(have)).len();
    assert_eq!(v.detail.matches("threads=").count(), n, "every candidate listed: {}", v.detail);
    assert_eq!(v.detail.matches(": chosen").count(), 1, "{}", v.detail);
    w.run(1).unwrap();
    let m = w.metrics();
    assert_eq!(metric(&m, "candidates"), n as f64);
    assert_eq!(metric(&m, "candidates_rejected"), 0.0, "a 10 s target rejects nothing");
    let level = metric(&m, "chosen_level");
    assert!((1.0..=3.0).contains(&level) && metric(&m, "chosen_threads") <= have as f64);
}

#[test]
fn adaptation_with_unreachable_targets_skips_naming_each_rejection() {
    for (latency, memory, says) in
        [(1e-6, 0.0, "over the 0.00 ms target"), (10_000.0, 0.001, "not allocated")]
    {
        let err = match prepare_standalone(&MobileSuite, &adapt_case(latency, memory)) {
            Err(e) => e,
            Ok(_) => panic!("latency {latency} ms, memory {memory} MiB: nothing can meet it"),
        };
        let skip = err.downcast_ref::<SkipCase>().unwrap_or_else(|| panic!("a skip, not {err:#}"));
        if !cfg!(feature = "models") {
            continue;
        }
        let why = skip.to_string();
        assert!(why.contains("no configuration meets") && why.contains(says), "{why}");
        assert!(why.contains("O1 threads=1 batch=1") && why.contains("O3"), "{why}");
    }
}

/// webgpu_kernel on adapter 0: every op verifies and reports its phases
/// and ratio where an adapter exists; elsewhere preparing is refused with
/// the reason (the harness skips such cases before preparing them).
#[test]
fn webgpu_kernels_verify_or_say_why_not() {
    let shapes = [("add", "n", i(1000)), ("gemm", "shape", s("64x32x72")), ("softmax", "rows", s("3x50"))];
    let available = Device::WebGpu(0).availability();
    for (op, key, size) in &shapes {
        let c = case("webgpu_kernel", &[("op", s(op)), (key, size.clone())]).on(Device::WebGpu(0));
        assert!(c.id.ends_with(",device=webgpu:0"), "{}", c.id);
        let w = prepare_standalone(&MobileSuite, &c);
        let mut w = match (&available, w) {
            (Err(why), Err(e)) => {
                eprintln!("{}: skipped: {why}", c.id);
                assert!(e.to_string().contains(why.as_str()), "{e:#} vs {why}");
                continue;
            }
            (Ok(()), Ok(w)) => w,
            (a, w) => panic!("{}: availability {a:?} but prepare {:?}", c.id, w.err()),
        };
        let v = w.verify().unwrap();
        assert!(v.passed, "{}: {} {}", c.id, v.reference, v.detail);
        assert!(v.reference.contains("f64 reference"), "{}", v.reference);
        w.run(3).unwrap();
        let m = w.metrics();
        for name in ["compile_ns", "upload_ns", "execute_ns", "readback_ns", "webgpu_native_ratio"] {
            assert!(metric(&m, name) > 0.0, "{}: {name}", c.id);
        }
        let emulated = metric(&m, "cpu_emulated") == 1.0;
        assert_eq!(v.reference.contains("CPU-emulated"), emulated, "{}", v.reference);
    }
    // On another device the benchmark says where it runs; an op without a
    // WGSL kernel is refused by the suite's rule.
    let cpu = case("webgpu_kernel", &[("op", s("add")), ("n", i(8))]);
    assert!(prepare_standalone(&MobileSuite, &cpu).err().unwrap().to_string().contains("--device webgpu"));
    match MobileSuite.param_rule("webgpu_kernel", "op") {
        Some(ParamRule::OneOf(ops)) => assert_eq!(ops, crate::backend::webgpu::OPS),
        _ => panic!("webgpu_kernel's op has no rule"),
    }
}
