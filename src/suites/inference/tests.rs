use super::*;
use crate::model::linear::DType;
use crate::model::random_ids;
use crate::model::steps::percentile;
use crate::model::transformer::{KvCache, Workspace, WorkspaceSize};
use crate::plan::{ParamValue, SuiteSpec, expand, test_case};

fn spec() -> SuiteSpec {
    SuiteSpec::parse("inference", InferenceSuite.spec_toml()).unwrap()
}

fn s(v: &str) -> ParamValue {
    ParamValue::Str(v.into())
}

fn i(v: i64) -> ParamValue {
    ParamValue::Int(v)
}

#[test]
fn the_suite_file_names_the_published_shapes() {
    let spec = spec();
    let ids: Vec<String> =
        spec.benchmarks.iter().flat_map(|b| expand("inference", b)).map(|c| c.id).collect();
    for model in [
        "bert-base",
        "bert-large",
        "gpt2",
        "gpt2-medium",
        "llama-7b",
        "llama-13b",
        "bert-tiny",
        "gpt2-tiny",
        "llama-tiny",
    ] {
        assert!(
            ids.iter().any(|id| id.contains(&format!("model={model},"))),
            "{model} missing from the grids"
        );
    }
    for want in [
        "batch=32,dtype=f32,layers=full,model=bert-base,seq=512",
        "depth=960",
        "batch=32,depth=32",
        "dtype=bf16",
        "dtype=f16",
    ] {
        assert!(ids.iter().any(|id| id.contains(want)), "{want} missing from the grids");
    }
}

#[test]
fn the_target_matches_a_default_decode_case_that_declares_bytes() {
    for t in InferenceSuite.targets() {
        let re = regex::Regex::new(t.case_pattern).unwrap();
        let hits: Vec<Case> = spec()
            .benchmarks
            .iter()
            .flat_map(|b| expand("inference", b))
            .filter(|c| re.is_match(&c.id))
            .collect();
        assert!(!hits.is_empty(), "{}: no case matches", t.name);
        // Same benchmark on the tiny model: declared kinds do not depend on size.
        let mut c = hits[0].clone();
        c.params.insert("model".into(), s("gpt2-tiny"));
        let c = Case::new("inference", &c.benchmark, c.params);
        let w = crate::suites::prepare_standalone(&InferenceSuite, &c).unwrap();
        assert!(w.throughput().iter().any(|x| x.kind == t.kind));
    }
}

fn run_case(c: &Case) -> Vec<crate::workload::Metric> {
    let mut w =
        crate::suites::prepare_standalone(&InferenceSuite, c).unwrap_or_else(|e| panic!("{}: {e:#}", c.id));
    let v = w.verify().unwrap_or_else(|e| panic!("{}: {e:#}", c.id));
    assert!(v.passed, "{}: {} {}", c.id, v.reference, v.detail);
    w.run(2).unwrap();
    w.metrics()
}

#[test]
fn tiny_models_prepare_verify_and_run_in_every_dtype() {
    for dtype in DTYPES_ALL {
        let base = [("dtype", s(dtype)), ("layers", s("full")), ("shape", s("preset"))];
        let mut p = base.to_vec();
        p.extend([("model", s("bert-tiny")), ("batch", i(2)), ("seq", i(16))]);
        run_case(&test_case("inference", "encoder", &p));
        for model in ["gpt2-tiny", "llama-tiny"] {
            let mut p = base.to_vec();
            p.extend([("model", s(model)), ("batch", i(2)), ("prompt", i(9))]);
            run_case(&test_case("inference", "prefill", &p));
            let mut p = base.to_vec();
            p.extend([("model", s(model)), ("batch", i(2)), ("depth", i(5)), ("gen", i(3))]);
            let m = run_case(&test_case("inference", "decode", &p));
            let get =
                |n: &str| m.iter().find(|x| x.name == n).unwrap_or_else(|| panic!("no metric {n}")).value;
            assert!(get("tpot_p50_ns") > 0.0 && get("tpot_p50_ns") <= get("tpot_p99_ns"));
            assert_eq!(get("tpot_count"), 6.0, "2 iterations x 3 steps");
            assert!(get("decode_vs_recompute_max_error") < 1e-3);
            // Reduced precisions report their error against the f32 model.
            let cos = m.iter().find(|x| x.name == "vs_f32_cosine").map(|x| x.value);
            match dtype {
                "f32" => assert!(cos.is_none()),
                _ => assert!(cos.is_some_and(|c| c > 0.9 && c <= 1.0 + 1e-9), "{model} {dtype}: {cos:?}"),
            }
        }
    }
}

const DTYPES_ALL: [&str; 5] = ["f32", "f16", "bf16", "int8", "q4_0"];

#[test]
fn deep_caches_fill_in_chunks_and_depth_zero_starts_from_a_seeded_token() {
    for depth in [0, 130] {
        let p = [
            ("model", s("gpt2-tiny")),
            ("dtype", s("f32")),
            ("layers", s("full")),
            ("shape", s("preset")),
            ("batch", i(1)),
            ("depth", i(depth)),
            ("gen", i(2)),
        ];
        run_case(&test_case("inference", "decode", &p));
    }
}

/// Cached generation equals recomputing the whole sequence at every step,
/// with grouped-query attention, a batch of two and RoPE.
#[test]
fn kv_cache_decode_matches_full_recompute_step_by_step() {
    for name in ["llama-tiny", "gpt2-tiny"] {
        let cfg = crate::model::config::ModelConfig::preset(name).unwrap();
        let model = weights::random_model(&cfg, DType::F32, 3).unwrap();
        let (b, p, steps) = (2, 4, 4);
        let ids = random_ids(b * (p + steps), cfg.vocab, 8);
        let seq_of = |i: usize, n: usize| ids[i * (p + steps)..i * (p + steps) + n].to_vec();
        let mut ws = Workspace::new(
            &model,
            WorkspaceSize { batch: b, tokens: p + steps, keys: p + steps, threads: 2 },
        );
        let mut cache = KvCache::new(&cfg, b, p + steps);
        let prompt: Vec<u32> = (0..b).flat_map(|i| seq_of(i, p)).collect();
        model.decode(&mut ws, &mut cache, &prompt, p, false);
        for k in 0..steps {
            let tok: Vec<u32> = (0..b).map(|i| ids[i * (p + steps) + p + k]).collect();
            model.decode(&mut ws, &mut cache, &tok, 1, false);
            let cached = ws.logits.clone();
            let n = p + k + 1;
            let mut ws2 = Workspace::new(&model, WorkspaceSize { batch: b, tokens: n, keys: n, threads: 2 });
            let mut fresh = KvCache::new(&cfg, b, n);
            let full: Vec<u32> = (0..b).flat_map(|i| seq_of(i, n)).collect();
            model.decode(&mut ws2, &mut fresh, &full, n, false);
            let v = crate::suites::Verification::compare("recompute", &cached, &ws2.logits, 1e-5, 1e-4);
            assert!(v.passed, "{name} step {k}: {}", v.detail);
        }
    }
}

/// The logits at position i do not change when tokens after i change.
#[test]
fn causal_mask_makes_position_i_independent_of_later_tokens_in_the_model() {
    for name in ["llama-tiny", "gpt2-tiny"] {
        let cfg = crate::model::config::ModelConfig::preset(name).unwrap();
        let model = weights::random_model(&cfg, DType::F32, 4).unwrap();
        let n = 8;
        let a = random_ids(n, cfg.vocab, 1);
        let mut b = a.clone();
        b[5] = (b[5] + 17) % cfg.vocab as u32;
        b[7] = (b[7] + 3) % cfg.vocab as u32;
        let logits = |ids: &[u32]| {
            let mut ws = Workspace::new(&model, WorkspaceSize { batch: 1, tokens: n, keys: n, threads: 2 });
            let mut cache = KvCache::new(&cfg, 1, n);
            model.decode(&mut ws, &mut cache, ids, n, true).unwrap()
        };
        let (la, lb) = (logits(&a), logits(&b));
        let v = cfg.vocab;
        assert_eq!(la[..5 * v], lb[..5 * v], "{name}: positions 0..5 saw later tokens");
        assert_ne!(la[5 * v..6 * v], lb[5 * v..6 * v]);
    }
}

#[test]
fn shape_and_layers_overrides_reach_the_model_and_bad_values_name_the_choices() {
    let p = [
        ("model", s("llama-tiny")),
        ("dtype", s("f32")),
        ("layers", i(1)),
        ("shape", s("hidden:64+heads:4+kv_heads:1+ffn:96+vocab:500")),
        ("batch", i(1)),
        ("prompt", i(5)),
    ];
    let c = test_case("inference", "prefill", &p);
    assert!(c.id.contains("layers=1"), "{}", c.id);
    let m = run_case(&c);
    let get = |n: &str| m.iter().find(|x| x.name == n).map(|x| x.value);
    assert_eq!(get("layers"), Some(1.0));
    assert_eq!(get("layers_of_full_model"), Some(2.0));
    // 500*64 embed + 1 block (q 64*64, k,v 64*16, o 64*64, 3 FFN 64*96, 2 norms) + final norm + head.
    let want = 500 * 64 + (2 * 64 * 64 + 2 * 64 * 16 + 3 * 64 * 96 + 2 * 64) + 64 + 500 * 64;
    assert_eq!(get("params"), Some(want as f64));

    let err = |p: &[(&str, ParamValue)], bench: &str| match crate::suites::prepare_standalone(
        &InferenceSuite,
        &test_case("inference", bench, p),
    ) {
        Ok(_) => panic!("accepted {:?}", p),
        Err(e) => format!("{e:#}"),
    };
    let mut bad = p.to_vec();
    bad[0] = ("model", s("gpt5"));
    assert!(err(&bad, "prefill").contains("valid models: bert-tiny"));
    let mut bad = p.to_vec();
    bad[1] = ("dtype", s("int3"));
    assert!(err(&bad, "prefill").contains("valid: f32, f16, bf16"));
    let mut bad = p.to_vec();
    bad[3] = ("shape", s("width:9"));
    assert!(err(&bad, "prefill").contains("valid: hidden, heads"));
    let mut bad = p.to_vec();
    bad[2] = ("layers", s("most"));
    assert!(err(&bad, "prefill").contains("\"full\" or a positive integer"));
    let mut bad = p.to_vec();
    bad[0] = ("model", s("bert-tiny"));
    bad[3] = ("shape", s("preset"));
    assert!(err(&bad, "prefill").contains("needs a decoder"));
    assert!(err(&p, "train").contains("valid: encoder, embed, prefill, decode"));
}

#[test]
fn percentiles_are_nearest_rank() {
    let v: Vec<f64> = (1..=100).map(f64::from).collect();
    assert_eq!(percentile(&v, 50.0), 50.0);
    assert_eq!(percentile(&v, 99.0), 99.0);
    assert_eq!(percentile(&[3.0], 90.0), 3.0);
    assert!(percentile(&[], 50.0).is_nan());
}

#[test]
fn random_prompts_are_not_one_token_and_stay_in_the_vocabulary() {
    let ids = random_ids(1000, 4096, 1);
    assert!(ids.iter().all(|&t| (1..4096).contains(&t)));
    let mut u = ids.clone();
    u.sort();
    u.dedup();
    assert!(u.len() > 500);
}

/// Not a test: where the time of a BERT-base forward and a GPT-2 decode step
/// goes (the whole model vs its projections alone, in the same process).
/// `cargo test --release --lib inference::tests::profile -- --ignored --nocapture`
#[test]
#[ignore]
fn profile() {
    use std::time::Instant;
    let best = |f: &mut dyn FnMut(), reps: usize| {
        f();
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64() * 1e3
            })
            .fold(f64::MAX, f64::min)
    };
    let threads = crate::backend::cpu::current_threads();
    for (name, rows) in [("bert-base", 128usize), ("gpt2", 32), ("gpt2", 1)] {
        let cfg = crate::model::config::ModelConfig::preset(name).unwrap();
        let model = weights::random_model(&cfg, DType::F32, 1).unwrap();
        let ids = random_ids(rows, cfg.vocab, 2);
        let total = if name == "bert-base" {
            let mut ws =
                Workspace::new(&model, WorkspaceSize { batch: 1, tokens: rows, keys: rows, threads });
            let mask = vec![1u8; rows];
            best(&mut || model.encode(&mut ws, &ids, &mask, 1, rows), 5)
        } else {
            let mut ws = Workspace::new(&model, WorkspaceSize { batch: 1, tokens: rows, keys: 64, threads });
            let mut cache = KvCache::new(&cfg, 1, 64);
            best(
                &mut || {
                    cache.len = 32 - rows.min(32) + if rows == 1 { 31 } else { 0 };
                    model.decode(&mut ws, &mut cache, &ids, rows, false);
                },
                5,
            )
        };
        // The same projections alone.
        let mut gemm = 0.0;
        let x = crate::util::randn(rows * cfg.ffn.max(cfg.hidden), 3);
        let mut y = vec![0.0; rows * cfg.vocab.max(cfg.ffn)];
        for b in &model.blocks {
            for l in [&b.q, &b.k, &b.v, &b.o, &b.up, &b.down] {
                let mut scratch =
                    crate::model::linear::LinearScratch::new(threads, rows, l.inp, l.out, false);
                gemm += best(
                    &mut || {
                        l.forward(threads, &x[..rows * l.inp], rows, &mut y[..rows * l.out], &mut scratch)
                    },
                    3,
                );
            }
        }
        let head = if name == "bert-base" {
            0.0
        } else {
            let l = &model.tokens;
            let mut scratch = crate::model::linear::LinearScratch::new(threads, 1, l.inp, l.out, false);
            best(&mut || l.forward(threads, &x[..l.inp], 1, &mut y[..l.out], &mut scratch), 3)
        };
        println!(
            "{name} rows={rows}: forward {total:.2} ms; block projections alone {gemm:.2} ms; LM head alone {head:.2} ms; rest {:.2} ms",
            total - gemm - head
        );
    }
}

/// Without a usable GPU every GPU inference case is skipped with the
/// driver's reason (and nothing panics); with one, `cuda:7` is named.
#[test]
fn gpu_cases_skip_with_the_reason_when_there_is_no_gpu() {
    use crate::backend::{Device, DeviceKind};
    let suite = InferenceSuite;
    let spec = suite.spec().unwrap();
    let mut n = 0;
    for b in &spec.benchmarks {
        if !suite.devices(&b.name).contains(&DeviceKind::Cuda) {
            assert!(["embed", "gguf"].contains(&b.name.as_str()), "{}", b.name);
            continue;
        }
        for case in crate::plan::expand("inference", b).into_iter().take(3) {
            let case = case.on(Device::Cuda(7));
            let err = match crate::suites::prepare_standalone(&suite, &case) {
                Ok(_) => panic!("{}: prepared on cuda:7", case.id),
                Err(e) => e,
            };
            let why = &err
                .downcast_ref::<crate::workload::SkipCase>()
                .unwrap_or_else(|| panic!("{}: not a skip: {err:#}", case.id))
                .0;
            assert!(why.starts_with("cuda:7"), "{why}");
            if crate::backend::Device::Cuda(0).availability().is_err() {
                assert!(why.contains("libcuda") || why.contains("cuInit"), "{why}");
            }
            n += 1;
        }
    }
    assert!(n >= 10, "{n} GPU cases checked");
}
