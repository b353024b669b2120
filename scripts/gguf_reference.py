#!/usr/bin/env python3
"""An independent float64 run of a llama-architecture GGUF file, for the
fixture tests/fixtures/smollm2_reference.json.

Nothing of tfbench is used: the file is read by the `gguf` PyPI package
(ggml's own Python reader), every tensor is dequantized by
`gguf.quants.dequantize` (ggml's reference formats), and the forward pass
follows llama.cpp's graph in plain numpy: RMSNorm, ggml's "normal" RoPE that
rotates adjacent pairs (the file's Q/K rows are stored for it; tfbench
instead un-permutes the rows and rotates halves, so agreement also checks
that step), grouped-query attention, SwiGLU, tied or untied output.

The prompt is a fixed list of whole-word vocabulary entries looked up in
`tokenizer.ggml.tokens` (no BPE involved). Greedy continuation of 32 tokens;
for each position the top-8 logits are kept.

    python3 -m venv /tmp/refenv && /tmp/refenv/bin/pip install gguf numpy
    /tmp/refenv/bin/python scripts/gguf_reference.py .data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
        > tests/fixtures/smollm2_reference.json
"""
import json
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

WORDS = ["The", "Ġcapital", "Ġof", "ĠFrance", "Ġis"]
GENERATE = 32
TOP = 8


def field(r, key):
    f = r.fields[key]
    return f.contents() if hasattr(f, "contents") else f.parts[f.data[0]][0]


def main(path):
    r = GGUFReader(path)
    arch = field(r, "general.architecture")
    assert arch == "llama", arch
    k = lambda s: f"{arch}.{s}"
    n_layer = int(field(r, k("block_count")))
    heads = int(field(r, k("attention.head_count")))
    kv_heads = int(field(r, k("attention.head_count_kv")))
    eps = float(field(r, k("attention.layer_norm_rms_epsilon")))
    base = float(field(r, k("rope.freq_base")))
    tokens = field(r, "tokenizer.ggml.tokens")
    vocab = {t: i for i, t in enumerate(tokens)}
    ids = [vocab[w] for w in WORDS]

    w = {}
    for t in r.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float64)
        # ggml dims are fastest first; numpy wants [rows, cols].
        w[t.name] = a.reshape([int(d) for d in reversed(t.shape)])
    emb = w["token_embd.weight"]
    out = w.get("output.weight", emb)
    h = emb.shape[1]
    hd = h // heads
    group = heads // kv_heads

    def rms(x, g):
        return x / np.sqrt(np.mean(x * x) + eps) * g

    def rope(x, pos):
        # ggml mode 0: pairs (2i, 2i+1) of each head.
        x = x.reshape(-1, hd // 2, 2).copy()
        theta = pos * base ** (-2.0 * np.arange(hd // 2) / hd)
        c, s = np.cos(theta), np.sin(theta)
        x0, x1 = x[:, :, 0].copy(), x[:, :, 1].copy()
        x[:, :, 0] = x0 * c - x1 * s
        x[:, :, 1] = x0 * s + x1 * c
        return x.reshape(-1)

    kc = [[] for _ in range(n_layer)]
    vc = [[] for _ in range(n_layer)]

    def step(tok, pos):
        x = emb[tok].copy()
        for l in range(n_layer):
            p = lambda s: w[f"blk.{l}.{s}.weight"]
            a = rms(x, p("attn_norm"))
            q = rope(p("attn_q") @ a, pos).reshape(heads, hd)
            kc[l].append(rope(p("attn_k") @ a, pos).reshape(kv_heads, hd))
            vc[l].append((p("attn_v") @ a).reshape(kv_heads, hd))
            K, V = np.stack(kc[l]), np.stack(vc[l])  # [t, kv_heads, hd]
            att = np.zeros((heads, hd))
            for hh in range(heads):
                sc = K[:, hh // group, :] @ q[hh] / np.sqrt(hd)
                pr = np.exp(sc - sc.max())
                pr /= pr.sum()
                att[hh] = pr @ V[:, hh // group, :]
            x = x + p("attn_output") @ att.reshape(-1)
            f = rms(x, p("ffn_norm"))
            g = p("ffn_gate") @ f
            x = x + p("ffn_down") @ (g / (1 + np.exp(-g)) * (p("ffn_up") @ f))
        return out @ rms(x, w["output_norm.weight"])

    positions = []
    seq = list(ids)
    for pos in range(len(ids) + GENERATE - 1):
        logits = step(seq[pos], pos)
        top = np.argsort(-logits)[:TOP]
        positions.append({"top_ids": [int(i) for i in top], "top_logits": [float(logits[i]) for i in top]})
        if pos >= len(ids) - 1:
            seq.append(int(top[0]))
    json.dump(
        {
            "source": "scripts/gguf_reference.py: gguf (PyPI) dequantize + numpy float64 llama forward",
            "file": path.split("/")[-1],
            "prompt_words": WORDS,
            "prompt_ids": ids,
            "greedy_ids": seq[len(ids):],
            "positions": positions,
        },
        sys.stdout,
        indent=1,
    )
    print()


if __name__ == "__main__":
    main(sys.argv[1])
