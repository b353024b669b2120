// Drives headless Chromium over the DevTools protocol for check-live.sh:
// opens the dashboard, starts a quick run that streams to it, and watches
// the page's live section while the run goes on.
//
// Usage: node --experimental-websocket check-live.mjs DEVTOOLS_PORT DASHBOARD_URL WORK_DIR TFBENCH RUN_ARGS...
// Prints one line per check and exits 0 when all pass.
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';

const [devtoolsPort, dashboard, work, bin, ...runArgs] = process.argv.slice(2);
const problems = [];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const targets = await (await fetch(`http://127.0.0.1:${devtoolsPort}/json/list`)).json();
const page = targets.find((t) => t.type === 'page');
if (!page) throw new Error('no page target in Chromium');
const ws = new WebSocket(page.webSocketDebuggerUrl);
await new Promise((ok, bad) => { ws.onopen = ok; ws.onerror = bad; });
let nextId = 1;
const pending = new Map();
const waiters = [];
ws.onmessage = (m) => {
  const msg = JSON.parse(m.data);
  if (msg.id && pending.has(msg.id)) {
    pending.get(msg.id)(msg);
    pending.delete(msg.id);
  } else if (msg.method) {
    for (const w of waiters.splice(0)) w(msg);
  }
};
function send(method, params = {}) {
  const id = nextId++;
  ws.send(JSON.stringify({ id, method, params }));
  return new Promise((ok) => pending.set(id, ok));
}
async function evaluate(expression) {
  const r = await send('Runtime.evaluate', { expression, returnByValue: true });
  return r.result && r.result.result ? r.result.result.value : undefined;
}
const liveRows = () => evaluate("document.querySelectorAll('#live tr[data-case]').length");

await send('Page.enable');
await send('Emulation.setDeviceMetricsOverride', { width: 1400, height: 1000, deviceScaleFactor: 1, mobile: false });
await send('Page.navigate', { url: dashboard + '/' });
for (let i = 0; i < 100 && (await evaluate('document.readyState')) !== 'complete'; i++) await sleep(100);
for (let i = 0; i < 50 && (await evaluate("document.documentElement.getAttribute('data-live')")) !== 'on'; i++) {
  await sleep(100);
}
await evaluate('window.__sameDocument = true');
if ((await liveRows()) !== 0) problems.push('the live section is not empty before the run');

// The run, streaming to the dashboard; its results go to a file to count.
const results = `${work}/run.json`;
const run = spawn(bin, [...runArgs, '--live', dashboard, '-q', '-o', results], { stdio: ['ignore', 'ignore', 'inherit'] });
let running = true;
const exited = new Promise((ok) => run.on('exit', (code) => { running = false; ok(code); }));
const seen = [];
let shot = false;
const t0 = Date.now();
while (running) {
  const n = await liveRows();
  if (seen.length === 0 || seen[seen.length - 1].n !== n) seen.push({ n, ms: Date.now() - t0 });
  if (!shot && n >= 3) {
    const png = await send('Page.captureScreenshot', { format: 'png' });
    writeFileSync(`${work}/live.png`, Buffer.from(png.result.data, 'base64'));
    shot = true;
  }
  await sleep(100);
}
const code = await exited;
if (code !== 0) problems.push(`the run exited with ${code}`);
const total = JSON.parse(readFileSync(results, 'utf8')).cases.length;
let final = 0;
for (let i = 0; i < 30; i++) {
  final = await liveRows();
  if (final === total && /Finished/.test(await evaluate("document.getElementById('live').textContent"))) break;
  await sleep(100);
}
const during = seen.filter((s) => s.n > 0 && s.n < total);
console.log(`rows seen while the run went on: ${seen.map((s) => `${s.n}@${s.ms}ms`).join(' ')}`);
if (during.length < 3) problems.push(`only ${during.length} intermediate counts seen while the run went on`);
if (final !== total) problems.push(`${final} rows on the page after the run, ${total} cases in its results`);
if ((await evaluate('window.__sameDocument')) !== true) problems.push('the page reloaded instead of updating');
if (!/Finished/.test(await evaluate("document.getElementById('live').textContent") || '')) {
  problems.push('the live section does not say the run finished');
}
if (!(await evaluate("!!document.getElementById('summary')"))) problems.push('the static report is gone');

// Scripts off: the same report, the run's cases in its static live section.
// The DOM is read through the DOM domain, which needs no page script.
await send('Emulation.setScriptExecutionDisabled', { value: true });
await send('Page.navigate', { url: dashboard + '/' });
let html = '';
for (let i = 0; i < 100; i++) {
  await sleep(100);
  const doc = await send('DOM.getDocument', { depth: 0 });
  if (!doc.result) continue;
  const outer = await send('DOM.getOuterHTML', { nodeId: doc.result.root.nodeId });
  html = (outer.result && outer.result.outerHTML) || '';
  if (html.includes('id="distributions"') && !html.includes('__sameDocument')) break;
}
const staticRows = (html.match(/<tr data-case=/g) || []).length;
if (/data-live="on"/.test(html)) problems.push('the script ran although scripts were off');
if (staticRows !== total || !html.includes('id="summary"')) {
  problems.push(`without scripts the page shows ${staticRows} of the run's ${total} cases`);
} else {
  console.log(`without scripts: the report and the run's ${staticRows} cases, statically`);
}
ws.close();
console.log(problems.length ? 'FAIL\n' + problems.join('\n') : `PASS: ${total} cases arrived on the page one by one`);
process.exit(problems.length ? 1 : 0);
