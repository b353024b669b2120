#!/usr/bin/env bash
# llama.cpp beside tfbench's `gguf` benchmark: builds llama-bench and
# llama-tokenize once from the llama.cpp that the `llama-cpp-python` source
# distribution on PyPI vendors (0.3.36 = llama.cpp build 0c1e570), with
# CMake and Ninja from PyPI, and caches them under the data folder
# ($TFBENCH_DATA_DIR, else .data/) in llama.cpp/. Nothing is installed
# system-wide; the build takes about 4-8 minutes on 2 cores, once.
#
#   bash scripts/llama-bench.sh build
#       only the build (prints where the binaries are)
#   bash scripts/llama-bench.sh bench MODEL.gguf OUT.json [llama-bench flags]
#       llama-bench -m MODEL.gguf -o json [flags] into OUT.json (written
#       atomically); flags default to `-t 2 -p 512 -n 128 -r 5` (plus
#       `--repack 0` on CPUs reporting AMX, see below). Feed OUT.json to
#       scripts/llama_bench_peer.py for tfbench's compare and report.
#   bash scripts/llama-bench.sh tokenize MODEL.gguf TEXTFILE
#       llama.cpp's token ids for TEXTFILE's contents (no BOS), one line
#       `[id, id, ...]` (what tests/fixtures/*_tokens.json were made from)
#
# Python tools (cmake, ninja, scikit-build-core) go into a venv in the same
# folder. The GGML_NATIVE build targets this CPU: rebuild (rm -rf
# .data/llama.cpp/build) on another machine.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
data="${TFBENCH_DATA_DIR:-$root/.data}"
dir="$data/llama.cpp"
version=0.3.36
src="$dir/llama_cpp_python-$version/vendor/llama.cpp"
bin="$dir/build/bin"
jobs="${CARGO_BUILD_JOBS:-2}"

die() { echo "llama-bench.sh: $*" >&2; exit 2; }

build() {
    if [ -x "$bin/llama-bench" ] && [ -x "$bin/llama-tokenize" ]; then
        return
    fi
    mkdir -p "$dir"
    if [ ! -x "$dir/venv/bin/cmake" ]; then
        echo "llama-bench.sh: cmake, ninja, scikit-build-core from PyPI into $dir/venv" >&2
        python3 -m venv "$dir/venv"
        "$dir/venv/bin/pip" install --quiet cmake ninja scikit-build-core
    fi
    export PATH="$dir/venv/bin:$PATH"
    if [ ! -f "$src/CMakeLists.txt" ]; then
        echo "llama-bench.sh: llama-cpp-python==$version source distribution from PyPI" >&2
        tmp="$(mktemp -d)"
        # The metadata step of `pip download` for an sdist runs its build
        # backend, which needs cmake on the PATH (hence the venv first).
        "$dir/venv/bin/pip" download --quiet --no-deps --no-build-isolation --no-binary :all: \
            "llama-cpp-python==$version" -d "$tmp"
        tar -xzf "$tmp/llama_cpp_python-$version.tar.gz" -C "$dir"
        rm -rf "$tmp"
    fi
    echo "llama-bench.sh: building llama-bench and llama-tokenize in $dir/build (-j$jobs)" >&2
    cmake -S "$src" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
        -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >&2
    cmake --build "$dir/build" --target llama-bench llama-tokenize -j"$jobs" >&2
}

cmd="${1:-}"
case "$cmd" in
build)
    build
    echo "$bin/llama-bench"
    echo "$bin/llama-tokenize"
    ;;
bench)
    [ $# -ge 3 ] || die "usage: $0 bench MODEL.gguf OUT.json [llama-bench flags]"
    model="$2" out="$3"
    shift 3
    [ -f "$model" ] || die "model file $model does not exist"
    build
    [ $# -gt 0 ] || set -- -t 2 -p 512 -n 128 -r 5
    # ggml's AMX matmul (chosen through its extra buffer types when the CPU
    # reports AMX) crashed with SIGSEGV on the project's Xeon VMs, as
    # PyTorch's AMX kernels did: there, unless told otherwise, run without
    # the extra buffer types (`--repack 0`, which also drops the CPU repacking
    # of Q4_0/IQ4_NL/Q4_K weights). Machines without AMX are unaffected.
    case " $* " in
    *" --repack "*) ;;
    *)
        if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then
            echo "llama-bench.sh: this CPU reports AMX: adding --repack 0 (ggml's AMX path crashes on these VMs)" >&2
            set -- "$@" --repack 0
        fi
        ;;
    esac
    "$bin/llama-bench" -m "$model" -o json "$@" >"$out.partial"
    mv "$out.partial" "$out"
    echo "llama-bench.sh: $out" >&2
    ;;
tokenize)
    [ $# -eq 3 ] || die "usage: $0 tokenize MODEL.gguf TEXTFILE"
    [ -f "$2" ] || die "model file $2 does not exist"
    [ -f "$3" ] || die "text file $3 does not exist"
    build
    # --ids prints the ids as a Python list; --no-bos so the ids are the
    # text's alone (tfbench's tokenizer adds no special tokens either);
    # --no-escape keeps backslashes in the text as they are. llama-tokenize
    # parses special tokens by default (`<|im_start|>` becomes its id).
    "$bin/llama-tokenize" -m "$2" -f "$3" --ids --no-bos --no-escape --log-disable 2>/dev/null |
        tail -n 1
    ;;
*)
    die "usage: $0 build | bench MODEL.gguf OUT.json [flags] | tokenize MODEL.gguf TEXTFILE"
    ;;
esac
