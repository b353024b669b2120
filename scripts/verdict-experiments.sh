#!/usr/bin/env bash
# The experiments behind the verdict goals of docs/verdicts.md (issue 19):
# A/A and injected-slowdown comparisons, stored baselines and paired `ab`
# runs, all measured by tfbench itself on this machine.
#
#   scripts/verdict-experiments.sh [OUT_DIR]
#
# Environment: RUNS (10), PAIRED (10), TFBENCH (target/release/tfbench),
# SELECT ('binary|reduction|unary'), INJECT (the five slowed cases' regex),
# TIMING (extra run options, e.g. '--measurement-time 0.5 --warm-up-time 0.2'
# to shorten every case; empty: configs/ci.toml as it is), PHASE (all, or
# stored / paired to run one half: the halves share OUT_DIR, and each prints
# its own rows of the table; judge: only the stored comparisons, of the
# runs already in OUT_DIR, by this build; interleaved: per round one timed ci.toml run,
# then one paired run each at 0%, +10% and +5%, so that a window of the host
# that changes mid-experiment touches every kind alike and the cost ratio
# compares runs of the same minutes), KINDS (the paired kinds each
# interleaved round runs: 'aa p10 p5'; 'aa' alone measures the cost),
# COMPARE (extra options of every stored `compare`, e.g. '--noise-k 2', to
# judge saved runs by other settings with PHASE=judge).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/verdict-experiments}
RUNS=${RUNS:-10}
PAIRED=${PAIRED:-10}
B=${TFBENCH:-target/release/tfbench}
SELECT=${SELECT:-binary|reduction|unary}
INJECT=${INJECT:-tensor/(binary/op=add,shape=500x500|binary/op=mul,shape=4096x4096|unary/elements=1048576,op=exp|unary/elements=16777216,op=sqrt|reduction/op=sum,shape=1000x1000)$}
read -r -a timing <<<"${TIMING:-}"
read -r -a compare_opts <<<"${COMPARE:-}"
[ -x "$B" ] || { echo "no tfbench at $B: cargo build --release first" >&2; exit 2; }
mkdir -p "$out"
store="$out/baselines"
hist="$out/history"
PHASE=${PHASE:-all}
run=("$B" run --config configs/ci.toml --suite tensor "$SELECT" --baseline-dir "$store" --history-dir "$hist" -q "${timing[@]}")
log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

stored_phase() {
rm -rf "$store" "$hist"
log "stored: $RUNS clean runs (A/A) and $RUNS with a 10% slowdown on 5 cases"
t0=$(date +%s)
for i in $(seq 1 "$RUNS"); do
  "${run[@]}" --save-baseline "aa$i" >/dev/null
  [ "$i" = 1 ] && one_run=$(( $(date +%s) - t0 ))
  TFBENCH_INJECT_SLOWDOWN="$INJECT=1.10" "${run[@]}" --save-baseline "inj$i" >/dev/null
done
log "one ci.toml run took ${one_run}s"
echo "$one_run" >"$out/one-run-seconds"
stored_judge
}

# Compares the stored runs of OUT_DIR (all A/A pairs, each injected run
# against its clean one) with this build: PHASE=judge re-judges runs saved
# earlier, so that a change to the verdict rules is tried on the same data.
stored_judge() {

aa_pass=0; aa_fail=0; verdicts="$out/aa-verdicts.txt"; : >"$verdicts"
for i in $(seq 1 "$RUNS"); do
  for j in $(seq $((i + 1)) "$RUNS"); do
    if "$B" compare --baseline-dir "$store" --history-dir "$hist" -b "aa$i" -a "aa$j" --fail-on-regression "${compare_opts[@]}" \
      --format json -o "$out/aa-$i-$j.json" >/dev/null 2>>"$out/compare.log"; then
      aa_pass=$((aa_pass + 1))
    else
      aa_fail=$((aa_fail + 1))
    fi
    python3 -c 'import json,sys; [print(c["verdict"]) for c in json.load(open(sys.argv[1]))["changes"]]' \
      "$out/aa-$i-$j.json" >>"$verdicts"
  done
done
flagged=$(grep -cE '^(regressed|improved)$' "$verdicts" || true)
total=$(wc -l <"$verdicts")

inj_caught=0; inj_cases=0
for i in $(seq 1 "$RUNS"); do
  "$B" compare --baseline-dir "$store" --history-dir "$hist" -b "aa$i" -a "inj$i" "${compare_opts[@]}" --format json \
    -o "$out/inj-$i.json" >/dev/null 2>>"$out/compare.log" || true
  n=$(python3 -c 'import json,re,sys; c=json.load(open(sys.argv[1]))["changes"]; r=re.compile(sys.argv[2]); print(sum(1 for x in c if r.search(x["id"]) and x["verdict"]=="regressed"))' "$out/inj-$i.json" "$INJECT")
  inj_cases=$((inj_cases + n))
  [ "$n" = 5 ] && inj_caught=$((inj_caught + 1))
done
cat <<TXT
| A/A stored, $((aa_pass + aa_fail)) comparisons: gate passes in >= 43 of 45 | $aa_pass pass, $aa_fail fail |
| A/A stored: <= 1% of case verdicts regressed or improved | $flagged of $total ($(python3 -c "print(f'{100*$flagged/max($total,1):.2f}%')")) |
| +10% on 5 cases, stored: all 5 flagged in >= 8 of 10 | $inj_caught of $RUNS ($inj_cases of $((5 * RUNS)) case verdicts) |
TXT
}

paired() { # $1: label, $2: injected factor or empty
  local fails=0 all5=0 cases=0 wall=0
  for i in $(seq 1 "$PAIRED"); do
    local env=()
    [ -n "$2" ] && env=(--head-env "TFBENCH_INJECT_SLOWDOWN=$INJECT=$2")
    local t=$(date +%s)
    "$B" ab --base "$B" --head "$B" --config configs/ci.toml --suite tensor "${timing[@]}" "${env[@]}" \
      --fail-on-regression --format json -o "$out/ab-$1-$i.json" -q "$SELECT" >/dev/null 2>>"$out/ab.log" \
      || fails=$((fails + 1))
    wall=$((wall + $(date +%s) - t))
    local n
    n=$(python3 -c 'import json,re,sys; c=json.load(open(sys.argv[1]))["changes"]; r=re.compile(sys.argv[2]); print(sum(1 for x in c if r.search(x["id"]) and x["verdict"]=="regressed"))' "$out/ab-$1-$i.json" "$INJECT")
    cases=$((cases + n))
    [ "$n" = 5 ] && all5=$((all5 + 1))
  done
  echo "$1 $fails $all5 $cases $((wall / PAIRED))"
}
paired_phase() {
log "paired: $PAIRED A/A, $PAIRED at +10%, $PAIRED at +5%"
read -r _ pa_fail _ _ pa_wall < <(paired aa "")
read -r _ _ p10_all p10_cases _ < <(paired p10 1.10)
read -r _ _ p5_all p5_cases _ < <(paired p5 1.05)
one_run=$(cat "$out/one-run-seconds" 2>/dev/null || echo 0)
cat <<TXT
| A/A paired, $PAIRED runs: 0 gate failures | $pa_fail failures |
| +10% on 5 cases, paired: all 5 flagged in >= 9 of 10 | $p10_all of $PAIRED ($p10_cases of $((5 * PAIRED)) case verdicts) |
| +5% on 5 cases, paired: all 5 flagged in >= 7 of 10 | $p5_all of $PAIRED ($p5_cases of $((5 * PAIRED)) case verdicts) |
| cost: paired run <= 2.2x one ci.toml run | ${pa_wall}s vs ${one_run}s ($(python3 -c "print(f'{$pa_wall/max($one_run,1):.2f}x')")) |
TXT
}

interleaved_phase() {
log "interleaved: $PAIRED rounds of (one ci.toml run, then ab: ${KINDS:-aa p10 p5})"
local run_wall=0 ab_wall=0 aa_fail=0 p10_all=0 p10_cases=0 p5_all=0 p5_cases=0
for i in $(seq 1 "$PAIRED"); do
  local t=$(date +%s)
  "${run[@]}" --save-baseline "cost$i" >/dev/null
  run_wall=$((run_wall + $(date +%s) - t))
  for kind in ${KINDS:-aa p10 p5}; do
    local env=() factor=""
    [ "$kind" = p10 ] && factor=1.10
    [ "$kind" = p5 ] && factor=1.05
    [ -n "$factor" ] && env=(--head-env "TFBENCH_INJECT_SLOWDOWN=$INJECT=$factor")
    t=$(date +%s)
    local rc=0
    "$B" ab --base "$B" --head "$B" --config configs/ci.toml --suite tensor "${timing[@]}" "${env[@]}" \
      --fail-on-regression --format json -o "$out/ab-$kind-$i.json" --pairs-output "$out/pairs-$kind-$i.json" -q "$SELECT" >/dev/null 2>>"$out/ab.log" || rc=$?
    local n
    n=$(python3 -c 'import json,re,sys; c=json.load(open(sys.argv[1]))["changes"]; r=re.compile(sys.argv[2]); print(sum(1 for x in c if r.search(x["id"]) and x["verdict"]=="regressed"))' "$out/ab-$kind-$i.json" "$INJECT")
    case $kind in
      aa) ab_wall=$((ab_wall + $(date +%s) - t)); [ "$rc" = 0 ] || aa_fail=$((aa_fail + 1)) ;;
      p10) p10_cases=$((p10_cases + n)); [ "$n" = 5 ] && p10_all=$((p10_all + 1)) ;;
      p5) p5_cases=$((p5_cases + n)); [ "$n" = 5 ] && p5_all=$((p5_all + 1)) ;;
    esac
    log "round $i $kind: exit $rc, $n of 5 injected cases regressed"
  done
done
echo "| A/A paired, $PAIRED runs: 0 gate failures | $aa_fail failures |"
case " ${KINDS:-aa p10 p5} " in *" p10 "*)
  echo "| +10% on 5 cases, paired: all 5 flagged in >= 9 of 10 | $p10_all of $PAIRED ($p10_cases of $((5 * PAIRED)) case verdicts) |" ;; esac
case " ${KINDS:-aa p10 p5} " in *" p5 "*)
  echo "| +5% on 5 cases, paired: all 5 flagged in >= 7 of 10 | $p5_all of $PAIRED ($p5_cases of $((5 * PAIRED)) case verdicts) |" ;; esac
echo "| cost: paired run <= 2.2x one ci.toml run | $((ab_wall / PAIRED))s vs $((run_wall / PAIRED))s ($(python3 -c "print(f'{$ab_wall/max($run_wall,1):.2f}x')")) |"
}

echo "| goal | measured |"
echo "| --- | --- |"
case "$PHASE" in
  stored) stored_phase ;;
  judge) stored_judge ;;
  paired) paired_phase ;;
  interleaved) interleaved_phase ;;
  all) stored_phase; paired_phase ;;
  *) echo "PHASE must be all, stored, judge, paired or interleaved" >&2; exit 2 ;;
esac
