#!/usr/bin/env python3
"""ggml's own decoding of generated Q6_K blocks, as the fixture
tests/fixtures/q6k_gguf.json that src/kernels/quant/q6k/tests.rs checks
tfbench's Q6_K reader and dequantizer against, bit for bit.

Blocks: seeded random bytes for ql, qh and the signed scales (plus the
extremes -128, 127, 0 and codes 0 and 63 everywhere in one block), `d` from
normal, tiny (subnormal f16), negative and zero values. Decoded by
`gguf.quants.dequantize(..., GGMLQuantizationType.Q6_K)` (the `gguf` PyPI
package, ggml's reference formats in NumPy); nothing of tfbench is used.

    python3 -m venv /tmp/refenv && /tmp/refenv/bin/pip install gguf numpy
    /tmp/refenv/bin/python scripts/q6k_reference.py > tests/fixtures/q6k_gguf.json
"""
import json
import sys

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

rng = np.random.default_rng(0x6b)
blocks = []
ds = [0.0123, -0.5, 6.1e-5 * 0.25, 0.0, 1.0, 3.0e-3, -2.0e-2, 65504.0]
for i, d in enumerate(ds):
    ql = rng.integers(0, 256, 128, dtype=np.uint8)
    qh = rng.integers(0, 256, 64, dtype=np.uint8)
    sc = rng.integers(-128, 128, 16, dtype=np.int16).astype(np.int8)
    if i == 1:
        sc[:4] = [-128, 127, 0, -1]
    if i == 4:
        ql[:64], qh[:32] = 0x00, 0x00   # codes 0 (value -32) in the first half
        ql[64:], qh[32:] = 0xFF, 0xFF   # codes 63 (value 31) in the second
    blocks.append(np.concatenate([ql, qh, sc.view(np.uint8), np.array([d], dtype=np.float16).view(np.uint8)]))
raw = np.stack(blocks)
assert raw.shape == (len(ds), 210)
vals = dequantize(raw, GGMLQuantizationType.Q6_K).astype(np.float32).reshape(-1)
json.dump({
    "source": "gguf.quants.dequantize(blocks, GGMLQuantizationType.Q6_K), gguf 0.19.0 (scripts/q6k_reference.py)",
    "blocks_hex": [bytes(b).hex() for b in raw],
    "values_f32_bits": [int(v) for v in vals.view(np.uint32)],
}, sys.stdout)
print()
