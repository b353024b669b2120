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
  thread count; filter your run to one impl) and `reduction` op=layernorm;
- nn and sci: conv (every algo's case gets PyTorch's own convolution;
  layout=nhwc as channels_last), pool, adaptive_pool, norm, rnn, attention
  (algo=materialised under SDPBackend.MATH, flash under FLASH_ATTENTION),
  fft (torch.fft), sparse_convert/spmv/spmm (torch.sparse; every impl's
  case gets PyTorch's), from scripts/torch_peer_nn.py; which case maps to
  which call, and why a case has none, is scripts/torch_twins.py's (plain
  Python, tested against `tfbench list` without torch);
- with `--device cuda`: the tensor suite's GPU cases (ids ending in
  `device=cuda:N`: creation, binary, unary, reduction, gpu_gemm, gpu_bmm,
  transfer, launch) on the same GPU, from scripts/torch_peer_cuda.py (run on
  an H100; figures in docs/cuda.md), and the inference twins above on the
  GPU in f32, f16 or bf16 (encoder, prefill, decode; `decode_graph`'s twin
  is eager and says so; run on an H100 on 2026-11-27, figures in
  docs/cuda-inference.md). Without it, GPU cases are skipped.

A case with no twin here (another suite or benchmark, a parameter the twin
does not model, the other device's case) is written as skipped with the
reason, and printed, so `compare` lists it; never silently dropped.

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
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import torch_peer_nn

SHAPES = {  # layers, hidden, heads, ffn, vocab, positions
    "bert-tiny": (2, 128, 2, 512, 30522, 512), "bert-base": (12, 768, 12, 3072, 30522, 512),
    "bert-large": (24, 1024, 16, 4096, 30522, 512), "gpt2-tiny": (2, 128, 2, 512, 4096, 1024),
    "gpt2": (12, 768, 12, 3072, 50257, 1024), "gpt2-medium": (24, 1024, 16, 4096, 50257, 1024),
}


DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


class Model:
    """The preset's shape with random weights, on `device` in `dtype` (the
    GPU twins: f32, f16 or bf16; the CPU twins: f32)."""
    def __init__(self, name, device="cpu", dtype=torch.float32):
        L, h, self.nh, f, v, p = SHAPES[name]
        r = lambda *s: (torch.randn(*s) * 0.02).to(device=device, dtype=dtype)
        one = lambda: torch.ones(h, device=device, dtype=dtype)
        zero = lambda: torch.zeros(h, device=device, dtype=dtype)
        self.h, self.L, self.bert, self.device = h, L, name.startswith("bert"), device
        self.tok, self.pos = r(v, h), r(p, h)
        self.blocks = [dict(qkv=r(3 * h, h), bqkv=r(3 * h), o=r(h, h), bo=r(h), up=r(f, h), bup=r(f), down=r(h, f),
                            bdown=r(h), n1=(one(), zero()), n2=(one(), zero()))
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


class VerifyError(Exception):
    """PyTorch's result disagrees with the independent check: the case fails."""


def sampling(n, reps, warm_ns, verify_ns, stopped_by):
    """The SamplingInfo record of a peer case (one call per sample)."""
    return {"warm_up_ns": float(warm_ns), "iterations_per_sample": 1, "samples": n, "requested_samples": reps,
            "stopped_by": stopped_by, "prepare_ns": 0.0, "verify_ns": float(verify_ns)}


def timed(fn, reps, secs):
    """(nanoseconds per call, sampling record): warm up for 0.3 s (at least
    one call), then time calls until there are `reps` of them and `secs` have
    passed (at most 10000 calls; a call slower than secs/reps stops after
    5*secs, keeping 3 or more)."""
    w0 = time.perf_counter_ns()
    t_end = time.perf_counter() + 0.3
    fn()
    while time.perf_counter() < t_end:
        fn()
    warm = time.perf_counter_ns() - w0
    out, start = [], time.perf_counter()
    while True:
        t = time.perf_counter_ns()
        fn()
        out.append(time.perf_counter_ns() - t)
        elapsed = time.perf_counter() - start
        if len(out) >= 10000:
            return out, sampling(len(out), reps, warm, 0, "sample_size")
        if len(out) >= reps and elapsed >= secs:
            return out, sampling(len(out), reps, warm, 0, "measurement_time")
        if len(out) >= 3 and elapsed >= 5 * secs:
            return out, sampling(len(out), reps, warm, 0, "max_time")


def check_finite(x, shape, what):
    """Shape and finiteness of a model output (the check tfbench's own full-shape runs make)."""
    if tuple(x.shape) != tuple(shape) or not bool(torch.isfinite(x).all()):
        raise VerifyError(f"{what}: shape {tuple(x.shape)} (want {tuple(shape)}) or non-finite values")
    return {"passed": True, "reference": f"{what}: shape {tuple(shape)} and finite", "max_error": None, "detail": ""}


def inference_case(c, reps, device="cpu"):
    """PyTorch's twin of an inference case: f32 on the CPU; with `device` a
    GPU (`--device cuda`), f32, f16 or bf16 there, eager (tfbench's
    `decode_graph` replays CUDA Graphs; its twin here does not, and says so
    in the case's notes). Each GPU call is timed up to a synchronise."""
    p = c["params"]
    gpu = device != "cpu"
    dtypes = DTYPES if gpu else {"f32": torch.float32}
    if p.get("shape", "preset") != "preset" or p.get("dtype") not in dtypes or p.get("layers") != "full" \
            or p.get("model") not in SHAPES:
        return None
    m, B = Model(p["model"], device, dtypes[p["dtype"]]), int(p["batch"])
    v = SHAPES[p["model"]][4]
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    done = lambda f: (lambda: (f(), sync()))
    with torch.inference_mode():
        if c["benchmark"] == "encoder":
            ids = torch.randint(1, v, (B, int(p["seq"])), device=device)
            ok = check_finite(m.encode(ids), (B, int(p["seq"]), m.h), "encoder output")
            return (*timed(done(lambda: m.encode(ids)), reps, MAX_SECS), ok)
        if c["benchmark"] == "prefill":
            ids = torch.randint(1, v, (B, int(p["prompt"])), device=device)
            ok = check_finite(m.decode(ids, [None] * m.L), (B, v), "last-position logits")
            return (*timed(done(lambda: m.decode(ids, [None] * m.L).argmax(-1)), reps, MAX_SECS), ok)
        if c["benchmark"] in ("decode", "decode_graph"):
            depth, gen = int(p["depth"]), int(p["gen"])
            prompt = torch.randint(1, v, (B, max(depth, 1)), device=device)

            def generate(check=False):
                cache = [None] * m.L
                tok = m.decode(prompt, cache).argmax(-1, keepdim=True)
                sync()
                t0 = time.perf_counter_ns()
                for _ in range(gen):
                    logits = m.decode(tok, cache)
                    tok = logits.argmax(-1, keepdim=True)
                sync()
                elapsed = time.perf_counter_ns() - t0
                return check_finite(logits, (B, v), "decode-step logits") if check else elapsed
            w0 = time.perf_counter_ns()
            ok = generate(check=True)
            warm = time.perf_counter_ns() - w0
            out, start = [], time.perf_counter()
            while len(out) < 3 or (len(out) < reps and time.perf_counter() - start < 5 * MAX_SECS):
                out.append(generate())
            stop = "sample_size" if len(out) >= reps else "max_time"
            return out, sampling(len(out), reps, warm, 0, stop), ok
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
    if c["benchmark"] != "optimizer_step":
        return None
    if make is None:
        return f"optimizer={p.get('optimizer')}: PyTorch has no twin of it here (twins: {', '.join(OPTIMIZERS)})"
    n = int(p["params"])
    w = torch.randn(n) * 0.02
    w.grad = torch.randn(n) * 1e-2
    kw = {"fused": True} if p["form"] == "fused" else {"foreach": True}
    opt = make([w], kw)
    with torch.no_grad():
        # The first step of 4097 values against the f64 textbook rule.
        w0, g = w[:4097].double(), w.grad[:4097].double()
        opt.step()
        want = first_step(p["optimizer"], w0, g)
        err = (w[:4097].double() - want).abs()
        tol = 1e-6 + 1e-5 * want.abs()
        if not bool((err <= tol).all()):
            raise VerifyError(f"first step: max error {float(err.max()):.3g} beyond atol 1e-6 + rtol 1e-5")
        ok = {"passed": True, "reference": "first step of the f64 textbook rule (4097 values)",
              "max_error": float(err.max()), "detail": "within atol 1e-6 + rtol 1e-5"}
        return (*timed(opt.step, reps, MAX_SECS), ok)


def first_step(kind, w, g):
    """The parameters after one step from zero state (f64): momentum buffers
    start as the gradient, and Adam's bias correction makes m/sqrt(v) = g/|g|."""
    if kind == "sgd":
        return w - 1e-2 * g
    if kind == "sgd_wd":
        return w - 1e-2 * (g + 1e-2 * w)
    if kind == "sgd_momentum":
        return w - 1e-2 * g
    if kind == "sgd_nesterov":
        return w - 1e-2 * 1.9 * g
    if kind == "adam":
        return w - 1e-3 * g / (g.abs() + 1e-8)
    if kind == "adamw":
        return w * (1 - 1e-3 * 1e-2) - 1e-3 * g / (g.abs() + 1e-8)
    raise ValueError(kind)


def tensor_case(c, reps):
    p = c["params"]
    if c["benchmark"] != "matmul":
        return None
    m, k, n = (int(x) for x in p["shape"].split("x"))
    a, b = torch.randn(m, k), torch.randn(k, n)
    out = torch.empty(m, n)
    torch.mm(a, b, out=out)
    # 64 sampled entries (corners included) against f64 dot products, within
    # the suite's bound 8 sqrt(k) eps sum|a b|.
    gen = torch.Generator().manual_seed(7)
    rows = torch.cat([torch.tensor([0, m - 1]), torch.randint(0, m, (62,), generator=gen)])
    cols = torch.cat([torch.tensor([0, n - 1]), torch.randint(0, n, (62,), generator=gen)])
    prod = a[rows].double() * b[:, cols].double().T
    want, mag = prod.sum(1), prod.abs().sum(1)
    err = (out[rows, cols].double() - want).abs()
    if not bool((err <= 8 * math.sqrt(k) * 2.0**-23 * mag + 1e-30).all()):
        raise VerifyError(f"C differs from f64 dot products by up to {float(err.max()):.3g}")
    ok = {"passed": True, "reference": "64 sampled entries against f64 dot products", "max_error": float(err.max()),
          "detail": "within 8 sqrt(k) eps sum|a b|"}
    return (*timed(lambda: torch.mm(a, b, out=out), reps, MAX_SECS), ok)


def nn_sci_case(c, reps):
    """The nn/sci twins (scripts/torch_peer_nn.py, mapped by scripts/torch_twins.py)."""
    return torch_peer_nn.twin_case(c, reps, timed, MAX_SECS)


SUITES = {"inference": inference_case, "optim": optim_case,
          "tensor": lambda c, reps: (nn_sci_case if c["benchmark"] == "reduction" else tensor_case)(c, reps),
          "nn": nn_sci_case, "sci": nn_sci_case}
MAX_SECS = 2.0


def skipped_case(c, reason):
    """Case `c` recorded as skipped, with the reason, so `compare` lists it
    (a case with no PyTorch twin is never silently dropped)."""
    c = copy.deepcopy(c)
    c.update(status={"state": "skipped", "reason": f"PyTorch peer: {reason}"}, sampling=None, samples=[],
             estimates=None, outliers=None, throughput=[], alloc=None, metrics=[], verification=None, bound=None,
             notes=[], roof=None)
    return c


def quantile(s, p):
    """Linear interpolation between order statistics (tfbench's quantile_sorted)."""
    h = (len(s) - 1) * p
    lo = int(h)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (h - lo) * (s[hi] - s[lo])


def estimates(ns):
    """tfbench's Estimates record from PyTorch's samples. The median's
    interval is fastest..slowest sample, which holds the median with
    probability 1 - 2^(1-n) (the level given); the mean's is a normal
    approximation at 95%."""
    s = sorted(float(x) for x in ns)
    n, med, mean = len(s), quantile(s, 0.5), statistics.fmean(s)
    sd = statistics.stdev(s) if n > 1 else 0.0
    half = 1.96 * sd / math.sqrt(n)
    return {
        "median": {"point": med, "lower": s[0], "upper": s[-1], "level": 1 - 2.0 ** (1 - n)},
        "mean": {"point": mean, "lower": mean - half, "upper": mean + half, "level": 0.95},
        "std_dev": sd, "mad": statistics.median(abs(x - med) for x in s), "min": s[0], "max": s[-1],
        "p50": med, "p90": quantile(s, 0.9), "p99": quantile(s, 0.99),
        "iqr_over_median": (quantile(s, 0.75) - quantile(s, 0.25)) / med,
    }


def outliers(ns):
    """Tukey fences at 1.5 and 3 IQR, counted (nothing removed)."""
    s = sorted(float(x) for x in ns)
    q1, q3 = quantile(s, 0.25), quantile(s, 0.75)
    iqr = q3 - q1
    count = lambda f: sum(1 for x in s if f(x))
    return {"low_severe": count(lambda x: x < q1 - 3 * iqr),
            "low_mild": count(lambda x: q1 - 3 * iqr <= x < q1 - 1.5 * iqr),
            "high_mild": count(lambda x: q3 + 1.5 * iqr < x <= q3 + 3 * iqr),
            "high_severe": count(lambda x: x > q3 + 3 * iqr), "removed": 0}


def rescale_throughput(c, est):
    """Rates from PyTorch's median and its interval; % of peak scaled alike."""
    for t in c.get("throughput", []):
        old_point = t["rate"]["point"]
        t["rate"] = {"point": t["per_iteration"] / (est["median"]["point"] / 1e9),
                     "lower": t["per_iteration"] / (est["median"]["upper"] / 1e9),
                     "upper": t["per_iteration"] / (est["median"]["lower"] / 1e9),
                     "level": est["median"]["level"]}
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
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cpu: the CPU cases; cuda: the GPU cases (ids with device=cuda:N)")
    a = ap.parse_args()
    if a.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("torch_peer.py: --device cuda, but PyTorch sees no CUDA GPU")
        import torch_peer_cuda
        SUITES.clear()
        SUITES["tensor"] = lambda c, reps: torch_peer_cuda.cuda_case(c, reps, MAX_SECS)
        SUITES["inference"] = lambda c, reps: inference_case(c, reps, torch_peer_cuda.device_of(c["id"]))
        peer_errors = (VerifyError, torch_peer_cuda.VerifyError)
    else:
        peer_errors = (VerifyError, torch_peer_nn.VerifyError)
    MAX_SECS = a.secs
    try:
        with open(a.template) as f:
            report = json.load(f)
        report["cases"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"torch_peer.py: {a.template} is not a readable tfbench results file: {e}")
    cases, skipped, failed = [], 0, 0
    started = time.time()
    for c in report["cases"]:
        run = SUITES.get(c["suite"])
        on_gpu = "device=cuda" in c["id"]
        if c["status"]["state"] != "ok":
            skipped += 1
            continue
        why = (f"no PyTorch twin for the {c['suite']} suite" if run is None else
               "a GPU case; this run is --device cpu" if on_gpu and a.device != "cuda" else
               "a CPU case; this run is --device cuda" if a.device == "cuda" and not on_gpu else None)
        if why:
            print(f"{c['id']}: skipped ({why})")
            cases.append(skipped_case(c, why))
            skipped += 1
            continue
        threads = 1 if str(c["params"].get("threads")) == "1" else a.threads
        torch.set_num_threads(threads)
        c = copy.deepcopy(c)
        try:
            got = run(c, a.reps)
        except peer_errors as e:
            # Loud, and recorded as tfbench records a failed self-check.
            print(f"{c['id']}: VERIFICATION FAILED: {e}", file=sys.stderr)
            c.update(status={"state": "failed", "phase": "verify", "reason": str(e)}, sampling=None, samples=[],
                     estimates=None, outliers=None, throughput=[], alloc=None, metrics=[],
                     verification={"passed": False, "reference": "scripts/torch_peer.py", "max_error": None,
                                   "detail": str(e)})
            cases.append(c)
            failed += 1
            continue
        except torch_peer_nn.Skip as e:
            got = str(e)
        except (RuntimeError, TypeError, ValueError) as e:  # e.g. no fused kernel for this optimizer on CPU
            got = f"{type(e).__name__}: {e}".splitlines()[0]
        if got is None or isinstance(got, str):
            why = got or f"no PyTorch twin for {c['suite']}/{c['benchmark']} with these parameters"
            print(f"{c['id']}: skipped ({why})")
            cases.append(skipped_case(c, why))
            skipped += 1
            continue
        ns, info, check = got
        est = estimates(ns)
        rescale_throughput(c, est)
        # Every figure below is PyTorch's; nothing of tfbench's run is kept
        # but the case's identity, parameters and declared work.
        # GPU twins time several calls per sample (ns holds the time per call).
        it = info.get("iterations_per_sample", 1)
        c.update(samples=[{"iterations": it, "nanos": float(x) * it, "round": 0} for x in ns], estimates=est,
                 outliers=outliers(ns), sampling=info, verification=check, metrics=[], alloc=None,
                 notes=[f"PyTorch {torch.__version__}, "
                        + (f"{torch.cuda.get_device_name()}" if on_gpu else f"{threads} threads")
                        + (", eager: no CUDA Graph" if c["benchmark"] == "decode_graph" else "")
                        + " (scripts/torch_peer.py)"])
        cases.append(c)
        print(f"{c['id']}: {est['median']['point'] / 1e6:.3f} ms")
    report["cases"] = cases
    report["targets"] = []
    # A run of its own: `compare` must not take it for the template's run
    # (same id: "a run compared with itself"), and the template's drift
    # canaries and load records describe tfbench's run, not PyTorch's.
    report["run_id"] = f"{report.get('run_id', 'run')}-torch-peer-{os.getpid()}"
    report["started_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
    report["canaries"] = []
    report["load"] = []
    # Marks the figures as another program's, so `compare` does not take a
    # shift of every case against tfbench for the machine's drift.
    report["environment"]["peer"] = f"PyTorch {torch.__version__}" + (
        f" on {torch.cuda.get_device_name()}" if a.device == "cuda" else f", {a.threads} threads")
    tmp = a.output + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1)
    os.replace(tmp, a.output)
    print(f"{len(cases)} cases written to {a.output} ({skipped} skipped: no PyTorch twin or not ok in the "
          f"template; {failed} failed)")
    # tfbench's exit code for failed cases (results still written).
    sys.exit(3 if failed else 0)


if __name__ == "__main__":
    main()
