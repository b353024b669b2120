#!/usr/bin/env bash
# Checks the live dashboard in a real browser: `tfbench serve` on a free
# port, headless Chromium on its page, then a quick run streaming to it
# (driven by check-live.mjs over the DevTools protocol), and checks what a
# person would see:
#   - the cases arrive in the page's live section one by one while the run
#     goes on, without a reload, and every case of the run is there at the end;
#   - the section says the run finished; the static report is still below;
#   - with scripts off, the page is the same report with the run's cases in
#     its live section (progressive enhancement).
#
# Needs Debian's chromium (`apt-get update && apt-get install -y chromium`)
# and Node.js 20 or newer (its WebSocket client); not part of `cargo test`.
#
# Usage: scripts/check-live.sh [WORK_DIR]   (default: target/check-live)
# Writes live.png (the page while the run goes on) and prints each check.
# (The scripts-off check is in check-live.mjs: Chromium's --dump-dom needs
# scripts itself, so it reads the DOM over the DevTools protocol.)
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-target/check-live}
rm -rf "$work"
mkdir -p "$work/store"
work=$(cd "$work" && pwd)
chrome=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$chrome" ]; then
    echo "error: chromium not found; install it with: apt-get update && apt-get install -y chromium" >&2
    exit 2
fi
if ! command -v node >/dev/null; then
    echo "error: node not found (Node.js 20 or newer drives the browser)" >&2
    exit 2
fi
cargo build --release --quiet
bin=$PWD/target/release/tfbench
export TFBENCH_CACHE_DIR="$work/cache"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

"$bin" serve --port 0 --baseline-dir "$work/store" >"$work/serve.out" 2>"$work/serve.err" &
pids+=($!)
for _ in $(seq 100); do grep -q listening "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
url=$(sed -n 's#^tfbench dashboard listening on \(http://[^/]*\)/$#\1#p' "$work/serve.out")
[ -n "$url" ] || { echo "error: serve printed no address" >&2; cat "$work/serve.err" >&2; exit 1; }
echo "dashboard at $url"

"$chrome" --headless --no-sandbox --disable-gpu --hide-scrollbars --remote-debugging-port=0 \
    --user-data-dir="$work/profile" about:blank >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/profile/DevToolsActivePort" ] && break; sleep 0.1; done
devtools=$(head -n1 "$work/profile/DevToolsActivePort")

# A quick run of 34 small tensor cases (about 10 s): long enough to watch them arrive.
status=0
node --experimental-websocket --no-warnings scripts/check-live.mjs "$devtools" "$url" "$work" "$bin" \
    run --suite tensor --quick --no-probe --sample-size 10 'tensor/(binary|unary)/' || status=1

echo "screenshot: $work/live.png"
exit $status
