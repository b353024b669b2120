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
use crate::model::config::{Arch, ModelConfig};
use crate::model::transformer::{Model, Norm};
use anyhow::{Context, Result, bail};
use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};
use std::collections::BTreeMap;
use std::sync::Arc;

mod forward;

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
        let blas = gpu.blas()?;
        let mut arena = Arena::new(gpu.clone());
        let ws = arena.zeros(super::BLAS_WORKSPACE)?;
        // SAFETY: the workspace lives in the arena as long as the handle (both
        // in this Net); cuBLAS then never allocates, also not under capture.
        let st = unsafe {
            cudarc::cublas::sys::cublasSetWorkspace_v2(
                *blas.handle(),
                ws as *mut std::ffi::c_void,
                super::BLAS_WORKSPACE,
            )
        };
        if st != cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            bail!("cublasSetWorkspace: {st:?}");
        }

        let el = dt.bytes();
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
        let tok = mat(&mut arena, &model.tokens.w.to_f32())?;
        let positions = opt_f32(&mut arena, model.positions.as_ref())?;
        let types = opt_f32(&mut arena, model.types.as_ref())?;
        let emb_norm = model.emb_norm.as_ref().map(|n| norm(&mut arena, n)).transpose()?;
        let mut blocks = Vec::with_capacity(model.blocks.len());
        for b in &model.blocks {
            let up = match &b.gate {
                Some(g) => lin(&mut arena, &[g, &b.up])?,
                None => lin(&mut arena, &[&b.up])?,
            };
            blocks.push(BlockP {
                qkv: lin(&mut arena, &[&b.q, &b.k, &b.v])?,
                o: lin(&mut arena, &[&b.o])?,
                up,
                down: lin(&mut arena, &[&b.down])?,
                n1: norm(&mut arena, &b.n1)?,
                n2: norm(&mut arena, &b.n2)?,
                gated: b.gate.is_some(),
            });
        }
        let final_norm = model.final_norm.as_ref().map(|n| norm(&mut arena, n)).transpose()?;
        let head = match &model.lm_head {
            Some(l) => lin(&mut arena, &[l])?,
            None => Lin { w: tok, b: 0, out: cfg.vocab, inp: cfg.hidden },
        };
        let pooler = model.pooler.as_ref().map(|p| lin(&mut arena, &[p])).transpose()?;
        let (cos, sin) = match &model.rope {
            Some(r) => {
                let (c, s) = r.tables();
                (arena.f32s(c)?, arena.f32s(s)?)
            }
            None => (0, 0),
        };
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
