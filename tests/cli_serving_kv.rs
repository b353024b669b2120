//! `tfbench load --kv-cache` (issue 46) through the real binary: a bad
//! storage stops the command (exit 2, naming the flag and the choices); the
//! engine on int8 KV caches serves every query and its tokens pass the
//! self-check against one-request int8 decoding. Short runs; assertions on
//! counts and checks, never on speed.

mod common;
use common::*;

#[test]
fn a_bad_kv_cache_is_refused_before_anything_runs() {
    for bad in ["int4", "F16", ""] {
        let r = tfbench(&["load", "--kv-cache", bad]);
        assert_usage_error(&r, &["--kv-cache", "f32", "int8"]);
    }
}

/// Both decoder families on int8 caches: all queries complete, the
/// results name the storage (settings, engine, self-check), and the
/// replayed tokens equal one-request greedy decoding on an int8 cache.
#[test]
fn the_engine_on_int8_caches_passes_its_self_check() {
    let dir = scratch("serving-kv-int8");
    for preset in ["llama-tiny", "gpt2-tiny"] {
        let out = dir.join(format!("{preset}.json"));
        let r = tfbench(&[
            "load",
            "--preset",
            preset,
            "--scenario",
            "offline",
            "--queries",
            "6",
            "--input-len",
            "8",
            "--output-len",
            "6",
            "--threads",
            "2",
            "--seed",
            "5",
            "--kv-cache",
            "int8",
            "-o",
            out.to_str().unwrap(),
        ]);
        assert_eq!(r.code, 0, "{preset}: {}\n{}", r.stdout, r.stderr);
        let v = json_file(&out);
        assert_eq!(v["settings"]["kv_cache"], "int8", "{preset}");
        let run = &v["runs"][0];
        assert_eq!(run["summary"]["failed"], 0, "{preset}: {}", run["summary"]);
        assert_eq!(run["log"]["target"]["kv_cache"], "int8", "{preset}");
        let c = &v["self_check"];
        assert_eq!(c["kv_cache"], "int8", "{preset}: {c}");
        assert!(c["requests"].as_u64().unwrap() >= 1 && c["identical"].as_u64().unwrap() >= 1, "{c}");
        assert!(r.stdout.contains("int8 KV cache"), "{}", r.stdout);
    }
}
