//! A model on the GPU: the CPU model's weights uploaded as stored, the
//! activation buffers and KV cache, and the launch sequence of one forward
//! pass (cuBLAS GEMMs and `crate::kernels::cuda::transformer`'s kernels).
//!
//! Buffers are plain byte allocations addressed by raw device pointers, so
//! a forward's launches are a flat list of (kernel, pointers, sizes): the
//! same list is run eagerly or captured once into a CUDA Graph. Everything
//! a decode step changes between steps (the position, the token ids) is in
//! device memory, never a launch argument.

use super::super::model::{Model, Norm};
use crate::cuda::Gpu;
use crate::kernels::cuda::gemm::{self as cugemm, GemmDtype};
use crate::kernels::cuda::transformer::{self as tk, ATTN_BLOCK, ELEM_BLOCK, ROW_BLOCK};
use crate::models::{Arch, ModelConfig};
use anyhow::{Context, Result, bail};
use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaFunction, CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};
use std::collections::BTreeMap;
use std::sync::Arc;

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
        let lin = |arena: &mut Arena, parts: &[&super::super::linear::Linear]| -> Result<Lin> {
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

    fn launch(&self, name: &str, grid: (u32, u32, u32), block: u32, smem: usize, args: &[A]) -> Result<()> {
        let f = self.funcs.get(name).with_context(|| format!("no kernel {name}"))?;
        let mut b = self.gpu.stream.launch_builder(f);
        for a in args {
            match a {
                A::P(p) | A::U(p) => b.arg(p),
                A::I(i) => b.arg(i),
                A::F(x) => b.arg(x),
            };
        }
        let cfg = LaunchConfig { grid_dim: grid, block_dim: (block, 1, 1), shared_mem_bytes: smem as u32 };
        // SAFETY: every pointer is a live allocation of this Net's arena,
        // sized by `cap` for the rows, batch and positions the callers pass
        // (checked against `cap` in the public entry points).
        unsafe { b.launch(cfg) }.map_err(|e| self.gpu.err(&format!("launch {name}"), e))?;
        Ok(())
    }

    fn elem(&self, name: &str, n: usize, args: &[A]) -> Result<()> {
        self.launch(name, (tk::elem_blocks(n), 1, 1), ELEM_BLOCK, 0, args)
    }

    /// `y[rows x out] = x[rows x inp] W^T` through cuBLAS.
    fn gemm(&self, x: u64, l: &Lin, y: u64, rows: usize) -> Result<()> {
        let call = cugemm::row_major(rows, l.inp, l.out, false, true)?;
        // SAFETY: x holds rows x inp, W out x inp, y rows x out elements of
        // `dt` (buffers sized by `cap`), all live in the arena.
        unsafe { cugemm::gemm(&self.blas, self.dt, &call, None, x, l.w, y) }
    }

    fn norm(&self, x: u64, out: u64, n: &NormP, rows: usize, step: usize, off: usize) -> Result<()> {
        let w = self.cfg.hidden;
        self.launch(
            "norm",
            (rows as u32, 1, 1),
            ROW_BLOCK,
            w * 4,
            &[
                A::P(x),
                A::P(out),
                A::P(n.w),
                A::P(n.b),
                A::I(w as i32),
                A::F(self.cfg.norm_eps),
                A::I(step as i32),
                A::I(off as i32),
            ],
        )
    }

    fn bias_act(&self, y: u64, bias: u64, rows: usize, width: usize, act: i32) -> Result<()> {
        self.elem(
            "bias_act",
            rows * width,
            &[A::P(y), A::P(bias), A::I(rows as i32), A::I(width as i32), A::I(act)],
        )
    }

    fn residual(&self, y: u64, bias: u64, rows: usize) -> Result<()> {
        let h = self.cfg.hidden;
        self.elem(
            "residual",
            rows * h,
            &[A::P(y), A::P(bias), A::P(self.x), A::I(rows as i32), A::I(h as i32)],
        )
    }

    fn at(&self, p: u64, elements: usize) -> u64 {
        p + (elements * self.dt.bytes()) as u64
    }

    fn check(&self, batch: usize, n: usize) -> Result<()> {
        if batch * n > self.cap.rows || batch > self.cap.batch || n > self.cap.keys {
            bail!(
                "forward of {batch} x {n} tokens: buffers hold {} rows, {} sequences",
                self.cap.rows,
                self.cap.batch
            );
        }
        Ok(())
    }

    /// BERT forward of `batch` sequences of `seq` tokens from [`Net::ids`]
    /// (with the key mask in [`Net::mask`] when `masked`); the last hidden
    /// states stay in the residual buffer ([`Net::hidden`]), the pooler's
    /// output in [`Net::pooled`].
    pub fn encode(&self, batch: usize, seq: usize, masked: bool) -> Result<()> {
        self.check(batch, seq)?;
        let c = &self.cfg;
        let (h, hd, rows) = (c.hidden, c.head_dim(), batch * seq);
        let w = h + 2 * c.kv_heads * hd;
        self.launch(
            "embed",
            (rows as u32, 1, 1),
            ROW_BLOCK,
            0,
            &[
                A::P(self.ids),
                A::P(0),
                A::P(self.tok),
                A::P(self.positions),
                A::P(self.types),
                A::P(self.x),
                A::I(seq as i32),
                A::I(h as i32),
            ],
        )?;
        if let Some(n) = &self.emb_norm {
            self.norm(self.x, self.x, n, rows, 1, 0)?;
        }
        for b in &self.blocks {
            self.gemm(self.x, &b.qkv, self.qkv, rows)?;
            if b.qkv.b != 0 {
                self.bias_act(self.qkv, b.qkv.b, rows, w, 0)?;
            }
            let kvd = c.kv_heads * hd;
            // K and V straight out of the fused projection: sequence stride
            // seq rows, head stride hd, key stride one row.
            self.attention(
                (self.qkv, (seq * w) as u64, w as u64),
                (self.at(self.qkv, h), self.at(self.qkv, h + kvd), (seq * w) as u64, hd as u64, w as u64),
                if masked { self.mask } else { 0 },
                0,
                (batch, seq, seq),
                false,
            )?;
            self.gemm(self.att, &b.o, self.y, rows)?;
            self.residual(self.y, b.o.b, rows)?;
            self.norm(self.x, self.x, &b.n1, rows, 1, 0)?;
            self.gemm(self.x, &b.up, self.f, rows)?;
            self.bias_act(self.f, b.up.b, rows, c.ffn, 1)?;
            self.gemm(self.f, &b.down, self.y, rows)?;
            self.residual(self.y, b.down.b, rows)?;
            self.norm(self.x, self.x, &b.n2, rows, 1, 0)?;
        }
        if let Some(p) = &self.pooler {
            self.launch(
                "gather_rows",
                (batch as u32, 1, 1),
                ROW_BLOCK,
                0,
                &[A::P(self.x), A::P(self.last), A::I(h as i32), A::I(seq as i32)],
            )?;
            self.gemm(self.last, p, self.pooled, batch)?;
            self.bias_act(self.pooled, p.b, batch, h, 3)?;
        }
        Ok(())
    }

    /// Attention launch: `q` = (pointer, sequence stride, token stride),
    /// `kv` = (k, v, sequence, head and key strides), `dims` = (batch,
    /// queries per sequence, keys capacity).
    fn attention(
        &self,
        q: (u64, u64, u64),
        kv: (u64, u64, u64, u64, u64),
        mask: u64,
        pos: u64,
        dims: (usize, usize, usize),
        causal: bool,
    ) -> Result<()> {
        let c = &self.cfg;
        let hd = c.head_dim();
        let (batch, n, cap) = dims;
        self.launch(
            "attention",
            (n as u32, c.heads as u32, batch as u32),
            ATTN_BLOCK,
            tk::attention_smem_bytes(hd, cap),
            &[
                A::P(q.0),
                A::U(q.1),
                A::U(q.2),
                A::P(kv.0),
                A::P(kv.1),
                A::U(kv.2),
                A::U(kv.3),
                A::U(kv.4),
                A::P(mask),
                A::P(self.att),
                A::P(pos),
                A::I(n as i32),
                A::I(c.heads as i32),
                A::I(c.kv_heads as i32),
                A::I(hd as i32),
                A::I(causal as i32),
                A::I(cap as i32),
                A::F(1.0 / (hd as f32).sqrt()),
            ],
        )
    }

    /// Decoder forward of `n` new tokens per sequence (ids in `ids_in`,
    /// `[batch x n]`) at positions `*pos..*pos + n`, appending to the KV
    /// cache; then the LM head on each sequence's last position and greedy
    /// argmax into [`Net::next`], advancing `*pos` by `n`. Nothing here
    /// depends on the host's idea of the position, so a step can be
    /// captured once and replayed.
    pub fn decode(&self, ids_in: u64, batch: usize, n: usize) -> Result<()> {
        self.check(batch, n)?;
        let c = &self.cfg;
        let (h, hd, rows) = (c.hidden, c.head_dim(), batch * n);
        let kvd = c.kv_heads * hd;
        let w = h + 2 * kvd;
        let cap = self.cap.cache;
        self.launch(
            "embed",
            (rows as u32, 1, 1),
            ROW_BLOCK,
            0,
            &[
                A::P(ids_in),
                A::P(self.pos),
                A::P(self.tok),
                A::P(self.positions),
                A::P(0),
                A::P(self.x),
                A::I(n as i32),
                A::I(h as i32),
            ],
        )?;
        let layer = self.cap.batch * c.kv_heads * cap * hd;
        for (l, b) in self.blocks.iter().enumerate() {
            self.norm(self.x, self.xn, &b.n1, rows, 1, 0)?;
            self.gemm(self.xn, &b.qkv, self.qkv, rows)?;
            if b.qkv.b != 0 {
                self.bias_act(self.qkv, b.qkv.b, rows, w, 0)?;
            }
            let (kc, vc) = (self.at(self.kc, l * layer), self.at(self.vc, l * layer));
            self.launch(
                "rope_append",
                (rows as u32, 1, 1),
                ROW_BLOCK,
                0,
                &[
                    A::P(self.qkv),
                    A::I(w as i32),
                    A::P(kc),
                    A::P(vc),
                    A::P(self.cos),
                    A::P(self.sin),
                    A::P(self.pos),
                    A::I(n as i32),
                    A::I(c.heads as i32),
                    A::I(c.kv_heads as i32),
                    A::I(hd as i32),
                    A::I(cap as i32),
                ],
            )?;
            // The cache is head-major: [batch][kv_heads][cap][hd].
            self.attention(
                (self.qkv, (n * w) as u64, w as u64),
                (kc, vc, (c.kv_heads * cap * hd) as u64, (cap * hd) as u64, hd as u64),
                0,
                self.pos,
                (batch, n, cap),
                true,
            )?;
            self.gemm(self.att, &b.o, self.y, rows)?;
            self.residual(self.y, b.o.b, rows)?;
            self.norm(self.x, self.xn, &b.n2, rows, 1, 0)?;
            self.gemm(self.xn, &b.up, self.f, rows)?;
            if b.gated {
                self.elem(
                    "swiglu",
                    rows * c.ffn,
                    &[A::P(self.f), A::P(self.g), A::I(rows as i32), A::I(c.ffn as i32)],
                )?;
                self.gemm(self.g, &b.down, self.y, rows)?;
            } else {
                self.bias_act(self.f, b.up.b, rows, c.ffn, 2)?;
                self.gemm(self.f, &b.down, self.y, rows)?;
            }
            self.residual(self.y, b.down.b, rows)?;
        }
        let fnorm = self.final_norm.as_ref().context("decoders have a final norm")?;
        // Only each sequence's last position feeds the LM head.
        self.norm(self.x, self.last, fnorm, batch, n, n - 1)?;
        self.gemm(self.last, &self.head, self.logits, batch)?;
        // 1024 threads: one block per sequence reads the whole vocabulary,
        // and with 256 a 50257-token row took ~200 dependent rounds.
        self.launch(
            "argmax",
            (batch as u32, 1, 1),
            tk::ARGMAX_BLOCK,
            0,
            &[A::P(self.logits), A::I(c.vocab as i32), A::P(self.next), A::P(self.pos), A::I(n as i32)],
        )
    }

    /// Copies `first` (`[batch]` ints on the device) into [`Net::next`] and
    /// sets the position to `depth`: a decode's starting state.
    pub fn reset(&self, first: u64, batch: usize, depth: usize) -> Result<()> {
        self.launch(
            "reset_decode",
            (1, 1, 1),
            32,
            0,
            &[A::P(first), A::P(self.next), A::I(batch as i32), A::P(self.pos), A::I(depth as i32)],
        )
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
