#!/usr/bin/env python3
"""The inference suite's peer: the same shapes in PyTorch (random weights,
torch.set_num_threads(N)), written as a tfbench results file so tfbench's own
`compare` puts the two side by side.

It reads a tfbench results file (the template: same machine, same case ids),
runs every case it supports in PyTorch (encoder, prefill and decode of the
bert*/gpt2* presets with `shape=preset`, f32), replaces the samples and
medians of those cases with PyTorch's timings and drops the rest.

    cargo run --release -- run --suite inference 'model=(bert-base|gpt2),' -o ours.json
    pip install torch   # CPU wheel; not installable on the machine this was written on
    python3 scripts/torch_inference.py ours.json torch.json --threads 2
    cargo run --release -- compare --baseline torch.json --against ours.json

The models are plain torch modules written from the same description as
src/suites/inference (post-norm BERT with erf GELU; pre-norm GPT-2 with tanh
GELU, tied LM head, a KV cache, logits for the last position only).
"""
import argparse
import copy
import json
import math
import time

import torch
import torch.nn.functional as F

SHAPES = {  # layers, hidden, heads, ffn, vocab, positions
    "bert-tiny": (2, 128, 2, 512, 30522, 512), "bert-base": (12, 768, 12, 3072, 30522, 512),
    "bert-large": (24, 1024, 16, 4096, 30522, 512), "gpt2-tiny": (2, 128, 2, 512, 4096, 1024),
    "gpt2": (12, 768, 12, 3072, 50257, 1024), "gpt2-medium": (24, 1024, 16, 4096, 50257, 1024),
}


class Model:
    def __init__(self, name):
        L, h, self.nh, f, v, p = SHAPES[name]
        r = lambda *s: torch.randn(*s) * 0.02
        self.h, self.L, self.bert = h, L, name.startswith("bert")
        self.tok, self.pos = r(v, h), r(p, h)
        self.blocks = [dict(qkv=r(3 * h, h), bqkv=r(3 * h), o=r(h, h), bo=r(h), up=r(f, h), bup=r(f), down=r(h, f),
                            bdown=r(h), n1=(torch.ones(h), torch.zeros(h)), n2=(torch.ones(h), torch.zeros(h)))
                       for _ in range(L)]

    def attn(self, x, b, past=None):
        B, T, h = x.shape
        q, k, v = F.linear(x, b["qkv"], b["bqkv"]).view(B, T, 3, self.nh, h // self.nh).permute(2, 0, 3, 1, 4)
        if past is not None:
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        causal = not self.bert and T > 1
        o = F.scaled_dot_product_attention(q, k, v, is_causal=causal and past is None)
        return F.linear(o.transpose(1, 2).reshape(B, T, h), b["o"], b["bo"]), (k, v)

    def encode(self, ids):
        x = F.layer_norm(self.tok[ids] + self.pos[: ids.shape[1]], (self.h,))
        for b in self.blocks:
            x = F.layer_norm(x + self.attn(x, b)[0], (self.h,), *b["n1"])
            x = F.layer_norm(x + F.linear(F.gelu(F.linear(x, b["up"], b["bup"])), b["down"], b["bdown"]), (self.h,), *b["n2"])
        return x

    def decode(self, ids, cache):
        start = 0 if cache[0] is None else cache[0][0].shape[2]
        x = self.tok[ids] + self.pos[start:start + ids.shape[1]]
        for i, b in enumerate(self.blocks):
            a, cache[i] = self.attn(F.layer_norm(x, (self.h,), *b["n1"]), b, cache[i])
            x = x + a
            y = F.layer_norm(x, (self.h,), *b["n2"])
            x = x + F.linear(F.gelu(F.linear(y, b["up"], b["bup"]), approximate="tanh"), b["down"], b["bdown"])
        return F.linear(F.layer_norm(x[:, -1], (self.h,)), self.tok)


def timed(fn, reps):
    fn()
    out = []
    for _ in range(reps):
        t = time.perf_counter_ns()
        fn()
        out.append(time.perf_counter_ns() - t)
    return out


def run_case(c, reps):
    p = c["params"]
    if p.get("shape", "preset") != "preset" or p.get("dtype") != "f32" or p.get("layers") != "full" \
            or p.get("model") not in SHAPES:
        return None
    m, B = Model(p["model"]), int(p["batch"])
    v = SHAPES[p["model"]][4]
    with torch.inference_mode():
        if c["benchmark"] == "encoder":
            ids = torch.randint(1, v, (B, int(p["seq"])))
            return timed(lambda: m.encode(ids), reps)
        if c["benchmark"] == "prefill":
            ids = torch.randint(1, v, (B, int(p["prompt"])))
            return timed(lambda: m.decode(ids, [None] * m.L).argmax(-1), reps)
        if c["benchmark"] == "decode":
            depth, gen = int(p["depth"]), int(p["gen"])
            prompt = torch.randint(1, v, (B, max(depth, 1)))

            def generate():
                cache = [None] * m.L
                tok = m.decode(prompt, cache).argmax(-1, keepdim=True)
                t0 = time.perf_counter_ns()
                for _ in range(gen):
                    tok = m.decode(tok, cache).argmax(-1, keepdim=True)
                return time.perf_counter_ns() - t0
            generate()
            return [generate() for _ in range(reps)]
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("template")
    ap.add_argument("output")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=10)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    report = json.load(open(a.template))
    cases = []
    for c in report["cases"]:
        ns = run_case(c, a.reps) if c["status"]["state"] == "ok" else None
        if ns is None:
            continue
        c = copy.deepcopy(c)
        c["samples"] = [{"iterations": 1, "nanos": float(x), "round": 0} for x in ns]
        s = sorted(ns)
        med = float(s[len(s) // 2])
        for key in ("median", "mean"):
            c["estimates"][key].update(point=med, lower=float(s[0]), upper=float(s[-1]))
        c["notes"] = [f"PyTorch {torch.__version__}, {a.threads} threads (scripts/torch_inference.py)"]
        c["metrics"] = []
        cases.append(c)
        print(f"{c['id']}: {med / 1e6:.2f} ms")
    report["cases"] = cases
    report["targets"] = []
    json.dump(report, open(a.output, "w"), indent=1)


if __name__ == "__main__":
    main()
