//! Where a `gguf` case's model comes from: a GGUF file (`gguf.rs`,
//! `gguf_arch.rs`) or a Hugging Face directory (`hfdir.rs`). Both give the
//! same [`FileInfo`] and [`Model`], so every test of the benchmark runs on
//! either.

use super::gguf::{self as ggufmodel, FileInfo};
use super::hfdir::HfDir;
use super::model::Model;
use crate::gguf::GgufFile;
use anyhow::Result;
use std::path::Path;

/// An opened model: header read and checked, no tensor page touched.
pub enum Source {
    /// A GGUF file.
    Gguf(GgufFile),
    /// A Hugging Face directory.
    Hf(HfDir),
}

/// Opens a GGUF file or a Hugging Face directory and describes its model,
/// checked against the memory budget (90% of what is available).
pub fn open(path: &Path) -> Result<(Source, FileInfo)> {
    if path.is_dir() {
        let budget = super::available_bytes().map(|b| (0.9 * b) as u64);
        let (d, info) = HfDir::open(path, budget)?;
        return Ok((Source::Hf(d), info));
    }
    let (f, info) = super::file::open(path)?;
    Ok((Source::Gguf(f), info))
}

/// Opens `path` again and builds its model (the `load` test, and checks of
/// cases that keep no model).
pub fn reload(path: &Path, info: &FileInfo, positions: usize) -> Result<Model> {
    open(path)?.0.load(info, positions)
}

impl Source {
    /// Builds the model; `positions` sizes a decoder's RoPE tables.
    pub fn load(&self, info: &FileInfo, positions: usize) -> Result<Model> {
        match self {
            Self::Gguf(f) => ggufmodel::load(f, info, positions),
            Self::Hf(d) => d.load(info, positions),
        }
    }

    /// `n` prompt ids: Genesis 1-3 through the model's own tokenizer (the
    /// GGUF's `tokenizer.ggml.*`, a directory's `tokenizer.json`), else
    /// seeded random ids; the note says which and why.
    pub fn prompt(&self, info: &FileInfo, n: usize) -> Result<(Vec<u32>, String)> {
        let d = match self {
            Self::Gguf(f) => return super::file::prompt(f, info, n),
            Self::Hf(d) => d,
        };
        let (ids, note) = match d.tokenizer() {
            Ok(t) => (
                super::filetok::prompt_ids(&crate::gguf::tokenizer::FileTokenizer::from_tokenizers(t), n)?,
                "prompt: Genesis 1-3 (KJV) through its tokenizer.json".into(),
            ),
            Err(e) => {
                (super::random_ids(n, info.cfg.vocab, 0x9e37), format!("prompt: seeded random ids ({e:#})"))
            }
        };
        if let Some(&bad) = ids.iter().find(|&&t| t as usize >= info.cfg.vocab) {
            anyhow::bail!(
                "{}: tokenizer.json gives id {bad}, outside the model's vocabulary of {}",
                d.dir.display(),
                info.cfg.vocab
            );
        }
        Ok((ids, note))
    }
}
