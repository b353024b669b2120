#!/usr/bin/env bash
# Quantized decode on AVX2 (issue 51), side by side in one session:
# main's build (OLD) and this branch's (NEW) with TFBENCH_MAX_ISA=avx2 (what an
# AVX2-only CPU runs; on an AVX2-only CPU the variable changes nothing), and
# llama-bench when it is built, in interleaved rounds so drift on a shared
# host lands on every build alike.
#
# usage: scripts/avx2-quant-side-by-side.sh [ROUNDS]
#   OLD=path/to/old/tfbench (required) NEW=path/to/new/tfbench (default: this
#   checkout's release build) LLAMA_BENCH=path/to/llama-bench (default: the one
#   `bash scripts/llama-bench.sh build` makes in the data folder)
#   MODELS="a.gguf b.gguf" THREADS=2 CAP=avx2 (CAP=native for the CPU's own level)
set -euo pipefail
rounds=${1:-2}
old=${OLD:?set OLD to the tfbench binary to compare against (e.g. a build of main)}
new=${NEW:-target/release/tfbench}
llama=${LLAMA_BENCH:-${TFBENCH_DATA_DIR:-.data}/llama.cpp/build/bin/llama-bench}
threads=${THREADS:-2}
cap=${CAP:-avx2}
models=${MODELS:-".data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf .data/smollm2/SmolLM2-135M-Instruct.Q4_K_M-tfbench.gguf"}

for b in "$old" "$new"; do
  [ -x "$b" ] || { echo "no tfbench binary at $b" >&2; exit 2; }
done
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# TFBENCH_MAX_ISA=$cap, $threads threads, $rounds interleaved rounds"
TFBENCH_MAX_ISA=$cap "$new" sysinfo --kernels | sed 's/^/# /'

gguf() { # label binary model
  echo "## $1 $(basename "$3")"
  TFBENCH_MAX_ISA=$cap "$2" run --model "$3" -p 512 -n 128 -r 3 -j "$threads" --no-probe -f llama-bench 2>/dev/null \
    | grep -E '^\| ' || echo "(failed)"
}
builtin() { # label binary
  echo "## $1 built-in GPT-2 decode, batch 1, depth 32, 32 tokens: f32 / int8 / q4_0"
  TFBENCH_MAX_ISA=$cap "$2" run --suite inference --no-probe -j "$threads" --sample-size 5 \
    'inference/decode/batch=1,depth=32,dtype=(f32|int8|q4_0),gen=32,layers=full,model=gpt2,' 2>&1 \
    | grep -E 'tokens/s|FAIL' || echo "(failed)"
}

for r in $(seq 1 "$rounds"); do
  echo "# round $r"
  # Alternate the order per round (old new, new old, ...).
  if [ $((r % 2)) -eq 1 ]; then order="old new"; else order="new old"; fi
  for m in $models; do
    for which in $order; do
      if [ "$which" = old ]; then gguf old "$old" "$m"; else gguf new "$new" "$m"; fi
    done
    if [ -x "$llama" ]; then
      echo "## llama-bench $(basename "$m") (built with GGML_NATIVE: the host's full ISA, not capped)"
      "$llama" -m "$m" -t "$threads" -p 512 -n 128 -r 3 2>/dev/null | grep -E '^\| ' || echo "(failed)"
    fi
  done
  for which in $order; do
    if [ "$which" = old ]; then builtin old "$old"; else builtin new "$new"; fi
  done
done
