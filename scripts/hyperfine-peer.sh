#!/usr/bin/env bash
# tfbench's `command` suite side by side with hyperfine on the same commands:
# the same argv (no shell on either side: hyperfine -N), the same inputs,
# the same number of timed runs, one after the other under the shared bench
# lock; prints both medians and their ratio. Run it on a quiet machine: the
# figures are only worth what the machine's load lets them be.
#
#   scripts/hyperfine-peer.sh             # 30 runs per command
#   RUNS=100 scripts/hyperfine-peer.sh
#
# Env: TFBENCH (binary, default ./target/release/tfbench), HYPERFINE (default:
# on the PATH, else .data/hyperfine/usr/bin/hyperfine, fetched there with
# `apt-get download hyperfine` when absent: Debian's 1.15), RUNS (default 30),
# WARMUP (hyperfine's warm-up runs, default 3; tfbench warms up for 0.5 s),
# TFBENCH_LOCK (default /tmp/tfbench-bench.lock).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${TFBENCH:-./target/release/tfbench}
lock=${TFBENCH_LOCK:-/tmp/tfbench-bench.lock}
runs=${RUNS:-30}
warmup=${WARMUP:-3}
[ -x "$bin" ] || { echo "build first: cargo build --release" >&2; exit 2; }

hf=${HYPERFINE:-$(command -v hyperfine || true)}
if [ -z "$hf" ]; then
    hf=.data/hyperfine/usr/bin/hyperfine
    if [ ! -x "$hf" ]; then
        dl=$(mktemp -d)
        (cd "$dl" && apt-get download hyperfine 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
        deb=$(ls "$dl"/hyperfine_*.deb 2>/dev/null | head -n1 || true)
        [ -n "$deb" ] || { echo "no hyperfine: install it, set HYPERFINE, or let apt-get download reach Debian" >&2; exit 2; }
        mkdir -p .data/hyperfine && dpkg-deb -x "$deb" .data/hyperfine && rm -rf "$dl"
    fi
fi
echo "hyperfine: $("$hf" --version)   tfbench: $("$bin" --version)"
echo "uptime: $(uptime)"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The inputs, made once for both tools.
awk 'BEGIN { srand(1); for (i = 0; i < 1000000; i++) print int(rand() * 1e9) }' >"$tmp/ints.txt"
# (seq is cut off by head: its SIGPIPE is expected, so no pipefail here.)
(set +o pipefail; seq 3000000 | head -c 16777216 >"$tmp/text.txt")
head -c 4194304 /dev/zero >"$tmp/zeros.bin"

# name | argv (words separated by spaces, no quoting needed for these)
commands=(
    "true|true"
    "sort|sort -n -o $tmp/sorted.txt $tmp/ints.txt"
    "gzip|gzip -6 -k -f $tmp/text.txt"
    "sha256sum|sha256sum $tmp/zeros.bin"
)

# One tfbench config with every command; each sample is one process.
cfg="$tmp/peer.toml"
{
    echo "[harness]"
    echo "sample_size = $runs"
    echo "warm_up_time = 0.5"
    # Large enough that the sample count, not the time budget, ends sampling.
    echo "measurement_time = 100000"
    for c in "${commands[@]}"; do
        name=${c%%|*}
        argv=${c#*|}
        printf '\n[[command]]\nname = "%s"\nargv = [' "$name"
        sep=""
        for w in $argv; do printf '%s"%s"' "$sep" "$w"; sep=", "; done
        printf ']\nenv = { LC_ALL = "C" }\n'
    done
} >"$cfg"

flock "$lock" "$bin" run --config "$cfg" --no-probe --no-canary -f json -o "$tmp/tf.json" --quiet >/dev/null
for c in "${commands[@]}"; do
    name=${c%%|*}
    argv=${c#*|}
    LC_ALL=C flock "$lock" "$hf" -N --style none --warmup "$warmup" --runs "$runs" \
        --export-json "$tmp/hf-$name.json" "$argv" >/dev/null
done

python3 - "$tmp" "${commands[@]}" <<'PY'
import json, sys
tmp, commands = sys.argv[1], sys.argv[2:]
tf = {c["benchmark"]: c for c in json.load(open(f"{tmp}/tf.json"))["cases"]}
print(f"{'command':<12} {'tfbench median':>16} {'hyperfine median':>18} {'tfbench/hyperfine':>18}")
for c in commands:
    name = c.split("|", 1)[0]
    case = tf[name]
    if case["status"]["state"] != "ok":
        print(f"{name:<12} tfbench failed: {case['status']}")
        continue
    t = case["estimates"]["median"]["point"] / 1e6
    h = json.load(open(f"{tmp}/hf-{name}.json"))["results"][0]["median"] * 1e3
    print(f"{name:<12} {t:>13.3f} ms {h:>15.3f} ms {t / h:>18.3f}")
PY
