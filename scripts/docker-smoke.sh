#!/usr/bin/env bash
# Smoke test of a built tfbench image (scripts/docker-build.sh runs it after a
# build). Every container runs with --network none: the image must need no
# download at run time. Run it before and after touching the Dockerfile.
#
#   bash scripts/docker-smoke.sh          # image $TFBENCH_IMAGE, default tfbench
#
# Checks, each failing the script with a message:
#   1. the entrypoint is tfbench and the user is not root
#   2. `list` shows every suite; `sysinfo` describes the machine and the build
#   3. `run --suite tensor --quick` exits 0 with no failed case, OpenBLAS found
#   4. the tokenizer suite finds the real GPT-2, BERT and LLaMA-2 vocabularies
#      and the King James corpus inside the image
#   5. the example workflow (examples/ci/github-actions.yml, nightly job):
#      save a baseline into a mounted store, then run against it with
#      --fail-on-regression and a Markdown comparison; the store gets the
#      baseline and the history, the comparison names every case
# Needs python3 on the host (to read the JSON results). Environment:
# TFBENCH_IMAGE, TFBENCH_ENGINE (podman or docker; default: podman if present).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
image="${TFBENCH_IMAGE:-tfbench}"
# shellcheck source=scripts/docker-engine.sh
source "$root/scripts/docker-engine.sh"
command -v python3 >/dev/null || { echo "docker-smoke: error: python3 is needed to read the results" >&2; exit 1; }

fail() { echo "docker-smoke: FAIL: $*" >&2; exit 1; }
say() { echo "docker-smoke: $*" >&2; }

"$engine" image inspect "$image" >/dev/null 2>&1 || fail "no image '$image'; build it with scripts/docker-build.sh"
detect_engine_flags "$image"

tmp="$(mktemp -d "${TMPDIR:-/var/tmp}/tfbench-smoke.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/store" "$tmp/out"
# The image runs as the unprivileged user `bench`: mounted folders must be
# writable by it (the example workflow does the same).
chmod -R a+rwX "$tmp"

# tfbench in the image, without network, the store at /work/baselines and an
# output folder at /work/out.
tfb() {
    "$engine" run --rm --network none "${eflags[@]}" \
        -v "$tmp/store:/work/baselines" -v "$tmp/out:/work/out" "$image" "$@"
}
start=$SECONDS

# 1. entrypoint and user
uid="$("$engine" run --rm --network none "${eflags[@]}" --entrypoint id "$image" -u)"
[ "$uid" != 0 ] || fail "the image runs as root"
entry="$("$engine" image inspect --format '{{json .Config.Entrypoint}}' "$image")"
[ "$entry" = '["tfbench"]' ] || fail "entrypoint is $entry, not [\"tfbench\"]"
version="$(tfb --version)"
say "1. entrypoint tfbench ($version), uid $uid"

# 2. list, sysinfo
tfb list >"$tmp/list.txt" || fail "tfbench list exited $?"
for suite in tensor memory optim quant tokenizer inference; do
    grep -q "^$suite (" "$tmp/list.txt" || fail "tfbench list shows no suite $suite"
done
tfb sysinfo >"$tmp/sysinfo.txt" || fail "tfbench sysinfo exited $?"
for field in cpu isa memory os rustc fingerprint; do
    grep -q "$field" "$tmp/sysinfo.txt" || fail "sysinfo has no '$field' row"
done
say "2. list: $(grep -c '^[a-z]* (' "$tmp/list.txt") suites; sysinfo: $(grep -m1 ' os ' "$tmp/sysinfo.txt" | tr -s ' │┆' ' ')"

# 3. the tensor suite's smoke profile, everything
t0=$SECONDS
tfb run --suite tensor --quick --no-probe -q --output out/tensor.json >"$tmp/tensor.txt" \
    || fail "run --suite tensor --quick exited $? (table: $tmp/tensor.txt)"
python3 - "$tmp/out/tensor.json" <<'EOF' || fail "tensor results (above)"
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
states = {}
for c in cases:
    states.setdefault(c["status"]["state"], []).append(c["id"])
failed = states.get("failed", [])
if failed or not states.get("ok"):
    sys.exit(f"failed cases: {failed}; ok: {len(states.get('ok', []))}")
blas = [c for c in cases if "impl=openblas" in c["id"]]
blas_ok = [c for c in blas if c["status"]["state"] == "ok"]
if not blas or len(blas_ok) != len(blas):
    sys.exit(f"OpenBLAS cases not all ok: {[(c['id'], c['status']) for c in blas if c not in blas_ok][:3]}")
print(f"docker-smoke: 3. run --suite tensor --quick: {len(cases)} cases, "
      f"{len(states['ok'])} ok, {len(states.get('skipped', []))} skipped, 0 failed; "
      f"{len(blas_ok)} OpenBLAS cases ok ({blas_ok[0]['verification']['detail'][:60]}...)", file=sys.stderr)
EOF
say "   ... in $((SECONDS - t0)) s"

# 4. real vocabularies and corpus: these ids exist only when the files are
# found (without them the suite substitutes fallbacks with other ids).
tfb run --suite tokenizer --quick --no-probe -q --output out/tok.json \
    'encode/corpus=kjv,.*length=line,vocab=(gpt2|bert|llama2)$' >/dev/null \
    || fail "tokenizer run on the image's vocabularies exited $?"
python3 - "$tmp/out/tok.json" <<'EOF' || fail "tokenizer results (above)"
import json, sys
cases = json.load(open(sys.argv[1]))["cases"]
ok = sorted(c["id"].rsplit("vocab=", 1)[1] for c in cases if c["status"]["state"] == "ok")
if ok != ["bert", "gpt2", "llama2"]:
    sys.exit(f"expected gpt2, bert and llama2 on the kjv corpus, ok: {ok}; {[c['status'] for c in cases]}")
print("docker-smoke: 4. tokenizer: gpt2, bert, llama2 vocabularies on the kjv corpus verified and measured", file=sys.stderr)
EOF

# 5. the example workflow's nightly steps, on a few fast cases of the CI config
filter='tensor/binary/op=add,shape=(100x100|500x500)$'
fast=(--sample-size 10 --warm-up-time 0.05 --measurement-time 0.2 --max-time 1 --no-probe -q)
tfb run --config /opt/tfbench/configs/ci.toml --suite tensor "$filter" "${fast[@]}" --save-baseline main >/dev/null \
    || fail "run --save-baseline main exited $?"
[ -s "$tmp/store/main.json" ] || fail "no baseline main.json in the mounted store: $(ls -R "$tmp/store")"
set +e
tfb run --config /opt/tfbench/configs/ci.toml --suite tensor "$filter" "${fast[@]}" \
    --baseline main --fail-on-regression --comparison-output out/comparison.md --output out/results.json >/dev/null
code=$?
set -e
# 0: no regression; 1: a case regressed beyond 5% (possible on a busy host, and
# a correct outcome of the gate); anything else is an error.
[ "$code" = 0 ] || [ "$code" = 1 ] || fail "run --baseline main exited $code"
[ -s "$tmp/out/comparison.md" ] || fail "no Markdown comparison written"
for id in 'tensor/binary/op=add,shape=100x100' 'tensor/binary/op=add,shape=500x500'; do
    grep -qF "$id" "$tmp/out/comparison.md" || fail "the comparison does not name $id"
done
runs="$(find "$tmp/store/history" -type f 2>/dev/null | wc -l)"
[ "$runs" -ge 1 ] || fail "configs/ci.toml records history, but the store has none: $(ls -R "$tmp/store")"
tfb history >/dev/null || fail "tfbench history exited $?"
say "5. workflow: baseline saved to the mounted store, compared (exit $code), comparison.md names both cases, history in $runs file(s)"

say "PASS: $image in $((SECONDS - start)) s"
