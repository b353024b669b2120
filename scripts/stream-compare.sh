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
# TFBENCH_LOCK (default /tmp/tfbench-bench.lock), STREAM_TIMES (default 20).
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
for t in ${@:-1 all}; do
  {
    id="memory/bandwidth/kernel=triad,level=dram,threads=$t"
    flock "$lock" "$bin" run --suite memory --exact "$id" -f json -o "$tmp/tf.json" >/dev/null
    read -r elements rate < <(python3 - "$tmp/tf.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = r["cases"][0]
if c["status"].get("state") != "ok":
    sys.exit(f"tfbench case failed: {c['status']}")
m = {x["name"]: x["value"] for x in c.get("metrics", [])}
tp = [x for x in c["throughput"] if x["kind"] == "bytes"][0]
print(int(m["array_bytes"]) // 8, tp["rate"]["point"] / 1e9)
PY
)
    n=$t
    [ "$t" = all ] && n=$(nproc)
    out=$(flock "$lock" env OMP_NUM_THREADS="$n" "$tmp/stream_triad" "$elements" "$times")
    best=$(awk '{print $6}' <<<"$out")
    median=$(awk '{print $8}' <<<"$out")
    awk -v t="$t" -v n="$n" -v e="$elements" -v tf="$rate" -v b="$best" -v m="$median" 'BEGIN {
      printf "triad threads=%s (%d), %d doubles per array (%.0f MiB each)\n", t, n, e, e * 8 / 1048576
      printf "  STREAM (C, OpenMP): median %.2f GB/s, best %.2f GB/s\n", m, b
      printf "  tfbench           : median %.2f GB/s\n", tf
      printf "  ratio tfbench/STREAM: %.3f (median), %.3f (vs STREAM best)\n", tf / m, tf / b
    }'
  }
done
echo "uptime: $(uptime)"
