#!/usr/bin/env bash
# How much a case's samples scatter, and how much its speed moves from process
# to process, under two or more sets of run options, measured with tfbench:
# N rounds, each running every variant once in a fresh process (so all
# variants share the same minutes of the host), then per case and variant the
# spread of successive samples (the SD of the log per-iteration time of one
# sample from the next, over sqrt 2, averaged over the rounds of every run:
# drift between samples cancels) and the coefficient of variation of the
# processes' medians. The figures behind docs/verdicts.md's "one thread".
#
#   scripts/thread-noise.sh [OUT_DIR]
#
# Environment: N (6), VARIANTS ('t2:--threads 2|t1:--threads 1', NAME:OPTIONS
# separated by |), SELECT (the five cases verdict-experiments.sh slows plus
# three more small ones), CONFIG (configs/ci.toml), TIMING ('--measurement-time
# 0.5 --warm-up-time 0.2'), TFBENCH (target/release/tfbench).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/thread-noise}
N=${N:-6}
CONFIG=${CONFIG:-configs/ci.toml}
B=${TFBENCH:-target/release/tfbench}
SELECT=${SELECT:-'tensor/(binary/op=(add|sub),shape=500x500|binary/op=mul,shape=4096x4096|unary/elements=1048576,op=(exp|relu)|unary/elements=16777216,op=sqrt|reduction/op=(sum|mean),shape=1000x1000)$'}
IFS='|' read -r -a variants <<<"${VARIANTS:-t2:--threads 2|t1:--threads 1}"
read -r -a timing <<<"${TIMING:---measurement-time 0.5 --warm-up-time 0.2}"
[ -x "$B" ] || { echo "no tfbench at $B: cargo build --release first" >&2; exit 2; }
mkdir -p "$out"
rm -f "$out"/*.json
for i in $(seq 1 "$N"); do
    for v in "${variants[@]}"; do
        read -r -a opts <<<"${v#*:}"
        "$B" run --config "$CONFIG" --suite tensor "$SELECT" -q "${timing[@]}" "${opts[@]}" \
            --format json -o "$out/${v%%:*}-$i.json" >/dev/null
    done
done
python3 - "$out" <<'PY'
import collections, glob, json, math, statistics as st, sys
med = collections.defaultdict(lambda: collections.defaultdict(list))
lag = collections.defaultdict(lambda: collections.defaultdict(list))
for f in glob.glob(f"{sys.argv[1]}/*-*.json"):
    v = f.rsplit("/", 1)[1].rsplit("-", 1)[0]
    for c in json.load(open(f))["cases"]:
        if "estimates" not in c:
            continue
        med[c["id"]][v].append(c["estimates"]["median"]["point"])
        for r in {s["round"] for s in c["samples"]}:
            x = [math.log(s["nanos"] / s["iterations"]) for s in c["samples"] if s["round"] == r]
            if len(x) > 4:
                d = [b - a for a, b in zip(x, x[1:])]
                lag[c["id"]][v].append(math.sqrt(st.mean(e * e for e in d) / 2))
vs = sorted({v for x in med.values() for v in x})
print("| case | " + " | ".join(f"{v}: median, sample-to-sample SD, CV over processes" for v in vs) + " |")
print("| --- |" + " --- |" * len(vs))
for cid in sorted(med):
    cells = [f"{st.median(med[cid][v]) / 1e3:.1f} us, {100 * st.mean(lag[cid][v]):.1f}%, "
             f"{100 * st.stdev(med[cid][v]) / st.mean(med[cid][v]):.1f}%" if len(med[cid][v]) > 1 else "-"
             for v in vs]
    print(f"| `{cid.split('/', 1)[1]}` | " + " | ".join(cells) + " |")
PY
