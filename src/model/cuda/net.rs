//! A model on the GPU: the CPU model's weights uploaded as stored, the
//! activation buffers and KV cache, and reading results back; the launch
//! sequences of a forward pass (cuBLAS GEMMs and
//! `crate::backend::cuda::kernels::transformer`'s kernels) are in `net/forward.rs`.
//!
//! Buffers are plain byte allocations addressed by raw device pointers, so
//! a forward's launches are a flat list of (kernel, pointers, sizes): the
//! same list is run eagerly or captured once into a CUDA Graph. Everything
//! a decode step changes between steps (the position, the token ids) is in
//! device memory, never a launch argument.

use crate::backend::cuda::Gpu;
use crate::backend::cuda::kernels::gemm as cugemm;
use crate::backend::cuda::kernels::transformer::{self as tk, ATTN_BLOCK, ELEM_BLOCK, ROW_BLOCK};
use crate::backend::ops::GemmDtype;
use crate::model::config::ModelConfig;
use crate::model::transformer::Model;
use anyhow::{Context, Result, bail};
use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};
use std::collections::BTreeMap;
use std::sync::Arc;

mod forward;
mod upload;

/// Device allocations of one case, owned here, addressed by raw pointers.
pub(super) struct Arena {
    gpu: Arc<Gpu>,
    bufs: Vec<CudaSlice<u8>>,
    /// Bytes allocated so far.
    pub bytes: u64,
}

impl Arena {
    fn new(gpu: Arc<Gpu>) -> Self {
        Self { gpu, bufs: Vec::new(), bytes: 0 }
    }

    fn keep(&mut self, s: CudaSlice<u8>) -> u64 {
        let p = {
            let (p, _sync) = s.device_ptr(&self.gpu.stream);
            p
        };
        self.bytes += s.len() as u64;
        self.bufs.push(s);
        p
    }

    /// A zeroed buffer of `bytes` (at least one byte, so the pointer is real).
    fn zeros(&mut self, bytes: usize) -> Result<u64> {
        let s = self.gpu.stream.alloc_zeros::<u8>(bytes.max(1)).map_err(|e| self.gpu.err("cuMemAlloc", e))?;
        Ok(self.keep(s))
    }

    /// `bytes` copied to a new device buffer.
    fn upload(&mut self, bytes: &[u8]) -> Result<u64> {
        let s = self.gpu.stream.clone_htod(bytes).map_err(|e| self.gpu.err("upload", e))?;
        Ok(self.keep(s))
    }

    fn f32s(&mut self, v: &[f32]) -> Result<u64> {
        self.upload(&v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())
    }
}

/// `v` as the device stores an activation or matrix of type `dt`: f32
/// bytes, or the f16/bf16 bits (round to nearest even, as the kernels'
/// stores; exact for weights already stored in that type).
pub(super) fn to_device_bytes(dt: GemmDtype, v: &[f32]) -> Vec<u8> {
    match dt {
        GemmDtype::F32 | GemmDtype::Tf32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        GemmDtype::F16 => v.iter().flat_map(|&x| half::f16::from_f32(x).to_le_bytes()).collect(),
        GemmDtype::Bf16 => v.iter().flat_map(|&x| half::bf16::from_f32(x).to_le_bytes()).collect(),
    }
}

/// The inverse of [`to_device_bytes`].
pub(super) fn from_device_bytes(dt: GemmDtype, b: &[u8]) -> Vec<f32> {
    match dt {
        GemmDtype::F32 | GemmDtype::Tf32 => {
            b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
        }
        GemmDtype::F16 => {
            b.chunks_exact(2).map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32()).collect()
        }
        GemmDtype::Bf16 => {
            b.chunks_exact(2).map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect()
        }
    }
}

/// A linear layer on the device: `[out, inp]` weights and an optional f32 bias.
struct Lin {
    w: u64,
    b: u64,
    out: usize,
    inp: usize,
}

/// A norm's f32 scale and shift (`b` = 0 for RMSNorm).
struct NormP {
    w: u64,
    b: u64,
}

struct BlockP {
    /// Fused `[q; k; v]` projection.
    qkv: Lin,
    o: Lin,
    /// `up`, or the fused `[gate; up]` for SwiGLU.
    up: Lin,
    down: Lin,
    n1: NormP,
    n2: NormP,
    gated: bool,
}

/// Sizes the activation buffers and the KV cache were allocated for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Capacity {
    /// Token rows of one forward (batch x tokens per sequence).
    pub rows: usize,
    /// Sequences.
    pub batch: usize,
    /// KV-cache positions per sequence (0: none).
    pub cache: usize,
    /// Most keys one attention call sees (the encoder's sequence length;
    /// for decoders the cache's positions).
    pub keys: usize,
}

/// One kernel argument.
#[derive(Clone, Copy)]
enum A {
    P(u64),
    I(i32),
    F(f32),
    U(u64),
}

/// The model, its buffers and the kernels, on one GPU.
pub(super) struct Net {
    gpu: Arc<Gpu>,
    /// The model's shape.
    pub cfg: ModelConfig,
    /// Activation, KV and matrix element type.
    pub dt: GemmDtype,
    blas: CudaBlas,
    funcs: BTreeMap<&'static str, CudaFunction>,
    /// Every device allocation of the case.
    pub arena: Arena,
    tok: u64,
    positions: u64,
    types: u64,
    emb_norm: Option<NormP>,
    blocks: Vec<BlockP>,
    final_norm: Option<NormP>,
    head: Lin,
    pooler: Option<Lin>,
    cos: u64,
    sin: u64,
    /// What the buffers below hold.
    pub cap: Capacity,
    x: u64,
    xn: u64,
    qkv: u64,
    att: u64,
    y: u64,
    f: u64,
    g: u64,
    last: u64,
    pooled: u64,
    logits: u64,
    /// Token ids read by the embedding (`[rows]` ints).
    pub ids: u64,
    /// Token ids written by `argmax` (`[batch]` ints): a decode reads and
    /// writes these, a prefill writes them.
    pub next: u64,
    /// The position of the next token (one int), read by every position-
    /// dependent kernel and advanced by `argmax`.
    pub pos: u64,
    /// Key mask (`[rows]` ints, 0 = padding) for the encoder.
    pub mask: u64,
    kc: u64,
    vc: u64,
}

const KERNELS: &[&str] =
    &["embed", "norm", "bias_act", "residual", "swiglu", "rope_append", "attention", "argmax", "gather_rows"];

impl Net {
    /// Uploads `model` (activations in `dt`) with buffers for `cap`:
    /// compiles the kernels (cached per process), creates the cuBLAS handle
    /// with its workspace. Returns the net and the NVRTC time it paid.
    pub fn new(
        gpu: Arc<Gpu>,
        model: &Model,
        dt: GemmDtype,
        cap: Capacity,
    ) -> Result<(Self, std::time::Duration)> {
        let cfg = model.cfg.clone();
        upload::check_fits(&cfg, cap)?;
        let (funcs, compile) = upload::load_kernels(&gpu, dt)?;
        let mut arena = Arena::new(gpu.clone());
        let blas = upload::blas_with_workspace(&gpu, &mut arena)?;
        let upload::Weights { tok, positions, types, emb_norm, blocks, final_norm, head, pooler, cos, sin } =
            upload::weights(&mut arena, model, dt)?;
        let upload::Buffers { x, xn, qkv, att, y, f, g, last, pooled, logits, ids, next, pos, mask, kc, vc } =
            upload::buffers(&mut arena, &cfg, dt, cap)?;
        gpu.sync()?;
        let net = Self {
            gpu,
            cfg,
            dt,
            blas,
            funcs,
            arena,
            tok,
            positions,
            types,
            emb_norm,
            blocks,
            final_norm,
            head,
            pooler,
            cos,
            sin,
            cap,
            x,
            xn,
            qkv,
            att,
            y,
            f,
            g,
            last,
            pooled,
            logits,
            ids,
            next,
            pos,
            mask,
            kc,
            vc,
        };
        Ok((net, compile))
    }

    /// Host ints into the device buffer at `dst` (`ids`, `mask` or a
    /// buffer of [`Net::ints`]); synchronous.
    pub fn put_ints(&self, dst: u64, v: &[i32]) -> Result<()> {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        // SAFETY: callers pass a buffer of this net holding at least v.len() ints.
        unsafe { cudarc::driver::result::memcpy_htod_async(dst, &bytes, self.gpu.stream.cu_stream()) }
            .map_err(|e| self.gpu.err("upload", e))?;
        self.gpu.sync()
    }

    /// A new device buffer of `v`'s ints.
    pub fn ints(&mut self, v: &[i32]) -> Result<u64> {
        self.arena.upload(&v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>())
    }

    fn read(&self, src: u64, bytes: usize) -> Result<Vec<u8>> {
        let mut out = vec![0u8; bytes];
        self.gpu.sync()?;
        // SAFETY: callers read within one of this net's buffers.
        unsafe { cudarc::driver::result::memcpy_dtoh_async(&mut out, src, self.gpu.stream.cu_stream()) }
            .map_err(|e| self.gpu.err("download", e))?;
        self.gpu.sync()?;
        Ok(out)
    }

    fn read_act(&self, src: u64, elements: usize) -> Result<Vec<f32>> {
        Ok(from_device_bytes(self.dt, &self.read(src, elements * self.dt.bytes())?))
    }

    /// The residual stream's first `rows` rows (the encoder's output).
    pub fn hidden(&self, rows: usize) -> Result<Vec<f32>> {
        self.read_act(self.x, rows * self.cfg.hidden)
    }

    /// The pooler's output of `batch` sequences.
    pub fn pooled(&self, batch: usize) -> Result<Vec<f32>> {
        self.read_act(self.pooled, batch * self.cfg.hidden)
    }

    /// The logits of `batch` sequences' last positions.
    pub fn logits(&self, batch: usize) -> Result<Vec<f32>> {
        self.read_act(self.logits, batch * self.cfg.vocab)
    }

    /// The greedy tokens of the last forward ([`Net::next`]).
    pub fn next_tokens(&self, batch: usize) -> Result<Vec<i32>> {
        Ok(self
            .read(self.next, batch * 4)?
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// The position counter.
    pub fn position(&self) -> Result<i32> {
        let b = self.read(self.pos, 4)?;
        Ok(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Sets the position counter (synchronous).
    pub fn set_position(&self, p: usize) -> Result<()> {
        self.put_ints(self.pos, &[p as i32])
    }

    /// The GPU this net lives on.
    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }
}
