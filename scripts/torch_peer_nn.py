"""PyTorch twins of tfbench's `nn` and `sci` suites (and the tensor suite's
layernorm), run by scripts/torch_peer.py: the case-to-call mapping is
scripts/torch_twins.py's (plain Python, tested without torch); this module
builds the tensors, checks PyTorch's output and times the call.

Every twin checks its own output before it is timed: shape and finiteness,
plus sampled values against f64 sums written here (not through PyTorch's
operator): convolution outputs over every tap, pooling windows, norm
statistics, the first recurrent step (for backward twins, gradients
against autograd of the cell equations in f64), attention rows, FFT bins and
Parseval's identity, sparse rows from the triplets. The work tfbench
declared for the case (FLOPs of conv and attention, elements of FFT and
sparse) must match the twin's shape, so a twin never times something else.
"""
import math
import warnings

import torch
import torch.nn.functional as F

import torch_twins
from torch_twins import Skip  # noqa: F401 (re-exported for torch_peer.py)


# torch.sparse's CSR/CSC support says it is beta on first use: known, not news per case.
warnings.filterwarnings("ignore", message="Sparse (CSR tensor support|invariant checks)")


class VerifyError(Exception):
    """PyTorch's result disagrees with the independent check: the case fails."""


def ok(reference, max_error=None, detail=""):
    """A passed verification record."""
    return {"passed": True, "reference": reference, "max_error": max_error, "detail": detail}


def declared(c, kind):
    """The work tfbench declared per call (`flops`, `elements`), if any."""
    for t in c.get("throughput", []):
        if t.get("kind") == kind:
            return float(t["per_iteration"])
    return None


def same_work(c, kind, ours, rel):
    """Fails when the twin's work differs from tfbench's declared work."""
    theirs = declared(c, kind)
    if theirs is not None and abs(ours - theirs) > rel * theirs:
        raise VerifyError(f"the twin's shape gives {ours:.6g} {kind}, tfbench declared {theirs:.6g}")


def sane(y, shape, what):
    """Shape and finiteness."""
    if tuple(y.shape) != tuple(shape) or not bool(torch.isfinite(y).all()):
        raise VerifyError(f"{what}: shape {tuple(y.shape)} (want {tuple(shape)}) or non-finite values")


def within(got, want, mag, what, rtol=1e-5, atol=1e-6):
    """Each got[i] within atol + rtol * mag[i] of want[i] (f64 lists)."""
    worst = 0.0
    for g, w, m in zip(got, want, mag):
        err = abs(g - w)
        if not err <= atol + rtol * m:
            raise VerifyError(f"{what}: {g:.7g} against f64 {w:.7g} (bound {atol + rtol * m:.3g})")
        worst = max(worst, err)
    return worst


def picks(total, count, gen):
    """`count` indices in 0..total (first and last included)."""
    more = torch.randint(0, total, (max(count - 2, 0),), generator=gen).tolist()
    return [0, total - 1] + more


def unravel(i, shape):
    out = []
    for s in reversed(shape):
        out.append(i % s)
        i //= s
    return out[::-1]


def conv(t, c):
    d, gen = t["dims"], torch.Generator().manual_seed(1)
    fan_in = t["weight"][1] * math.prod(t["weight"][2:])
    x = torch.randn(t["input"], generator=gen)
    w = torch.randn(t["weight"], generator=gen) / math.sqrt(fan_in)
    if t["memory_format"]:
        fmt = getattr(torch, t["memory_format"])
        x, w = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
    f = getattr(F, f"conv{d}d")
    args = (t["stride"], t["padding"], t["dilation"], t["groups"])
    call = lambda: f(x, w, None, *args)
    y = call()
    sane(y, t["output"], "convolution output")
    same_work(c, "flops", t["flops"], 1e-9)
    # PyTorch may hand a channels-last 3-D convolution's output back planar: said, not failed.
    layout = "" if not t["memory_format"] else (
        "; output channels-last" if y.is_contiguous(memory_format=getattr(torch, t["memory_format"]))
        else "; output planar (PyTorch's choice)")
    # 16 sampled outputs against f64 sums over every tap.
    p, s, dl = t["padding"], t["stride"], t["dilation"]
    xp, wd = F.pad(x.double(), [p] * 2 * d), w.double()
    cg, kg = t["weight"][1], t["output"][1] // t["groups"]
    got, want, mag = [], [], []
    for i in picks(y.numel(), 16, gen):
        n, k, *o = unravel(i, t["output"])
        win = xp[n, (k // kg) * cg:(k // kg + 1) * cg]
        for a, (oa, ka) in enumerate(zip(o, t["weight"][2:])):
            win = win.narrow(a + 1, oa * s, dl * (ka - 1) + 1)[(slice(None),) * (a + 1) + (slice(None, None, dl),)]
        prod = win * wd[k]
        got.append(float(y[(n, k, *o)]))
        want.append(float(prod.sum()))
        mag.append(float(prod.abs().sum()))
    err = within(got, want, mag, "convolution output")
    return call, ok("16 sampled outputs against f64 sums over every tap", err,
                    "within 1e-6 + 1e-5 sum|x w|" + layout)


def pool(t, c):
    d, gen = t["dims"], torch.Generator().manual_seed(2)
    x = torch.randn(t["input"], generator=gen)
    if t["op"] == "adaptive_avg":
        call = lambda: getattr(F, f"adaptive_avg_pool{d}d")(x, t["adaptive"])
    elif t["op"] == "max":
        call = lambda: getattr(F, f"max_pool{d}d")(x, t["kernel"], t["stride"], t["padding"])
    else:
        call = lambda: getattr(F, f"avg_pool{d}d")(x, t["kernel"], t["stride"], t["padding"],
                                                  count_include_pad=False)
    y = call()
    sane(y, t["output"], "pooling output")
    xd, got, want = x.double(), [], []
    for i in picks(y.numel(), 64, gen):
        n, ch, *o = unravel(i, t["output"])
        win = xd[n, ch]
        for a, oa in enumerate(o):
            size, out = t["input"][2 + a], t["output"][2 + a]
            if t["op"] == "adaptive_avg":
                lo, hi = oa * size // out, -(-(oa + 1) * size // out)
            else:
                lo = oa * t["stride"] - t["padding"]
                lo, hi = max(lo, 0), min(lo + t["kernel"], size)
            win = win.narrow(a, lo, hi - lo)
        got.append(float(y[(n, ch, *o)]))
        want.append(float(win.max() if t["op"] == "max" else win.mean()))
    err = within(got, want, [abs(v) + 1 for v in want], "pooling output")
    return call, ok("64 sampled outputs against f64 windows", err, "within 1e-6 + 1e-5 (|value| + 1)")


def norm(t, c):
    gen = torch.Generator().manual_seed(3)
    shape = t["input"]
    ch = shape[1]
    x = torch.randn(shape, generator=gen)
    w, b = 1 + 0.1 * torch.randn(ch, generator=gen), 0.1 * torch.randn(ch, generator=gen)
    rm, rv = 0.1 * torch.randn(ch, generator=gen), 1 + 0.1 * torch.rand(ch, generator=gen)
    kind = t["kind"]
    if kind in ("batch_infer", "batch_train"):
        train = kind == "batch_train"
        stats = (rm.clone(), rv.clone())
        call = lambda: F.batch_norm(x, stats[0], stats[1], w, b, training=train, momentum=0.1, eps=1e-5)
    elif kind == "group":
        call = lambda: F.group_norm(x, 32, w, b, eps=1e-5)
    else:
        call = lambda: F.instance_norm(x, weight=w, bias=b, eps=1e-5)
    y = call()
    sane(y, shape, "normalised output")
    # Two sampled (image, channel) planes: f64 statistics of the set each is normalised over.
    xd, worst = x.double(), 0.0
    for n, k in ((0, 0), (shape[0] - 1, ch - 1)):
        if kind == "batch_infer":
            mean, var = float(rm[k]), float(rv[k])
        else:
            if kind == "batch_train":
                part = xd[:, k]
            elif kind == "group":
                g = ch // 32
                part = xd[n, (k // g) * g:(k // g + 1) * g]
            else:
                part = xd[n, k]
            mean, var = float(part.mean()), float(part.var(unbiased=False))
        want = (xd[n, k] - mean) / math.sqrt(var + 1e-5) * float(w[k]) + float(b[k])
        err = float((y[n, k].double() - want).abs().max())
        if not err <= 1e-4:
            raise VerifyError(f"{kind} norm of plane ({n}, {k}): off the f64 statistics by {err:.3g}")
        worst = max(worst, err)
    return call, ok("2 planes against f64 statistics and normalisation", worst, "within 1e-4")


def rnn(t, c):
    seq, batch, h = t["input"]
    torch.manual_seed(4)
    m = {"rnn": torch.nn.RNN, "lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[t["cell"]](h, h)
    x = torch.randn(t["input"])
    if t.get("backward"):
        return rnn_backward(t, c, m, x)
    call = lambda: m(x)[0]
    y = call()
    sane(y, t["output"], "hidden states")
    # The first step of row 0 from zero state, in f64 (W_hh h0 = 0).
    x0 = x[0, 0].double()
    pre = m.weight_ih_l0.double() @ x0 + m.bias_ih_l0.double()
    bh = m.bias_hh_l0.double()
    if t["cell"] == "rnn":
        want = torch.tanh(pre + bh)
    elif t["cell"] == "lstm":
        i, _, g, o = (pre + bh).chunk(4)
        want = torch.sigmoid(o) * torch.tanh(torch.sigmoid(i) * torch.tanh(g))
    else:
        (r, z, n), (hr, hz, hn) = pre.chunk(3), bh.chunk(3)
        want = (1 - torch.sigmoid(z + hz)) * torch.tanh(n + torch.sigmoid(r + hr) * hn)
    err = float((y[0, 0].double() - want).abs().max())
    if not err <= 1e-4:
        raise VerifyError(f"first step of row 0 off the f64 cell by {err:.3g}")
    return call, ok("first step of row 0 against the f64 cell", err, "within 1e-4")


def cell_f64(cell, w, xt, hp, cp):
    """One step of `cell` in f64 from the equations (PyTorch's gate order),
    plain tensor operations: the reference autograd differentiates."""
    wih, whh, bih, bhh = w
    ax, ah = wih @ xt + bih, whh @ hp + bhh
    if cell == "rnn":
        return torch.tanh(ax + ah), cp
    if cell == "lstm":
        i, f, g, o = (ax + ah).chunk(4)
        c = torch.sigmoid(f) * cp + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c
    (xr, xz, xn), (hr, hz, hn) = ax.chunk(3), ah.chunk(3)
    r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
    return (1 - z) * torch.tanh(xn + r * hn) + z * hp, cp


def rnn_backward(t, c, m, x):
    """Forward plus backward through time: autograd through the module with
    dL/dh given for every step's output (seeded), for the gradients of x,
    the weights, the biases and the zero initial state (tfbench's set). The
    check runs it with dL/dh nonzero on the first 4 steps of row 0 only, as
    tfbench's does, against the f64 cell equations written above,
    differentiated over those steps."""
    seq, batch, h = t["input"]
    lstm = t["cell"] == "lstm"
    dy = torch.randn(t["output"], generator=torch.Generator().manual_seed(9))
    params = [m.weight_ih_l0, m.weight_hh_l0, m.bias_ih_l0, m.bias_hh_l0]

    def run(dyv):
        xg = x.detach().requires_grad_()
        h0 = torch.zeros(1, batch, h, requires_grad=True)
        state = (h0, torch.zeros(1, batch, h, requires_grad=True)) if lstm else h0
        m.zero_grad(set_to_none=True)
        y = m(xg, state)[0]
        y.backward(dyv)
        return y, xg.grad, h0.grad
    steps = min(seq, 4)
    dys = torch.zeros_like(dy)
    dys[:steps, 0] = dy[:steps, 0]
    y, dx, dh0 = run(dys)
    sane(y, t["output"], "hidden states")
    got = [dx[:steps, 0], dh0[0, 0]] + [p.grad for p in params]
    w = [p.detach().double().requires_grad_() for p in params]
    xs = x[:steps, 0].double().requires_grad_()
    h0 = torch.zeros(h, dtype=torch.float64, requires_grad=True)
    hp, cp, loss = h0, torch.zeros(h, dtype=torch.float64), 0.0
    for s in range(steps):
        hp, cp = cell_f64(t["cell"], w, xs[s], hp, cp)
        loss = loss + (hp * dys[s, 0].double()).sum()
    want = torch.autograd.grad(loss, [xs, h0] + w)
    worst = 0.0
    for name, g, r in zip(("dx", "dh0", "dW_ih", "dW_hh", "db_ih", "db_hh"), got, want):
        err = float((g.double() - r).abs().max())
        if not err <= 1e-4 * float(r.abs().max()) + 1e-6:
            raise VerifyError(f"{name}: off the f64 cell equations' gradient by {err:.3g}")
        worst = max(worst, err)
    if bool(dx[steps:].any()) or bool(dx[:, 1:].any()):
        raise VerifyError("dx nonzero where dL/dh was zero")
    same_work(c, "tokens", seq * batch, 1e-9)
    call = lambda: run(dy)
    return call, ok(f"gradients with dL/dh on {steps} steps of row 0 against f64 autograd of the cell equations",
                    worst, "within 1e-4 x each tensor's largest")


def attention(t, c):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    gen = torch.Generator().manual_seed(5)
    q, k, v = (torch.randn(t["input"], generator=gen) for _ in range(3))
    backend = getattr(SDPBackend, t["backend"])

    def call():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=t["causal"])
    y = call()
    sane(y, t["output"], "attention output")
    same_work(c, "flops", t["flops"], 1e-9)
    heads, n = t["input"][1], t["input"][2]
    worst = 0.0
    for i in picks(heads * n, 8, gen):
        hd, row = divmod(i, n)
        lim = row + 1 if t["causal"] else n
        s = (k[0, hd, :lim].double() @ q[0, hd, row].double()) / 8.0
        want = torch.softmax(s, 0) @ v[0, hd, :lim].double()
        err = float((y[0, hd, row].double() - want).abs().max())
        if not err <= 1e-4:
            raise VerifyError(f"query row {row} of head {hd}: off the f64 definition by {err:.3g}")
        worst = max(worst, err)
    return call, ok("8 sampled query rows against the f64 definition", worst, "within 1e-4")


def fft(t, c):
    shape, real = t["input"], t["real"]
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(shape, generator=gen) if real else torch.complex(
        torch.randn(shape, generator=gen), torch.randn(shape, generator=gen))
    f = getattr(torch.fft, t["call"].split(".")[-1])
    call = (lambda: f(x)) if len(shape) == 1 else (lambda: f(x, dim=tuple(range(len(shape)))))
    y = call()
    sane(y, t["output"], "spectrum")
    n = math.prod(shape)
    same_work(c, "elements", n, 1e-9)
    xd = x.to(torch.complex128)
    energy = float((xd.abs() ** 2).sum())
    yd = y.to(torch.complex128)
    mag2 = yd.abs() ** 2
    if real:  # the half spectrum holds the inner bins once for two
        last = shape[-1]
        inner = mag2[..., 1:(last + 1) // 2].sum()
        out_energy = float(mag2.sum() + inner)
    else:
        out_energy = float(mag2.sum())
    if not abs(out_energy / (n * energy) - 1) <= 1e-4:
        raise VerifyError(f"Parseval: sum|X|^2 / (n sum|x|^2) = {out_energy / (n * energy):.7f}")
    # Four bins as plain f64 sums, contracted one axis at a time (O(n) each).
    tol = 2e-6 * math.sqrt(energy) * (2 + math.log2(n))
    worst = 0.0
    for bins in ([0] * len(shape), [s // 3 for s in t["output"]], [s - 1 for s in t["output"]],
                 [s // 2 for s in t["output"]]):
        acc = xd
        for a in reversed(range(len(shape))):
            j = torch.arange(shape[a], dtype=torch.float64)
            ang = -2 * math.pi * torch.remainder(j * bins[a], shape[a]) / shape[a]
            acc = acc @ torch.complex(torch.cos(ang), torch.sin(ang))
        err = abs(complex(yd[tuple(bins)]) - complex(acc))
        if not err <= tol:
            raise VerifyError(f"bin {bins}: off the f64 sum by {err:.3g} (tol {tol:.3g})")
        worst = max(worst, err)
    return call, ok("Parseval (1e-4) and 4 bins against f64 sums", worst, f"bins within {tol:.3g}")


def generate(pattern, n, density, gen):
    """tfbench's matrix patterns (src/kernels/sparse.rs, `generate`), drawn
    afresh: rows ascending, columns sorted in each row, values in [-1, 1)."""
    if pattern == "banded":
        w = min(max(round(density * n), 1), n)
        r = torch.arange(n)
        lo = torch.clamp(r + 1 - (w + 1) // 2, min=0).clamp(max=n - w)
        rows = r.repeat_interleave(w)
        cols = (lo[:, None] + torch.arange(w)).reshape(-1)
    else:
        if pattern == "powerlaw":
            h = float((1 / torch.arange(1, n + 1, dtype=torch.float64)).sum())
            ranks = torch.randperm(n, generator=gen).double()
            p = (density * n * n / h / (ranks + 1) / n).clamp(max=1.0)
        else:
            p = torch.full((n,), density, dtype=torch.float64)
        parts, step = [], max(1, (1 << 22) // n)
        for r0 in range(0, n, step):
            r1 = min(n, r0 + step)
            mask = torch.rand(r1 - r0, n, generator=gen, dtype=torch.float64) < p[r0:r1, None]
            nz = mask.nonzero()
            nz[:, 0] += r0
            parts.append(nz)
        nz = torch.cat(parts)
        rows, cols = nz[:, 0].contiguous(), nz[:, 1].contiguous()
    vals = torch.rand(rows.numel(), generator=gen) * 2 - 1
    return rows, cols, vals


def sparse(t, c):
    gen = torch.Generator().manual_seed(7)
    n = t["n"]
    rows, cols, vals = generate(t["pattern"], n, t["density"], gen)
    nnz = rows.numel()
    same_work(c, "elements", nnz, 0 if t["pattern"] == "banded" else 0.05)
    crow = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(rows, minlength=n).cumsum(0)])
    if t["op"] == "coo_to_csr":
        perm = torch.randperm(nnz, generator=gen)
        idx, v = torch.stack([rows[perm], cols[perm]]), vals[perm]
        call = lambda: torch.sparse_coo_tensor(idx, v, (n, n)).to_sparse_csr()
        a = call()
        if not (torch.equal(a.crow_indices(), crow) and torch.equal(a.col_indices(), cols)
                and torch.equal(a.values(), vals)):
            raise VerifyError("CSR arrays differ from the triplets sorted by (row, col)")
        return call, ok("CSR arrays equal the triplets sorted by (row, col)", 0.0)
    a = torch.sparse_csr_tensor(crow, cols, vals, (n, n))
    if t["op"] == "csr_to_csc":
        call = lambda: a.to_sparse_csc()
        b = call()
        order = torch.argsort(cols * n + rows)
        ccol = torch.cat([torch.zeros(1, dtype=torch.long), torch.bincount(cols, minlength=n).cumsum(0)])
        if not (torch.equal(b.ccol_indices(), ccol) and torch.equal(b.row_indices(), rows[order])
                and torch.equal(b.values(), vals[order])):
            raise VerifyError("CSC arrays differ from the triplets sorted by (col, row)")
        return call, ok("CSC arrays equal the triplets sorted by (col, row)", 0.0)
    k = t["cols"]
    x = torch.randn(n, generator=gen) if k == 1 else torch.randn(n, k, generator=gen)
    call = lambda: a @ x
    y = call()
    sane(y, (n,) if k == 1 else (n, k), "product")
    got, want, mag = [], [], []
    xd = x.double().reshape(n, k)
    y2 = y.reshape(n, k)
    for r in picks(n, 32, gen):
        lo, hi = int(crow[r]), int(crow[r + 1])
        prod = vals[lo:hi].double()[:, None] * xd[cols[lo:hi]]
        got += y2[r].double().tolist()
        want += prod.sum(0).tolist()
        mag += prod.abs().sum(0).tolist()
    err = within(got, want, mag, "product rows", rtol=1e-5)
    return call, ok("32 sampled rows against f64 sums from the triplets", err, "within 1e-6 + 1e-5 sum|a x|")


def layernorm(t, c):
    gen = torch.Generator().manual_seed(8)
    rows, cols = t["input"]
    x = torch.randn(rows, cols, generator=gen)
    w, b = 1 + 0.1 * torch.randn(cols, generator=gen), 0.1 * torch.randn(cols, generator=gen)
    call = lambda: F.layer_norm(x, (cols,), w, b, 1e-5)
    y = call()
    sane(y, t["output"], "layernorm output")
    worst = 0.0
    for r in picks(rows, 4, gen):
        xd = x[r].double()
        want = (xd - xd.mean()) / torch.sqrt(xd.var(unbiased=False) + 1e-5) * w.double() + b.double()
        worst = max(worst, float((y[r].double() - want).abs().max()))
    if not worst <= 1e-4:
        raise VerifyError(f"layernorm rows off f64 by {worst:.3g}")
    return call, ok("4 rows against f64 layernorm", worst, "within 1e-4")


RUNNERS = {"conv": conv, "pool": pool, "adaptive_pool": pool, "norm": norm, "rnn": rnn, "attention": attention,
           "fft": fft, "sparse_convert": sparse, "spmv": sparse, "spmm": sparse, "reduction": layernorm}


def twin_case(c, reps, timed, secs):
    """(samples, sampling, verification) of case `c`'s twin; raises Skip
    when it has none, VerifyError when PyTorch's output fails its check."""
    t = torch_twins.plan(c)
    # Backward twins need autograd; the rest run without it, as inference does.
    with torch.enable_grad() if t.get("backward") else torch.inference_mode():
        call, check = RUNNERS[t["benchmark"]](t, c)
        return (*timed(call, reps, secs), check)
