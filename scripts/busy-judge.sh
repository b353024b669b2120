#!/usr/bin/env bash
# What share of cases the gate can judge on a busy machine (issue 45): with
# two busy loops of another process beside tfbench (the load of a shared
# runner compiling beside the job), a stored comparison (two `run`s of
# configs/ci.toml, then `compare`) and a paired `ab` of the build against
# itself, on the same cases. Prints each method's verdict counts and its
# gate exit status, then a quick-profile A/A pair of the matmul cases;
# quiet (BUSY=0) for the control. Bands are learned from no history: a band
# learned from these runs would judge them by themselves.
#
#   scripts/busy-judge.sh [OUT_DIR]
#
# Environment: TFBENCH (target/release/tfbench), SELECT (the cases' regex),
# BUSY (busy loops beside the runs: 2), TIMING (extra run/ab options).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/busy-judge}
B=${TFBENCH:-target/release/tfbench}
SELECT=${SELECT:-tensor/(binary/op=(add|mul),shape=(500x500|4096x4096)|reduction/op=sum,shape=1000x1000|unary/elements=1048576,op=exp)$}
BUSY=${BUSY:-2}
read -r -a timing <<<"${TIMING:-}"
[ -x "$B" ] || { echo "no tfbench at $B: cargo build --release first" >&2; exit 2; }
rm -rf "$out" && mkdir -p "$out"
loops=()
trap 'for p in "${loops[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
for _ in $(seq 1 "$BUSY"); do
    ( while :; do :; done ) &
    loops+=("$!")
done
echo "[$(date -u +%H:%M:%S)] $BUSY busy loop(s) beside tfbench; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs" >&2
counts() {
    python3 -c 'import json,sys,collections
v=json.load(open(sys.argv[1]))
c=collections.Counter(ch["verdict"] for ch in v["changes"])
judged=sum(c[k] for k in ("regressed","improved","unchanged"))
print("%s: judged %d of %d (%s), gate exit %s" % (sys.argv[2], judged, len(v["changes"]), dict(c), sys.argv[3]))' "$@"
}
for side in base cand; do
    "$B" run --config configs/ci.toml "$SELECT" --history-dir "$out/runs-history" -q --output "$out/$side.json" "${timing[@]}" >/dev/null
done
status=0
"$B" compare --baseline "$out/base.json" --against "$out/cand.json" --history-dir "$out/no-history" \
    --fail-on-regression -f json -o "$out/stored.json" >/dev/null 2>"$out/stored.err" || status=$?
counts "$out/stored.json" stored "$status"
status=0
"$B" ab --base "$B" --head "$B" --config configs/ci.toml "$SELECT" --fail-on-regression -q \
    -f json -o "$out/ab.json" "${timing[@]}" >/dev/null 2>"$out/ab.err" || status=$?
counts "$out/ab.json" ab "$status"
# A quick-profile A/A pair (smoke profile: judged with its wide band): the
# tensor suite's matmul cases, where issue 45 saw seven false regressions.
for side in qa qb; do
    "$B" run --suite tensor matmul --quick --no-probe -q --output "$out/$side.json" >/dev/null
done
status=0
"$B" compare --baseline "$out/qa.json" --against "$out/qb.json" --history-dir "$out/no-history" \
    --fail-on-regression -f json -o "$out/quick.json" >/dev/null 2>"$out/quick.err" || status=$?
counts "$out/quick.json" "quick A/A" "$status"
