#!/usr/bin/env python3
"""A Q4_K_M-style test model from SmolLM2-135M Q4_1: the same file with every
`ffn_down` matrix re-quantized to Q6_K (the layers llama.cpp's Q4_K_M gives
more bits: the first and last eighth and every third between) or Q4_K (the
others). Only ffn_down has rows of a multiple of 256 values (1536); the
576-wide matrices cannot hold K-quants, and llama.cpp falls back there too.
Every other tensor and all metadata are copied unchanged.

The K-quant blocks are written here in NumPy (ggml's layouts, simple
quantizers: Q4_K per sub-block min/max, Q6_K with the largest magnitude of
each 16 at code -32), then decoded back by `gguf.quants.dequantize` (ggml's
reference decoder) and checked against the source values, so a layout
mistake fails here. Nothing of tfbench is used.

    python3 -m venv /tmp/refenv && /tmp/refenv/bin/pip install gguf numpy
    /tmp/refenv/bin/python scripts/make_q4km.py .data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \\
        .data/smollm2/SmolLM2-135M-Instruct.Q4_K_M-tfbench.gguf
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize

QK = 256


def f16_up(v):
    """v (>= 0) rounded to f16, upwards when round-to-nearest went below."""
    h = v.astype(np.float16)
    low = h.astype(np.float32) < v
    h[low] = np.nextafter(h[low], np.float16(np.inf))
    return h


def q4_k(x):
    """[n, 256] float32 -> [n, 144] uint8 blocks of ggml's block_q4_K."""
    n = x.shape[0]
    sub = x.reshape(n, 8, 32)
    lo = np.minimum(sub.min(axis=2), 0.0)
    hi = sub.max(axis=2)
    dmin = f16_up((-lo).max(axis=1) / 63.0)
    dminf = dmin.astype(np.float32)[:, None]
    m = np.where(dminf > 0, np.clip(np.ceil(-lo / np.where(dminf > 0, dminf, 1)), 0, 63), 0).astype(np.uint8)
    step = (hi + dminf * m) / 15.0
    d = f16_up(step.max(axis=1) / 63.0)
    df = d.astype(np.float32)[:, None]
    sc = np.where(df > 0, np.clip(np.ceil(step / np.where(df > 0, df, 1)), 0, 63), 0).astype(np.uint8)
    e = (df * sc)[:, :, None]
    q = np.clip(np.rint((sub + (dminf * m)[:, :, None]) / np.where(e > 0, e, 1)), 0, 15).astype(np.uint8)
    q[np.broadcast_to(e == 0, q.shape)] = 0
    scales = np.zeros((n, 12), np.uint8)
    for j in range(4):
        scales[:, j] = (sc[:, j] & 63) | ((sc[:, j + 4] >> 4) << 6)
        scales[:, j + 4] = (m[:, j] & 63) | ((m[:, j + 4] >> 4) << 6)
        scales[:, j + 8] = (sc[:, j + 4] & 15) | ((m[:, j + 4] & 15) << 4)
    qs = np.zeros((n, 128), np.uint8)
    for c in range(4):
        qs[:, 32 * c:32 * c + 32] = q[:, 2 * c] | (q[:, 2 * c + 1] << 4)
    blocks = np.concatenate([d.view(np.uint8).reshape(n, 2), dmin.view(np.uint8).reshape(n, 2), scales, qs], axis=1)
    # Every value is on or inside its sub-block's grid: half a step.
    return blocks, np.repeat((df * sc) / 2.0, 32, axis=1)


def q6_k(x):
    """[n, 256] float32 -> [n, 210] uint8 blocks of ggml's block_q6_K."""
    n = x.shape[0]
    sub = x.reshape(n, 16, 16)
    idx = np.abs(sub).argmax(axis=2)
    mx = np.take_along_axis(sub, idx[:, :, None], axis=2)[:, :, 0]
    scale = -mx / 32.0
    ms = np.take_along_axis(scale, np.abs(scale).argmax(axis=1)[:, None], axis=1)[:, 0]
    safe = np.where(ms != 0, ms, 1.0)
    iscale = np.where(ms != 0, -128.0 / safe, 0.0)
    d = np.where(ms != 0, 1.0 / np.where(iscale != 0, iscale, 1.0), 0.0).astype(np.float16)
    # Scales rounded away from zero, so no sub-block's grid is narrower
    # than its values (nearest rounding could clamp a value by several steps).
    s = iscale[:, None] * scale
    sc = np.clip(np.sign(s) * np.ceil(np.abs(s) - 1e-4), -128, 127).astype(np.int8)
    e = (d.astype(np.float32)[:, None] * sc.astype(np.float32))[:, :, None]
    q = np.where(e != 0, np.clip(np.rint(sub / np.where(e != 0, e, 1)), -32, 31), 0) + 32
    q = q.astype(np.uint8).reshape(n, 256)
    ql = np.zeros((n, 128), np.uint8)
    qh = np.zeros((n, 64), np.uint8)
    for h in range(2):
        v = q[:, 128 * h:128 * h + 128]
        ql[:, 64 * h:64 * h + 64] = (v[:, :64] & 15) | ((v[:, 64:] & 15) << 4)
        qh[:, 32 * h:32 * h + 32] = ((v[:, :32] >> 4) | ((v[:, 32:64] >> 4) << 2)
                                     | ((v[:, 64:96] >> 4) << 4) | ((v[:, 96:] >> 4) << 6))
    blocks = np.concatenate([ql, qh, sc.view(np.uint8), d.view(np.uint8).reshape(n, 2)], axis=1)
    # Half a step; up to 1.26 where a value of the other sign meets code 31
    # (a sub-block scale of +128 is stored as 127: 32.25 steps -> 31).
    return blocks, np.repeat(1.3 * np.abs(e[:, :, 0]), 16, axis=1)


def more_bits(i, n):
    """llama.cpp's use_more_bits(i_layer, n_layers)."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def main():
    src, dst = sys.argv[1], sys.argv[2]
    r = GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    n_layers = int(r.fields[f"{arch}.block_count"].contents())
    w = GGUFWriter(dst + ".partial", arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        sub = f.types[1] if f.types[0] == GGUFValueType.ARRAY else None
        val = f.contents()
        if name == "general.name":
            val += " Q4_K_M-style (tfbench test file)"
        w.add_key_value(name, val, f.types[0], sub)
    counts = {}
    for t in r.tensors:
        data, ty = t.data, t.tensor_type
        if t.name.endswith("ffn_down.weight"):
            i = int(t.name.split(".")[1])
            x = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1, QK)
            ty = T.Q6_K if more_bits(i, n_layers) else T.Q4_K
            blocks, step = q6_k(x) if ty == T.Q6_K else q4_k(x)
            back = dequantize(blocks, ty).reshape(-1, QK)
            # ggml's decoder on these bytes must give the source back within
            # the grid's step: a layout mistake would be far outside.
            err = np.abs(back - x)
            bad = err > step * 1.01 + 1e-5 * np.abs(x) + 1e-7
            assert not bad.any(), f"{t.name}: {ty.name} round trip error {err[bad].max()} at {np.argwhere(bad)[0]}"
            rows = int(t.shape[1])
            data = blocks.reshape(rows, -1)
        counts[ty.name] = counts.get(ty.name, 0) + 1
        w.add_tensor(t.name, data, raw_dtype=ty)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(dst + ".partial", dst)
    print(f"{dst}: tensors by type {counts}", file=sys.stderr)


if __name__ == "__main__":
    main()
