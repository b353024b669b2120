#!/usr/bin/env bash
# tfbench's `cargo bench` harness beside criterion, on the same trivial
# closure (issue 31): the harness's overhead (median time per iteration of
# the closure under each) and the time from `cargo bench` to the first
# result (wall time of `cargo bench` for one benchmark, after the build).
#
# Usage: scripts/criterion-peer.sh [ROUNDS] [SCRATCH_DIR]
#   ROUNDS       alternating rounds of each measurement (default 5)
#   SCRATCH_DIR  where the scratch crate and its target/ go (default
#                ${TMPDIR:-/tmp}/tfbench-criterion-peer; outside the checkout)
#
# ALIGN_LOOPS=64 in the environment builds both with
# `-C llvm-args=-align-loops=64` (in a target dir of its own), which places
# every loop at a 64-byte boundary: for a closure of a few nanoseconds, where
# the compiler happens to place the inner loop (across a 32-byte boundary or
# not) changes its time by up to a quarter under either harness, and this
# takes that luck out of the comparison.
#
# Needs cargo and crates.io (criterion is fetched into the scratch crate,
# never into tfbench). Run it on a quiet machine: both harnesses time a
# closure of a few nanoseconds. Prints one line per round and the medians.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd -P)
rounds=${1:-5}
dir=${2:-${TMPDIR:-/tmp}/tfbench-criterion-peer}
mkdir -p "$dir/benches" "$dir/src"

cat > "$dir/Cargo.toml" <<EOF
[package]
name = "criterion-peer"
version = "0.1.0"
edition = "2024"
publish = false

[workspace]

[lib]
bench = false

[dev-dependencies]
# The newest criterion, default features (as the seeds use it).
criterion = ">=0.5"
tfbench = { path = "$root" }

[[bench]]
name = "crit"
harness = false

[[bench]]
name = "tfb"
harness = false

[profile.release]
debug = "line-tables-only"
EOF
echo '' > "$dir/src/lib.rs"

# The same closure in both: the sum of 64 values the optimiser cannot see.
cat > "$dir/benches/crit.rs" <<'EOF'
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;

fn trivial(c: &mut Criterion) {
    let data: Vec<u64> = (0..64).collect();
    c.bench_function("trivial", |b| b.iter(|| black_box(&data).iter().sum::<u64>()));
}
criterion_group!(benches, trivial);
criterion_main!(benches);
EOF
cat > "$dir/benches/tfb.rs" <<'EOF'
use std::hint::black_box;
use tfbench::bench::Verification;

fn main() -> std::process::ExitCode {
    tfbench::bench::main(|c| {
        c.bench_function("trivial", |b| {
            let data: Vec<u64> = (0..64).collect();
            b.iter(move || black_box(&data).iter().sum::<u64>())
                .verify(|s| Verification::equal("n(n-1)/2", s, &2016))
        });
    })
}
EOF

cd "$dir"
target=target
if [ -n "${ALIGN_LOOPS:-}" ]; then
    export RUSTFLAGS="${RUSTFLAGS:-} -C llvm-args=-align-loops=$ALIGN_LOOPS"
    target="target-align-$ALIGN_LOOPS"
fi
export CARGO_TARGET_DIR="$dir/$target"
echo "building (not timed) in $dir ..." >&2
cargo bench --quiet --no-run 2>&1 | tail -3 >&2

now() { date +%s.%N; }
crit_ns() { # criterion's median estimate of the last run, ns
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["median"]["point_estimate"])' \
        "$CARGO_TARGET_DIR/criterion/trivial/new/estimates.json"
}
tfb_ns() { # tfbench's median of the last run, ns
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cases"][0]["estimates"]["median"]["point"])' \
        "$dir/tfb.json"
}

printf 'round  criterion_ns  tfbench_ns  ratio  criterion_wall_s  tfbench_wall_s  tfbench_quick_wall_s\n'
results=()
for r in $(seq 1 "$rounds"); do
    # Default settings of each (criterion: 3 s warm-up, 5 s measurement,
    # 100 samples; tfbench: 1 s warm-up, 3 s measurement, 100 samples).
    t0=$(now); cargo bench --quiet --bench crit >/dev/null 2>&1; t1=$(now)
    c_wall=$(echo "$t1 - $t0" | bc); c_ns=$(crit_ns)
    t0=$(now); cargo bench --quiet --bench tfb -- --output "$dir/tfb.json" >/dev/null 2>&1; t1=$(now)
    t_wall=$(echo "$t1 - $t0" | bc); t_ns=$(tfb_ns)
    t0=$(now); cargo bench --quiet --bench tfb -- --quick >/dev/null 2>&1; t1=$(now)
    q_wall=$(echo "$t1 - $t0" | bc)
    ratio=$(echo "scale=3; $t_ns / $c_ns" | bc)
    printf '%5d  %12.3f  %10.3f  %5.3f  %16.2f  %14.2f  %20.2f\n' "$r" "$c_ns" "$t_ns" "$ratio" "$c_wall" "$t_wall" "$q_wall"
    results+=("$c_ns $t_ns $ratio $c_wall $t_wall $q_wall")
done
printf '%s\n' "${results[@]}" | python3 -c '
import statistics, sys
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
cols = list(zip(*rows))
names = ["criterion ns/iter", "tfbench ns/iter", "tfbench/criterion", "criterion wall s", "tfbench wall s", "tfbench --quick wall s"]
for n, c in zip(names, cols):
    print(f"median {n}: {statistics.median(c):.3f}  (min {min(c):.3f}, max {max(c):.3f})")
'
