//! The mobile suite through the real binary: WebAssembly cases on wasmi
//! (always built), a device profile on the CPU, and the refusals.

mod common;
use common::*;
use serde_json::Value;

fn cases(v: &Value) -> &Vec<Value> {
    v["cases"].as_array().expect("cases")
}

#[test]
fn wasm_cases_run_verified_on_wasmi_with_phases_and_ratios() {
    let filter = r"mobile/wasm_(kernel/(n=\d+,)?op=(dot_i8|gemm),|memory/pattern=(freelist|ceiling))";
    let (r, v) = suite_json("mobile", "3", &["--device", "wasm:wasmi", filter]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    // dot_i8 and gemm, each scalar and SIMD128, and two memory patterns.
    assert_eq!(cases(&v).len(), 6, "{:?}", cases(&v).iter().map(|c| &c["id"]).collect::<Vec<_>>());
    for c in cases(&v) {
        let id = c["id"].as_str().unwrap();
        assert!(id.ends_with(",device=wasm:wasmi") || id.ends_with("/device=wasm:wasmi"), "{id}");
        assert_eq!(c["status"]["state"], "ok", "{id}: {}", c["status"]);
        assert_eq!(c["verification"]["passed"], true, "{id}");
        assert!(metric(c, "compile_ns").unwrap() > 0.0, "{id}");
        if id.contains("wasm_kernel") {
            assert!(metric(c, "wasm_native_ratio").unwrap() > 0.0, "{id}");
            assert_eq!(metric(c, "simd_speedup").is_some(), id.contains("simd=simd"), "{id}");
        }
    }
}

#[test]
fn a_profile_runs_capped_and_says_it_is_emulated() {
    let filter = "mobile/capped/powersave=0,profile=(browser-tab|pixel8)-emulated,shape=1x1024x1024,threads=";
    let (r, v) = suite_json("mobile", "3", &[filter]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for c in cases(&v) {
        let id = c["id"].as_str().unwrap();
        if id.contains("pixel8") && id.ends_with("threads=all") && cores < 9 {
            // Nine cores asked of a smaller machine: refused with the figures.
            assert_eq!(c["status"]["state"], "skipped", "{id}");
            let why = c["status"]["reason"].as_str().unwrap();
            assert!(why.contains("9 threads") && why.contains(&format!("has {cores}")), "{why}");
            continue;
        }
        if id.ends_with("threads=all") && !id.contains("browser-tab") {
            continue;
        }
        assert_eq!(c["status"]["state"], "ok", "{id}: {}", c["status"]);
        assert!(c["verification"]["reference"].as_str().unwrap().contains("not emulated"), "{id}");
        assert_eq!(metric(c, "profile_simd_bits"), Some(128.0), "{id}");
    }
    // wasmtime is a Cargo feature: without it, its cases are skipped, saying so.
    if !cfg!(feature = "wasmtime") {
        let (r, v) =
            suite_json("mobile", "3", &["--device", "wasm:wasmtime", "mobile/wasm_memory/pattern=ceiling"]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let why = cases(&v)[0]["status"]["reason"].as_str().unwrap_or_default().to_string();
        assert!(why.contains("wasmtime feature"), "{why}");
    }
}

/// The user's own device profile: `NAME.toml` in a folder of
/// `$TFBENCH_DEVICE_PROFILES`, chosen by a config file as `NAME-emulated`,
/// runs capped like a shipped one; an unknown name stops the run before
/// anything runs, naming the known profiles (the user's among them).
#[test]
fn a_users_own_profile_file_runs_and_a_typo_is_refused() {
    let dir = scratch("mobile-user-profile");
    let shipped = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/configs/devices/rpi5.toml"))
        .expect("shipped profile");
    write(&dir, "my-board.toml", &shipped.replace("name = \"rpi5\"", "name = \"my-board\""));
    let env = [("TFBENCH_DEVICE_PROFILES", dir.to_str().unwrap())];
    let config = |profile: &str| {
        write(
            &dir,
            "mobile.toml",
            &format!(
                "[suites.mobile.benchmarks.capped]\nprofile = \"{profile}\"\nshape = \"1x64x32\"\nthreads = 1\npowersave = 0\n"
            ),
        )
    };
    let cfg = config("my-board-emulated");
    let args =
        ["run", "--suite", "mobile", "--quick", "--no-probe", "--sample-size", "3", "--format", "json"];
    let mut with = args.to_vec();
    with.extend(["--config", &cfg, "mobile/capped/"]);
    let r = tfbench_env(&env, &with);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = json(&r);
    let ids: Vec<&str> = cases(&v).iter().filter_map(|c| c["id"].as_str()).collect();
    assert_eq!(ids, ["mobile/capped/powersave=0,profile=my-board-emulated,shape=1x64x32,threads=1"]);
    let c = &cases(&v)[0];
    assert_eq!(c["status"]["state"], "ok", "{}", c["status"]);
    assert!(c["verification"]["reference"].as_str().unwrap().contains("my-board-emulated"));

    let cfg = config("my-bord-emulated");
    let mut with = args.to_vec();
    with.extend(["--config", &cfg, "mobile/capped/"]);
    let r = tfbench_env(&env, &with);
    assert_usage_error(&r, &["mobile.toml", "my-bord-emulated", "my-board-emulated", "pixel8-emulated"]);
}

/// `--device webgpu` through the binary: with an adapter (lavapipe counts)
/// the WGSL kernels run verified with their phases; without the feature or
/// an adapter every case is skipped, the reason naming what is missing.
#[test]
fn webgpu_cases_run_verified_or_are_skipped_with_the_reason() {
    let filter = r"mobile/webgpu_kernel/(n=65536,op=add|op=gemm,shape=64x64x64|op=softmax,rows=64x768)";
    let (r, v) = suite_json("mobile", "3", &["--device", "webgpu", filter]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(cases(&v).len(), 3, "{:?}", cases(&v).iter().map(|c| &c["id"]).collect::<Vec<_>>());
    let skipped = cases(&v).iter().filter(|c| c["status"]["state"] == "skipped").count();
    for c in cases(&v) {
        let id = c["id"].as_str().unwrap();
        assert!(id.ends_with(",device=webgpu:0"), "{id}");
        if c["status"]["state"] == "skipped" {
            let why = c["status"]["reason"].as_str().unwrap_or_default();
            eprintln!("{id}: skipped: {why}");
            if cfg!(feature = "webgpu") {
                assert!(why.contains("no WebGPU adapter") && why.contains("mesa-vulkan-drivers"), "{why}");
            } else {
                assert!(why.contains("built without the `webgpu` feature"), "{why}");
            }
            continue;
        }
        assert_eq!(c["status"]["state"], "ok", "{id}: {}", c["status"]);
        assert_eq!(c["verification"]["passed"], true, "{id}");
        assert!(metric(c, "compile_ns").unwrap() > 0.0 && metric(c, "upload_ns").unwrap() > 0.0, "{id}");
        assert!(metric(c, "webgpu_native_ratio").unwrap() > 0.0, "{id}");
    }
    // All or none: the adapter is the machine's, not the case's.
    assert!(skipped == 0 || skipped == 3, "{skipped} of 3 skipped");
    if skipped == 0 {
        // The run records the adapter, labelled when it is CPU-emulated.
        let gpus = v["environment"]["gpus"].as_array().expect("the adapter is recorded");
        assert_eq!(gpus[0]["device"], "webgpu:0", "{gpus:?}");
        assert!(gpus[0]["api"].as_str().unwrap().contains("WebGPU"), "{gpus:?}");
    }
}
