#!/usr/bin/env bash
# Triad bandwidth: an independent STREAM measurement (scripts/stream_triad.c,
# McCalpin's triad kernel compiled by the system C compiler with OpenMP)
# against tfbench's memory/bandwidth triad case in DRAM, same array size and
# thread count, run one after the other under the shared bench lock.
#
#   scripts/stream-compare.sh            # 1 thread and all threads
#   scripts/stream-compare.sh all        # just all threads
#
# Env: TFBENCH (binary, default ./target/release/tfbench), CC (default gcc),
# TFBENCH_LOCK (default /tmp/tfbench-bench.lock), STREAM_TIMES (default 20),
# STREAM_ROUNDS (alternating rounds, default 3).
# Both sides count 24 bytes per element (no write-allocate traffic); the
# ratio uses the median rate of each (tfbench's headline), and the STREAM
# best rate (what STREAM itself prints) is shown too.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${TFBENCH:-./target/release/tfbench}
lock=${TFBENCH_LOCK:-/tmp/tfbench-bench.lock}
times=${STREAM_TIMES:-20}
[ -x "$bin" ] || { echo "build first: cargo build --release" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"${CC:-gcc}" -O3 -march=native -fopenmp scripts/stream_triad.c -o "$tmp/stream_triad"
echo "uptime: $(uptime)"
# One tfbench triad run; prints "elements rate_GBps".
tfbench_triad() {
  flock "$lock" "$bin" run --suite memory --exact "memory/bandwidth/kernel=triad,level=dram,threads=$1" \
    -f json -o "$tmp/tf.json" --quiet >/dev/null
  python3 - "$tmp/tf.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["cases"][0]
if c["status"].get("state") != "ok":
    sys.exit(f"tfbench case failed: {c['status']}")
m = {x["name"]: x["value"] for x in c.get("metrics", [])}
tp = [x for x in c["throughput"] if x["kind"] == "bytes"][0]
print(int(m["array_bytes"]) // 8, tp["rate"]["point"] / 1e9)
PY
}

# The host is shared and its bandwidth drifts by 10-20% within minutes, so
# the two programs alternate for STREAM_ROUNDS rounds (order flipped every
# round) and the median of the per-round ratios is the verdict.
rounds=${STREAM_ROUNDS:-3}
for t in ${@:-1 all}; do
  n=$t
  [ "$t" = all ] && n=$(nproc)
  ratios=()
  for r in $(seq "$rounds"); do
    if [ $((r % 2)) = 1 ]; then
      read -r elements rate < <(tfbench_triad "$t")
      out=$(flock "$lock" env OMP_NUM_THREADS="$n" "$tmp/stream_triad" "$elements" "$times")
    else
      # The array size is the same every round: reuse the first round's.
      out=$(flock "$lock" env OMP_NUM_THREADS="$n" "$tmp/stream_triad" "$elements" "$times")
      read -r elements rate < <(tfbench_triad "$t")
    fi
    best=$(awk '{print $6}' <<<"$out")
    median=$(awk '{print $8}' <<<"$out")
    ratio=$(awk -v tf="$rate" -v m="$median" 'BEGIN { printf "%.3f", tf / m }')
    ratios+=("$ratio")
    awk -v t="$t" -v n="$n" -v e="$elements" -v tf="$rate" -v b="$best" -v m="$median" -v r="$r" 'BEGIN {
      printf "triad threads=%s (%d) round %d, %d doubles per array (%.0f MiB each)\n", t, n, r, e, e * 8 / 1048576
      printf "  STREAM (C, OpenMP): median %.2f GB/s, best %.2f GB/s\n", m, b
      printf "  tfbench           : median %.2f GB/s\n", tf
      printf "  ratio tfbench/STREAM: %.3f (median), %.3f (vs STREAM best)\n", tf / m, tf / b
    }'
  done
  printf '%s\n' "${ratios[@]}" | sort -n | awk -v t="$t" '{ v[NR] = $1 } END {
    printf "threads=%s: median ratio tfbench/STREAM over %d rounds: %.3f (range %.3f to %.3f)\n", t, NR, v[int((NR + 1) / 2)], v[1], v[NR]
  }'
done
echo "uptime: $(uptime)"
