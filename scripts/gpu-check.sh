#!/usr/bin/env bash
# One call on a lent GPU machine: where the CUDA libraries are, sysinfo,
# the GPU probe, the GPU unit tests, the tensor suite on cuda and PyTorch's
# twins, the inference suite on cuda with its twins, tests/cli_cuda*.rs. Built here, carried in .gpu/:
#   .gpu/tfbench        target/release/tfbench, stripped
#   .gpu/unit           target/release/deps/tfbench-<hash> (lib unit tests), stripped
#   .gpu/cli_*          target/release/deps/cli_cuda-<hash> and
#                       cli_cuda_inference-<hash> (integration tests), stripped
# Logs and results go to $OUT (or ./gpu-out). STEPS picks steps (default all).
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
STEPS=${STEPS:-env sysinfo probe unit run peer inference cli}
RUN_ARGS=${RUN_ARGS:---quick}
FILTER=${FILTER:-}
log() { echo "== $* ($(date -u +%T))"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }

# cudarc opens libcublas.so.13 / libnvrtc.so.13 by name: put CUDA 13's
# library folders (toolkit, then PyTorch's wheels) on the loader's path.
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; p = nvidia.__path__[0]; print(" ".join(os.path.join(p, s, "lib") for s in os.listdir(p)))' 2>/dev/null) \
         $(python3 -c 'import nvidia, os; p = nvidia.__path__[0]; print(os.path.join(p, "cu13", "lib"))' 2>/dev/null); do
  [ -d "$d" ] && LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
export LD_LIBRARY_PATH
chmod +x .gpu/* 2>/dev/null

if has env; then
  log env
  { nvidia-smi; echo; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; ldconfig -p | grep -E 'libcuda\.|cublas|nvrtc' ;
    for d in ${LD_LIBRARY_PATH//:/ }; do ls "$d" | grep -E 'cublas|nvrtc' | sed "s|^|$d/|"; done; } > "$OUT/env.txt" 2>&1
  head -20 "$OUT/env.txt"; grep -E 'cublas|nvrtc' "$OUT/env.txt" | head -12
fi
if has sysinfo; then
  log sysinfo
  timeout 60 .gpu/tfbench sysinfo 2>&1 | tee "$OUT/sysinfo.txt" | grep -i -A30 'cuda\|gpu' | head -40
fi
if has probe; then
  log probe
  timeout ${PROBE_TIMEOUT:-120} .gpu/tfbench sysinfo --probe > "$OUT/probe.txt" 2>&1; echo "probe rc=$?"
  grep -i -E 'gpu|cuda|gemm|copy|h2d|d2h|launch|TFLOP|GB/s' "$OUT/probe.txt" | head -30
fi
if has unit; then
  log unit tests
  timeout ${UNIT_TIMEOUT:-150} .gpu/unit --test-threads 1 ${UNIT_FILTER:-cuda} > "$OUT/unit.txt" 2>&1; echo "unit rc=$?"
  grep -E '^test .*(FAILED|ok)$|test result|panicked' "$OUT/unit.txt" | grep -v ' ok$' | head -40
fi
if has run; then
  log run tensor on cuda $RUN_ARGS $FILTER
  timeout ${RUN_TIMEOUT:-300} .gpu/tfbench run --suite tensor --device cuda $RUN_ARGS -f json -o "$OUT/ours.json" $FILTER > "$OUT/run.txt" 2>&1; echo "run rc=$?"
  grep -v -E '^\s*$' "$OUT/run.txt" | tail -70
fi
if has peer; then
  log torch peer
  PYTHONUNBUFFERED=1 timeout ${PEER_TIMEOUT:-240} python3 scripts/torch_peer.py --device cuda ${PEER_ARGS:---secs 0.5} "$OUT/ours.json" "$OUT/torch.json" > "$OUT/peer.txt" 2>&1; echo "peer rc=$?"
  tail -30 "$OUT/peer.txt"
  timeout 60 .gpu/tfbench compare --baseline "$OUT/torch.json" --against "$OUT/ours.json" > "$OUT/compare.txt" 2>&1
  tail -60 "$OUT/compare.txt"
fi
if has inference; then
  log inference on cuda ${INF_ARGS:---quick} ${INF_FILTER:-}
  timeout ${INF_TIMEOUT:-300} .gpu/tfbench run --suite inference --device cuda ${INF_ARGS:---quick} -f json -o "$OUT/inf.json" ${INF_FILTER:-} > "$OUT/inf.txt" 2>&1; echo "inference rc=$?"
  grep -v -E '^\s*$' "$OUT/inf.txt" | tail -70
  if [ -f "$OUT/inf.json" ]; then
    log torch peer, inference
    PYTHONUNBUFFERED=1 timeout ${PEER_TIMEOUT:-240} python3 scripts/torch_peer.py --device cuda ${PEER_ARGS:---secs 0.5} "$OUT/inf.json" "$OUT/inf_torch.json" > "$OUT/inf_peer.txt" 2>&1; echo "inference peer rc=$?"
    tail -30 "$OUT/inf_peer.txt"
    timeout 60 .gpu/tfbench compare --baseline "$OUT/inf_torch.json" --against "$OUT/inf.json" > "$OUT/inf_compare.txt" 2>&1
    tail -60 "$OUT/inf_compare.txt"
  fi
fi
if has alloc; then
  log pageable transfers with each allocator
  for a in system mimalloc; do
    echo "TFBENCH_ALLOCATOR=$a"
    TFBENCH_ALLOCATOR=$a timeout 60 .gpu/tfbench run --suite tensor --device cuda --quick 'transfer/bytes=268435456,direction=(h2d|d2h),memory=pageable' 2>&1 | grep -E 'tensor/transfer' | cut -c1-140
  done
fi
if has h2d && [ -f .gpu/h2d.py ]; then
  log host-to-device experiments
  timeout 120 python3 .gpu/h2d.py 2>&1 | tail -20
fi
if has cli; then
  for t in .gpu/cli_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    log "$name"
    # The integration tests run the binary at the path they were built with
    # (CARGO_BIN_EXE_tfbench), their scratch under CARGO_TARGET_TMPDIR.
    tmp=$(grep -a -o -m1 -E '/[A-Za-z0-9_/.-]*/target/tmp' "$t" | head -1)
    if [ -n "$tmp" ]; then mkdir -p "$tmp" "$(dirname "$tmp")/release" && cp .gpu/tfbench "$(dirname "$tmp")/release/tfbench"; fi
    timeout ${CLI_TIMEOUT:-150} "$t" --test-threads 1 > "$OUT/$name.txt" 2>&1; echo "$name rc=$?"
    grep -E 'FAILED|test result|panicked' "$OUT/$name.txt" | head -20
  done
fi
log done
