#!/usr/bin/env bash
# tfbench and llama-bench on the same GGUF file, interleaved round by round
# (the figures behind docs/models.md's "Beside llama-bench" table):
#
#   scripts/llama-side-by-side.sh [MODEL.gguf] [OUT_DIR]
#
# Each round runs, for every thread count, llama-bench (`-p PP -n TG -r REPS`,
# plus --repack 0 on AMX CPUs as scripts/llama-bench.sh does) and then
# tfbench's `ppPP` and `tgTG` cases on the same file with the same threads,
# so both see the same machine state; the order within a round alternates.
# It prints each round's t/s (llama-bench's mean over its repetitions,
# tfbench's median over its samples) and, per test and thread count, the
# median over rounds of the tfbench / llama-bench ratio, the comparison to
# quote on a shared host (never one round's absolute figure).
#
# Environment: ROUNDS (3), THREADS ("2 1"), PP (512), TG (128), REPS (5),
# TFBENCH (target/release/tfbench), LLAMA_PP_FLAGS / LLAMA_TG_FLAGS (extra
# llama-bench flags for its pp / tg runs, e.g. LLAMA_TG_FLAGS='--repack 1'
# to let ggml use its AMX buffer type for generation on a CPU where
# scripts/llama-bench.sh would turn it off). llama-bench runs pp and tg as
# two calls so each can have its own flags. Needs the llama.cpp build of
# `scripts/llama-bench.sh build`.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
model=${1:-.data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
out=${2:-target/llama-side-by-side}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2 1}
PP=${PP:-512}
TG=${TG:-128}
REPS=${REPS:-5}
B=${TFBENCH:-target/release/tfbench}
LLAMA_PP_FLAGS=${LLAMA_PP_FLAGS:-}
LLAMA_TG_FLAGS=${LLAMA_TG_FLAGS:-}
[ -x "$B" ] || { echo "llama-side-by-side: no tfbench at $B (cargo build --release)" >&2; exit 2; }
[ -f "$model" ] || { echo "llama-side-by-side: no model file $model" >&2; exit 2; }
bash scripts/llama-bench.sh build
mkdir -p "$out"
rm -f "$out"/*.json
# The two tests on this file, through a config (`--model FILE -p PP -n TG` says the same
# on the command line, with the model's name in the case ids).
cat >"$out/gguf.toml" <<TOML
[suites.inference.benchmarks.gguf]
file = ["$(realpath "$model")"]
test = ["pp$PP", "tg$TG"]
depth = [0]
TOML
for r in $(seq 1 "$ROUNDS"); do
    for t in $THREADS; do
        llama() {
            # shellcheck disable=SC2086 # the extra flags are words
            bash scripts/llama-bench.sh bench "$model" "$out/llama-pp-r$r-t$t.json" -t "$t" -p "$PP" -n 0 -r "$REPS" $LLAMA_PP_FLAGS
            # shellcheck disable=SC2086
            bash scripts/llama-bench.sh bench "$model" "$out/llama-tg-r$r-t$t.json" -t "$t" -p 0 -n "$TG" -r "$REPS" $LLAMA_TG_FLAGS
        }
        ours() {
            "$B" run --config "$out/gguf.toml" --suite inference "^inference/gguf/" --threads "$t" -q \
                --format llama-bench-json -o "$out/tfbench-r$r-t$t.json" >/dev/null
        }
        if [ $(((r + t) % 2)) = 0 ]; then llama; ours; else ours; llama; fi
        echo "[$(date -u +%H:%M:%S)] round $r, $t thread(s) done" >&2
    done
done
python3 - "$out" "$ROUNDS" "$THREADS" "$PP" "$TG" <<'EOF'
import json, statistics, sys
out, rounds, threads, pp, tg = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4], sys.argv[5]
def ts(path, test):
    for rec in json.load(open(path)):
        name = rec.get("test") or (f"pp{rec['n_prompt']}" if rec["n_gen"] == 0 else f"tg{rec['n_gen']}")
        if name == test:
            return rec["tfbench"]["median_ts"] if "tfbench" in rec else rec["avg_ts"]
    raise SystemExit(f"{path}: no {test}")
print("| test | threads | round | llama-bench t/s | tfbench t/s | tfbench / llama-bench |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
summary = []
for test in (f"pp{pp}", f"tg{tg}"):
    for t in threads:
        ratios = []
        for r in range(1, rounds + 1):
            a = ts(f"{out}/llama-{test[:2]}-r{r}-t{t}.json", test)
            b = ts(f"{out}/tfbench-r{r}-t{t}.json", test)
            ratios.append(b / a)
            print(f"| {test} | {t} | {r} | {a:.1f} | {b:.1f} | {b / a:.3f} |")
        summary.append((test, t, statistics.median(ratios), min(ratios), max(ratios)))
print()
print("| test | threads | median ratio | range over rounds |")
print("| --- | ---: | ---: | --- |")
for test, t, med, lo, hi in summary:
    print(f"| {test} | {t} | {med:.3f} | {lo:.3f}-{hi:.3f} |")
EOF
