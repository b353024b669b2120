//! Hostile counts in model files, in process: tiny `llama`, `qwen3`,
//! `gemma3` (head width 8 of their own, twice the width's 4 per head),
//! `gpt2` and `bert` GGUF files and Hugging Face directories, each count set beyond
//! what the tensors back (refused naming the key and value, allocating
//! almost nothing), and seeded mutations of each (loaded or refused, never a
//! panic, never a peak of memory out of proportion to the files).

use super::super::hf_dir::HfDir;
use super::{describe, load};
use crate::model::gguf::GgufFile;
use crate::model::gguf::tests::Writer;
use std::path::{Path, PathBuf};

const H: u64 = 8;
const F: u64 = 16;
const V: u64 = 32;
const P: u64 = 16;

/// Small seeded values; norms are ones.
fn values(name: &str, n: u64) -> Vec<f32> {
    let one = name.contains("norm") && name.ends_with("weight");
    (0..n)
        .map(|i| if one { 1.0 } else { ((i * 7919 + name.len() as u64) % 17) as f32 * 0.02 - 0.16 })
        .collect()
}

/// A tiny GGUF model of `arch` (metadata as u64 counts) with `over`
/// replacing the count of the same key.
fn gguf(arch: &str, over: &[(&str, u64)]) -> Vec<u8> {
    let llama = ["llama", "qwen3", "gemma3"].contains(&arch);
    // qwen3 and gemma3 have heads of 8 values (the queries 16 wide).
    let wide = arch != "llama" && llama;
    let (qd, kv) = if wide {
        (2 * H, H)
    } else if llama {
        (H, H / 2)
    } else {
        (H, H)
    };
    let mut counts: Vec<(String, u64)> = [
        ("embedding_length", H),
        ("attention.head_count", 2),
        ("feed_forward_length", F),
        ("block_count", 2),
        ("context_length", P),
    ]
    .iter()
    .map(|(k, v)| (format!("{arch}.{k}"), *v))
    .collect();
    if llama {
        counts.push((format!("{arch}.attention.head_count_kv"), 1));
    }
    if wide {
        counts.push((format!("{arch}.attention.key_length"), H));
    }
    for (k, v) in over {
        match counts.iter_mut().find(|(c, _)| c == k) {
            Some(c) => c.1 = *v,
            None => counts.push((k.to_string(), *v)),
        }
    }
    let mut w = Writer::new();
    w.kv_str("general.architecture", arch);
    for (k, v) in &counts {
        w.kv_u64(k, *v);
    }
    let eps = if llama { "layer_norm_rms_epsilon" } else { "layer_norm_epsilon" };
    w.kv_f32(&format!("{arch}.attention.{eps}"), 1e-5);
    let mut t: Vec<(String, Vec<u64>)> = vec![("token_embd.weight".into(), vec![H, V])];
    let wb = |n: &str, d: &[u64]| {
        [(format!("{n}.weight"), d.to_vec()), (format!("{n}.bias"), vec![*d.last().unwrap()])]
    };
    match arch {
        _ if llama => t.push(("output_norm.weight".into(), vec![H])),
        "gpt2" => {
            t.push(("position_embd.weight".into(), vec![H, P]));
            t.push(("output_norm.weight".into(), vec![H]));
            t.push(("output_norm.bias".into(), vec![H]));
        }
        _ => {
            t.push(("position_embd.weight".into(), vec![H, P]));
            t.push(("token_types.weight".into(), vec![H, 2]));
            t.push(("token_embd_norm.weight".into(), vec![H]));
            t.push(("token_embd_norm.bias".into(), vec![H]));
        }
    }
    for i in 0..2 {
        let p = |n: &str| format!("blk.{i}.{n}");
        let mats: Vec<(&str, [u64; 2])> = match arch {
            _ if llama => vec![
                ("attn_q", [H, qd]),
                ("attn_k", [H, kv]),
                ("attn_v", [H, kv]),
                ("attn_output", [qd, H]),
                ("ffn_gate", [H, F]),
                ("ffn_up", [H, F]),
                ("ffn_down", [F, H]),
            ],
            "gpt2" => vec![
                ("attn_qkv", [H, 3 * H]),
                ("attn_output", [H, H]),
                ("ffn_up", [H, F]),
                ("ffn_down", [F, H]),
            ],
            _ => vec![
                ("attn_q", [H, H]),
                ("attn_k", [H, H]),
                ("attn_v", [H, H]),
                ("attn_output", [H, H]),
                ("ffn_up", [H, F]),
                ("ffn_down", [F, H]),
            ],
        };
        for (n, d) in mats {
            if llama {
                t.push((p(&format!("{n}.weight")), d.to_vec()));
            } else {
                t.extend(wb(&p(n), &d));
            }
        }
        let norms: &[&str] = match arch {
            "gemma3" => &["attn_norm", "ffn_norm", "post_attention_norm", "post_ffw_norm"],
            _ if llama => &["attn_norm", "ffn_norm"],
            "gpt2" => &["attn_norm", "ffn_norm"],
            _ => &["attn_output_norm", "layer_output_norm"],
        };
        for n in norms {
            if llama {
                t.push((p(&format!("{n}.weight")), vec![H]));
            } else {
                t.extend(wb(&p(n), &[H]));
            }
        }
        if wide {
            t.push((p("attn_q_norm.weight"), vec![H]));
            t.push((p("attn_k_norm.weight"), vec![H]));
        }
    }
    for (name, dims) in &t {
        let n = dims.iter().product();
        w.tensor(name, dims, 0, values(name, n).iter().flat_map(|v| v.to_le_bytes()).collect());
    }
    w.bytes()
}

/// A scratch folder for this test binary.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tfbench-hostile-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Opens, describes and loads a GGUF file: `Err` as its text.
fn gguf_outcome(path: &Path) -> Result<(), String> {
    let f = GgufFile::open(path, None).map_err(|e| format!("{e:#}"))?;
    let info = describe(&f).map_err(|e| format!("{e:#}"))?;
    load(&f, &info, 8).map(drop).map_err(|e| format!("{e:#}"))
}

/// Runs `f` under the counting allocator: its result and the peak bytes gained.
fn peak<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let before = crate::alloc::reset_peak();
    let r = f();
    (r, crate::alloc::peak().saturating_sub(before))
}

#[test]
fn each_gguf_count_the_tensors_cannot_back_is_refused_naming_it() {
    let dir = scratch("gguf-counts");
    let path = dir.join("m.gguf");
    for arch in ["llama", "qwen3", "gemma3", "gpt2", "bert"] {
        std::fs::write(&path, gguf(arch, &[])).unwrap();
        gguf_outcome(&path).unwrap_or_else(|e| panic!("the valid {arch} file: {e}"));
        let mut keys = vec![
            "block_count",
            "embedding_length",
            "attention.head_count",
            "feed_forward_length",
            "vocab_size",
        ];
        if ["llama", "qwen3", "gemma3"].contains(&arch) {
            keys.push("attention.head_count_kv");
        }
        if ["qwen3", "gemma3"].contains(&arch) {
            keys.push("attention.key_length");
        }
        for key in keys {
            for v in [0, 3, 4_000_000_000, 1 << 40, u64::MAX] {
                // 3 blocks are one more than the file holds; 3 heads do not
                // divide 8; the others are out of all proportion.
                let k = format!("{arch}.{key}");
                std::fs::write(&path, gguf(arch, &[(&k, v)])).unwrap();
                let (r, bytes) = peak(|| gguf_outcome(&path));
                let e = r.expect_err(&format!("{k} = {v} must be refused"));
                assert!(e.contains(&format!("`{k}` is {v}")), "{k} = {v}: {e}");
                if crate::alloc::is_installed() {
                    assert!(bytes < 1 << 20, "{k} = {v}: refusing it peaked at {bytes} bytes");
                }
            }
        }
        // A context length beyond the learned table is bounded by it; a
        // llama's sizes nothing. Either way the model loads.
        std::fs::write(&path, gguf(arch, &[(&format!("{arch}.context_length"), u64::MAX)])).unwrap();
        let (r, bytes) = peak(|| gguf_outcome(&path));
        r.unwrap_or_else(|e| panic!("{arch} context_length: {e}"));
        if crate::alloc::is_installed() {
            assert!(bytes < 8 << 20, "{arch} with a huge context peaked at {bytes} bytes");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// A tiny xorshift generator.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

const EXTREMES: [u64; 10] = [0, 1, 2, 3, 7, 255, u32::MAX as u64, 1 << 32, 1 << 62, u64::MAX];

#[test]
fn mutated_gguf_models_load_or_fail_never_panic() {
    let dir = scratch("gguf-fuzz");
    let path = dir.join("m.gguf");
    let mut rng = Rng(0x5851_f42d_4c95_7f2d);
    let keys =
        ["block_count", "embedding_length", "attention.head_count", "feed_forward_length", "context_length"];
    let (mut ok, mut bad) = (0, 0);
    for i in 0..500 {
        let arch = ["llama", "gpt2", "bert", "qwen3", "gemma3"][i % 5];
        let mut b = match (i / 5) % 3 {
            // A count set to an extreme or random value.
            0 => {
                let k = format!("{arch}.{}", keys[(rng.next() % keys.len() as u64) as usize]);
                let v = if rng.next().is_multiple_of(2) {
                    EXTREMES[(rng.next() % 10) as usize]
                } else {
                    rng.next() % 64
                };
                gguf(arch, &[(&k, v)])
            }
            _ => gguf(arch, &[]),
        };
        // Then bytes: overwritten with extremes, flipped, or cut off.
        for _ in 0..(i / 5) % 3 {
            let at = (rng.next() as usize) % (b.len() - 8);
            match rng.next() % 3 {
                0 => b[at..at + 8].copy_from_slice(&EXTREMES[(rng.next() % 10) as usize].to_le_bytes()),
                1 => b[at] ^= 1 << (rng.next() % 8),
                _ => b.truncate(at.max(1)),
            }
        }
        std::fs::write(&path, &b).unwrap();
        let (r, bytes) = peak(|| std::panic::catch_unwind(|| gguf_outcome(&path)));
        match r {
            Ok(Ok(())) => ok += 1,
            Ok(Err(_)) => bad += 1,
            Err(_) => panic!("mutation {i} of {arch} panicked"),
        }
        if crate::alloc::is_installed() {
            assert!(bytes < 16 << 20, "mutation {i} of {arch} ({} bytes) peaked at {bytes} bytes", b.len());
        }
    }
    assert!(ok > 0 && bad > 0, "the mutations should yield both outcomes: {ok} loaded, {bad} refused");
    std::fs::remove_dir_all(&dir).ok();
}

/// A safetensors file of F32 tensors (name, shape) with [`values`].
fn safetensors(path: &Path, tensors: &[(String, Vec<usize>)]) {
    let (mut header, mut data) = (Vec::new(), Vec::new());
    for (name, shape) in tensors {
        let off = data.len();
        values(name, shape.iter().product::<usize>() as u64)
            .iter()
            .for_each(|v| data.extend(v.to_le_bytes()));
        header.push(format!(
            "\"{name}\":{{\"dtype\":\"F32\",\"shape\":{shape:?},\"data_offsets\":[{off},{}]}}",
            data.len()
        ));
    }
    let mut h = format!("{{{}}}", header.join(",")).into_bytes();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut bytes = (h.len() as u64).to_le_bytes().to_vec();
    bytes.extend(h);
    bytes.extend(data);
    std::fs::write(path, bytes).unwrap();
}

/// A tiny Hugging Face directory of `model_type`: its config.json (as a
/// JSON object) and tensors, written to `dir`.
fn hf(dir: &Path, model_type: &str) -> serde_json::Map<String, serde_json::Value> {
    let (h, f, v, p) = (H as usize, F as usize, V as usize, P as usize);
    let mut t: Vec<(String, Vec<usize>)> = Vec::new();
    let lin = |t: &mut Vec<(String, Vec<usize>)>, n: String, s: Vec<usize>, bias: bool| {
        if bias {
            t.push((format!("{n}.bias"), vec![if n.contains("c_") { s[1] } else { s[0] }]));
        }
        t.push((format!("{n}.weight"), s));
    };
    let config = match model_type {
        "llama" => {
            t.push(("model.embed_tokens.weight".into(), vec![v, h]));
            t.push(("model.norm.weight".into(), vec![h]));
            t.push(("lm_head.weight".into(), vec![v, h]));
            for i in 0..2 {
                let p = |n: &str| format!("model.layers.{i}.{n}");
                for (n, s) in [("q", [h, h]), ("k", [h / 2, h]), ("v", [h / 2, h]), ("o", [h, h])] {
                    lin(&mut t, p(&format!("self_attn.{n}_proj")), s.to_vec(), false);
                }
                for (n, s) in [("gate", [f, h]), ("up", [f, h]), ("down", [h, f])] {
                    lin(&mut t, p(&format!("mlp.{n}_proj")), s.to_vec(), false);
                }
                lin(&mut t, p("input_layernorm"), vec![h], false);
                lin(&mut t, p("post_attention_layernorm"), vec![h], false);
            }
            serde_json::json!({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": h,
                "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": f,
                "vocab_size": v, "max_position_embeddings": p})
        }
        "gpt2" => {
            t.push(("wte.weight".into(), vec![v, h]));
            t.push(("wpe.weight".into(), vec![p, h]));
            lin(&mut t, "ln_f".into(), vec![h], true);
            for i in 0..2 {
                let q = |n: &str| format!("h.{i}.{n}");
                lin(&mut t, q("attn.c_attn"), vec![h, 3 * h], true);
                lin(&mut t, q("attn.c_proj"), vec![h, h], true);
                lin(&mut t, q("mlp.c_fc"), vec![h, f], true);
                lin(&mut t, q("mlp.c_proj"), vec![f, h], true);
                lin(&mut t, q("ln_1"), vec![h], true);
                lin(&mut t, q("ln_2"), vec![h], true);
            }
            serde_json::json!({"model_type": "gpt2", "n_layer": 2, "n_embd": h, "n_head": 2,
                "n_inner": f, "vocab_size": v, "n_positions": p})
        }
        _ => {
            let e = |n: &str| format!("embeddings.{n}");
            t.push((e("word_embeddings.weight"), vec![v, h]));
            t.push((e("position_embeddings.weight"), vec![p, h]));
            t.push((e("token_type_embeddings.weight"), vec![2, h]));
            lin(&mut t, e("LayerNorm"), vec![h], true);
            lin(&mut t, "pooler.dense".into(), vec![h, h], true);
            for i in 0..2 {
                let q = |n: &str| format!("encoder.layer.{i}.{n}");
                for n in ["attention.self.query", "attention.self.key", "attention.self.value"] {
                    lin(&mut t, q(n), vec![h, h], true);
                }
                lin(&mut t, q("attention.output.dense"), vec![h, h], true);
                lin(&mut t, q("attention.output.LayerNorm"), vec![h], true);
                lin(&mut t, q("intermediate.dense"), vec![f, h], true);
                lin(&mut t, q("output.dense"), vec![h, f], true);
                lin(&mut t, q("output.LayerNorm"), vec![h], true);
            }
            serde_json::json!({"model_type": "bert", "num_hidden_layers": 2, "hidden_size": h,
                "num_attention_heads": 2, "intermediate_size": f, "vocab_size": v,
                "max_position_embeddings": p, "type_vocab_size": 2})
        }
    };
    std::fs::create_dir_all(dir).unwrap();
    safetensors(&dir.join("model.safetensors"), &t);
    let serde_json::Value::Object(c) = config else { unreachable!() };
    c
}

/// Writes `config` to the directory, then opens and loads it: `Err` as its text.
fn hf_outcome(dir: &Path, config: &serde_json::Map<String, serde_json::Value>) -> Result<(), String> {
    std::fs::write(dir.join("config.json"), serde_json::to_string(config).unwrap()).unwrap();
    let (d, info) = HfDir::open(dir, None).map_err(|e| format!("{e:#}"))?;
    d.load(&info, 8).map(drop).map_err(|e| format!("{e:#}"))
}

#[test]
fn each_config_count_the_tensors_cannot_back_is_refused_naming_it() {
    let root = scratch("hf-counts");
    let keys: [(&str, &[&str]); 3] = [
        (
            "llama",
            &[
                "num_hidden_layers",
                "hidden_size",
                "num_attention_heads",
                "num_key_value_heads",
                "intermediate_size",
                "vocab_size",
            ],
        ),
        ("gpt2", &["n_layer", "n_embd", "n_head", "n_inner", "vocab_size", "n_positions"]),
        (
            "bert",
            &[
                "num_hidden_layers",
                "hidden_size",
                "num_attention_heads",
                "intermediate_size",
                "vocab_size",
                "max_position_embeddings",
                "type_vocab_size",
            ],
        ),
    ];
    for (ty, keys) in keys {
        let dir = root.join(ty);
        let good = hf(&dir, ty);
        hf_outcome(&dir, &good).unwrap_or_else(|e| panic!("the valid {ty} directory: {e}"));
        for key in keys {
            for v in [3u64, 1_000_000_000_000, u64::MAX] {
                let mut c = good.clone();
                c.insert(key.to_string(), v.into());
                let (r, bytes) = peak(|| hf_outcome(&dir, &c));
                let e = r.expect_err(&format!("{ty} {key} = {v} must be refused"));
                // bert's heads are checked where its config is read (weights.rs).
                let named = e.contains(&format!("`{key}` is {v}")) || (ty == "bert" && e.contains("heads"));
                assert!(named, "{ty} {key} = {v}: {e}");
                if crate::alloc::is_installed() {
                    assert!(bytes < 1 << 20, "{ty} {key} = {v}: refusing it peaked at {bytes} bytes");
                }
            }
        }
    }
    // A llama's max_position_embeddings is backed by no tensor and sizes
    // nothing: RoPE's tables follow the positions asked for.
    let dir = root.join("llama");
    let mut c = hf(&dir, "llama");
    c.insert("max_position_embeddings".into(), 1_000_000_000_000u64.into());
    let (r, bytes) = peak(|| hf_outcome(&dir, &c));
    r.unwrap();
    if crate::alloc::is_installed() {
        assert!(bytes < 8 << 20, "a huge max_position_embeddings peaked at {bytes} bytes");
    }
    std::fs::remove_dir_all(&root).ok();
}

#[test]
fn mutated_configs_load_or_fail_never_panic() {
    let root = scratch("hf-fuzz");
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut ok, mut bad) = (0, 0);
    for ty in ["llama", "gpt2", "bert"] {
        let dir = root.join(ty);
        let good = hf(&dir, ty);
        let keys: Vec<String> = good.keys().filter(|k| *k != "model_type").cloned().collect();
        for i in 0..60 {
            let mut c = good.clone();
            for _ in 0..1 + i % 3 {
                let key = &keys[(rng.next() % keys.len() as u64) as usize];
                let v: serde_json::Value = match rng.next() % 5 {
                    0 => EXTREMES[(rng.next() % 10) as usize].into(),
                    1 => (rng.next() % 40).into(),
                    2 => (-((rng.next() % 1000) as i64)).into(),
                    3 => 2.5.into(),
                    _ => serde_json::Value::Null,
                };
                c.insert(key.clone(), v);
            }
            let (r, bytes) = peak(|| std::panic::catch_unwind(|| hf_outcome(&dir, &c)));
            match r {
                Ok(Ok(())) => ok += 1,
                Ok(Err(_)) => bad += 1,
                Err(_) => panic!("{ty} config {c:?} panicked"),
            }
            if crate::alloc::is_installed() {
                assert!(bytes < 16 << 20, "{ty} config {c:?} peaked at {bytes} bytes");
            }
        }
    }
    assert!(ok > 0 && bad > 0, "the mutations should yield both outcomes: {ok} loaded, {bad} refused");
    std::fs::remove_dir_all(&root).ok();
}
