//! The launch sequences of a forward pass on a [`Net`]: the encoder's, and
//! the decoder's (one call = `n` new tokens per sequence, LM head and greedy
//! argmax included), as cuBLAS GEMMs and the transformer kernels. Nothing
//! here allocates or synchronises, so a decode step can be captured.

use super::*;

impl Net {
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
}
