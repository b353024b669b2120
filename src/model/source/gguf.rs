//! A [`Model`] from a GGUF file: the `llama` architecture read from the
//! file's own metadata (grouped-query attention, RoPE base and dimension,
//! RMSNorm epsilon, SwiGLU, tied or untied output), each matrix kept in the
//! file's type through the kernel library's [`QMatrix`] (codes copied, never
//! dequantized to f32 for the timed path). `gpt2` and `bert` are read with
//! the same [`Loader`] in `gguf_arch.rs`.

use crate::kernels::quant::{QMatrix, WeightFormat, ggml_row_bytes};
use crate::model::config::{Arch, ModelConfig};
use crate::model::gguf::{GgufFile, Header, TensorInfo, Value};
use crate::model::linear::{DType, Linear, Weights};
use crate::model::ops::Rope;
use crate::model::transformer::{Block, Model, Norm};
use anyhow::{Result, bail};
use std::collections::{HashMap, HashSet};

/// Architectures this loader runs.
pub const ARCHITECTURES: &[&str] = &["llama", "gpt2", "bert"];

/// What the header says about a model, checked before anything is loaded.
#[derive(Debug, Clone)]
pub struct FileInfo {
    /// The shape from the metadata.
    pub cfg: ModelConfig,
    /// `general.name` (else the file stem), safe for a case id.
    pub name: String,
    /// The type of most weight bytes (`q4_1`), as llama-bench's `type` column.
    pub ty: String,
    /// Parameters (values in all tensors).
    pub params: u64,
    /// Bytes of tensor data.
    pub bytes: u64,
}

fn meta_u64(h: &Header, key: &str) -> Result<u64> {
    h.get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| anyhow::anyhow!("metadata `{key}` is missing or not an integer"))
}

fn meta_f64(h: &Header, key: &str) -> Result<f64> {
    h.get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| anyhow::anyhow!("metadata `{key}` is missing or not a float"))
}

/// Keeps `[A-Za-z0-9._-]` so the name can sit in a case id and a file name.
fn id_safe(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '-' }).collect()
}

/// The kernels' format for a tensor, or an error naming it and its type.
pub fn format_of(t: &TensorInfo) -> Result<WeightFormat> {
    Ok(match t.ty.name {
        "F32" => WeightFormat::F32,
        "F16" => WeightFormat::F16,
        "BF16" => WeightFormat::Bf16,
        "Q8_0" => WeightFormat::Q8_0,
        "Q4_0" => WeightFormat::Q4_0,
        "Q4_1" => WeightFormat::Q4_1,
        "Q4_K" => WeightFormat::Q4K,
        "Q6_K" => WeightFormat::Q6K,
        other => bail!(
            "tensor `{}` is {other}, a type tfbench does not run; supported: {}",
            t.name,
            crate::model::gguf::SUPPORTED.join(", ")
        ),
    })
}

/// `v` as a usize (every count here is bounded by a tensor's dims first,
/// which the parser keeps within the file; a context length is only ever
/// compared against).
fn size(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// The dims of tensor `name`, or an error naming it.
fn dims<'h>(h: &'h Header, name: &str) -> Result<&'h [u64]> {
    h.tensor(name).map(|t| t.dims.as_slice()).ok_or_else(|| anyhow::anyhow!("no tensor `{name}`"))
}

/// The model's shape from the header's counts, each checked against the
/// tensors the file holds before anything is built from it: the embedding
/// width and vocabulary are `token_embd.weight`'s dims, the heads divide
/// the width, the blocks fit in the `blk.*` tensors present, the
/// feed-forward width is `blk.0.ffn_up.weight`'s, learned position and
/// segment tables bound theirs. A count the file cannot back is an error
/// naming its key and value (a 4 KB file saying 4x10^9 blocks made the
/// loader list 36x10^9 tensor names before checking one). A llama's
/// `context_length` is backed by no tensor and sizes nothing: RoPE's tables
/// follow the cases' own positions, which it only bounds.
fn shape(h: &Header, arch: &str, family: Arch) -> Result<ModelConfig> {
    let k = |s: &str| format!("{arch}.{s}");
    let emb = dims(h, "token_embd.weight")?;
    let (hk, bk, fk) = (k("embedding_length"), k("block_count"), k("feed_forward_length"));
    let hidden = meta_u64(h, &hk)?;
    if emb.len() != 2 || emb[0] != hidden || emb.contains(&0) {
        bail!(
            "metadata `{hk}` is {hidden}, but tensor `token_embd.weight` has dims {emb:?} (ggml's [{hk}, vocabulary], neither 0)"
        );
    }
    let vocab = emb[1];
    if let Some(v) = h.get(&k("vocab_size")).and_then(Value::as_u64)
        && v != vocab
    {
        bail!("metadata `{arch}.vocab_size` is {v}, but tensor `token_embd.weight` has dims {emb:?}");
    }
    let (qk, kvk) = (k("attention.head_count"), k("attention.head_count_kv"));
    let heads = meta_u64(h, &qk)?;
    if heads == 0 || !hidden.is_multiple_of(heads) {
        bail!("metadata `{qk}` is {heads}: it must divide `{hk}` ({hidden})");
    }
    let kv_heads = h.get(&kvk).and_then(Value::as_u64).unwrap_or(heads);
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        bail!("metadata `{kvk}` is {kv_heads}: it must divide `{qk}` ({heads})");
    }
    // Named first: a file missing one gets its name, not a block count error.
    if let Some(n) = super::gguf_arch::outside_blocks(family).into_iter().find(|n| h.tensor(n).is_none()) {
        bail!("no tensor `{n}`, which the `{arch}` architecture needs");
    }
    let blocks = meta_u64(h, &bk)?;
    let per = super::gguf_arch::block_tensors(family, 0, |_| true).len() as u64;
    let present = h.tensors.iter().filter(|t| t.name.starts_with("blk.")).count() as u64;
    if blocks == 0 || blocks.checked_mul(per).is_none_or(|n| n > present) {
        bail!(
            "metadata `{bk}` is {blocks}, but the file holds {present} block tensors (`blk.*`): room for at most {} blocks of at least {per} tensors",
            present / per
        );
    }
    let ffn = meta_u64(h, &fk)?;
    // A missing blk.0.ffn_up is named with the other required tensors.
    if let Some(up) = h.tensor("blk.0.ffn_up.weight")
        && (up.dims.get(1) != Some(&ffn) || ffn == 0)
    {
        bail!(
            "metadata `{fk}` is {ffn}, but tensor `blk.0.ffn_up.weight` has dims {:?} (ggml's [{hk}, {fk}])",
            up.dims
        );
    }
    let mut max_positions = meta_u64(h, &k("context_length"))?;
    // Learned tables: position rows bound the context; row 0 of the segment table is added.
    let table = |name: &str| -> Result<u64> {
        let t = dims(h, name)?;
        if t.len() != 2 || t[0] != hidden {
            bail!("tensor `{name}` has dims {t:?}, expected [{hidden}, rows] (`{hk}` is {hidden})");
        }
        Ok(t[1])
    };
    if family != Arch::Llama {
        max_positions = max_positions.min(table("position_embd.weight")?);
    }
    let type_vocab = match h.tensor("token_types.weight") {
        Some(_) if family == Arch::Bert => table("token_types.weight")?,
        _ => 0,
    };
    let eps_key = if family == Arch::Llama { "layer_norm_rms_epsilon" } else { "layer_norm_epsilon" };
    Ok(ModelConfig {
        name: String::new(),
        arch: family,
        layers: size(blocks),
        hidden: size(hidden),
        heads: size(heads),
        kv_heads: size(kv_heads),
        ffn: size(ffn),
        vocab: size(vocab),
        max_positions: size(max_positions),
        type_vocab: size(type_vocab),
        norm_eps: meta_f64(h, &k(&format!("attention.{eps_key}")))? as f32,
        rope_theta: h.get(&k("rope.freq_base")).and_then(Value::as_f64).unwrap_or(10000.0) as f32,
    })
}

/// Reads and checks the header's model description: architecture, shape
/// (every count against the tensors present, [`shape`]), every tensor's
/// type. Nothing is loaded.
pub fn describe(file: &GgufFile) -> Result<FileInfo> {
    let h = &file.header;
    let arch = h.get("general.architecture").and_then(Value::as_str).unwrap_or("(none)");
    let family = match arch {
        "llama" => Arch::Llama,
        "gpt2" => Arch::Gpt2,
        "bert" => Arch::Bert,
        _ => bail!(
            "architecture `{arch}` is not one tfbench runs from GGUF; supported: {}",
            ARCHITECTURES.join(", ")
        ),
    };
    let k = |s: &str| format!("{arch}.{s}");
    let llama = family == Arch::Llama;
    let cfg = shape(h, arch, family)?;
    cfg.validate()?;
    if family == Arch::Bert && matches!(h.get(&k("attention.causal")), Some(Value::Bool(true))) {
        bail!("a causal `bert` (bert.attention.causal = true) is not supported");
    }
    if let Some(d) = h.get(&k("rope.dimension_count")).and_then(Value::as_u64)
        && llama
        && d != cfg.head_dim() as u64
    {
        bail!(
            "partial rotary embeddings (rope.dimension_count {d} of head dimension {}) are not supported",
            cfg.head_dim()
        );
    }
    if h.get(&k("rope.scaling.type")).and_then(Value::as_str).is_some_and(|s| s != "none") {
        bail!("RoPE scaling ({arch}.rope.scaling.type) is not supported");
    }
    // Every tensor the architecture needs must be there, and every tensor's
    // type is checked up front, so the error names the first missing or
    // unsupported one before anything is loaded. The block count is bounded
    // by the tensors present ([`shape`]), so the list is too.
    let names: HashSet<&str> = h.tensors.iter().map(|t| t.name.as_str()).collect();
    for n in super::gguf_arch::required(&cfg, |n| names.contains(n)) {
        if !names.contains(n.as_str()) {
            // A block's tensor: the count may be what is wrong.
            let count = if n.starts_with("blk.") {
                format!(" (`{arch}.block_count` is {})", cfg.layers)
            } else {
                String::new()
            };
            bail!("no tensor `{n}`, which the `{arch}` architecture needs{count}");
        }
    }
    let mut by_type: Vec<(&str, u64)> = Vec::new();
    for t in &h.tensors {
        format_of(t)?;
        match by_type.iter_mut().find(|(n, _)| *n == t.ty.name) {
            Some(e) => e.1 = e.1.saturating_add(t.bytes),
            None => by_type.push((t.ty.name, t.bytes)),
        }
    }
    let ty = by_type.iter().max_by_key(|e| e.1).map_or("f32".into(), |e| e.0.to_ascii_lowercase());
    let stem = file.path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let name = id_safe(h.get("general.name").and_then(Value::as_str).unwrap_or(&stem));
    let mut cfg = cfg;
    cfg.name = format!("{name}.{ty}");
    Ok(FileInfo { cfg, name, ty, params: h.params(), bytes: h.data_bytes() })
}

/// Undoes llama.cpp's convert-time permutation of Q and K rows (ggml's
/// rotation pairs adjacent values; tfbench's [`Rope`] pairs `i` with
/// `i + head_dim/2`, as Hugging Face does): row `h*hd + 2i + j` of the file
/// becomes row `h*hd + j*hd/2 + i`. A row move, exact for every format.
fn unpermute_rows(bytes: &[u8], rows: usize, heads: usize) -> Vec<u8> {
    let rb = bytes.len() / rows;
    let hd = rows / heads;
    let mut out = vec![0u8; bytes.len()];
    for h in 0..heads {
        for i in 0..hd / 2 {
            for j in 0..2 {
                let (src, dst) = (h * hd + 2 * i + j, h * hd + j * hd / 2 + i);
                out[dst * rb..(dst + 1) * rb].copy_from_slice(&bytes[src * rb..(src + 1) * rb]);
            }
        }
    }
    out
}

/// Reads named tensors of a GGUF file into the model's parts.
pub(super) struct Loader<'a> {
    /// The open file.
    pub file: &'a GgufFile,
    /// The header's tensors by name (a model looks up every one of them).
    index: HashMap<&'a str, &'a TensorInfo>,
}

impl<'a> Loader<'a> {
    /// A loader of `file`'s tensors.
    pub fn new(file: &'a GgufFile) -> Self {
        Self { file, index: file.header.tensors.iter().map(|t| (t.name.as_str(), t)).collect() }
    }

    /// The tensor's header entry, or an error naming it.
    pub fn tensor(&self, name: &str) -> Result<&'a TensorInfo> {
        self.index.get(name).copied().ok_or_else(|| anyhow::anyhow!("no tensor `{name}`"))
    }

    /// Whether the file holds a tensor of that name.
    pub fn has(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    /// A tensor of `len` values as f32 (norms, biases, position tables).
    pub fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>> {
        let t = self.tensor(name)?;
        if t.numel() != len as u64 {
            bail!("tensor `{name}` has {} values, expected {len}", t.numel());
        }
        let q = QMatrix::from_ggml(format_of(t)?, self.file.data(t), 1, len)?;
        Ok(q.dequantize())
    }

    fn norm(&self, name: &str, len: usize) -> Result<Norm> {
        Ok(Norm { w: self.vector(name, len)?, b: None })
    }

    /// A `[rows, cols]` matrix (ggml dims `[cols, rows]`); `heads` un-permutes Q/K.
    pub fn linear(&self, name: &str, rows: usize, cols: usize, heads: Option<usize>) -> Result<Linear> {
        let t = self.tensor(name)?;
        if t.dims != [cols as u64, rows as u64] {
            bail!("tensor `{name}` has dims {:?}, expected [{cols}, {rows}]", t.dims);
        }
        let raw = self.file.data(t);
        let permuted;
        let bytes = match heads {
            Some(h) => {
                permuted = unpermute_rows(raw, rows, h);
                &permuted[..]
            }
            None => raw,
        };
        self.matrix(name, format_of(t)?, bytes, rows, cols)
    }

    /// Rows `start..start + rows` of a matrix of `total` rows (a fused QKV's
    /// part): a slice of whole rows, exact for every row-wise format.
    pub fn rows(&self, name: &str, total: usize, cols: usize, start: usize, rows: usize) -> Result<Linear> {
        let t = self.tensor(name)?;
        if t.dims != [cols as u64, total as u64] || start + rows > total {
            bail!("tensor `{name}` has dims {:?}, expected [{cols}, {total}]", t.dims);
        }
        let f = format_of(t)?;
        let rb = ggml_row_bytes(f, cols).map_err(|e| anyhow::anyhow!("tensor `{name}`: {e}"))?;
        self.matrix(name, f, &self.file.data(t)[start * rb..(start + rows) * rb], rows, cols)
    }

    fn matrix(&self, name: &str, f: WeightFormat, bytes: &[u8], rows: usize, cols: usize) -> Result<Linear> {
        debug_assert_eq!(bytes.len(), ggml_row_bytes(f, cols).unwrap_or(0) * rows);
        let w = match f {
            // f32 matrices take the packed f32 GEMM, as the random-weight models do.
            WeightFormat::F32 => Weights::from_f32(
                QMatrix::from_ggml(f, bytes, rows, cols)?.dequantize(),
                rows,
                cols,
                DType::F32,
            )?,
            _ => Weights::Quant(
                QMatrix::from_ggml(f, bytes, rows, cols)
                    .map_err(|e| anyhow::anyhow!("tensor `{name}`: {e}"))?,
            ),
        };
        Ok(Linear { out: rows, inp: cols, w, bias: None })
    }
}

/// Loads the model `describe` accepted; `positions` sizes the RoPE tables
/// (the longest sequence the cases will run, at most the context length).
pub fn load(file: &GgufFile, info: &FileInfo, positions: usize) -> Result<Model> {
    let cfg = &info.cfg;
    let l = Loader::new(file);
    match cfg.arch {
        Arch::Gpt2 => return super::gguf_arch::gpt2(&l, cfg),
        Arch::Bert => return super::gguf_arch::bert(&l, cfg),
        Arch::Llama => {}
    }
    let (h, f, v, hd) = (cfg.hidden, cfg.ffn, cfg.vocab, cfg.head_dim());
    let kvd = cfg.kv_heads * hd;
    let tokens = l.linear("token_embd.weight", v, h, None)?;
    let mut blocks = Vec::with_capacity(cfg.layers);
    for i in 0..cfg.layers {
        let p = |s: &str| format!("blk.{i}.{s}.weight");
        blocks.push(Block {
            q: l.linear(&p("attn_q"), h, h, Some(cfg.heads))?,
            k: l.linear(&p("attn_k"), kvd, h, Some(cfg.kv_heads))?,
            v: l.linear(&p("attn_v"), kvd, h, None)?,
            o: l.linear(&p("attn_output"), h, h, None)?,
            gate: Some(l.linear(&p("ffn_gate"), f, h, None)?),
            up: l.linear(&p("ffn_up"), f, h, None)?,
            down: l.linear(&p("ffn_down"), h, f, None)?,
            n1: l.norm(&p("attn_norm"), h)?,
            n2: l.norm(&p("ffn_norm"), h)?,
        });
    }
    let final_norm = Some(l.norm("output_norm.weight", h)?);
    // Tied output (SmolLM2): no `output.weight`, the LM head is the embedding.
    let lm_head = if l.has("output.weight") { Some(l.linear("output.weight", v, h, None)?) } else { None };
    let rope = Some(Rope::new(positions.clamp(1, cfg.max_positions), hd, cfg.rope_theta));
    let mut m = super::gguf_arch::model(cfg, tokens, blocks);
    (m.final_norm, m.lm_head, m.rope) = (final_norm, lm_head, rope);
    Ok(m)
}

#[cfg(test)]
#[path = "hostile_tests.rs"]
mod hostile_tests;

#[cfg(test)]
mod tests {
    #[test]
    fn unpermute_moves_rows_to_half_split_order() {
        // 1 head of 4 rows, 1 byte each: file rows (0,1,2,3) are pairs (i0j0,i0j1,i1j0,i1j1).
        assert_eq!(super::unpermute_rows(&[0, 1, 2, 3], 4, 1), vec![0, 2, 1, 3]);
        assert_eq!(super::unpermute_rows(&[0, 1, 2, 3, 4, 5, 6, 7], 8, 2), vec![0, 2, 1, 3, 4, 6, 5, 7]);
        assert_eq!(super::id_safe("SmolLM2 135M/x"), "SmolLM2-135M-x");
    }
}
