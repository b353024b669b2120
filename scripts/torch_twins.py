#!/usr/bin/env python3
"""Which PyTorch twin a tfbench nn/sci case gets, or why it gets none: the
case-id mapping of scripts/torch_peer.py for the `nn` and `sci` suites (and
the tensor suite's layernorm), in plain Python (no torch, no numpy), so a
test can check it against `tfbench list --format json` on any machine.

    tfbench list --suite nn --suite sci --format json > list.json
    python3 scripts/torch_twins.py list.json      # one JSON line per case

Each line is {"id", "twin": {...}} or {"id", "skip": "reason"}; the twin
names the PyTorch call and the tensor shapes it is given. The shapes are
parsed here from the same strings tfbench parses (layer presets copied from
src/suites/nn/conv.rs, whose table the test compares with this one through
the FLOPs tfbench declares), and torch_peer_nn.py runs them.
"""
import json
import sys

# src/suites/nn/conv.rs, LAYERS: named layers of real networks.
LAYERS = {
    "rn50_l1_3x3_b1": "1x64x56x56-k64x3x3-p1",
    "rn50_l1_3x3_b32": "32x64x56x56-k64x3x3-p1",
    "rn50_l3_3x3_b1": "1x256x14x14-k256x3x3-p1",
    "rn50_l3_3x3_b32": "32x256x14x14-k256x3x3-p1",
    "rn50_l1_1x1_b1": "1x64x56x56-k256x1x1",
    "rn50_l3_1x1_b1": "1x1024x14x14-k256x1x1",
    "rn50_l1_1x1_b32": "32x64x56x56-k256x1x1",
    "rn50_l3_1x1_b32": "32x1024x14x14-k256x1x1",
    "mbv2_dw_b1": "1x144x56x56-k144x3x3-p1-g144",
    "mbv2_dw_s2_b1": "1x96x112x112-k96x3x3-s2-p1-g96",
    "mbv2_dw_b32": "32x144x56x56-k144x3x3-p1-g144",
    "opbench_short": "1x256x16x16-k256x3x3",
    "wav2vec2_conv1d": "1x512x3199-k512x3-s2",
    "r3d18_block": "1x64x8x56x56-k64x3x3x3-p1",
}

# Parameters each benchmark's twin understands, with the values it accepts
# (None: any). A case with another parameter or value (a new `dtype=bf16`,
# `pass=train`) is listed as skipped, naming it, never run as something else.
KNOWN = {
    ("nn", "conv"): {"algo": None, "layer": None, "layout": ("nchw", "nhwc"), "dtype": ("f32",)},
    ("nn", "pool"): {"op": ("max", "avg"), "shape": None},
    ("nn", "adaptive_pool"): {"shape": None},
    ("nn", "norm"): {"kind": ("batch_infer", "batch_train", "group", "instance"), "shape": None},
    ("nn", "rnn"): {"cell": ("rnn", "lstm", "gru"), "hidden": None, "batch": None, "seq": None,
                    "pass": ("forward",), "dtype": ("f32",)},
    ("nn", "attention"): {"algo": ("materialised", "flash"), "mask": ("none", "causal"), "seq": None,
                          "heads": None, "dtype": ("f32",)},
    ("sci", "fft"): {"kind": ("c2c", "r2c"), "shape": None},
    ("sci", "sparse_convert"): {"op": ("coo_to_csr", "csr_to_csc"), "impl": None, "pattern": None,
                                "density": None, "n": None},
    ("sci", "spmv"): {"impl": None, "pattern": None, "density": None, "n": None},
    ("sci", "spmm"): {"impl": None, "pattern": None, "density": None, "n": None},
    ("tensor", "reduction"): {"op": ("layernorm",), "shape": None},
}

# Benchmarks with no twin at all, and why.
NO_TWIN = {
    ("sci", "fft_plan"): "torch.fft has no separate plan step (it plans, and may cache, inside each call)",
}

SPMM_COLS = 64  # src/suites/sci/sparse.rs, SPMM_COLS


class Skip(Exception):
    """The case has no PyTorch twin; the message says why."""


def dims(s, what):
    """Positive integers joined by x."""
    try:
        v = [int(d) for d in str(s).split("x")]
    except ValueError:
        raise Skip(f"{what} `{s}` is not integers joined by x") from None
    if not v or min(v) <= 0:
        raise Skip(f"{what} `{s}` has a non-positive extent")
    return v


def tagged(parts, spec, tags):
    """The -tN parts of a shape string as {tag: text}."""
    out = {}
    for p in parts:
        tag = p.rstrip("0123456789x")
        if tag not in tags or tag == p:
            raise Skip(f"`{spec}`: unknown part `{p}`")
        out[tag] = p[len(tag):]
    return out


def conv_geom(spec):
    """parse_conv's shape: input, weight, stride, padding, dilation, groups, output."""
    head, *rest = spec.split("-")
    inp = dims(head, "input")
    if not 3 <= len(inp) <= 5:
        raise Skip(f"`{spec}`: the input needs N, C and 1 to 3 spatial extents")
    nd = len(inp) - 2
    t = tagged(rest, spec, ("k", "s", "p", "d", "g"))
    if "k" not in t:
        raise Skip(f"`{spec}`: no -k part")
    kern = dims(t["k"], "kernel")
    if len(kern) != nd + 1:
        raise Skip(f"`{spec}`: -k needs K and {nd} kernel extents")
    s, p, d, g = (int(t.get(x, dflt)) for x, dflt in (("s", 1), ("p", 0), ("d", 1), ("g", 1)))
    n, c, k = inp[0], inp[1], kern[0]
    if g <= 0 or c % g or k % g:
        raise Skip(f"`{spec}`: groups {g} must divide {c} and {k}")
    out = [(i + 2 * p - d * (kk - 1) - 1) // s + 1 for i, kk in zip(inp[2:], kern[1:])]
    if min(out) <= 0:
        raise Skip(f"`{spec}`: the kernel is larger than the padded input")
    taps = 1
    for kk in kern[1:]:
        taps *= kk
    outputs = n * k
    for o in out:
        outputs *= o
    return {"dims": nd, "input": inp, "weight": [k, c // g] + kern[1:], "stride": s, "padding": p,
            "dilation": d, "groups": g, "output": [n, k] + out, "flops": 2.0 * outputs * (c // g) * taps}


def pool_geom(spec):
    """parse_pool's shape: the input, window/stride/padding or adaptive size, output."""
    head, *rest = spec.split("-")
    inp = dims(head, "input")
    if not 3 <= len(inp) <= 5:
        raise Skip(f"`{spec}`: the input needs N, C and 1 to 3 spatial extents")
    t = {k: int(v) for k, v in tagged(rest, spec, ("k", "s", "p", "o")).items()}
    if "o" in t:
        if set(t) != {"o"} or t["o"] <= 0:
            raise Skip(f"`{spec}`: an adaptive size -o takes no window")
        return {"dims": len(inp) - 2, "input": inp, "adaptive": t["o"],
                "output": inp[:2] + [t["o"]] * (len(inp) - 2)}
    if "k" not in t:
        raise Skip(f"`{spec}`: give a window -k or an adaptive size -o")
    k, s, p = t["k"], t.get("s", t["k"]), t.get("p", 0)
    if k <= 0 or s <= 0 or 2 * p > k:
        raise Skip(f"`{spec}`: window and stride must be positive, padding at most half the window")
    out = [(i + 2 * p - k) // s + 1 for i in inp[2:]]
    return {"dims": len(inp) - 2, "input": inp, "kernel": k, "stride": s, "padding": p,
            "output": inp[:2] + out}


def threads_of(params):
    """1 for threads=1 (or any integer), None for the run's count ("all")."""
    t = params.get("threads", "all")
    return None if str(t) == "all" else int(t)


def check_params(suite, bench, params):
    """Raises Skip naming a parameter or value the twin does not model."""
    known = KNOWN[(suite, bench)]
    for key, val in params.items():
        if key == "threads":
            continue
        if key not in known:
            raise Skip(f"parameter {key}={val} has no PyTorch twin here")
        if known[key] is not None and str(val) not in known[key]:
            raise Skip(f"{key}={val} has no PyTorch twin here (twins for {', '.join(known[key])})")


def plan(case):
    """The twin of one case (a dict with "suite", "benchmark", "params"):
    {"call": ..., shapes...}. Raises Skip with the reason when there is none."""
    suite, bench, p = case["suite"], case["benchmark"], case.get("params", {})
    if (suite, bench) in NO_TWIN:
        raise Skip(NO_TWIN[(suite, bench)])
    if (suite, bench) not in KNOWN:
        raise Skip(f"no PyTorch twin for {suite}/{bench}")
    check_params(suite, bench, p)
    twin = {"suite": suite, "benchmark": bench, "threads": threads_of(p)}
    if bench == "conv":
        layer = str(p["layer"])
        if layer not in LAYERS and "-" not in layer:
            raise Skip(f"layer {layer} is not a preset scripts/torch_twins.py knows (LAYERS)")
        g = conv_geom(LAYERS.get(layer, layer))
        memfmt = None
        if p.get("layout") == "nhwc":
            if g["dims"] == 1:
                raise Skip("layout=nhwc of a 1-D convolution: PyTorch has no channels-last format for 3-D tensors")
            memfmt = "channels_last" if g["dims"] == 2 else "channels_last_3d"
        # Every algorithm's cases (im2col, direct, winograd) get PyTorch's convolution of the
        # layer: the twin is the layer, not the algorithm (oneDNN picks its own).
        twin.update(g, call=f"F.conv{g['dims']}d", memory_format=memfmt)
    elif bench in ("pool", "adaptive_pool"):
        g = pool_geom(str(p["shape"]))
        if ("adaptive" in g) != (bench == "adaptive_pool"):
            raise Skip(f"`{p['shape']}` is not a {bench} shape")
        op = "adaptive_avg" if bench == "adaptive_pool" else p["op"]
        twin.update(g, call=f"F.{op}_pool{g['dims']}d", op=op)
    elif bench == "norm":
        shape = dims(p["shape"], "shape")
        if len(shape) != 4 or (p["kind"] == "group" and shape[1] % 32):
            raise Skip(f"shape {p['shape']}: NxCxHxW (C a multiple of 32 for group norm) expected")
        call = {"batch_infer": "F.batch_norm(training=False)", "batch_train": "F.batch_norm(training=True)",
                "group": "F.group_norm(32)", "instance": "F.instance_norm"}[p["kind"]]
        twin.update(call=call, kind=p["kind"], input=shape, output=shape)
    elif bench == "rnn":
        t, b, h = int(p["seq"]), int(p["batch"]), int(p["hidden"])
        twin.update(call=f"torch.nn.{p['cell'].upper()}({h}, {h})", cell=p["cell"], input=[t, b, h],
                    output=[t, b, h])
    elif bench == "attention":
        shape = [1, int(p["heads"]), int(p["seq"]), 64]
        backend = "MATH" if p["algo"] == "materialised" else "FLASH_ATTENTION"
        flops = 4.0 * shape[1] * shape[2] ** 2 * 64 / (2 if p["mask"] == "causal" else 1)
        twin.update(call=f"F.scaled_dot_product_attention under SDPBackend.{backend}", backend=backend,
                    causal=p["mask"] == "causal", input=shape, output=shape, flops=flops)
    elif bench == "fft":
        shape = dims(p["shape"], "shape")
        real = p["kind"] == "r2c"
        out = shape[:-1] + [shape[-1] // 2 + 1] if real else shape
        name = ("rfft" if real else "fft") + {1: "", 2: "2", 3: "n"}[len(shape)] if len(shape) <= 3 else None
        if name is None:
            raise Skip(f"shape {p['shape']}: 1 to 3 extents expected")
        twin.update(call=f"torch.fft.{name}", real=real, input=shape, output=out)
    elif bench in ("sparse_convert", "spmv", "spmm"):
        n, density = int(p["n"]), float(p["density"])
        if not 0 < density <= 1 or n <= 0 or p["pattern"] not in ("random", "banded", "powerlaw"):
            raise Skip(f"n={n}, density={density}, pattern={p['pattern']}: not a generated matrix")
        cols = {"spmv": 1, "spmm": SPMM_COLS}.get(bench, 0)
        call = {"coo_to_csr": "torch.sparse_coo_tensor(..).to_sparse_csr()",
                "csr_to_csc": "csr.to_sparse_csc()"}.get(p.get("op"), "torch.sparse_csr_tensor @ dense")
        twin.update(call=call, op=p.get("op", bench), pattern=p["pattern"], n=n, density=density, cols=cols)
    elif bench == "reduction":
        shape = dims(p["shape"], "shape")
        if len(shape) != 2:
            raise Skip(f"shape {p['shape']}: rows x columns expected")
        twin.update(call="F.layer_norm", input=shape, output=shape)
    return twin


def classify(case):
    """{"id", "twin"} or {"id", "skip"} for one case."""
    try:
        return {"id": case["id"], "twin": plan(case)}
    except (Skip, KeyError, ValueError) as e:
        why = f"parameter {e} missing" if isinstance(e, KeyError) else str(e)
        return {"id": case["id"], "skip": why}


def list_cases(doc):
    """The cases of a `tfbench list --format json` document or a results file."""
    if "cases" in doc and isinstance(doc["cases"], list):
        return doc["cases"]
    out = []
    for s in doc.get("suites", []):
        for b in s.get("benchmarks", []):
            for c in b.get("cases", []):
                suite, bench = c["id"].split("/")[:2]
                out.append({"id": c["id"], "suite": suite, "benchmark": bench, "params": c.get("params", {})})
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: torch_twins.py LIST.json (from tfbench list --format json; - for stdin)")
    try:
        doc = json.load(sys.stdin if sys.argv[1] == "-" else open(sys.argv[1]))
    except (OSError, ValueError) as e:
        sys.exit(f"torch_twins.py: {sys.argv[1]}: {e}")
    for c in list_cases(doc):
        print(json.dumps(classify(c), sort_keys=True))


if __name__ == "__main__":
    main()
