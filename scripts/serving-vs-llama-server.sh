#!/usr/bin/env bash
# The same server-scenario load against llama.cpp's llama-server (through
# tfbench's HTTP client), against tfbench's continuous-batching engine
# served over HTTP (`tfbench load --serve`, through the same client), and
# against that engine in-process, on the same model, threads, batch slots
# and seeded arrivals; prints a Markdown table for docs/serving.md with the
# date, CPU and load average. The two engine rows differ by the client's
# and the socket's cost.
#
#   scripts/serving-vs-llama-server.sh [MODEL.gguf] [LLAMA_SERVER]
#
# LLAMA_SERVER defaults to llama-server in the data folder's llama.cpp build
# (${TFBENCH_DATA_DIR:-.data}/llama.cpp/build/bin): build it from the same
# llama-cpp-python 0.3.36 sdist as scripts/llama-bench.sh, with
# -DLLAMA_BUILD_SERVER=ON and the `llama-server` target (docs/serving.md).
#
# Env: QPS (fixed-rate run, default 2), PEAK (0: no peak searches), THREADS (2), SLOTS (4), OUT (folder,
# default target/serving-vs-llama-server), LLAMA_ARGS (extra llama-server flags, split on spaces: on a
# busy host `--poll 0`, since llama.cpp's threads spin-wait for each other at every step and an
# oversubscribed machine makes that very slow; say so beside the table). Needs a release build of tfbench
# (target/release/tfbench) and python3 for the table.
set -euo pipefail
MODEL=${1:-.data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf}
SERVER=${2:-${TFBENCH_DATA_DIR:-.data}/llama.cpp/build/bin/llama-server}
[ -x "$SERVER" ] || { echo "serving-vs-llama-server.sh: no llama-server at $SERVER (see the header)" >&2; exit 2; }
QPS=${QPS:-2}
THREADS=${THREADS:-2}
SLOTS=${SLOTS:-4}
OUT=${OUT:-target/serving-vs-llama-server}
TF=${TF:-target/release/tfbench}
PORT=${PORT:-18089}
TFPORT=${TFPORT:-18090}
PEAK=${PEAK:-1}
mkdir -p "$OUT"

read -r -a EXTRA <<<"${LLAMA_ARGS:-}"
"$SERVER" -m "$MODEL" --host 127.0.0.1 --port "$PORT" -t "$THREADS" -c 2048 -np "$SLOTS" ${EXTRA[@]+"${EXTRA[@]}"} \
  >"$OUT/llama-server.log" 2>&1 &
PID=$!
"$TF" load --serve "127.0.0.1:$TFPORT" --model "$MODEL" --threads "$THREADS" --max-batch "$SLOTS" \
  --input-len 32 --output-len 16 >"$OUT/tfbench-server.log" 2>&1 &
TFPID=$!
trap 'kill $PID $TFPID 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then break; fi
  sleep 0.5
done
curl -sf "http://127.0.0.1:$PORT/health" >/dev/null || { echo "llama-server did not come up" >&2; exit 1; }
for _ in $(seq 1 120); do
  if curl -sf "http://127.0.0.1:$TFPORT/health" >/dev/null 2>&1; then break; fi
  sleep 0.5
done
curl -sf "http://127.0.0.1:$TFPORT/health" >/dev/null || { echo "tfbench load --serve did not come up" >&2; exit 1; }

COMMON=(--scenario server --quick --seed 1 --input-len 32 --output-len 16 --tpot-bound-ms 200 --ttft-bound-ms 2000
        --goodput ttft:1000ms tpot:200ms)
# 1. A fixed rate, both servers.
"$TF" load "${COMMON[@]}" --qps "$QPS" --endpoint "http://127.0.0.1:$PORT" --model "$MODEL" \
  --server-pid "$PID" -o "$OUT/llama-fixed.json" >"$OUT/llama-fixed.txt"
"$TF" load "${COMMON[@]}" --qps "$QPS" --endpoint "http://127.0.0.1:$TFPORT" --model "$MODEL" \
  --server-pid "$TFPID" -o "$OUT/served-fixed.json" >"$OUT/served-fixed.txt"
"$TF" load "${COMMON[@]}" --qps "$QPS" --model "$MODEL" --threads "$THREADS" --max-batch "$SLOTS" \
  -o "$OUT/engine-fixed.json" >"$OUT/engine-fixed.txt"
# 2. The peak search, every server (PEAK=0 skips it).
if [ "$PEAK" != 0 ]; then
"$TF" load "${COMMON[@]}" --find-peak --qps 1 --endpoint "http://127.0.0.1:$PORT" --model "$MODEL" \
  --server-pid "$PID" -o "$OUT/llama-peak.json" >"$OUT/llama-peak.txt"
"$TF" load "${COMMON[@]}" --find-peak --qps 1 --endpoint "http://127.0.0.1:$TFPORT" --model "$MODEL" \
  --server-pid "$TFPID" -o "$OUT/served-peak.json" >"$OUT/served-peak.txt"
"$TF" load "${COMMON[@]}" --find-peak --qps 1 --model "$MODEL" --threads "$THREADS" --max-batch "$SLOTS" \
  -o "$OUT/engine-peak.json" >"$OUT/engine-peak.txt"
else
  rm -f "$OUT"/*-peak.json
fi

python3 - "$OUT" <<'PY'
import json, sys, os
out = sys.argv[1]
def load(n): return json.load(open(os.path.join(out, n)))
rows = [("llama-server (HTTP client)", "llama"), ("tfbench engine over HTTP (`load --serve`, HTTP client)", "served"),
        ("tfbench engine (in-process)", "engine")]
f = load("engine-fixed.json")
print(f"Measured {f['date_utc']} on {f['cpu']} ({f['logical_cpus']} logical CPUs); "
      f"load average {f['loadavg_before']} before the first run.\n")
print("| server | QPS | done/failed | TTFT p50 / p99 ms | TPOT p50 / p99 ms | E2E p99 ms | out tok/s | goodput | peak QPS (p99 TTFT < 2 s, TPOT < 200 ms) | search wall s | client CPU us/req |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for label, k in rows:
    fx = load(f"{k}-fixed.json")
    pk = load(f"{k}-peak.json") if os.path.exists(os.path.join(out, f"{k}-peak.json")) else None
    r = fx["runs"][0]; s = r["summary"]
    cpu = r["log"]["target"].get("client_cpu_us_per_request") if isinstance(r["log"]["target"], dict) else None
    peak = pk["peak"]["qps"] if pk else None
    g = s["goodput"]["share"] if s.get("goodput") else None
    cpu_s = "-" if not cpu else "%.0f" % cpu["p50"]
    g_s = "-" if g is None else "%.0f%%" % (100 * g)
    peak_s = ("none" if peak is None else "%.2f" % peak) if pk else "not run"
    wall_s = "%.0f" % pk["wall_s"] if pk else "-"
    print(f"| {label} | {r['qps']:.2f} | {s['completed']}/{s['failed']} | {s['ttft']['p50']:.0f} / {s['ttft']['p99']:.0f} | "
          f"{s['tpot']['p50']:.1f} / {s['tpot']['p99']:.1f} | {s['e2e']['p99']:.0f} | {s['output_tok_per_s']:.1f} | "
          f"{g_s} | {peak_s} | {wall_s} | {cpu_s} |")
PY
