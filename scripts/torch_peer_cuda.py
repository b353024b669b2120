"""PyTorch twins of tfbench's GPU tensor cases (`device=cuda:N` ids), for
scripts/torch_peer.py --device cuda. Run on an H100 with PyTorch 2.11 on
2026-11-25: every twin verified (docs/cuda.md has the figures).

Each twin builds the case's inputs on the GPU, checks PyTorch's result
against an f64 reference on the CPU with tfbench's tolerances, and times
batches of calls between torch.cuda.synchronize() calls (as tfbench times a
sample of iterations and then syncs the stream); a sample's time divided by
its calls is one value. `launch/mode=launch_sync` synchronises after every
call, as tfbench's case does.
"""
import math
import time

import torch
import torch.nn.functional as F


class VerifyError(Exception):
    """PyTorch's result disagrees with the reference: the case fails."""


def device_of(case_id):
    """`cuda:N` from a case id ending in `device=cuda:N`, else None."""
    tail = case_id.rsplit("device=", 1)
    return tail[1] if len(tail) == 2 and tail[1].startswith("cuda") else None


def timed_gpu(fn, reps, secs, sync_each=False):
    """(ns per call for each sample, sampling record): calls per sample
    doubled until a sample takes 1 ms, 0.3 s of warm-up, then samples until
    `reps` of them and `secs` have passed (3 or more by 5*secs)."""
    def batch(iters):
        torch.cuda.synchronize()
        t = time.perf_counter_ns()
        for _ in range(iters):
            fn()
            if sync_each:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        return time.perf_counter_ns() - t
    w0 = time.perf_counter_ns()
    iters = 1
    while batch(iters) < 1e6 and iters < 1 << 16:
        iters *= 2
    t_end = time.perf_counter() + 0.3
    while time.perf_counter() < t_end:
        batch(iters)
    warm = time.perf_counter_ns() - w0
    out, start = [], time.perf_counter()
    while True:
        out.append(batch(iters) / iters)
        elapsed = time.perf_counter() - start
        stop = ("sample_size" if len(out) >= 10000 else "measurement_time" if len(out) >= reps and elapsed >= secs
                else "max_time" if len(out) >= 3 and elapsed >= 5 * secs else None)
        if stop:
            info = {"warm_up_ns": float(warm), "iterations_per_sample": iters, "samples": len(out),
                    "requested_samples": reps, "stopped_by": stop, "prepare_ns": 0.0, "verify_ns": 0.0}
            return out, info, iters


def close(got, want, atol, rtol, what):
    """got (any device/dtype) against the f64 `want` within atol + rtol |want|."""
    err = (got.detach().double().cpu() - want).abs()
    bad = ~(err <= atol + rtol * want.abs())
    if bool(bad.any()):
        raise VerifyError(f"{what}: {int(bad.sum())} values beyond atol {atol:g} + rtol {rtol:g}, max error {float(err.max()):.3g}")
    return {"passed": True, "reference": what, "max_error": float(err.max()), "detail": f"atol {atol:g}, rtol {rtol:g}"}


UNARY = {  # torch op, input range (None: normal), (atol, rtol) as tfbench's unary tolerance
    "relu": (torch.relu, None, (0, 0)), "sigmoid": (torch.sigmoid, (-10, 10), (1e-7, 1e-5)),
    "tanh": (torch.tanh, (-10, 10), (1e-7, 1e-5)), "exp": (torch.exp, (-10, 10), (1e-44, 1e-5)),
    "log": (torch.log, (1e-3, 100), (1e-7, 1e-5)), "sqrt": (torch.sqrt, (1e-3, 100), (0, 0)),
    "gelu": (lambda x: F.gelu(x, approximate="tanh"), (-10, 10), (1e-6, 1e-5)),
}


def gelu64(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


REF64 = {"relu": torch.relu, "sigmoid": torch.sigmoid, "tanh": torch.tanh, "exp": torch.exp, "log": torch.log,
         "sqrt": torch.sqrt, "gelu": gelu64}


def gemm_tol(dtype, k, abs_sum, want):
    """tfbench's GemmDtype::tolerance (src/backend/cuda/kernels/gemm.rs)."""
    eps = 2.0 ** -23
    acc = (8.0 if dtype == "f32" else 16.0) * max(math.sqrt(k), 1.0) * eps * abs_sum
    inp = 2.0 ** -9 * abs_sum if dtype == "tf32" else 0.0
    out = {"f16": 2.0 ** -11 * want.abs() + 2.0 ** -24, "bf16": 2.0 ** -8 * want.abs() + 1e-38}.get(dtype, 0.0)
    return acc + inp + out + 1e-30


def uniform(shape, lo, hi, dev):
    return torch.empty(shape, device=dev).uniform_(lo, hi)


def cuda_case(c, reps, secs):
    """(ns per call, sampling, verification) of PyTorch's twin of case `c`, or None."""
    dev = device_of(c["id"])
    if dev is None or c["suite"] != "tensor":
        return None
    p, bench = c["params"], c["benchmark"]
    torch.backends.cuda.matmul.allow_tf32 = p.get("dtype") == "tf32"
    with torch.no_grad():
        if bench == "binary":
            r, cols = (int(x) for x in p["shape"].split("x"))
            a = torch.randn(r, cols, device=dev)
            op = p["op"]
            b = torch.randn(1, cols, device=dev) if op == "broadcast_add" else \
                uniform((r, cols), 0.5, 2.0, dev) if op == "div" else torch.randn(r, cols, device=dev)
            out = torch.empty(r, cols, device=dev)
            f = {"add": torch.add, "broadcast_add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}[op]
            run = lambda: f(a, b, out=out)
            run()
            want = f(a.double().cpu(), b.double().cpu()).float().double()
            ok = close(out, want, 0, 0, "f64 arithmetic rounded to f32, exact")
            return (*timed_gpu(run, reps, secs)[:2], ok)
        if bench == "unary":
            n = int(p["elements"])
            f, rng, (atol, rtol) = UNARY[p["op"]]
            x = torch.randn(n, device=dev) if rng is None else uniform((n,), *rng, dev)
            out = torch.empty_like(x)
            if p["op"] == "gelu":
                run = lambda: out.copy_(f(x))
            elif p["op"] == "relu":  # torch.relu takes no out=; clamp at 0 is the same function
                run = lambda: torch.clamp(x, min=0.0, out=out)
            else:
                g = getattr(torch, p["op"])
                run = lambda: g(x, out=out)
            run()
            ok = close(out, REF64[p["op"]](x.double().cpu()).float().double(), atol, rtol, f"f64 {p['op']}")
            return (*timed_gpu(run, reps, secs)[:2], ok)
        if bench == "reduction":
            r, cols = (int(x) for x in p["shape"].split("x"))
            op = p["op"]
            x = uniform((r, cols), -0.5, 1.5, dev) if op in ("sum", "mean") else torch.randn(r, cols, device=dev)
            if op == "softmax":
                x = x * 3
            g, bt = uniform((cols,), 0.5, 1.5, dev), torch.randn(cols, device=dev)
            fns = {"sum": lambda: x.sum(), "mean": lambda: x.mean(), "max": lambda: x.max(),
                   "argmax": lambda: x.argmax(), "softmax": lambda: torch.softmax(x, -1),
                   "layernorm": lambda: F.layer_norm(x, (cols,), g, bt, 1e-5)}
            run = fns[op]
            got, x64 = run(), x.double().cpu()
            if op in ("sum", "mean"):
                want = x64.sum() / (x64.numel() if op == "mean" else 1)
                scale = x64.abs().sum() / (x64.numel() if op == "mean" else 1)
                ok = close(got.reshape(1), want.reshape(1), float(scale) * 1e-5, 0, "f64 sum")
            elif op == "max":
                ok = close(got.reshape(1), x64.max().reshape(1), 0, 0, "naive maximum")
            elif op == "argmax":
                if int(got) != int(x64.flatten().argmax()):
                    raise VerifyError(f"argmax {int(got)}, reference {int(x64.flatten().argmax())}")
                ok = {"passed": True, "reference": "first maximum", "max_error": None, "detail": ""}
            elif op == "softmax":
                ok = close(got, torch.softmax(x64, -1), 1e-9, 1e-5, "f64 softmax")
            else:
                ok = close(got, F.layer_norm(x64, (cols,), g.double().cpu(), bt.double().cpu(), 1e-5), 2e-5, 1e-5,
                           "f64 layer norm")
            return (*timed_gpu(run, reps, secs)[:2], ok)
        if bench == "creation":
            n = int(p["elements"])
            out = torch.empty(n, device=dev)
            run = {"zeros": out.zero_, "ones": lambda: out.fill_(1.0), "randn": lambda: out.normal_()}[p["op"]]
            run()
            if p["op"] == "randn":
                m, v = float(out.double().mean()), float(out.double().var())
                if abs(m) > 6 / math.sqrt(n) or abs(v - 1) > 6 * math.sqrt(2 / n):
                    raise VerifyError(f"randn mean {m:.3g}, variance {v:.3g}")
                ok = {"passed": True, "reference": "mean and variance", "max_error": None, "detail": ""}
            else:
                ok = close(out, torch.full((n,), 0.0 if p["op"] == "zeros" else 1.0, dtype=torch.float64), 0, 0,
                           "the fill value")
            return (*timed_gpu(run, reps, secs)[:2], ok)
        if bench in ("gpu_gemm", "gpu_bmm"):
            dims = [int(x) for x in p["shape"].split("x")]
            bt, (m, k, n) = (dims[0], dims[1:]) if bench == "gpu_bmm" else (1, dims)
            dt = {"f32": torch.float32, "tf32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[p["dtype"]]
            a = torch.randn(bt, m, k, device=dev).to(dt)
            b = torch.randn(bt, k, n, device=dev).to(dt)
            cc = torch.empty(bt, m, n, device=dev, dtype=dt)
            run = (lambda: torch.bmm(a, b, out=cc)) if bench == "gpu_bmm" else (lambda: torch.mm(a[0], b[0], out=cc[0]))
            run()
            gen = torch.Generator().manual_seed(7)
            t = torch.randint(0, bt, (64,), generator=gen)
            rows = torch.cat([torch.tensor([0, m - 1]), torch.randint(0, m, (62,), generator=gen)])
            cols = torch.cat([torch.tensor([n - 1, 0]), torch.randint(0, n, (62,), generator=gen)])
            a64, b64 = a.double().cpu(), b.double().cpu()
            prod = a64[t, rows] * b64[t, :, cols]
            want, mag = prod.sum(1), prod.abs().sum(1)
            got = cc.double().cpu()[t, rows, cols]
            tol = gemm_tol(p["dtype"], k, mag, want)
            err = (got - want).abs()
            if not bool((err <= tol).all()):
                raise VerifyError(f"C differs from f64 dot products by up to {float(err.max()):.3g}")
            ok = {"passed": True, "reference": "64 sampled entries against f64 dot products",
                  "max_error": float(err.max()), "detail": f"{p['dtype']} tolerance of tfbench"}
            return (*timed_gpu(run, reps, secs)[:2], ok)
        if bench == "transfer":
            nbytes, d = int(p["bytes"]), p["direction"]
            pinned = p.get("memory") == "pinned"
            src = torch.randint(0, 256, (nbytes,), dtype=torch.uint8)
            if d == "h2d":
                src = src.pin_memory() if pinned else src
                dst = torch.empty(nbytes, dtype=torch.uint8, device=dev)
                run = lambda: dst.copy_(src, non_blocking=pinned)
            elif d == "d2h":
                dsrc = src.to(dev)
                dst = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)
                run = lambda: dst.copy_(dsrc, non_blocking=pinned)
            else:
                dsrc = src.to(dev)
                dst = torch.empty(nbytes, dtype=torch.uint8, device=dev)
                run = lambda: dst.copy_(dsrc)
            run()
            torch.cuda.synchronize()
            if not torch.equal(dst.cpu(), src):
                raise VerifyError("the bytes arrived changed")
            ok = {"passed": True, "reference": "the random bytes sent", "max_error": None, "detail": ""}
            return (*timed_gpu(run, reps, secs)[:2], ok)
        if bench == "launch":
            x = torch.zeros(1, device=dev)
            run = lambda: x.fill_(42.0)
            run()
            if float(x) != 42.0:
                raise VerifyError(f"got {float(x)}")
            ok = {"passed": True, "reference": "the value the kernel writes", "max_error": None, "detail": ""}
            return (*timed_gpu(run, reps, secs, sync_each=p["mode"] == "launch_sync")[:2], ok)
    return None
