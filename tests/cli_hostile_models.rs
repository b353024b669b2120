//! Hostile model files through `run --model`, the real binary under an
//! address-space limit of 1 GiB: a GGUF of a few kilobytes or a config.json
//! whose counts (blocks, layers, heads, widths, vocabulary) the file cannot
//! back exits 2 naming the key and its value, quickly, never a panic or an
//! allocation sized by the count; a context length backed by no tensor
//! sizes nothing and the model runs. Seeded mutations of a valid GGUF and
//! of a valid config.json each load or fail with an error, never a panic.
//! (The same tiny models run under the limit, so the limit itself is not
//! what refuses them: 512 MiB was enough for them when this was written.)

mod common;
use common::*;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The address-space limit of every run here.
const LIMIT: u64 = 1 << 30;
/// The longest a refusal may take (the unfixed binary aborted after 14-15 s
/// under a 4 GiB limit, having listed billions of tensor names).
const QUICK: Duration = Duration::from_secs(5);

/// Runs tfbench with `args` under [`LIMIT`]; the run and its wall time.
fn limited(args: &[&str]) -> (Run, Duration) {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("empty-cache");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tfbench"));
    cmd.args(args).env("TFBENCH_CACHE_DIR", cache).env("NO_COLOR", "1").env_remove("COLUMNS");
    // SAFETY: setrlimit is async-signal-safe and touches no state of the
    // parent; the closure runs in the child between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            let lim = libc::rlimit { rlim_cur: LIMIT, rlim_max: LIMIT };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let t = Instant::now();
    let out = cmd.output().expect("run tfbench");
    let run = Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    (run, t.elapsed())
}

/// `run --model PATH` of the `load` and `tg4` tests, as JSON, under [`LIMIT`].
fn run_model(path: &Path, tests: &str) -> (Run, Duration) {
    limited(&[
        "run",
        "--no-probe",
        "--model",
        path.to_str().expect("utf-8 path"),
        "--tests",
        tests,
        "--quick",
        "--sample-size",
        "3",
        "--threads",
        "2",
        "--format",
        "json",
    ])
}

/// A GGUF metadata value.
#[derive(Clone, Copy)]
enum Meta<'a> {
    U32(u32),
    U64(u64),
    F32(f32),
    Str(&'a str),
}

/// The tiny llama's shape: hidden 8, 2 heads of 4, 1 KV head, FFN 16,
/// vocabulary 32, 2 blocks, context 64.
const H: u64 = 8;
const KV: u64 = 4;
const F: u64 = 16;
const V: u64 = 32;

/// Small seeded values; norms are ones.
fn values(name: &str, n: u64) -> Vec<f32> {
    if name.contains("norm") {
        return vec![1.0; n as usize];
    }
    (0..n).map(|i| ((i * 7919 + name.len() as u64 * 31) % 17) as f32 * 0.02 - 0.16).collect()
}

/// The tiny llama's metadata, `key` replaced by (or, absent, added as) `over`.
fn llama_meta<'a>(over: &[(&'a str, Meta<'a>)]) -> Vec<(&'a str, Meta<'a>)> {
    let mut m = vec![
        ("general.architecture", Meta::Str("llama")),
        ("llama.embedding_length", Meta::U32(H as u32)),
        ("llama.attention.head_count", Meta::U32(2)),
        ("llama.attention.head_count_kv", Meta::U32(1)),
        ("llama.feed_forward_length", Meta::U32(F as u32)),
        ("llama.block_count", Meta::U32(2)),
        ("llama.context_length", Meta::U32(64)),
        ("llama.attention.layer_norm_rms_epsilon", Meta::F32(1e-5)),
    ];
    for (k, v) in over {
        match m.iter_mut().find(|(mk, _)| mk == k) {
            Some(e) => e.1 = *v,
            None => m.push((k, *v)),
        }
    }
    m
}

/// The tiny llama's tensors (ggml dims, fastest first).
fn llama_tensors() -> Vec<(String, Vec<u64>)> {
    let mut t = vec![("token_embd.weight".to_string(), vec![H, V]), ("output_norm.weight".into(), vec![H])];
    for i in 0..2 {
        let shapes: [(&str, &[u64]); 9] = [
            ("attn_q", &[H, H]),
            ("attn_k", &[H, KV]),
            ("attn_v", &[H, KV]),
            ("attn_output", &[H, H]),
            ("ffn_gate", &[H, F]),
            ("ffn_up", &[H, F]),
            ("ffn_down", &[F, H]),
            ("attn_norm", &[H]),
            ("ffn_norm", &[H]),
        ];
        t.extend(shapes.iter().map(|(n, d)| (format!("blk.{i}.{n}.weight"), d.to_vec())));
    }
    t
}

/// A GGUF v3 file: metadata, then F32 tensors with their values (a tensor
/// whose dims ask for more values than [`values`] gives for `cap` stays short
/// on disk, so its data lies outside the file).
fn gguf(meta: &[(&str, Meta)], tensors: &[(String, Vec<u64>)]) -> Vec<u8> {
    let s = |out: &mut Vec<u8>, x: &str| {
        out.extend((x.len() as u64).to_le_bytes());
        out.extend(x.as_bytes());
    };
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend((tensors.len() as u64).to_le_bytes());
    b.extend((meta.len() as u64).to_le_bytes());
    for (k, v) in meta {
        s(&mut b, k);
        match v {
            Meta::U32(x) => b.extend(4u32.to_le_bytes().into_iter().chain(x.to_le_bytes())),
            Meta::U64(x) => b.extend(10u32.to_le_bytes().into_iter().chain(x.to_le_bytes())),
            Meta::F32(x) => b.extend(6u32.to_le_bytes().into_iter().chain(x.to_le_bytes())),
            Meta::Str(x) => {
                b.extend(8u32.to_le_bytes());
                s(&mut b, x);
            }
        }
    }
    let data: Vec<Vec<f32>> = tensors
        .iter()
        .map(|(n, d)| values(n, d.iter().try_fold(1u64, |a, &x| a.checked_mul(x)).unwrap_or(0).min(1 << 12)))
        .collect();
    let mut off = 0u64;
    for ((name, dims), vals) in tensors.iter().zip(&data) {
        s(&mut b, name);
        b.extend((dims.len() as u32).to_le_bytes());
        dims.iter().for_each(|d| b.extend(d.to_le_bytes()));
        b.extend(0u32.to_le_bytes());
        b.extend(off.to_le_bytes());
        off += (vals.len() as u64 * 4).next_multiple_of(32);
    }
    b.resize(b.len().next_multiple_of(32), 0);
    for vals in &data {
        vals.iter().for_each(|v| b.extend(v.to_le_bytes()));
        b.resize(b.len().next_multiple_of(32), 0);
    }
    b
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
    std::fs::write(path, bytes).expect("write safetensors");
}

/// The tiny llama as a Hugging Face directory (same shape as the GGUF).
fn hf_llama(dir: &Path, config: &str) {
    std::fs::create_dir_all(dir).expect("mkdir");
    let (h, kv, f, v) = (H as usize, KV as usize, F as usize, V as usize);
    let mut t = vec![
        ("model.embed_tokens.weight".to_string(), vec![v, h]),
        ("model.norm.weight".into(), vec![h]),
        ("lm_head.weight".into(), vec![v, h]),
    ];
    for i in 0..2 {
        let shapes: [(&str, Vec<usize>); 9] = [
            ("self_attn.q_proj", vec![h, h]),
            ("self_attn.k_proj", vec![kv, h]),
            ("self_attn.v_proj", vec![kv, h]),
            ("self_attn.o_proj", vec![h, h]),
            ("mlp.gate_proj", vec![f, h]),
            ("mlp.up_proj", vec![f, h]),
            ("mlp.down_proj", vec![h, f]),
            ("input_layernorm", vec![h]),
            ("post_attention_layernorm", vec![h]),
        ];
        t.extend(shapes.into_iter().map(|(n, s)| (format!("model.layers.{i}.{n}.weight"), s)));
    }
    safetensors(&dir.join("model.safetensors"), &t);
    write(dir, "config.json", config);
}

/// The tiny llama's config.json with `key` set to the raw JSON `value`.
fn llama_config(key: &str, value: &str) -> String {
    let mut c: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
        r#"{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 8,
            "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 16,
            "vocab_size": 32, "max_position_embeddings": 64, "rms_norm_eps": 1e-5}"#,
    )
    .expect("config");
    if !key.is_empty() {
        c.insert(key.into(), serde_json::from_str(value).expect("a JSON value"));
    }
    serde_json::to_string(&c).expect("json")
}

/// Asserts a quick refusal: exit 2, nothing on stdout, every needle on
/// stderr, no panic.
fn refused(what: &str, r: &Run, took: Duration, needles: &[&str]) {
    assert_eq!(r.code, 2, "{what}: exit code; stderr: {}", r.stderr);
    assert!(r.stdout.is_empty(), "{what}: nothing on stdout: {}", r.stdout);
    for n in needles {
        assert!(r.stderr.contains(n), "{what}: stderr lacks {n:?}: {}", r.stderr);
    }
    assert!(!r.stderr.contains("panicked"), "{what}: {}", r.stderr);
    assert!(took < QUICK, "{what}: refused after {took:?}");
}

/// Asserts the run went through: exit 0, every case ok.
fn ran(what: &str, r: &Run) {
    assert_eq!(r.code, 0, "{what}: {}", r.stderr);
    let v = json(r);
    for c in v["cases"].as_array().expect("cases") {
        assert_eq!(c["status"]["state"], "ok", "{what}: {}", c["status"]);
    }
}

#[test]
fn hostile_gguf_counts_exit_2_naming_the_key_under_1_gib() {
    let dir = scratch("hostile-gguf");
    let file = dir.join("m.gguf");
    std::fs::write(&file, gguf(&llama_meta(&[]), &llama_tensors())).unwrap();
    // The valid file runs under the same limit.
    let (r, _) = run_model(&file, "load,tg4");
    ran("valid", &r);
    let big = u64::MAX;
    let cases: [(&str, Meta, &str); 9] = [
        ("llama.block_count", Meta::U32(4_000_000_000), "`llama.block_count` is 4000000000"),
        ("llama.block_count", Meta::U64(big), "`llama.block_count` is 18446744073709551615"),
        ("llama.block_count", Meta::U32(3), "room for at most 2 blocks"),
        ("llama.embedding_length", Meta::U64(1 << 40), "`llama.embedding_length` is 1099511627776"),
        ("llama.attention.head_count", Meta::U32(u32::MAX), "`llama.attention.head_count` is 4294967295"),
        ("llama.attention.head_count_kv", Meta::U64(big), "`llama.attention.head_count_kv` is 1844"),
        ("llama.feed_forward_length", Meta::U64(1 << 40), "`llama.feed_forward_length` is 1099511627776"),
        ("llama.vocab_size", Meta::U64(1 << 40), "`llama.vocab_size` is 1099511627776"),
        ("llama.vocab_size", Meta::U32(33), "`llama.vocab_size` is 33"),
    ];
    for (key, value, want) in cases {
        std::fs::write(&file, gguf(&llama_meta(&[(key, value)]), &llama_tensors())).unwrap();
        let (r, took) = run_model(&file, "load");
        refused(key, &r, took, &["--model", "m.gguf", want]);
    }
    // Tensor dims: a vocabulary of 2^40 rows the file does not hold, and a
    // zero-width table claiming 2^62 rows (no bytes, so within the file).
    let mut t = llama_tensors();
    t[0].1 = vec![H, 1 << 40];
    std::fs::write(&file, gguf(&llama_meta(&[]), &t)).unwrap();
    let (r, took) = run_model(&file, "load");
    refused("dims", &r, took, &["tensor `token_embd.weight`", "lies outside the file"]);
    t[0].1 = vec![0, 1 << 62];
    std::fs::write(&file, gguf(&llama_meta(&[]), &t)).unwrap();
    let (r, took) = run_model(&file, "load");
    refused("zero dims", &r, took, &["`llama.embedding_length` is 8", "[0, 4611686018427387904]"]);
    // Counts of the format itself.
    let mut b = gguf(&llama_meta(&[]), &llama_tensors());
    b[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes());
    std::fs::write(&file, &b).unwrap();
    let (r, took) = run_model(&file, "load");
    refused("tensor count", &r, took, &["tensor count at byte 8 is 1152921504606846976"]);
    // A context length no tensor backs sizes nothing: the model runs.
    let meta = llama_meta(&[("llama.context_length", Meta::U64(big))]);
    std::fs::write(&file, gguf(&meta, &llama_tensors())).unwrap();
    let (r, _) = run_model(&file, "load,tg4");
    ran("context_length", &r);
}

#[test]
fn hostile_config_json_counts_exit_2_naming_the_key_under_1_gib() {
    let root = scratch("hostile-hf");
    let dir = root.join("llama");
    hf_llama(&dir, &llama_config("", ""));
    let (r, _) = run_model(&dir, "load,tg4");
    ran("valid", &r);
    let t = "1000000000000";
    let cases: [(&str, &str, &str); 7] = [
        ("num_hidden_layers", t, "`num_hidden_layers` is 1000000000000"),
        ("num_hidden_layers", "3", "room for at most 2 layers"),
        ("hidden_size", "1099511627776", "`hidden_size` is 1099511627776"),
        ("num_attention_heads", t, "`num_attention_heads` is 1000000000000"),
        ("num_key_value_heads", t, "`num_key_value_heads` is 1000000000000"),
        ("intermediate_size", t, "`intermediate_size` is 1000000000000"),
        ("vocab_size", t, "`vocab_size` is 1000000000000"),
    ];
    for (key, value, want) in cases {
        write(&dir, "config.json", &llama_config(key, value));
        let (r, took) = run_model(&dir, "load");
        refused(key, &r, took, &["--model", "config.json", want]);
    }
    // max_position_embeddings is backed by no tensor: it only bounds the
    // cases' positions, and RoPE's tables follow those.
    write(&dir, "config.json", &llama_config("max_position_embeddings", t));
    let (r, _) = run_model(&dir, "load,tg4");
    ran("max_position_embeddings", &r);
}

/// A tiny xorshift generator (seeded: every run tries the same files).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Asserts the run loaded or failed with an error: exit 0 (it ran), 2 (the
/// model was refused) or 3 (a case failed, e.g. its output did not verify),
/// never a panic or a signal.
fn no_panic(what: &str, r: &Run, took: Duration) {
    assert!([0, 2, 3].contains(&r.code), "{what}: exit {}: {}", r.code, r.stderr);
    assert!(!r.stderr.contains("panicked"), "{what}: {}", r.stderr);
    assert!(took < QUICK, "{what}: took {took:?}");
}

#[test]
fn mutated_models_load_or_fail_with_an_error_never_a_panic() {
    let root = scratch("hostile-fuzz");
    let file = root.join("m.gguf");
    let good = gguf(&llama_meta(&[]), &llama_tensors());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let extremes = [0u64, 1, 3, u32::MAX as u64, 1 << 32, 1 << 40, 1 << 62, u64::MAX];
    let (mut codes, mut runs) = (Vec::new(), 0);
    for i in 0..12 {
        let mut b = good.clone();
        let at = (rng.next() as usize) % (b.len() - 8);
        match i % 3 {
            0 => b[at..at + 8].copy_from_slice(&extremes[(rng.next() % 8) as usize].to_le_bytes()),
            1 => b.truncate(at),
            _ => (0..4).for_each(|_| {
                let j = (rng.next() as usize) % b.len();
                b[j] ^= 1 << (rng.next() % 8);
            }),
        }
        std::fs::write(&file, &b).unwrap();
        let (r, took) = run_model(&file, "load");
        no_panic(&format!("gguf mutation {i} at byte {at}"), &r, took);
        codes.push(r.code);
        runs += 1;
    }
    let dir = root.join("hf");
    hf_llama(&dir, &llama_config("", ""));
    let keys = ["num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size"];
    for i in 0..6 {
        let key = keys[(rng.next() % keys.len() as u64) as usize];
        let value = match i % 3 {
            0 => extremes[(rng.next() % 8) as usize].to_string(),
            1 => format!("{}", -(rng.next() as i64 % 1000).abs()),
            _ => "\"many\"".into(),
        };
        write(&dir, "config.json", &llama_config(key, &value));
        let (r, took) = run_model(&dir, "load");
        no_panic(&format!("config {key} = {value}"), &r, took);
        codes.push(r.code);
        runs += 1;
    }
    assert!(codes.contains(&2), "the mutations should include refusals: {codes:?} of {runs}");
}
