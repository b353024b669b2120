//! A [`Model`] from a Hugging Face directory: `config.json` (its
//! `model_type`: `llama`, `gpt2` or `bert`) and `*.safetensors` (every file
//! of the directory, memory-mapped; the header is read first, so a model
//! over the memory budget is refused before a page is touched), and an
//! optional `tokenizer.json` (the tokenizers crate) for the prompts and the
//! `tokenize` case (the inference suite's `model_file_tokenize.rs`).
//!
//! Tensors are read by their Hugging Face names into the catalogue's
//! ([`ModelConfig::weights`], [`Model::build`]): LLaMA's `model.layers.N.
//! self_attn.q_proj` (already in the rotate-half order tfbench's RoPE
//! uses), GPT-2's Conv1D `c_attn` (`[in, 3 x out]`, transposed and split
//! into Q, K and V), BERT's `encoder.layer.N.attention.self.query`. The
//! matrices stay in the checkpoint's own precision (F32, F16 or BF16).

use super::gguf::FileInfo;
use crate::model::config::{Arch, ModelConfig};
use crate::model::linear::DType;
use crate::model::transformer::{Model, Tensor};
use anyhow::{Context, Result, bail};
use half::{bf16, f16};
use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// `model_type`s this loader runs.
pub const MODEL_TYPES: &[&str] = &["llama", "gpt2", "bert"];

/// An open directory: its config and its memory-mapped safetensors files.
pub struct HfDir {
    /// The directory.
    pub dir: PathBuf,
    config: Value,
    maps: Vec<(PathBuf, memmap2::Mmap)>,
}

fn id_safe(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '-' }).collect()
}

impl HfDir {
    /// Opens `dir` and describes its model: `config.json` and the
    /// safetensors headers only, checked against `budget` bytes.
    pub fn open(dir: &Path, budget: Option<u64>) -> Result<(Self, FileInfo)> {
        let d = dir.display();
        let cfg_path = dir.join("config.json");
        if !cfg_path.is_file() {
            bail!(
                "{d} has no config.json: a Hugging Face model directory needs config.json and *.safetensors"
            );
        }
        let text = std::fs::read_to_string(&cfg_path)
            .with_context(|| format!("cannot read {}", cfg_path.display()))?;
        let config: Value =
            serde_json::from_str(&text).with_context(|| format!("{} is not JSON", cfg_path.display()))?;
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .with_context(|| format!("cannot list {d}"))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        files.sort();
        if files.is_empty() {
            bail!("{d} has no *.safetensors file (tfbench reads Hugging Face weights in safetensors only)");
        }
        let bytes: u64 = files.iter().map(|f| f.metadata().map_or(0, |m| m.len())).sum();
        if let Some(b) = budget
            && bytes > b
        {
            bail!(
                "model directory {d}: its safetensors files hold {:.1} MiB but the memory budget is {:.1} MiB; nothing was loaded",
                bytes as f64 / 1048576.0,
                b as f64 / 1048576.0
            );
        }
        let mut maps = Vec::new();
        for f in files {
            let file = std::fs::File::open(&f).with_context(|| format!("cannot open {}", f.display()))?;
            // SAFETY: read-only map of a file nobody is expected to change
            // while the benchmark runs (as the GGUF reader does).
            let m = unsafe { memmap2::Mmap::map(&file) }
                .with_context(|| format!("cannot map {}", f.display()))?;
            SafeTensors::deserialize(&m)
                .map_err(|e| anyhow::anyhow!("{}: not a safetensors file: {e}", f.display()))?;
            maps.push((f, m));
        }
        let hf = Self { dir: dir.to_path_buf(), config, maps };
        let info = hf.describe(&cfg_path)?;
        hf.check_names(&info)?;
        Ok((hf, info))
    }

    /// Every tensor the model needs is in some file (names only: a missing
    /// one is a usage error before anything runs).
    fn check_names(&self, info: &FileInfo) -> Result<()> {
        let sts: Vec<SafeTensors> =
            self.maps.iter().map(|(_, m)| SafeTensors::deserialize(m)).collect::<Result<_, _>>()?;
        let has = |n: &str| sts.iter().any(|s| s.tensor(n).is_ok());
        let tied = self.config["tie_word_embeddings"].as_bool().unwrap_or(false);
        let prefix = self.gpt2_prefix(&sts, info.cfg.arch);
        for w in info.cfg.weights() {
            let (hf, _) = hf_name(info.cfg.arch, &w.name, &info.cfg, prefix);
            let tied_head = w.name == "lm_head.weight" && tied && has("model.embed_tokens.weight");
            if !has(&hf) && !tied_head {
                bail!(
                    "model directory {}: no tensor `{hf}` (tfbench's `{}`) in its safetensors files",
                    self.dir.display(),
                    w.name
                );
            }
        }
        Ok(())
    }

    /// GPT-2 checkpoints name tensors with or without `transformer.`.
    fn gpt2_prefix(&self, sts: &[SafeTensors], arch: Arch) -> &'static str {
        if arch == Arch::Gpt2 && sts.iter().any(|s| s.tensor("transformer.wte.weight").is_ok()) {
            "transformer."
        } else {
            ""
        }
    }

    fn describe(&self, cfg_path: &Path) -> Result<FileInfo> {
        let v = &self.config;
        let at = cfg_path.display();
        let sts: Vec<SafeTensors> = self
            .maps
            .iter()
            .map(|(_, m)| SafeTensors::deserialize(m))
            .collect::<Result<_, _>>()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let num = |k: &str| -> Result<usize> {
            v[k].as_u64()
                .map(|n| n as usize)
                .with_context(|| format!("{at}: `{k}` is missing or not an integer"))
        };
        let ty = v["model_type"].as_str().unwrap_or("(none)");
        let keys = Keys::of(ty);
        let mut cfg = match ty {
            "llama" => {
                if !v["rope_scaling"].is_null() {
                    bail!("{at}: `rope_scaling` is not supported");
                }
                let heads = num("num_attention_heads")?;
                ModelConfig {
                    name: String::new(),
                    arch: Arch::Llama,
                    layers: num("num_hidden_layers")?,
                    hidden: num("hidden_size")?,
                    heads,
                    kv_heads: v["num_key_value_heads"].as_u64().map_or(heads, |n| n as usize),
                    ffn: num("intermediate_size")?,
                    vocab: num("vocab_size")?,
                    max_positions: num("max_position_embeddings")?,
                    type_vocab: 0,
                    norm_eps: v["rms_norm_eps"].as_f64().unwrap_or(1e-6) as f32,
                    rope_theta: v["rope_theta"].as_f64().unwrap_or(10000.0) as f32,
                    variant: Default::default(),
                }
            }
            "gpt2" => {
                let act = v["activation_function"].as_str().unwrap_or("gelu_new");
                if !["gelu_new", "gelu_pytorch_tanh"].contains(&act) {
                    bail!(
                        "{at}: activation_function `{act}` is not supported; supported: gelu_new, gelu_pytorch_tanh"
                    );
                }
                let hidden = num("n_embd")?;
                let heads = num("n_head")?;
                ModelConfig {
                    name: String::new(),
                    arch: Arch::Gpt2,
                    layers: num("n_layer")?,
                    hidden,
                    heads,
                    kv_heads: heads,
                    ffn: v["n_inner"].as_u64().map_or(hidden.saturating_mul(4), |n| n as usize),
                    vocab: num("vocab_size")?,
                    max_positions: num("n_positions")?,
                    type_vocab: 0,
                    norm_eps: v["layer_norm_epsilon"].as_f64().unwrap_or(1e-5) as f32,
                    rope_theta: 0.0,
                    variant: Default::default(),
                }
            }
            "bert" => crate::model::weights::bert_config(&self.dir.join("config.json"))?,
            other => bail!(
                "{at}: model_type `{other}` is not one tfbench runs; supported: {}",
                MODEL_TYPES.join(", ")
            ),
        };
        self.check_counts(&sts, &cfg, &keys, &at.to_string())?;
        cfg.validate()?;
        let (mut params, mut bytes, mut by_type) = (0u64, 0u64, Vec::<(Dtype, u64)>::new());
        for st in &sts {
            for (_, t) in st.tensors() {
                let n: u64 = t.shape().iter().product::<usize>() as u64;
                params += n;
                bytes += t.data().len() as u64;
                match by_type.iter_mut().find(|e| e.0 == t.dtype()) {
                    Some(e) => e.1 += t.data().len() as u64,
                    None => by_type.push((t.dtype(), t.data().len() as u64)),
                }
            }
        }
        let ty =
            by_type.iter().max_by_key(|e| e.1).map_or("f32".into(), |e| format!("{:?}", e.0).to_lowercase());
        let name =
            id_safe(&self.dir.file_name().map_or("model".into(), |n| n.to_string_lossy().into_owned()));
        cfg.name = format!("{name}.{ty}");
        Ok(FileInfo { cfg, name, ty, params, bytes })
    }

    /// Checks config.json's counts against the tensors the safetensors files
    /// hold, before anything is built from them (tensor names, shapes,
    /// buffers): the heads divide the width, the layers fit in the tensors
    /// present, the embedding's shape is `[vocab, hidden]`, layer 0's FFN
    /// is `ffn` wide, learned position and segment tables have the rows the
    /// config says. A count the files cannot back is an error naming the
    /// key and its value (`num_hidden_layers: 10^12` made the loader list
    /// 10^13 tensor names before checking one). A llama's
    /// `max_position_embeddings` is backed by no tensor and sizes nothing:
    /// [`HfDir::load`] builds RoPE tables for the cases' own positions.
    fn check_counts(&self, sts: &[SafeTensors], cfg: &ModelConfig, keys: &Keys, at: &str) -> Result<()> {
        let (hk, h) = (keys.hidden, cfg.hidden);
        let prefix = self.gpt2_prefix(sts, cfg.arch);
        // Each tensor's shape names the counts it backs (rows, columns).
        let shape = |ours: &str, want: [(&str, usize); 2]| -> Result<()> {
            let (hf, _) = hf_name(cfg.arch, ours, cfg, prefix);
            let t = sts.iter().find_map(|s| s.tensor(&hf).ok()).ok_or_else(|| {
                anyhow::anyhow!(
                    "model directory {}: no tensor `{hf}` (tfbench's `{ours}`) in its safetensors files",
                    self.dir.display()
                )
            })?;
            let s = t.shape();
            if let Some((i, (k, n))) = want.iter().enumerate().find(|(i, (_, n))| s.len() != 2 || s[*i] != *n)
            {
                let axis = if i == 0 { "rows" } else { "columns" };
                bail!("{at}: `{k}` is {n}, but tensor `{hf}` has shape {s:?} ({axis}: `{k}`)");
            }
            Ok(())
        };
        shape("embed.tokens", [(keys.vocab, cfg.vocab), (hk, h)])?;
        if cfg.arch != Arch::Llama {
            shape("embed.positions", [(keys.positions, cfg.max_positions), (hk, h)])?;
        }
        if cfg.arch == Arch::Bert {
            shape("embed.types", [("type_vocab_size", cfg.type_vocab), (hk, h)])?;
        }
        if cfg.heads == 0 || !h.is_multiple_of(cfg.heads) {
            bail!("{at}: `{}` is {}: it must divide `{hk}` ({h})", keys.heads, cfg.heads);
        }
        if cfg.kv_heads == 0 || !cfg.heads.is_multiple_of(cfg.kv_heads) {
            bail!(
                "{at}: `{}` is {}: it must divide `{}` ({})",
                keys.kv_heads,
                cfg.kv_heads,
                keys.heads,
                cfg.heads
            );
        }
        // The files' tensors per layer (GPT-2's Q, K and V share `c_attn`).
        let mut one = cfg.clone();
        one.layers = 1;
        let per = one
            .weights()
            .iter()
            .filter(|w| w.name.starts_with("layers.0."))
            .map(|w| hf_name(cfg.arch, &w.name, cfg, prefix).0)
            .collect::<std::collections::HashSet<_>>()
            .len();
        let present: usize = sts.iter().map(SafeTensors::len).sum();
        if cfg.layers == 0 || cfg.layers.checked_mul(per).is_none_or(|n| n > present) {
            bail!(
                "{at}: `{}` is {}, but its safetensors files hold {present} tensors: room for at most {} layers of {per} tensors",
                keys.layers,
                cfg.layers,
                present / per
            );
        }
        let up = [(keys.ffn, cfg.ffn), (hk, h)];
        // GPT-2's Conv1D stores `[in, out]`.
        shape("layers.0.ffn.up.weight", if cfg.arch == Arch::Gpt2 { [up[1], up[0]] } else { up })?;
        Ok(())
    }

    /// The storage of the matrices: the checkpoint's dominant precision.
    fn dtype(info: &FileInfo) -> DType {
        match info.ty.as_str() {
            "f16" => DType::F16,
            "bf16" => DType::BF16,
            _ => DType::F32,
        }
    }

    /// Builds the model `open` described; `positions` sizes a llama's RoPE
    /// tables (the longest sequence the cases will run), as for GGUF files.
    pub fn load(&self, info: &FileInfo, positions: usize) -> Result<Model> {
        let sts: Vec<SafeTensors> =
            self.maps.iter().map(|(_, m)| SafeTensors::deserialize(m)).collect::<Result<_, _>>()?;
        let d = self.dir.display();
        let find = |name: &str| -> Result<(usize, safetensors::tensor::TensorView<'_>)> {
            for (i, st) in sts.iter().enumerate() {
                if let Ok(t) = st.tensor(name) {
                    return Ok((i, t));
                }
            }
            bail!("{d}: no tensor `{name}` in its safetensors files")
        };
        let cfg = &info.cfg;
        let arch = cfg.arch;
        let prefix = self.gpt2_prefix(&sts, arch);
        let tied = self.config["tie_word_embeddings"].as_bool().unwrap_or(false);
        let mut get = |ours: &str, shape: &[usize], _stored: bool| -> Result<Tensor> {
            let (hf, part) = hf_name(arch, ours, cfg, prefix);
            // A tied LLaMA (tie_word_embeddings) has no lm_head: the
            // embedding is the head (held twice; the catalogue keeps one).
            let found = match find(&hf) {
                Err(_) if ours == "lm_head.weight" && tied => find("model.embed_tokens.weight"),
                r => r,
            };
            let (_, t) = found.map_err(|e| anyhow::anyhow!("{e:#} (tfbench's `{ours}`)"))?;
            let vals = to_f32(&t).map_err(|e| anyhow::anyhow!("{d}: `{hf}`: {e}"))?;
            let vals = match part {
                Part::Whole => vals,
                Part::Conv { inp, out, start, rows } => {
                    if t.shape() != [inp, out] && t.shape() != [out] {
                        bail!("{d}: `{hf}` has shape {:?}, expected [{inp}, {out}]", t.shape());
                    }
                    if t.shape().len() == 1 {
                        vals[start..start + rows].to_vec()
                    } else {
                        // Conv1D `[in, out]`: row j of ours is column start+j.
                        let mut m = vec![0.0f32; rows * inp];
                        for j in 0..rows {
                            for i in 0..inp {
                                m[j * inp + i] = vals[i * out + start + j];
                            }
                        }
                        m
                    }
                }
            };
            if Some(vals.len()) != shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) {
                bail!("{d}: `{hf}` has shape {:?}, tfbench's `{ours}` needs {shape:?}", t.shape());
            }
            Ok(Tensor::F32(vals))
        };
        // `max_position_embeddings` only bounds the positions: the tables
        // are built for those the cases run, never for the config's count.
        let mut built = cfg.clone();
        if arch == Arch::Llama {
            built.max_positions = positions.clamp(1, cfg.max_positions);
        }
        let mut m = Model::build(&built, Self::dtype(info), &mut get)?;
        m.cfg = cfg.clone();
        Ok(m)
    }

    /// The directory's `tokenizer.json`, when it has one.
    pub fn tokenizer(&self) -> Result<tokenizers::Tokenizer> {
        let p = self.dir.join("tokenizer.json");
        if !p.is_file() {
            bail!("{} has no tokenizer.json", self.dir.display());
        }
        tokenizers::Tokenizer::from_file(&p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))
    }
}

/// The config.json keys a model type's counts come from, for errors.
struct Keys {
    layers: &'static str,
    hidden: &'static str,
    heads: &'static str,
    kv_heads: &'static str,
    ffn: &'static str,
    vocab: &'static str,
    positions: &'static str,
}

impl Keys {
    fn of(model_type: &str) -> Self {
        match model_type {
            "gpt2" => Self {
                layers: "n_layer",
                hidden: "n_embd",
                heads: "n_head",
                kv_heads: "n_head",
                ffn: "n_inner",
                vocab: "vocab_size",
                positions: "n_positions",
            },
            _ => Self {
                layers: "num_hidden_layers",
                hidden: "hidden_size",
                heads: "num_attention_heads",
                kv_heads: if model_type == "llama" { "num_key_value_heads" } else { "num_attention_heads" },
                ffn: "intermediate_size",
                vocab: "vocab_size",
                positions: "max_position_embeddings",
            },
        }
    }
}

/// Which part of a Hugging Face tensor one of ours is.
enum Part {
    Whole,
    /// Rows `start..start+rows` of the transposed Conv1D `[inp, out]` (or
    /// the same values of its bias).
    Conv {
        inp: usize,
        out: usize,
        start: usize,
        rows: usize,
    },
}

/// The Hugging Face name (and part) of a catalogue tensor.
fn hf_name(arch: Arch, ours: &str, cfg: &ModelConfig, prefix: &str) -> (String, Part) {
    let parts: Vec<&str> = ours.splitn(3, '.').collect();
    let (layer, rest) = (parts.get(1).copied().unwrap_or(""), parts.get(2).copied().unwrap_or(""));
    match arch {
        Arch::Bert => (crate::model::weights::hf_bert_name(ours), Part::Whole),
        Arch::Llama => {
            let fixed = [
                ("embed.tokens", "model.embed_tokens.weight"),
                ("final_norm.weight", "model.norm.weight"),
                ("lm_head.weight", "lm_head.weight"),
            ];
            if let Some((_, hf)) = fixed.iter().find(|(o, _)| *o == ours) {
                return (hf.to_string(), Part::Whole);
            }
            let map = [
                ("attn.q.", "self_attn.q_proj."),
                ("attn.k.", "self_attn.k_proj."),
                ("attn.v.", "self_attn.v_proj."),
                ("attn.o.", "self_attn.o_proj."),
                ("ffn.gate.", "mlp.gate_proj."),
                ("ffn.up.", "mlp.up_proj."),
                ("ffn.down.", "mlp.down_proj."),
                ("attn_norm.", "input_layernorm."),
                ("ffn_norm.", "post_attention_layernorm."),
            ];
            let hf = map.iter().find_map(|(o, h)| rest.strip_prefix(o).map(|s| format!("{h}{s}")));
            (format!("model.layers.{layer}.{}", hf.unwrap_or_else(|| rest.to_string())), Part::Whole)
        }
        Arch::Gpt2 => {
            let fixed = [
                ("embed.tokens", "wte.weight"),
                ("embed.positions", "wpe.weight"),
                ("final_norm.weight", "ln_f.weight"),
                ("final_norm.bias", "ln_f.bias"),
            ];
            if let Some((_, hf)) = fixed.iter().find(|(o, _)| *o == ours) {
                return (format!("{prefix}{hf}"), Part::Whole);
            }
            let (h, f) = (cfg.hidden, cfg.ffn);
            let (what, suffix) = rest.rsplit_once('.').unwrap_or((rest, ""));
            let (hf, part) = match what {
                "attn.q" => ("attn.c_attn", Part::Conv { inp: h, out: 3 * h, start: 0, rows: h }),
                "attn.k" => ("attn.c_attn", Part::Conv { inp: h, out: 3 * h, start: h, rows: h }),
                "attn.v" => ("attn.c_attn", Part::Conv { inp: h, out: 3 * h, start: 2 * h, rows: h }),
                "attn.o" => ("attn.c_proj", Part::Conv { inp: h, out: h, start: 0, rows: h }),
                "ffn.up" => ("mlp.c_fc", Part::Conv { inp: h, out: f, start: 0, rows: f }),
                "ffn.down" => ("mlp.c_proj", Part::Conv { inp: f, out: h, start: 0, rows: h }),
                "norm1" => ("ln_1", Part::Whole),
                "norm2" => ("ln_2", Part::Whole),
                other => (other, Part::Whole),
            };
            (format!("{prefix}h.{layer}.{hf}.{suffix}"), part)
        }
    }
}

/// A tensor's values as f32 (F32, F16 or BF16 checkpoints).
fn to_f32(t: &safetensors::tensor::TensorView<'_>) -> Result<Vec<f32>> {
    let data = t.data();
    Ok(match t.dtype() {
        Dtype::F32 => data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        Dtype::F16 => data.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        Dtype::BF16 => data.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        other => bail!("dtype {other:?} is not supported; supported: F32, F16, BF16"),
    })
}
