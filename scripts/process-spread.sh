#!/usr/bin/env bash
# How much fresh processes of two tfbench builds disagree on the same cases:
# N interleaved runs of each (the old one first in odd rounds), then per case
# the median over processes of their medians, the coefficient of variation
# over processes and max/min. The figures behind docs/verdicts.md's
# "timing from inside the pool" table.
#
#   OLD=path/to/old/tfbench NEW=target/release/tfbench scripts/process-spread.sh [OUT_DIR]
#
# Environment: N (6), SELECT (the five cases verdict-experiments.sh slows,
# plus two one-thread ones), CONFIG (configs/ci.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/process-spread}
N=${N:-6}
CONFIG=${CONFIG:-configs/ci.toml}
SELECT=${SELECT:-'tensor/(binary/op=add,shape=500x500|binary/op=mul,shape=4096x4096|unary/elements=1048576,op=exp|unary/elements=16777216,op=sqrt|reduction/op=sum,shape=1000x1000|binary/op=add,shape=100x100|reduction/op=sum,shape=100x100)$'}
: "${OLD:?set OLD to the old build}" "${NEW:=target/release/tfbench}"
mkdir -p "$out"
rm -f "$out"/old-*.json "$out"/new-*.json
for i in $(seq 1 "$N"); do
    order="old new"
    [ $((i % 2)) = 0 ] && order="new old"
    for b in $order; do
        bin=$OLD
        [ "$b" = new ] && bin=$NEW
        "$bin" run --config "$CONFIG" --suite tensor "$SELECT" -q --format json -o "$out/$b-$i.json" >/dev/null
    done
done
python3 - "$out" <<'PY'
import collections, glob, json, statistics as st, sys
d = collections.defaultdict(lambda: collections.defaultdict(list))
for f in glob.glob(f"{sys.argv[1]}/*-*.json"):
    build = f.rsplit("/", 1)[1].split("-")[0]
    for c in json.load(open(f))["cases"]:
        if "estimates" in c:
            d[c["id"]][build].append(c["estimates"]["median"]["point"])
print("| case | old: median, CV, max/min | new: median, CV, max/min |")
print("| --- | --- | --- |")
for cid in sorted(d):
    cells = []
    for b in ("old", "new"):
        v = d[cid][b]
        cells.append(f"{st.median(v) / 1e3:.1f} us, {st.stdev(v) / st.mean(v) * 100:.1f}%, {max(v) / min(v):.2f}"
                     if len(v) > 1 else "-")
    print(f"| `{cid.split('/', 1)[1]}` | {cells[0]} | {cells[1]} |")
PY
