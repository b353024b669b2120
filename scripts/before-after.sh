#!/usr/bin/env bash
# Behaviour check of a refactor (issue 20): a quick run of every suite with
# an old and a new build, in the order old new new old (so drift over the
# session hits both alike), then `tfbench compare` of each old run with the
# new run next to it: a change that is real shows in both comparisons, one
# that the machine made rarely does. (Old builds cannot `--append`, so each
# run is its own baseline.)
#
#   scripts/before-after.sh OLD_TFBENCH NEW_TFBENCH [OUT_DIR] [-- run options]
#
# Prints the comparison as Markdown and leaves the baselines and the JSON in
# OUT_DIR (default target/before-after). Case ids that differ between the
# builds (a renamed case) are listed by compare as only in one side.
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: before-after.sh OLD_TFBENCH NEW_TFBENCH [OUT_DIR] [-- run options]}
new=${2:?usage: before-after.sh OLD_TFBENCH NEW_TFBENCH [OUT_DIR] [-- run options]}
shift 2
out=target/before-after
if [ $# -gt 0 ] && [ "$1" != "--" ]; then out=$1; shift; fi
[ "${1:-}" = "--" ] && shift
extra=("$@")
for b in "$old" "$new"; do
  [ -x "$b" ] || { echo "not an executable: $b" >&2; exit 2; }
done
store="$out/baselines"
rm -rf "$store"
mkdir -p "$store"
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }
one() { # $1: build, $2: baseline name
  local t=$SECONDS
  # A failing case is reported in the results; the run's exit code says so too.
  "$1" run --quick --baseline-dir "$store" --save-baseline "$2" -q "${extra[@]}" >/dev/null || true
  log "$2 with $1: $((SECONDS - t)) s"
}
one "$old" before1
one "$new" after1
one "$new" after2
one "$old" before2
for i in 1 2; do
  "$new" compare --baseline-dir "$store" -b "before$i" -a "after$i" --format json -o "$out/compare-$i.json" >/dev/null || true
  echo "## old run $i against new run $i"
  "$new" compare --baseline-dir "$store" -b "before$i" -a "after$i" --format markdown || true
done
