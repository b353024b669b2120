//! A model file of the user's: a GGUF file (`gguf.rs`, `gguf_arch.rs`) or a
//! Hugging Face directory (`hf_dir.rs`). Both give the same [`FileInfo`] and
//! [`Model`], so whatever drives a model (every test of the inference
//! suite's `gguf` benchmark) runs on either.

use crate::model::gguf::GgufFile;
use crate::model::transformer::Model;
use anyhow::Result;
use gguf::FileInfo;
use hf_dir::HfDir;
use std::path::Path;

pub mod gguf;
mod gguf_arch;
mod gguf_llama;
pub mod hf_dir;
mod q5_0;

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
        let budget = crate::model::available_bytes().map(|b| (0.9 * b) as u64);
        let (d, info) = HfDir::open(path, budget)?;
        return Ok((Source::Hf(d), info));
    }
    let (f, info) = open_gguf(path)?;
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
            Self::Gguf(f) => gguf::load(f, info, positions),
            Self::Hf(d) => d.load(info, positions),
        }
    }
}

/// Opens and checks a model file against the memory budget (90% of what is
/// available): the header only, no tensor page is read.
pub fn open_gguf(path: &Path) -> Result<(GgufFile, FileInfo)> {
    let budget = crate::model::available_bytes().map(|b| (0.9 * b) as u64);
    let f = GgufFile::open(path, budget)?;
    if let Some(b) = budget
        && crate::kernels::quant::lanes::in_use()
    {
        let copy = decode_copy_bytes(&f.header);
        let need = f.header.data_bytes() + copy;
        if copy > 0 && need > b {
            let mib = |v: u64| v as f64 / 1048576.0;
            anyhow::bail!(
                "model file {}: its tensors need {:.1} MiB, and generating on this CPU (AVX-512 VNNI) adds a decode copy of its Q8_0/Q4_0/Q4_1 matrices of up to {:.1} MiB: {:.1} MiB in all, over the memory budget of {:.1} MiB; nothing was loaded",
                path.display(),
                mib(f.header.data_bytes()),
                mib(copy),
                mib(need),
                mib(b)
            );
        }
    }
    let info = gguf::describe(&f).map_err(|e| anyhow::anyhow!("model file {}: {e:#}", path.display()))?;
    Ok((f, info))
}

/// Bytes of the decode copies a generating case may make of `h`'s matrices
/// on a CPU that decodes through the layout ([`crate::kernels::quant::lanes`]):
/// every two-dimensional Q8_0, Q4_0 or Q4_1 tensor (an upper bound: a token
/// table that is only looked up gets none).
fn decode_copy_bytes(h: &crate::model::gguf::Header) -> u64 {
    use crate::kernels::quant::{blocks::BlockFormat, lanes};
    h.tensors
        .iter()
        .filter(|t| t.dims.len() == 2)
        .map(|t| {
            let format = match t.ty.name {
                // Q5_0 is stored as Q8_0 (q5_0.rs), and so copied.
                "Q8_0" | "Q5_0" => BlockFormat::Q8_0,
                "Q4_0" => BlockFormat::Q4_0,
                "Q4_1" => BlockFormat::Q4_1,
                _ => return 0,
            };
            lanes::copy_bytes(format, t.dims[1] as usize, t.dims[0] as usize) as u64
        })
        .sum()
}
