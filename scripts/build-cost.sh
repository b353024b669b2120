#!/usr/bin/env bash
# What a user's crate pays to build its benchmarks on tfbench's harness,
# beside criterion (issue 46: the small public API): two scratch crates,
# each with one closure benchmark, one depending on tfbench with
# `default-features = false` (no cudarc, tokenizers, safetensors), the other
# on criterion (the newest, default features). Each round builds both from
# clean (`cargo build --release --benches`, a fresh target dir each time),
# alternating, after `cargo fetch`, so downloads are not counted.
#
# Usage: scripts/build-cost.sh [ROUNDS] [SCRATCH_DIR]
#   ROUNDS       alternating rounds (default 2)
#   SCRATCH_DIR  where the crates go (default ${TMPDIR:-/tmp}/tfbench-build-cost)
#
# Prints per build: wall seconds and CPU seconds (user + system, which a
# busy machine inflates much less than wall time), and the load average
# before it. Run it on a quiet machine for figures to quote.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd -P)
rounds=${1:-2}
dir=${2:-${TMPDIR:-/tmp}/tfbench-build-cost}

make_crate() { # name dependency-line bench-source
    mkdir -p "$dir/$1/benches" "$dir/$1/src"
    cat > "$dir/$1/Cargo.toml" <<EOF
[package]
name = "$1"
version = "0.1.0"
edition = "2024"
publish = false

[workspace]

[lib]
bench = false

[dev-dependencies]
$2

[[bench]]
name = "sum"
harness = false

[profile.release]
debug = "line-tables-only"
EOF
    echo '' > "$dir/$1/src/lib.rs"
    printf '%s\n' "$3" > "$dir/$1/benches/sum.rs"
}

make_crate tfb "tfbench = { path = \"$root\", default-features = false }" '
use std::hint::black_box;
use tfbench::Verification;
fn main() -> std::process::ExitCode {
    tfbench::main(|c| {
        c.bench_function("sum", |b| {
            let data: Vec<u64> = (0..64).collect();
            b.iter(move || black_box(&data).iter().sum::<u64>())
                .verify(|s| Verification::equal("n(n-1)/2", s, &2016))
        });
    })
}'
make_crate crit 'criterion = ">=0.5"' '
use criterion::{Criterion, criterion_group, criterion_main};
use std::hint::black_box;
fn sum(c: &mut Criterion) {
    let data: Vec<u64> = (0..64).collect();
    c.bench_function("sum", |b| b.iter(|| black_box(&data).iter().sum::<u64>()));
}
criterion_group!(benches, sum);
criterion_main!(benches);'

for c in tfb crit; do (cd "$dir/$c" && cargo fetch --quiet); done
echo "# $(date -u +%FT%TZ) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
echo "# crate  round  wall_s  cpu_s  load_before"
for r in $(seq "$rounds"); do
    for c in tfb crit; do
        rm -rf "$dir/$c/target"
        load=$(cut -d' ' -f1 /proc/loadavg)
        t=$( { cd "$dir/$c" && /usr/bin/time -f '%e %U %S' cargo build --quiet --release --benches 2>&1 >/dev/null; } | tail -1)
        read -r wall user sys <<<"$t"
        echo "$c  $r  $wall  $(echo "$user + $sys" | bc)  $load"
    done
done
