#!/usr/bin/env bash
# Behaviour check of a redesign (issue 46): `tfbench ab` of an old and a new
# build on the quick profile, one suite at a time (both builds must plan the
# same case ids, so a renamed case fails the pairing), paired rounds with
# fresh worker processes. Prints each suite's verdict line; the Markdown
# reports stay in OUT_DIR.
#
#   scripts/ab-suites.sh OLD_TFBENCH NEW_TFBENCH [OUT_DIR] [SUITE...]
set -uo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: ab-suites.sh OLD_TFBENCH NEW_TFBENCH [OUT_DIR] [SUITE...]}
new=${2:?usage: ab-suites.sh OLD_TFBENCH NEW_TFBENCH [OUT_DIR] [SUITE...]}
out=${3:-target/ab-suites}
shift $(( $# < 3 ? $# : 3 ))
suites=("$@")
[ ${#suites[@]} -eq 0 ] && suites=(tensor inference tokenizer quant optim memory)
mkdir -p "$out"
for s in "${suites[@]}"; do
  echo "=== $s $(date -u +%H:%M:%S)"
  "$new" ab --base "$old" --head "$new" --suite "$s" --quick --quiet --format markdown \
    > "$out/$s.md" 2> "$out/$s.err"
  echo "exit $?"
  grep -E "^\*\*[0-9]+ regressed" "$out/$s.md"
done
