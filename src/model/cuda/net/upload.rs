//! Building a [`Net`](super::Net): the fit checks, the kernels, the cuBLAS
//! workspace, the weights' upload and the activation buffers, one function
//! each, so `Net::new` reads as the sequence it is.

use super::{Arena, BlockP, KERNELS, Lin, NormP, to_device_bytes};
use crate::backend::cuda::Gpu;
use crate::backend::cuda::kernels::transformer as tk;
use crate::backend::ops::GemmDtype;
use crate::model::config::{Arch, ModelConfig};
use crate::model::transformer::{Model, Norm};
use anyhow::{Result, bail};
use cudarc::cublas::CudaBlas;
use cudarc::driver::CudaFunction;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Refuses shapes the GPU kernels cannot hold (head dimension, shared memory).
pub(super) fn check_fits(cfg: &ModelConfig, cap: super::Capacity) -> Result<()> {
    if !cfg.variant.is_plain() {
        bail!("the GPU forward pass runs llama, gpt2 and bert models, not `{}`", cfg.arch_name());
    }
    let hd = cfg.head_dim();
    if hd > tk::MAX_HEAD_DIM {
        bail!("head dimension {hd} exceeds the GPU attention kernel's {}", tk::MAX_HEAD_DIM);
    }
    let smem = tk::attention_smem_bytes(hd, cap.keys);
    if smem > tk::DEFAULT_SMEM_LIMIT || cfg.hidden * 4 > tk::DEFAULT_SMEM_LIMIT {
        bail!(
            "{} keys of head dimension {hd} (or width {}) exceed the 48 KiB of shared memory the GPU kernels use",
            cap.keys,
            cfg.hidden
        );
    }
    Ok(())
}

/// The transformer module's kernels for `dt` (compiled once per process),
/// and the NVRTC time this call paid.
pub(super) fn load_kernels(
    gpu: &Arc<Gpu>,
    dt: GemmDtype,
) -> Result<(BTreeMap<&'static str, CudaFunction>, std::time::Duration)> {
    let (module, compile) = gpu.module(tk::TRANSFORMER_MODULE, tk::TRANSFORMER)?;
    let suffix = match dt {
        GemmDtype::F32 | GemmDtype::Tf32 => "f32",
        GemmDtype::F16 => "f16",
        GemmDtype::Bf16 => "bf16",
    };
    let mut funcs = BTreeMap::new();
    for &k in KERNELS {
        let name = format!("{k}_{suffix}");
        let f = module.load_function(&name).map_err(|e| gpu.err(&format!("function {name}"), e))?;
        funcs.insert(k, f);
    }
    let reset = module.load_function("reset_decode").map_err(|e| gpu.err("function reset_decode", e))?;
    funcs.insert("reset_decode", reset);
    Ok((funcs, compile))
}

/// A cuBLAS handle whose workspace lives in `arena`, so cuBLAS never
/// allocates, also not under graph capture.
pub(super) fn blas_with_workspace(gpu: &Arc<Gpu>, arena: &mut Arena) -> Result<CudaBlas> {
    let blas = gpu.blas()?;
    let ws = arena.zeros(super::super::BLAS_WORKSPACE)?;
    // SAFETY: the workspace lives in the arena as long as the handle (both
    // in this Net); cuBLAS then never allocates, also not under capture.
    let st = unsafe {
        cudarc::cublas::sys::cublasSetWorkspace_v2(
            *blas.handle(),
            ws as *mut std::ffi::c_void,
            super::super::BLAS_WORKSPACE,
        )
    };
    if st != cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        bail!("cublasSetWorkspace: {st:?}");
    }

    Ok(blas)
}

/// The model's parameters on the device.
pub(super) struct Weights {
    pub tok: u64,
    pub positions: u64,
    pub types: u64,
    pub emb_norm: Option<NormP>,
    pub blocks: Vec<BlockP>,
    pub final_norm: Option<NormP>,
    pub head: Lin,
    pub pooler: Option<Lin>,
    pub cos: u64,
    pub sin: u64,
}

/// Uploads `model`'s matrices in `dt` (norms, biases and RoPE tables in f32),
/// fusing q/k/v and gate/up into one matrix each.
pub(super) fn weights(arena: &mut Arena, model: &Model, dt: GemmDtype) -> Result<Weights> {
    let cfg = &model.cfg;
    let mat = |arena: &mut Arena, v: &[f32]| arena.upload(&to_device_bytes(dt, v));
    let opt_f32 =
        |arena: &mut Arena, v: Option<&Vec<f32>>| -> Result<u64> { v.map_or(Ok(0), |v| arena.f32s(v)) };
    let norm = |arena: &mut Arena, n: &Norm| -> Result<NormP> {
        Ok(NormP { w: arena.f32s(&n.w)?, b: opt_f32(arena, n.b.as_ref())? })
    };
    let lin = |arena: &mut Arena, parts: &[&crate::model::linear::Linear]| -> Result<Lin> {
        let mut w = Vec::new();
        let mut b = Vec::new();
        let has_bias = parts.iter().any(|l| l.bias.is_some());
        for l in parts {
            w.extend(l.w.to_f32());
            b.extend(l.bias.clone().unwrap_or_else(|| vec![0.0; l.out]));
        }
        let out = parts.iter().map(|l| l.out).sum();
        let bias = if has_bias { arena.f32s(&b)? } else { 0 };
        Ok(Lin { w: mat(arena, &w)?, b: bias, out, inp: parts[0].inp })
    };
    let tok = mat(arena, &model.tokens.w.to_f32())?;
    let positions = opt_f32(arena, model.positions.as_ref())?;
    let types = opt_f32(arena, model.types.as_ref())?;
    let emb_norm = model.emb_norm.as_ref().map(|n| norm(arena, n)).transpose()?;
    let mut blocks = Vec::with_capacity(model.blocks.len());
    for b in &model.blocks {
        let up = match &b.gate {
            Some(g) => lin(arena, &[g, &b.up])?,
            None => lin(arena, &[&b.up])?,
        };
        blocks.push(BlockP {
            qkv: lin(arena, &[&b.q, &b.k, &b.v])?,
            o: lin(arena, &[&b.o])?,
            up,
            down: lin(arena, &[&b.down])?,
            n1: norm(arena, &b.n1)?,
            n2: norm(arena, &b.n2)?,
            gated: b.gate.is_some(),
        });
    }
    let final_norm = model.final_norm.as_ref().map(|n| norm(arena, n)).transpose()?;
    let head = match &model.lm_head {
        Some(l) => lin(arena, &[l])?,
        None => Lin { w: tok, b: 0, out: cfg.vocab, inp: cfg.hidden },
    };
    let pooler = model.pooler.as_ref().map(|p| lin(arena, &[p])).transpose()?;
    let (cos, sin) = match &model.rope {
        Some(r) => {
            let (c, s) = r.tables();
            (arena.f32s(c)?, arena.f32s(s)?)
        }
        None => (0, 0),
    };
    Ok(Weights { tok, positions, types, emb_norm, blocks, final_norm, head, pooler, cos, sin })
}

/// Activation buffers, token/position/mask ints and the KV cache.
pub(super) struct Buffers {
    pub x: u64,
    pub xn: u64,
    pub qkv: u64,
    pub att: u64,
    pub y: u64,
    pub f: u64,
    pub g: u64,
    pub last: u64,
    pub pooled: u64,
    pub logits: u64,
    pub ids: u64,
    pub next: u64,
    pub pos: u64,
    pub mask: u64,
    pub kc: u64,
    pub vc: u64,
}

/// Allocates (zeroed) the buffers a forward over `cap` needs.
pub(super) fn buffers(
    arena: &mut Arena,
    cfg: &ModelConfig,
    dt: GemmDtype,
    cap: super::Capacity,
) -> Result<Buffers> {
    let (el, hd) = (dt.bytes(), cfg.head_dim());
    let (h, kvd, rows, batch) = (cfg.hidden, cfg.kv_heads * hd, cap.rows, cap.batch);
    let ffn_out = if cfg.arch == Arch::Llama { 2 * cfg.ffn } else { cfg.ffn };
    let x = arena.zeros(rows * h * el)?;
    let xn = arena.zeros(rows * h * el)?;
    let qkv = arena.zeros(rows * (h + 2 * kvd) * el)?;
    let att = arena.zeros(rows * h * el)?;
    let y = arena.zeros(rows * h * el)?;
    let f = arena.zeros(rows * ffn_out * el)?;
    let g = arena.zeros(if cfg.arch == Arch::Llama { rows * cfg.ffn * el } else { 1 })?;
    let last = arena.zeros(batch * h * el)?;
    let pooled = arena.zeros(batch * h * el)?;
    let logits = arena.zeros(batch * cfg.vocab * el)?;
    let ids = arena.zeros(rows * 4)?;
    let next = arena.zeros(batch * 4)?;
    let pos = arena.zeros(4)?;
    let mask = arena.zeros(rows * 4)?;
    let kv_bytes = cfg.kv_cache_bytes(batch, cap.cache, el) as usize / 2;
    let kc = arena.zeros(kv_bytes)?;
    let vc = arena.zeros(kv_bytes)?;
    Ok(Buffers { x, xn, qkv, att, y, f, g, last, pooled, logits, ids, next, pos, mask, kc, vc })
}
