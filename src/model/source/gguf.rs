//! A [`Model`] from a GGUF file: its shape read from the file's own
//! metadata (grouped-query attention, head width, RoPE base and dimension,
//! norm epsilon, tied or untied output) and checked against its tensors,
//! each matrix kept in the file's type through the kernel library's
//! [`QMatrix`] (codes copied, never dequantized to f32 for the timed path;
//! Q5_0 rewritten exactly as Q8_0, `q5_0.rs`). The LLaMA family (`llama`,
//! `qwen2`, `qwen3`, `gemma3`, `phi3`) is built in `gguf_llama.rs`, `gpt2`
//! and `bert` in `gguf_arch.rs`, all with the same [`Loader`].

use super::gguf_arch::{KINDS, Kind};
use crate::kernels::quant::{QMatrix, WeightFormat, ggml_row_bytes};
use crate::model::config::{Arch, ModelConfig, Variant};
use crate::model::gguf::{GgufFile, Header, TensorInfo, Value};
use crate::model::linear::{DType, Linear, Weights};
use crate::model::transformer::Model;
use anyhow::{Result, bail};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

/// Architectures this loader runs.
pub const ARCHITECTURES: &[&str] = &["llama", "gpt2", "bert", "qwen2", "qwen3", "gemma3", "phi3"];

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

/// The kernels' format for a tensor as the [`Loader`] stores it, or an
/// error naming it and its type (Q5_0 is stored as Q8_0, `q5_0.rs`).
pub fn format_of(t: &TensorInfo) -> Result<WeightFormat> {
    Ok(match t.ty.name {
        "F32" => WeightFormat::F32,
        "F16" => WeightFormat::F16,
        "BF16" => WeightFormat::Bf16,
        "Q8_0" | "Q5_0" => WeightFormat::Q8_0,
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
fn shape(h: &Header, arch: &str, kind: Kind) -> Result<ModelConfig> {
    let family = kind.family();
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
    // A head width of the file's own (qwen3, gemma3), when it is not hidden / heads.
    let klk = k("attention.key_length");
    let key_length = match h.get(&klk).and_then(Value::as_u64) {
        Some(kl) if heads.checked_mul(kl) != Some(hidden) => Some(kl),
        _ => None,
    };
    if heads == 0 || (key_length.is_none() && !hidden.is_multiple_of(heads)) {
        bail!("metadata `{qk}` is {heads}: it must divide `{hk}` ({hidden})");
    }
    let kv_heads = h.get(&kvk).and_then(Value::as_u64).unwrap_or(heads);
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        bail!("metadata `{kvk}` is {kv_heads}: it must divide `{qk}` ({heads})");
    }
    if let Some(kl) = key_length {
        head_width(h, arch, kind, [hidden, heads, kv_heads, kl])?;
    }
    // Named first: a file missing one gets its name, not a block count error.
    if let Some(n) = super::gguf_arch::outside_blocks(kind).into_iter().find(|n| h.tensor(n).is_none()) {
        bail!("no tensor `{n}`, which the `{arch}` architecture needs");
    }
    let blocks = meta_u64(h, &bk)?;
    let per = super::gguf_arch::block_tensors(kind, 0, |_| true).len() as u64;
    let present = h.tensors.iter().filter(|t| t.name.starts_with("blk.")).count() as u64;
    if blocks == 0 || blocks.checked_mul(per).is_none_or(|n| n > present) {
        bail!(
            "metadata `{bk}` is {blocks}, but the file holds {present} block tensors (`blk.*`): room for at most {} blocks of at least {per} tensors",
            present / per
        );
    }
    let ffn = meta_u64(h, &fk)?;
    // phi3's `ffn_up` holds the gate's rows too.
    let (up_rows, up_what) = if kind == Kind::Phi3 { (ffn.checked_mul(2), "2 x ") } else { (Some(ffn), "") };
    // A missing blk.0.ffn_up is named with the other required tensors.
    if let Some(up) = h.tensor("blk.0.ffn_up.weight")
        && (up.dims.get(1).copied() != up_rows || ffn == 0)
    {
        bail!(
            "metadata `{fk}` is {ffn}, but tensor `blk.0.ffn_up.weight` has dims {:?} (ggml's [{hk}, {up_what}{fk}])",
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
        variant: Variant { head_dim: key_length.map_or(0, size), ..Variant::default() },
    })
}

/// Checks a head width of the file's own (`attention.key_length` = `kl`,
/// with `heads * kl` not the model width) against block 0's Q rows (or
/// fused QKV rows), which bound it before it sizes a buffer.
fn head_width(h: &Header, arch: &str, kind: Kind, [hidden, heads, kv_heads, kl]: [u64; 4]) -> Result<()> {
    let (klk, vlk) = (format!("{arch}.attention.key_length"), format!("{arch}.attention.value_length"));
    if kind.family() != Arch::Llama || kl == 0 || kl % 2 != 0 {
        bail!(
            "metadata `{klk}` is {kl}: a head width other than `{arch}.embedding_length` / heads ({hidden} / {heads}) must be even and is only run for LLaMA-family architectures"
        );
    }
    if let Some(vl) = h.get(&vlk).and_then(Value::as_u64)
        && vl != kl
    {
        bail!("metadata `{vlk}` is {vl}, `{klk}` {kl}: different key and value widths are not supported");
    }
    let (q, qkv) = ("blk.0.attn_q.weight", "blk.0.attn_qkv.weight");
    let (name, rows) = match h.tensor(qkv) {
        Some(_) => (qkv, heads.checked_add(kv_heads.saturating_mul(2)).and_then(|n| n.checked_mul(kl))),
        None => (q, heads.checked_mul(kl)),
    };
    let d = dims(h, name)?;
    if rows.is_none() || d != [hidden, rows.unwrap_or(0)] {
        bail!(
            "metadata `{arch}.attention.head_count` is {heads}, `{arch}.attention.head_count_kv` is {kv_heads} and `{klk}` is {kl}, but tensor `{name}` has dims {d:?}"
        );
    }
    Ok(())
}

/// Reads and checks the header's model description: architecture, shape
/// (every count against the tensors present, [`shape`]), every tensor's
/// type. Nothing is loaded.
pub fn describe(file: &GgufFile) -> Result<FileInfo> {
    let h = &file.header;
    let arch = h.get("general.architecture").and_then(Value::as_str).unwrap_or("(none)");
    let Some(kind) = Kind::parse(arch) else {
        bail!(
            "architecture `{arch}` is not one tfbench runs from GGUF; supported: {}",
            ARCHITECTURES.join(", ")
        )
    };
    debug_assert_eq!(KINDS.len(), ARCHITECTURES.len());
    let family = kind.family();
    let k = |s: &str| format!("{arch}.{s}");
    let llama = family == Arch::Llama;
    let mut cfg = shape(h, arch, kind)?;
    if llama {
        cfg.variant = super::gguf_llama::variant(h, kind, &cfg)?;
    }
    cfg.validate()?;
    if let Some(t) = ["rope_factors_long.weight", "rope_factors_short.weight", "rope_freqs.weight"]
        .into_iter()
        .find(|n| h.tensor(n).is_some() && kind != Kind::Llama)
    {
        bail!("tensor `{t}`: RoPE frequency factors (LongRoPE, LLaMA 3 scaling) are not supported");
    }
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
    for n in super::gguf_arch::required(&cfg, kind, |n| names.contains(n)) {
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
        let q = QMatrix::from_ggml(format_of(t)?, &self.data(t, 0, 1, len)?, 1, len)?;
        Ok(q.dequantize())
    }

    /// Rows `start..start + rows` of `t` (rows of `cols` values; the caller
    /// has checked its dims) in the format [`format_of`] names: the file's
    /// bytes, or Q5_0 rewritten as Q8_0.
    fn data(&self, t: &TensorInfo, start: usize, rows: usize, cols: usize) -> Result<Cow<'a, [u8]>> {
        let raw = self.file.data(t);
        let rb = t.ty.size_of(cols as u64).map(size).unwrap_or(usize::MAX);
        let part =
            rb.checked_mul(start + rows).and_then(|end| raw.get(rb * start..end)).ok_or_else(|| {
                anyhow::anyhow!(
                    "tensor `{}`: rows {start}..{} of {cols} values lie outside its data",
                    t.name,
                    start + rows
                )
            })?;
        Ok(if t.ty.name == "Q5_0" {
            Cow::Owned(super::q5_0::to_q8_0(part).map_err(|e| anyhow::anyhow!("tensor `{}`: {e}", t.name))?)
        } else {
            Cow::Borrowed(part)
        })
    }

    /// A `[rows, cols]` matrix (ggml dims `[cols, rows]`); `heads` un-permutes Q/K.
    pub fn linear(&self, name: &str, rows: usize, cols: usize, heads: Option<usize>) -> Result<Linear> {
        let t = self.tensor(name)?;
        if t.dims != [cols as u64, rows as u64] {
            bail!("tensor `{name}` has dims {:?}, expected [{cols}, {rows}]", t.dims);
        }
        let raw = self.data(t, 0, rows, cols)?;
        let permuted;
        let bytes = match heads {
            Some(h) => {
                permuted = unpermute_rows(&raw, rows, h);
                &permuted[..]
            }
            None => &raw[..],
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
        self.matrix(name, format_of(t)?, &self.data(t, start, rows, cols)?, rows, cols)
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
    let kind = Kind::parse(cfg.arch_name())
        .ok_or_else(|| anyhow::anyhow!("architecture `{}` is not one tfbench runs", cfg.arch_name()))?;
    match kind {
        Kind::Gpt2 => super::gguf_arch::gpt2(&l, cfg),
        Kind::Bert => super::gguf_arch::bert(&l, cfg),
        _ => super::gguf_llama::load(&l, cfg, kind, positions),
    }
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
