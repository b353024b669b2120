#!/usr/bin/env python3
"""Independent reference for tfbench's real-weights test: MiniLM-L6 (BERT
architecture) sentence embeddings computed with a small numpy BERT and mean
pooling, the way sentence-transformers' all-MiniLM-L6-v2 does it
(Transformer -> mean pooling over the attention mask -> L2 normalisation).

Writes tests/fixtures/minilm_embeddings.json: the sentences, their token ids
(from the model's own tokenizer.json via the `tokenizers` package), the
attention mask of the padded batch and the expected embeddings.

Regenerate (the exact command used for the committed fixture):
    python3 -m venv /tmp/infvenv && /tmp/infvenv/bin/pip install numpy safetensors tokenizers
    /tmp/infvenv/bin/python scripts/minilm_reference.py .data/minilm tests/fixtures/minilm_embeddings.json
"""
import json
import math
import sys

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Benchmarks should verify their results before timing them.",
    "In the beginning God created the heaven and the earth.",
]


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def gelu(x):  # exact erf GELU, as BERT's "gelu"
    from math import erf
    return 0.5 * x * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))


def main(model_dir, out_path):
    cfg = json.load(open(f"{model_dir}/config.json"))
    w = {k: v.astype(np.float64) for k, v in load_file(f"{model_dir}/model.safetensors").items()}
    tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    enc = tok.encode_batch(SENTENCES)
    ids = np.array([e.ids for e in enc])
    mask = np.array([e.attention_mask for e in enc])
    b, s = ids.shape
    h, nh, eps = cfg["hidden_size"], cfg["num_attention_heads"], cfg["layer_norm_eps"]
    hd = h // nh
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:s][None]
    x = x + w["embeddings.token_type_embeddings.weight"][0]
    x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    bias = (1.0 - mask[:, None, None, :]) * -1e9
    for l in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{l}."
        lin = lambda t, n: t @ w[p + n + ".weight"].T + w[p + n + ".bias"]
        q = lin(x, "attention.self.query").reshape(b, s, nh, hd).transpose(0, 2, 1, 3)
        k = lin(x, "attention.self.key").reshape(b, s, nh, hd).transpose(0, 2, 1, 3)
        v = lin(x, "attention.self.value").reshape(b, s, nh, hd).transpose(0, 2, 1, 3)
        sc = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd) + bias
        sc = np.exp(sc - sc.max(-1, keepdims=True))
        sc /= sc.sum(-1, keepdims=True)
        a = (sc @ v).transpose(0, 2, 1, 3).reshape(b, s, h)
        x = layer_norm(x + lin(a, "attention.output.dense"), w[p + "attention.output.LayerNorm.weight"],
                       w[p + "attention.output.LayerNorm.bias"], eps)
        f = lin(gelu(lin(x, "intermediate.dense")), "output.dense")
        x = layer_norm(x + f, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
    m = mask[:, :, None].astype(np.float64)
    pooled = (x * m).sum(1) / m.sum(1)
    normed = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
    out = {
        "command": "python3 scripts/minilm_reference.py .data/minilm tests/fixtures/minilm_embeddings.json",
        "reference": "numpy float64 BERT forward, mean pooling over the attention mask, L2 normalisation",
        "sentences": SENTENCES,
        "ids": ids.tolist(),
        "attention_mask": mask.tolist(),
        "mean_pooled": [[round(float(v), 7) for v in r] for r in pooled],
        "normalized": [[round(float(v), 7) for v in r] for r in normed],
    }
    with open(out_path, "w") as f:
        json.dump(out, f)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
