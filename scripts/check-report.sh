#!/usr/bin/env bash
# Renders the HTML report of a fixed set of results in headless Chromium and
# checks what a person would see:
#   - no element wider than the page, no table wider than its box;
#   - no chart label cut short ("…") and no two bars of one chart whose
#     visible labels read alike but stand for different cases;
#   - the summary at the top, counting skipped cases;
#   - the inference headlines (tokens/s, latency percentiles) present.
# The fixed set: a quick run of every suite, a second tensor run without
# OpenBLAS (its cases skip) compared against the first, and three recorded
# runs of a few tensor cases for the trend charts.
#
# Needs Debian's chromium (`apt-get update && apt-get install -y chromium`);
# not part of `cargo test`.
#
# Usage: scripts/check-report.sh [WORK_DIR]
#   WORK_DIR keeps the results between runs (default: target/check-report);
#   delete it to measure again. Writes report.html, report.png (a screenshot
#   of the top of the page at 1400 px) and prints each check.
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-target/check-report}
mkdir -p "$work"
work=$(cd "$work" && pwd)
chrome=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$chrome" ]; then
    echo "error: chromium not found; install it with: apt-get update && apt-get install -y chromium" >&2
    exit 2
fi
cargo build --release --quiet
bin=$PWD/target/release/tfbench
export TFBENCH_CACHE_DIR="$work/cache"

for suite in tensor inference tokenizer quant optim memory; do
    if [ ! -s "$work/$suite.json" ]; then
        echo "running the $suite suite (--quick) ..." >&2
        "$bin" run --suite "$suite" --quick --no-probe -q -o "$work/$suite.json" >/dev/null || [ $? -eq 3 ]
    fi
done
if [ ! -s "$work/tensor-no-openblas.json" ]; then
    echo "running the tensor suite again without OpenBLAS ..." >&2
    TFBENCH_OPENBLAS=/nonexistent/libopenblas.so "$bin" run --suite tensor --quick --no-probe -q \
        -o "$work/tensor-no-openblas.json" >/dev/null
fi
if [ ! -d "$work/baselines/history" ]; then
    for _ in 1 2 3; do
        "$bin" run --suite tensor --quick --no-probe -q --history --baseline-dir "$work/baselines" \
            'binary/op=add|reduction/op=sum' >/dev/null
    done
fi

# From the work folder, so the files are labelled by their names.
(cd "$work" && "$bin" report --title "tfbench check-report" --baseline-dir baselines \
    --baseline tensor.json --html report.html \
    tensor-no-openblas.json tensor.json inference.json tokenizer.json quant.json optim.json memory.json)

# The checks run in the page: the report itself has no script, so a copy
# gets one that writes its verdict into the DOM, which --dump-dom prints.
cat > "$work/check.js" <<'JS'
(function () {
  var problems = [], notes = [];
  var page = document.documentElement.clientWidth;
  var all = document.body.getElementsByTagName('*');
  var wide = 0;
  for (var i = 0; i < all.length; i++) {
    var el = all[i];
    var r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > page + 1) {
      if (wide++ < 5) problems.push('wider than the page (' + Math.round(r.right) + ' > ' + page + ' px): <' +
        el.tagName.toLowerCase() + ' class="' + (el.getAttribute('class') || '') + '"> ' +
        (el.textContent || '').slice(0, 80));
    }
  }
  if (wide > 5) problems.push('... and ' + (wide - 5) + ' more elements wider than the page');
  var boxes = document.querySelectorAll('.scroll');
  for (var b = 0; b < boxes.length; b++) {
    if (boxes[b].scrollWidth > boxes[b].clientWidth + 1) {
      problems.push('a table scrolls sideways (' + boxes[b].scrollWidth + ' in ' + boxes[b].clientWidth +
        ' px): ' + (boxes[b].textContent || '').slice(0, 80));
    }
  }
  var svgs = document.querySelectorAll('svg'), labels = 0;
  for (var s = 0; s < svgs.length; s++) {
    var seen = {};
    var texts = svgs[s].querySelectorAll('text');
    for (var t = 0; t < texts.length; t++) {
      var title = texts[t].querySelector('title');
      if (!title) continue;
      labels++;
      var visible = '';
      for (var n = 0; n < texts[t].childNodes.length; n++) {
        if (texts[t].childNodes[n].nodeType === 3) visible += texts[t].childNodes[n].nodeValue;
      }
      if (visible.indexOf('\u2026') >= 0) problems.push('truncated label: ' + visible + ' (' + title.textContent + ')');
      if (seen[visible] !== undefined && seen[visible] !== title.textContent) {
        problems.push('one label for two cases: "' + visible + '" = ' + seen[visible] + ' and ' + title.textContent);
      }
      seen[visible] = title.textContent;
    }
  }
  var summary = document.getElementById('summary');
  if (!summary) problems.push('no summary');
  else if (!/skipped/.test(summary.textContent)) problems.push('the summary does not count skipped cases');
  else if (summary.getBoundingClientRect().top > 400) problems.push('the summary is not at the top');
  if (!/Tokens\/s/.test(document.body.textContent)) problems.push('no inference headlines (tokens/s)');
  notes.push(svgs.length + ' charts, ' + labels + ' bar labels checked; page ' + page + ' px wide, ' +
    document.documentElement.scrollHeight + ' px tall');
  var pre = document.createElement('pre');
  pre.id = 'check-result';
  var sections = document.querySelectorAll('section');
  var heights = [];
  for (var q = 0; q < sections.length; q++) heights.push(sections[q].id + ' ' + sections[q].offsetHeight + ' px');
  notes.push('section heights: ' + heights.join(', '));
  pre.textContent = 'CHECK-BEGIN\n' + (problems.length ? 'FAIL\n' + problems.join('\n') : 'PASS') + '\n' +
    notes.join('\n') + '\nCHECK-END';
  document.body.appendChild(pre);
})();
JS
sed 's#</body></html>#<script src="check.js"></script></body></html>#' "$work/report.html" > "$work/check.html"

flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,1000)
"$chrome" "${flags[@]}" --virtual-time-budget=10000 --dump-dom "file://$work/check.html" 2>/dev/null \
    > "$work/dom.html"
"$chrome" "${flags[@]}" --screenshot="$work/report.png" "file://$work/report.html" >/dev/null 2>&1 || true

result=$(awk '/CHECK-BEGIN/{on=1; sub(/.*CHECK-BEGIN/, "")} on{print} /CHECK-END/{on=0}' "$work/dom.html" |
    sed -e 's/CHECK-END.*//' -e 's/&lt;/</g' -e 's/&gt;/>/g' -e 's/&amp;/\&/g' -e 's/&quot;/"/g' | sed '/^$/d')
size=$(wc -c < "$work/report.html")
echo "report: $work/report.html ($((size / 1024)) KiB), screenshot: $work/report.png"
echo "$result"
case "$result" in
PASS*) exit 0 ;;
*) exit 1 ;;
esac
