#!/usr/bin/env python3
"""llama.cpp's token ids of tfbench's tokenizer check text for a GGUF file,
as the fixture src/suites/inference/text/<name>_tokens.json.

The ids come from llama.cpp itself: `llama-tokenize` of build 0c1e570 (the
llama.cpp that `llama-cpp-python==0.3.36` vendors, built by
scripts/llama-bench.sh), run on the file with `--ids --no-bos --no-escape` (it
parses special tokens by default: control tokens written in the text become
their ids), which is
what tfbench's tokenizer (src/model/tokenizer/mod.rs) must reproduce. Nothing of
tfbench runs here. The fingerprint (FNV-1a 64 over the vocabulary's tokens
then merges, each followed by a zero byte; read by the `gguf` package)
tells tfbench which files the ids apply to.

    python3 -m venv /tmp/refenv && /tmp/refenv/bin/pip install gguf numpy
    bash scripts/llama-bench.sh build
    /tmp/refenv/bin/python scripts/gguf_tokens_reference.py \\
        .data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf src/suites/inference/text/check.txt \\
        > src/suites/inference/text/smollm2_tokens.json
"""
import json
import os
import subprocess
import sys

from gguf import GGUFReader
from tokref import fnv1a


def strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]) for i in f.data]


def main():
    model, text_file = sys.argv[1], sys.argv[2]
    r = GGUFReader(model)
    tokens = strings(r, "tokenizer.ggml.tokens")
    merges = strings(r, "tokenizer.ggml.merges") if "tokenizer.ggml.merges" in r.fields else []
    pre = bytes(r.fields["tokenizer.ggml.pre"].parts[-1]).decode() if "tokenizer.ggml.pre" in r.fields else "default"
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llama-bench.sh")
    out = subprocess.run(["bash", script, "tokenize", model, text_file], check=True, capture_output=True, text=True)
    ids = json.loads(out.stdout.strip().splitlines()[-1])
    with open(text_file, "rb") as f:
        text = f.read()
    print(f"{len(ids)} ids for {len(text)} bytes, vocabulary {len(tokens)}, pre {pre}", file=sys.stderr)
    json.dump({
        "source": "llama.cpp 0c1e570 llama-tokenize --ids --no-bos --no-escape, special tokens parsed (llama-cpp-python 0.3.36 sdist)",
        "model": os.path.basename(model),
        "tokenizer_pre": pre,
        "vocab": len(tokens),
        "fingerprint": fnv1a(tokens + merges),
        "text_file": text_file,
        "text_bytes": len(text),
        "ids": ids,
    }, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
