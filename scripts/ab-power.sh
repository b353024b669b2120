#!/usr/bin/env bash
# The power of `tfbench ab` on its default profile (issue 45): a 10% slowdown
# of a single case caught in at least 9 of 10 runs, and A/A failing the gate
# in at most 1 of 10. Runs A/A and +10% alternately (so a window of a busy
# host touches both kinds alike) and prints one table row per kind.
#
#   scripts/ab-power.sh [OUT_DIR]
#
# Environment: RUNS (10), TFBENCH (target/release/tfbench), SELECT (the
# tensor cases: add/mul 500x500 and 4096x4096, sum 1000x1000, exp 1M, as
# scripts/busy-judge.sh), INJECT (the one slowed case), AB (extra `ab`
# options; empty: the default profile as a user gets it).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/ab-power}
RUNS=${RUNS:-10}
B=${TFBENCH:-target/release/tfbench}
SELECT=${SELECT:-'(binary/op=(add|mul),shape=(500x500|4096x4096)|reduction/op=sum,shape=1000x1000|unary/elements=1048576,op=exp)$'}
INJECT=${INJECT:-'tensor/unary/elements=1048576,op=exp$'}
read -r -a extra <<<"${AB:-}"
[ -x "$B" ] || { echo "no tfbench at $B: cargo build --release first" >&2; exit 2; }
mkdir -p "$out"
# A private copy: a rebuild of target/ during the runs must not swap the
# binary under the later rounds' fresh workers.
cp "$B" "$out/tfbench" && B="$out/tfbench"
log0() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
log0 "build: $("$B" --version), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) CPUs"
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

# One ab run of kind $1 (aa or p10), number $2: prints its exit status.
one() {
  local env=()
  [ "$1" = p10 ] && env=(--head-env "TFBENCH_INJECT_SLOWDOWN=$INJECT=1.10")
  local rc=0
  "$B" ab --base "$B" --head "$B" --suite tensor "${extra[@]}" "${env[@]}" \
    --fail-on-regression --format json -o "$out/ab-$1-$2.json" -q "$SELECT" >/dev/null 2>>"$out/ab.log" || rc=$?
  echo "$rc"
}

# What run $1 found for the injected case and the others: "verdict ratio worst_other".
verdicts() {
  python3 - "$1" "$INJECT" <<'PY'
import json, re, sys
c = json.load(open(sys.argv[1]))["changes"]
r = re.compile(sys.argv[2])
inj = [x for x in c if r.search(x["id"])]
rest = [x for x in c if not r.search(x["id"])]
v = inj[0] if inj else {"verdict": "missing", "ratio": {"point": float("nan")}}
flagged = sum(1 for x in rest if x["verdict"] in ("regressed", "improved"))
print(v["verdict"], f'{v["ratio"]["point"]:.3f}', flagged)
PY
}

declare -A fails=() caught=() exit4=()
for kind in aa p10; do fails[$kind]=0; caught[$kind]=0; exit4[$kind]=0; done
for i in $(seq 1 "$RUNS"); do
  for kind in aa p10; do
    t=$(date +%s)
    rc=$(one "$kind" "$i")
    read -r v ratio others < <(verdicts "$out/ab-$kind-$i.json")
    log "$kind $i: exit $rc, injected case $v at $ratio, $others other case(s) flagged, $(( $(date +%s) - t ))s"
    [ "$rc" != 0 ] && fails[$kind]=$((fails[$kind] + 1))
    [ "$rc" = 4 ] && exit4[$kind]=$((exit4[$kind] + 1))
    [ "$v" = regressed ] && caught[$kind]=$((caught[$kind] + 1))
  done
done
echo "| kind | runs | gate failed (exit != 0) | of which could not judge (exit 4) | injected case regressed |"
echo "| --- | --- | --- | --- | --- |"
echo "| A/A | $RUNS | ${fails[aa]} | ${exit4[aa]} | ${caught[aa]} |"
echo "| +10% on one case | $RUNS | ${fails[p10]} | ${exit4[p10]} | ${caught[p10]} |"
