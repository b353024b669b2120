#!/usr/bin/env bash
# The issue-48 goals side by side with PyTorch on this machine: ResNet-50
# 3x3 and 1x1 convolutions at batch 1 and 32 (im2col, tfbench's GEMM path;
# NCHW and channels-last), LSTM hidden 1024 seq 128
# batch 32, FFT 1-D complex 2^20 and 2-D 1024x1024 against torch.fft,
# attention at sequence 4096 (materialised and flash, causal and not), and
# SpMV/SpMM (own kernel) against torch.sparse.
#
# Interleaved rounds on the same machine and threads: each round runs
# tfbench's cases and PyTorch's twins (scripts/torch_peer.py, same case
# ids), alternating which goes first; the table gives per case the medians
# of each side's per-round medians and the median (min..max) of the
# per-round ratios tfbench / PyTorch (below 1: tfbench is faster).
#
#   PY=/path/to/venv/bin/python scripts/nn-sci-vs-torch.sh [ROUNDS] [FILTER]
#
# ROUNDS defaults to 3; FILTER (a tfbench case regex) replaces the goal set.
# Environment: PY (a python with torch; default python3), TFBENCH (default
# target/release/tfbench), THREADS (default: all cores), SECS (measurement
# time per case and side, default 1), OUT (default a temporary folder).
# Prints date, CPU and load before and after: on a shared host the figures
# are the busy machine's, say so when quoting them.
#
# PyTorch runs with OMP_WAIT_POLICY=PASSIVE unless it is set: on a shared
# host its OpenMP threads otherwise spin at every barrier while the other
# core is taken (one GRU layer, batch 1, hidden 256, 128 steps, 2 threads,
# at load 8 on 2 cores: 80 ms spinning, 17 ms passive, 12 ms on 1 thread).
# On a quiet machine set OMP_WAIT_POLICY=ACTIVE, PyTorch's default.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
PY=${PY:-python3}
TFBENCH=${TFBENCH:-target/release/tfbench}
THREADS=${THREADS:-$(nproc)}
SECS=${SECS:-1}
OUT=${OUT:-$(mktemp -d)}
GOALS='^nn/conv/algo=im2col,layer=rn50_(l1_3x3_b1|l3_3x3_b1|l1_3x3_b32|l3_3x3_b32|l1_1x1_b1|l3_1x1_b1|l3_1x1_b32),layout=(nchw|nhwc),threads=all$'
GOALS+='|^nn/rnn/batch=32,cell=lstm,hidden=1024,seq=128,threads=all$'
GOALS+='|^sci/fft/kind=c2c,shape=(1048576|1024x1024),threads=all$'
GOALS+='|^nn/attention/algo=(materialised|flash),heads=8,mask=(none|causal),seq=4096,threads=all$'
GOALS+='|^sci/(spmv|spmm)/density=0.01,impl=own,n=10000,pattern=(random|powerlaw),threads=all$'
FILTER=${2:-$GOALS}

[ -x "$TFBENCH" ] || { echo "no $TFBENCH: cargo build --release first" >&2; exit 2; }
"$PY" -c 'import torch' 2>/dev/null || { echo "$PY has no torch: set PY to a python with torch (pip install torch)" >&2; exit 2; }
mkdir -p "$OUT"
echo "date: $(date -u +%Y-%m-%dT%H:%MZ); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); threads: $THREADS; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "PyTorch: $("$PY" -c 'import torch; print(torch.__version__, torch.backends.cpu.get_cpu_capability())'), OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}; max ISA: ${TFBENCH_MAX_ISA:-native}; results in $OUT"

ours() {
  "$TFBENCH" run "$FILTER" -j "$THREADS" --no-probe --no-canary --warm-up-time 0.3 \
    --measurement-time "$SECS" --max-time "$(awk "BEGIN{print $SECS * 5}")" -f json -o "$OUT/ours_$1.json" > "$OUT/ours_$1.log" 2>&1 \
    || { echo "tfbench round $1 failed (rc $?): see $OUT/ours_$1.log" >&2; exit 1; }
}
theirs() {
  # Any round's tfbench file is a template: only ids, parameters and declared work are read.
  local template
  template=$(ls "$OUT"/ours_*.json | head -1)
  OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE} "$PY" scripts/torch_peer.py "$template" "$OUT/torch_$1.json" --threads "$THREADS" --secs "$SECS" --reps 10 \
    > "$OUT/torch_$1.log" 2>&1 || { echo "PyTorch round $1 failed (rc $?): see $OUT/torch_$1.log" >&2; exit 1; }
}
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then ours "$r"; theirs "$r"; else theirs "$r"; ours "$r"; fi
  echo "round $r of $ROUNDS done ($(date -u +%H:%MZ), load $(cut -d' ' -f1 /proc/loadavg))"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

"$PY" - "$OUT" "$ROUNDS" <<'EOF'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def medians(path):
    with open(path) as f:
        doc = json.load(f)
    return {c["id"]: c["estimates"]["median"]["point"] for c in doc["cases"]
            if c["status"]["state"] == "ok" and c.get("estimates")}
ours = [medians(f"{out}/ours_{r}.json") for r in range(1, rounds + 1)]
theirs = [medians(f"{out}/torch_{r}.json") for r in range(1, rounds + 1)]
ms = lambda ns: f"{ns / 1e6:.3f}" if ns < 1e8 else f"{ns / 1e6:.0f}"
print(f"\n| case | tfbench ms | PyTorch ms | ratio, median of {rounds} rounds (min..max) |")
print("|---|---:|---:|---|")
for cid in ours[0]:
    pairs = [(o[cid], t[cid]) for o, t in zip(ours, theirs) if cid in o and cid in t]
    if not pairs:
        print(f"| `{cid}` | {ms(ours[0][cid])} | no twin | |")
        continue
    ratios = [a / b for a, b in pairs]
    print(f"| `{cid}` | {ms(statistics.median(a for a, _ in pairs))} | {ms(statistics.median(b for _, b in pairs))} "
          f"| {statistics.median(ratios):.2f} ({min(ratios):.2f}..{max(ratios):.2f}) |")
EOF
