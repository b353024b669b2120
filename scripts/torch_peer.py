#!/usr/bin/env python3
"""tfbench's PyTorch peer: the same workloads in PyTorch, written as a tfbench
results file so tfbench's own `compare` puts the two side by side.

It reads a tfbench results file (the template: same machine, same case ids),
runs every case it has a PyTorch twin for, replaces those cases' samples,
estimates and throughput with PyTorch's timings and drops the rest:

- inference: encoder, prefill and decode of the bert*/gpt2* presets with
  `shape=preset`, f32 (plain torch modules written from the same description
  as src/suites/inference: post-norm BERT with erf GELU; pre-norm GPT-2 with
  tanh GELU, tied LM head, a KV cache, logits for the last position only);
- optim: `optimizer_step` for sgd, sgd_wd, sgd_momentum, sgd_nesterov, adam
  and adamw (PyTorch has no Lion, and its Adafactor factors only 2-D
  parameters, unlike the suite's flat vector; form=fused -> `fused=True`, form=unfused ->
  `foreach=True`; one flat parameter tensor, the suite's hyperparameters);
- tensor: `matmul` (every impl's case gets `torch.mm` at its shape and
  thread count; filter your run to one impl).

    cargo run --release -- run --suite inference 'model=(bert-base|gpt2),' -o ours.json
    pip install torch   # the PyPI wheel, about 540 MB plus its CUDA libraries
    python3 scripts/torch_peer.py ours.json torch.json
    cargo run --release -- compare --baseline torch.json --against ours.json

`threads=1` cases run with torch.set_num_threads(1), all others with
--threads (default: all cores). Every case is warmed up, then timed --reps
times and for at least --secs (see `timed`); the median is the headline.
"""
import argparse
import copy
import json
import math
import os
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


def timed(fn, reps, secs):
    """Nanoseconds per call: warm up for 0.3 s (at least one call), then time
    calls until there are `reps` of them and `secs` have passed (at most 10000
    calls; a call slower than secs/reps stops after 5*secs, keeping 3 or more)."""
    t_end = time.perf_counter() + 0.3
    fn()
    while time.perf_counter() < t_end:
        fn()
    out, start = [], time.perf_counter()
    while True:
        t = time.perf_counter_ns()
        fn()
        out.append(time.perf_counter_ns() - t)
        elapsed = time.perf_counter() - start
        if len(out) >= 10000 or (len(out) >= reps and elapsed >= secs) or (len(out) >= 3 and elapsed >= 5 * secs):
            return out


def inference_case(c, reps):
    p = c["params"]
    if p.get("shape", "preset") != "preset" or p.get("dtype") != "f32" or p.get("layers") != "full" \
            or p.get("model") not in SHAPES:
        return None
    m, B = Model(p["model"]), int(p["batch"])
    v = SHAPES[p["model"]][4]
    with torch.inference_mode():
        if c["benchmark"] == "encoder":
            ids = torch.randint(1, v, (B, int(p["seq"])))
            return timed(lambda: m.encode(ids), reps, MAX_SECS)
        if c["benchmark"] == "prefill":
            ids = torch.randint(1, v, (B, int(p["prompt"])))
            return timed(lambda: m.decode(ids, [None] * m.L).argmax(-1), reps, MAX_SECS)
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
            out, start = [], time.perf_counter()
            while len(out) < 3 or (len(out) < reps and time.perf_counter() - start < 5 * MAX_SECS):
                out.append(generate())
            return out
    return None


# The optim suite's hyperparameters (src/suites/optim/optimizers.rs, Kind::default_hyper).
OPTIMIZERS = {
    "sgd": lambda p, kw: torch.optim.SGD(p, lr=1e-2, **kw),
    "sgd_wd": lambda p, kw: torch.optim.SGD(p, lr=1e-2, weight_decay=1e-2, **kw),
    "sgd_momentum": lambda p, kw: torch.optim.SGD(p, lr=1e-2, momentum=0.9, **kw),
    "sgd_nesterov": lambda p, kw: torch.optim.SGD(p, lr=1e-2, momentum=0.9, nesterov=True, **kw),
    "adam": lambda p, kw: torch.optim.Adam(p, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, **kw),
    "adamw": lambda p, kw: torch.optim.AdamW(p, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, **kw),
}


def optim_case(c, reps):
    p = c["params"]
    make = OPTIMIZERS.get(p.get("optimizer"))
    if c["benchmark"] != "optimizer_step" or make is None:
        return None
    n = int(p["params"])
    w = torch.randn(n) * 0.02
    w.grad = torch.randn(n) * 1e-2
    kw = {"fused": True} if p["form"] == "fused" else {"foreach": True}
    opt = make([w], kw)
    with torch.no_grad():
        return timed(opt.step, reps, MAX_SECS)


def tensor_case(c, reps):
    p = c["params"]
    if c["benchmark"] != "matmul":
        return None
    m, k, n = (int(x) for x in p["shape"].split("x"))
    a, b = torch.randn(m, k), torch.randn(k, n)
    out = torch.empty(m, n)
    return timed(lambda: torch.mm(a, b, out=out), reps, MAX_SECS)


SUITES = {"inference": inference_case, "optim": optim_case, "tensor": tensor_case}
MAX_SECS = 2.0


def rescale_throughput(c, old_median, new_median):
    """Rates follow the new median; the interval spans the fastest and slowest sample."""
    for t in c.get("throughput", []):
        old_point = t["rate"]["point"]
        t["rate"]["point"] = t["per_iteration"] / (new_median / 1e9)
        t["rate"]["lower"] = t["per_iteration"] / (c["estimates"]["median"]["upper"] / 1e9)
        t["rate"]["upper"] = t["per_iteration"] / (c["estimates"]["median"]["lower"] / 1e9)
        if t.get("pct_of_peak") is not None and old_point:
            t["pct_of_peak"] *= t["rate"]["point"] / old_point


def main():
    global MAX_SECS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("template", help="a tfbench results file (JSON) from this machine")
    ap.add_argument("output", help="where to write PyTorch's results (tfbench JSON)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for cases not pinned to 1")
    ap.add_argument("--reps", type=int, default=10, help="minimum timed repetitions per case")
    ap.add_argument("--secs", type=float, default=2.0, help="time budget per case (seconds)")
    a = ap.parse_args()
    MAX_SECS = a.secs
    report = json.load(open(a.template))
    cases, skipped = [], 0
    for c in report["cases"]:
        run = SUITES.get(c["suite"])
        if run is None or c["status"]["state"] != "ok":
            skipped += 1
            continue
        threads = 1 if str(c["params"].get("threads")) == "1" else a.threads
        torch.set_num_threads(threads)
        try:
            ns = run(c, a.reps)
        except (RuntimeError, TypeError, ValueError) as e:  # e.g. no fused kernel for this optimizer on CPU
            print(f"{c['id']}: skipped ({type(e).__name__}: {e})")
            ns = None
        if ns is None:
            skipped += 1
            continue
        c = copy.deepcopy(c)
        c["samples"] = [{"iterations": 1, "nanos": float(x), "round": 0} for x in ns]
        s = sorted(ns)
        med, old = float(s[len(s) // 2]), c["estimates"]["median"]["point"]
        for key in ("median", "mean"):
            c["estimates"][key].update(point=med, lower=float(s[0]), upper=float(s[-1]))
        rescale_throughput(c, old, med)
        c["notes"] = [f"PyTorch {torch.__version__}, {threads} threads (scripts/torch_peer.py); "
                      f"interval = fastest..slowest of {len(s)} samples"]
        c["metrics"] = []
        c["alloc"] = None
        cases.append(c)
        print(f"{c['id']}: {med / 1e6:.3f} ms")
    report["cases"] = cases
    report["targets"] = []
    tmp = a.output + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1)
    os.replace(tmp, a.output)
    print(f"{len(cases)} cases written to {a.output} ({skipped} without a PyTorch twin)")


if __name__ == "__main__":
    main()
