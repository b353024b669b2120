#!/usr/bin/env bash
# Instruction counts on the A/A protocol of docs/verdicts.md (issue 50):
# the tensor suite's binary|reduction|unary cases under configs/ci.toml,
# counted (run --measure instructions) RUNS times clean and RUNS times with
# 2% extra instructions on the five cases of scripts/verdict-experiments.sh;
# every clean pair compared (A/A), every injected run against the first
# clean one. Prints the flagged cases of each comparison and the wall time
# of one counted run.
#   scripts/count-experiments.sh [OUT]     (RUNS=2 by default)
set -euo pipefail
out=${1:-target/count-experiments}
RUNS=${RUNS:-2}
B=${TFBENCH:-target/release/tfbench}
SELECT=${SELECT:-binary|reduction|unary}
INJECT=${INJECT:-tensor/(binary/op=add,shape=500x500|binary/op=mul,shape=4096x4096|unary/elements=1048576,op=exp|unary/elements=16777216,op=sqrt|reduction/op=sum,shape=1000x1000)$}
[ -x "$B" ] || { echo "no tfbench at $B: cargo build --release first" >&2; exit 2; }
mkdir -p "$out"
run=("$B" run --config configs/ci.toml --suite tensor --measure instructions --no-live -q "$SELECT")
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
flagged() { python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["changes"]; f=[x["id"] for x in c if x["verdict"] in ("regressed","improved")]; print(len(c), "compared,", len(f), "flagged:", " ".join(f))' "$1"; }
for i in $(seq 1 "$RUNS"); do
  t0=$(date +%s)
  "${run[@]}" -o "$out/aa$i.json" >/dev/null
  log "clean counted run $i: $(( $(date +%s) - t0 )) s"
done
for i in $(seq 1 "$RUNS"); do
  t0=$(date +%s)
  TFBENCH_INJECT_INSTRUCTIONS="$INJECT=1.02" "${run[@]}" -o "$out/inj$i.json" >/dev/null 2>&1
  log "injected counted run $i: $(( $(date +%s) - t0 )) s"
done
for i in $(seq 1 "$RUNS"); do
  for j in $(seq $((i + 1)) "$RUNS"); do
    "$B" compare --baseline "$out/aa$i.json" --against "$out/aa$j.json" -f json -o "$out/aa-$i-$j.cmp.json" >/dev/null || true
    log "A/A $i vs $j: $(flagged "$out/aa-$i-$j.cmp.json")"
  done
  "$B" compare --baseline "$out/aa1.json" --against "$out/inj$i.json" -f json -o "$out/inj-$i.cmp.json" >/dev/null || true
  log "+2% instructions run $i: $(flagged "$out/inj-$i.cmp.json")"
done
