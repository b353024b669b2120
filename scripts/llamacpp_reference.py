#!/usr/bin/env python3
"""llama.cpp's own run of a GGUF file, as a JSON fixture for tfbench's tests
(tests/fixtures/llamacpp_*.json): the independent reference the `gguf`
benchmark's model is checked against.

Nothing of tfbench is used. llama.cpp is the build that
scripts/llama-bench.sh makes from the llama-cpp-python 0.3.36 source
distribution (llama.cpp 0c1e570), driven through that package's own ctypes
bindings (pure Python; `LLAMA_CPP_LIB_PATH` points them at the built
libllama.so):

- decoders (llama, gpt2): the logits of every position of a fixed prompt,
  then a greedy continuation of `--generate` tokens (argmax, fed back one at
  a time through the KV cache), keeping per position the top-k logits and
  the logits of a fixed sample of ids spread over the vocabulary;
- bert: the last hidden states of every token of the prompt (pooling none),
  full rows.

Settings are recorded in the fixture. `use_extra_bufts` is off (ggml's AMX
and repacking paths: its AMX matmul crashed on the project's Xeon VMs, see
scripts/llama-bench.sh), flash attention off, and the KV cache in f32 rather
than llama.cpp's default f16, so the only arithmetic difference left between
the two programs is the one that belongs to the kernels: ggml's CPU matmul
converts the activations to the weight type's `vec_dot_type` (Q8_0 for
Q4_0/Q8_0 weights, Q8_1 for Q4_1, Q8_K for Q4_K/Q6_K, F16 for F16 weights,
F32 for F32) before every dot product.

    bash scripts/llama-bench.sh build        # once: .data/llama.cpp/build/bin
    python3 -m venv .data/pyref && .data/pyref/bin/pip install gguf numpy diskcache jinja2 typing_extensions
    LLAMA_CPP_LIB_PATH=$PWD/.data/llama.cpp/build/bin .data/pyref/bin/python \\
        scripts/llamacpp_reference.py MODEL.gguf --prompt-ids 504,3575,282,4649,314 > fixture.json

The llama-cpp-python package is imported from the unpacked sdist
(`--package`, default .data/llama.cpp/llama_cpp_python-0.3.36).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

GGML_TYPE_F32 = 0
LLAMA_POOLING_TYPE_NONE = 0
# ggml-cpu's vec_dot_type of each weight type (ggml/src/ggml-cpu/ggml-cpu.c,
# `type_traits_cpu`): what the activations are converted to before a matmul.
VEC_DOT = {"F32": "F32", "F16": "F16", "BF16": "BF16", "Q8_0": "Q8_0", "Q4_0": "Q8_0",
           "Q4_1": "Q8_1", "Q4_K": "Q8_K", "Q6_K": "Q8_K", "Q5_0": "Q8_0"}


def load_bindings(package):
    sys.path.insert(0, package)
    import llama_cpp  # noqa: E402
    import llama_cpp.llama_cpp as C  # noqa: E402
    import llama_cpp.llama as L  # noqa: E402

    # The high-level constructor takes no `use_extra_bufts`: set it in the
    # defaults it starts from.
    orig = C.llama_model_default_params

    def params():
        p = orig()
        p.use_extra_bufts = False
        return p

    C.llama_model_default_params = params
    L.llama_cpp.llama_model_default_params = params
    return llama_cpp


def commit_of(package):
    src = os.path.join(package, "vendor", "llama.cpp")
    try:
        out = subprocess.run(["git", "-C", src, "rev-parse", "--short=7", "HEAD"],
                             capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "0c1e570 (vendored by llama-cpp-python 0.3.36)"


def tensor_types(path):
    """Tensor counts by type and the architecture, from the file's header (the
    gguf package, ggml's own reader)."""
    from gguf import GGUFReader

    r = GGUFReader(path)
    out = {}
    for t in r.tensors:
        out[t.tensor_type.name] = out.get(t.tensor_type.name, 0) + 1
    arch = r.fields["general.architecture"]
    return out, bytes(arch.parts[arch.data[0]]).decode()


def rnd(xs, digits=5):
    return [round(float(x), digits) for x in xs]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--prompt-ids", required=True, help="comma-separated token ids")
    ap.add_argument("--generate", type=int, default=32)
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("--sample", type=int, default=64, help="ids spread over the vocabulary, per position")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--package", default=os.path.join(".data", "llama.cpp", "llama_cpp_python-0.3.36"))
    a = ap.parse_args()
    llama_cpp = load_bindings(a.package)
    ids = [int(t) for t in a.prompt_ids.split(",")]
    types, arch = tensor_types(a.model)
    encoder = arch == "bert"
    n_ctx = len(ids) + a.generate + 8
    llm = llama_cpp.Llama(
        a.model, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=a.threads, n_threads_batch=a.threads,
        logits_all=not encoder, embedding=encoder, pooling_type=LLAMA_POOLING_TYPE_NONE if encoder else -1,
        flash_attn=False, type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32, verbose=False)
    fx = {
        "source": "scripts/llamacpp_reference.py: llama.cpp through llama-cpp-python's ctypes bindings",
        "file": os.path.basename(a.model),
        "architecture": arch,
        "llama_cpp": {
            "package": "llama-cpp-python " + llama_cpp.__version__,
            "commit": commit_of(a.package),
            "threads": a.threads,
            "n_ctx": n_ctx,
            "n_batch": n_ctx,
            "use_extra_bufts": False,
            "flash_attn": False,
            "kv_cache_type": "f32",
            "tensor_types": types,
            "activations": "ggml-cpu converts each matmul's activations to the weight type's vec_dot_type: "
            + ", ".join(f"{t} weights -> {VEC_DOT.get(t, '?')}" for t in sorted(types)),
        },
        "prompt_ids": ids,
    }
    if encoder:
        n_embd = llm.n_embd()
        llm._batch.reset()
        llm._batch.add_sequence(ids, 0, True)
        llm._ctx.decode(llm._batch)
        ptr = llama_cpp.llama_get_embeddings(llm._ctx.ctx)
        fx["hidden"] = [rnd(ptr[i * n_embd:(i + 1) * n_embd]) for i in range(len(ids))]
        json.dump(fx, sys.stdout, indent=None)
        print()
        return
    n_vocab = llm.n_vocab()
    sample = [int(i) for i in np.linspace(0, n_vocab - 1, a.sample)]
    llm.eval(ids)
    rows = [np.array(r, dtype=np.float64) for r in llm.scores[:llm.n_tokens]]
    greedy = []
    for _ in range(a.generate):
        nxt = int(np.argmax(rows[-1]))
        greedy.append(nxt)
        if len(greedy) == a.generate:
            break
        llm.eval([nxt])
        rows.append(np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64))
    fx["greedy_ids"] = greedy
    fx["sample_ids"] = sample
    positions = []
    for r in rows:
        top = np.argsort(-r, kind="stable")[:a.top]
        positions.append({"top_ids": [int(i) for i in top], "top_logits": rnd(r[top]),
                          "sample_logits": rnd(r[sample])})
    fx["positions"] = positions
    json.dump(fx, sys.stdout, indent=None)
    print()


if __name__ == "__main__":
    main()
