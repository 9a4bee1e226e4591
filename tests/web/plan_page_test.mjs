// The planner's page in a real Chromium (Debian's, driven by playwright-core; no browser is
// downloaded): for each case it fills the page's form, presses Plan, and holds every figure on
// the page (each element's data-path into the report and its data-value) to the report
// `dtrain plan --json` prints for the command line the page itself shows ("copy as command").
// Bad inputs must show the command's own error message, next to the field it names.
// It takes the screenshots in docs/web/ and prints the first plan's time and the page's sizes.
//
//   node tests/web/plan_page_test.mjs SITE_DIR DTRAIN_BINARY [SCREENSHOT_DIR]
import {execFileSync, spawnSync} from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {createRequire} from 'node:module';
import {pathToFileURL} from 'node:url';

const [siteDir, dtrain, shotDir] = process.argv.slice(2);
const root = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');
const require = createRequire(path.join(root, 'web', 'package.json'));
const {chromium} = require('playwright-core');
const chromiumPath = process.env.DTRAIN_CHROMIUM || '/usr/bin/chromium';

// A cluster file as `dtrain plan --print-cluster` writes it, with slower links: the page takes
// it as the file's JSON, the command as --cluster cluster.json.
const clusterFile = JSON.parse(
    execFileSync(dtrain, ['plan', '--cluster', '2x8xA100', '--print-cluster']).toString());
clusterFile.name = 'lab-a100';
clusterFile.inter_node.bandwidth_bytes_per_s = 12.5e9;
// And one `dtrain calibrate --compute` writes: this machine's CPU measured (quickly) in place of
// the GPU, which the engine clock prices.
const calibrated = (() => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dtrain-web-calibrate-'));
  const file = path.join(dir, 'cpu.json');
  execFileSync(dtrain, ['calibrate', '--ranks', '4', '--compute', '--quick', '-o', file], {stdio: 'ignore'});
  const text = fs.readFileSync(file, 'utf8');
  fs.rmSync(dir, {recursive: true});
  return text;
})();

// Each case: the fields to fill, in any order (the command follows the form's order).
const cases = [
  {name: '7B on 8 GPUs', shot: 'llama2-7b-8xh100.png', f: {model: 'llama2-7b', cluster: '1x8xH100', tp: '2', zero: '1'}},
  {name: 'Llama 3 405B with CP', shot: 'llama3-405b-cp.png', f: {model: 'llama3-405b-128k', cluster: '256x8xH100', tp: '8', pp: '16', cp: '16', zero: '1', recompute: 'full'}},
  {name: 'DeepSeek-V3 with EP', shot: 'deepseek-v3-ep.png', f: {model: 'deepseek-v3', cluster: '64x8xH100', ep: '8', pp: '8', zero: '2', recompute: 'full'}},
  {name: 'search, 7B on 8 GPUs', f: {model: 'llama2-7b', cluster: '1x8xH100', search: true}},
  {name: 'search, 70B with tp held', f: {model: 'llama2-70b', cluster: '8x8xH100', search: true, tp: '8', top: '8'}},
  {name: 'search, 3.6B, top 10', f: {model: 'megatron-3.6b', cluster: '1x8xA100', search: true, top: '10'}},
  {name: '13B interleaved on 8 GPUs', f: {model: 'llama2-13b', cluster: '1x8xA100', tp: '2', pp: '2', vp: '2', schedule: 'interleaved', 'sequence-parallel': true, recompute: 'selective'}},
  {name: 'GPT-3 with sequence parallelism', f: {model: 'gpt3-175b', cluster: '128x8xA100', tp: '8', pp: '16', recompute: 'selective', 'sequence-parallel': true}},
  {name: 'custom GPT', f: {layers: '24', hidden: '2048', heads: '16', vocab: '50257', 'seq-length': '2048', 'global-batch': '256', cluster: '2x8xA100', tp: '2'}},
  {name: 'custom Llama with GQA', f: {family: 'llama', layers: '32', hidden: '4096', heads: '32', 'kv-heads': '8', 'ffn-hidden': '14336', vocab: '128256', 'seq-length': '8192', 'global-batch': '512', cluster: '4x8xH100', tp: '4', pp: '2', zero: '1'}},
  {name: 'Mixtral with EP and TP', f: {model: 'mixtral-8x7b', 'global-batch': '256', cluster: '4x8xH100', ep: '8', tp: '2', zero: '1'}},
  {name: 'custom MoE', f: {family: 'llama', layers: '16', hidden: '2048', heads: '16', vocab: '32000', 'seq-length': '4096', 'global-batch': '256', experts: '16', 'top-k': '2', 'moe-every': '2', cluster: '2x8xH100', ep: '4'}},
  {name: 'interleaved 70B', f: {model: 'llama2-70b', cluster: '8x8xH100', tp: '4', pp: '4', vp: '4', schedule: 'interleaved'}},
  {name: 'GPipe with microbatches', f: {model: 'llama2-13b', cluster: '2x8xA100', tp: '2', pp: '4', schedule: 'gpipe', microbatches: '16'}},
  {name: 'zero-bubble, megatron precision, 6ND', f: {model: 'megatron-18.4b', cluster: '4x8xA100', tp: '4', pp: '2', schedule: 'zb-h1', precision: 'megatron', flops: '6nd'}},
  {name: 'cluster overrides, ZeRO-3', f: {model: 'llama2-7b', cluster: '2x8xA100', 'gpu-memory': '40GB', 'intra-bandwidth': '200', 'inter-bandwidth': '25', 'peak-tflops': '250', tp: '4', zero: '3'}},
  {name: 'one efficiency, ZeRO-2', f: {model: 'megatron-1.7b', cluster: '2x8xA100', 'compute-efficiency': '0.5', zero: '2', 'micro-batch': '4'}},
  {name: 'achieved TFLOP/s', f: {model: 'gpt3-175b', cluster: '128x8xA100', tp: '8', pp: '16', 'achieved-tflops': '140', recompute: 'full'}},
  {name: 'rank order and stage layers', f: {model: 'llama2-13b', cluster: '2x8xH100', tp: '2', pp: '4', 'rank-order': 'dp-tp-pp', 'stage-layers': '9,10,11,10'}},
  {name: 'measured routing', f: {model: 'mixtral-8x7b', 'global-batch': '256', cluster: '4x8xH100', ep: '8', tp: '2', 'tokens-per-expert': '3,1,1,1,1,1,1,1'}},
  {name: 'measured step, selective rerun', f: {model: 'llama2-7b', cluster: '1x8xH100', 'step-time': '100', 'bucket-size': '50MiB', tokens: '1e12', 'selective-flops': 'rerun', recompute: 'selective', tp: '2', 'sequence-parallel': true}},
  {name: 'cluster file', f: {model: 'llama2-13b', 'cluster-file': JSON.stringify(clusterFile, null, 1), tp: '4', pp: '2', nodes: '4'}},
  {name: 'calibrated CPU cluster (engine clock)', f: {layers: '4', hidden: '128', heads: '4', vocab: '512', 'seq-length': '64', 'global-batch': '16', 'cluster-file': calibrated, tp: '2', threads: '2'}},
  {name: 'search on the calibrated cluster', f: {layers: '4', hidden: '128', heads: '4', vocab: '512', 'seq-length': '64', 'global-batch': '16', 'cluster-file': calibrated, search: true}},
  {name: 'search with cp held', f: {model: 'llama3-405b-128k', cluster: '256x8xH100', search: true, cp: '16', tp: '8', top: '5'}},
];
const badCases = [
  {name: 'tp not dividing the heads', field: 'tp', f: {layers: '24', hidden: '1536', heads: '12', vocab: '32000', 'seq-length': '2048', 'global-batch': '64', cluster: '1x8xH100', tp: '8'}},
  {name: 'unknown preset', field: 'model', f: {model: 'llama9-1t', cluster: '1x8xH100'}},
];

function at(obj, p) {
  return p.split('.').reduce((o, k) => (o == null ? undefined : o[k]), obj);
}

async function fill(page, f) {
  await page.click('#clear');
  for (const [flag, value] of Object.entries(f)) {
    const el = page.locator(`[data-flag="${flag}"]`);
    const tag = await el.evaluate((e) => e.tagName);
    if (value === true) await el.check();
    else if (tag === 'SELECT') await el.selectOption(value);
    else await el.fill(value);
  }
  await page.waitForTimeout(100);  // the form's own re-plan on change, if any, has run
  const runs = Number(await page.getAttribute('#status', 'data-runs'));
  await page.click('#run');
  await page.waitForFunction((n) => Number(document.getElementById('status').dataset.runs) > n, runs);
}

// The command line the page shows, run in a folder holding the case's cluster file as
// cluster.json (the name "copy as command" gives it).
function runCommand(args, f) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dtrain-web-'));
  if (f['cluster-file']) fs.writeFileSync(path.join(dir, 'cluster.json'), f['cluster-file']);
  const r = spawnSync(path.resolve(dtrain), [...args, '--json'], {cwd: dir, encoding: 'utf8'});
  fs.rmSync(dir, {recursive: true});
  return r;
}

let failures = 0;
function fail(what) {
  failures += 1;
  console.log(`FAIL ${what}`);
}

const t0 = Date.now();
const browser = await chromium.launch({executablePath: chromiumPath, args: ['--no-sandbox']});
const page = await browser.newPage({viewport: {width: 1400, height: 1100}});
page.on('pageerror', (e) => fail(`page error: ${e.message}`));
const url = pathToFileURL(path.join(siteDir, 'index.html')).href;
await page.goto(url);
await page.waitForSelector('#status[data-runs="1"]');
const firstPlanMs = await page.getAttribute('body', 'data-first-plan-ms');
const plannerReadyMs = await page.getAttribute('body', 'data-planner-ready-ms');

let figures = 0;
let timelineCount = 0;
let trainCount = 0;
for (const c of cases) {
  await fill(page, c.f);
  const args = JSON.parse(await page.getAttribute('#command', 'data-args'));
  const shown = await page.textContent('#command');
  if (shown !== ['dtrain', ...args].join(' ')) fail(`${c.name}: command '${shown}' is not its args ${args}`);
  const r = runCommand(args, c.f);
  if (r.status !== 0) {
    fail(`${c.name}: dtrain ${args.join(' ')} failed: ${r.stderr}`);
    continue;
  }
  const expected = JSON.parse(r.stdout);
  const pageError = await page.locator('#error').isVisible();
  if (pageError) {
    fail(`${c.name}: the page shows ${await page.textContent('#error')}`);
    continue;
  }
  const kind = await page.getAttribute('#result', 'data-kind');
  if (kind !== (expected.top ? 'search' : 'plan')) fail(`${c.name}: the page drew a ${kind}`);
  const shownFigures = await page.$$eval('[data-path]', (els) => els.map((e) => [e.dataset.path, e.dataset.value]));
  let bad = 0;
  for (const [p, v] of shownFigures) {
    const want = JSON.stringify(at(expected, p));
    if (v !== want) {
      bad += 1;
      if (bad <= 5) fail(`${c.name}: ${p} is ${v} on the page, ${want} from the command`);
    }
  }
  // The figures the issue names are among those compared.
  const base = expected.top ? 'top.0' : 'plan';
  const paths = new Set(shownFigures.map(([p]) => p));
  for (const p of ['memory.total_bytes', 'memory.activations_bytes', 'memory.capacity_bytes', 'time.step_s', 'time.mfu', 'time.hfu', 'communication.0.bytes_per_rank']) {
    if (at(expected, `${base}.${p}`) !== undefined && !paths.has(`${base}.${p}`)) fail(`${c.name}: ${base}.${p} is not on the page`);
  }
  if (expected.top) {
    for (let i = 0; i < expected.top.length; i++) {
      if (!paths.has(`top.${i}.time.step_s`)) fail(`${c.name}: layout ${i} is not in the table`);
    }
  }
  // The pipeline's timeline is the SVG `dtrain pipeline --svg` writes, byte for byte.
  let timelines = '';
  for (const t of await page.$$('.timeline')) {
    const targs = JSON.parse(await t.getAttribute('data-args'));
    const svg = await t.getAttribute('data-svg');
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dtrain-web-svg-'));
    const file = path.join(dir, 'timeline.svg');
    const p = spawnSync(path.resolve(dtrain), [...targs, '--svg', file], {encoding: 'utf8'});
    const want = p.status === 0 ? fs.readFileSync(file, 'utf8') : `failed: ${p.stderr}`;
    fs.rmSync(dir, {recursive: true});
    if (svg !== want) fail(`${c.name}: the timeline differs from dtrain ${targs.join(' ')} --svg (${svg.length} vs ${want.length} characters)`);
    else timelines = `, its timeline equal to dtrain ${targs.join(' ')} --svg`;
    timelineCount += 1;
  }
  // The small `dtrain train` line, where the page offers one, runs.
  const trainText = await page.getAttribute('#train-command', 'data-args');
  let trained = '';
  if (trainText) {
    const targs = JSON.parse(trainText);
    const tr = spawnSync(path.resolve(dtrain), targs, {encoding: 'utf8', cwd: os.tmpdir()});
    if (tr.status !== 0) fail(`${c.name}: dtrain ${targs.join(' ')} failed: ${tr.stderr.slice(0, 300)}`);
    else trained = `; dtrain ${targs.join(' ')} ran`;
    trainCount += 1;
  }
  figures += shownFigures.length;
  if (bad) {
    fail(`${c.name}: ${bad} of ${shownFigures.length} figures differ from the command's`);
    continue;
  }
  const ms = await page.getAttribute('#status', 'data-plan-ms');
  console.log(`ok   ${c.name}: ${shownFigures.length} figures equal dtrain ${args.join(' ').slice(0, 90)}${args.join(' ').length > 90 ? '...' : ''} (${ms} ms in the page)${timelines}${trained}`);
  if (c.shot && shotDir) {
    fs.mkdirSync(shotDir, {recursive: true});
    await page.screenshot({path: path.join(shotDir, c.shot), fullPage: true, clip: {x: 0, y: 0, width: 1400, height: 1500}});
  }
}

// The address holds the inputs: the last search's link, opened in a new tab, draws it again.
const link = page.url();
const again = await browser.newPage({viewport: {width: 1400, height: 1100}});
await again.goto(link);
await again.waitForSelector('#status[data-runs="1"]');
const before = await page.$$eval('[data-path]', (els) => els.map((e) => `${e.dataset.path}=${e.dataset.value}`).join('\n'));
const after = await again.$$eval('[data-path]', (els) => els.map((e) => `${e.dataset.path}=${e.dataset.value}`).join('\n'));
if (before !== after) fail(`the link ${link} does not reproduce its plan`);
else console.log('ok   the page\'s address reproduces its search');
await again.close();

// The search table sorts: by step time, the fastest first.
await page.click('#search-table th[data-col="2"]');
const steps = await page.$$eval('#search-table tbody tr td:nth-child(3)', (tds) => tds.map((t) => Number(t.dataset.sort)));
if (steps.some((s, i) => i > 0 && s < steps[i - 1])) fail(`sorting by step time gives ${steps}`);

for (const c of badCases) {
  await fill(page, c.f);
  const args = JSON.parse(await page.getAttribute('#command', 'data-args'));
  const r = runCommand(args, c.f);
  const message = r.stderr.trim().split('\n').filter((l) => l.startsWith('error: '))[0];
  if (r.status === 0 || !message) {
    fail(`${c.name}: dtrain ${args.join(' ')} did not fail`);
    continue;
  }
  const shown = (await page.textContent('#error')).trim();
  const beside = await page.locator(`.field-error[data-error-for="${c.field}"]`).textContent().catch(() => null);
  if (shown !== message) fail(`${c.name}: the page says '${shown}', the command '${message}'`);
  else if (beside !== message) fail(`${c.name}: the message is not beside --${c.field} (${beside})`);
  else console.log(`ok   ${c.name}: the page shows the command's '${message.slice(0, 70)}...' beside --${c.field}`);
}
await browser.close();

const planner = fs.statSync(path.join(siteDir, 'dtrain_plan.js')).size;
const pageBytes = fs.readdirSync(siteDir).reduce((n, f) => n + fs.statSync(path.join(siteDir, f)).size, 0);
console.log(`first plan ${firstPlanMs} ms after the page began loading (the planner compiled at ${plannerReadyMs} ms); planner (wasm inlined) ${planner} bytes, page ${pageBytes} bytes in all`);
console.log(`${cases.length} cases, ${figures} figures and ${timelineCount} timelines compared, ${trainCount} train lines run, ${badCases.length} bad inputs, ${((Date.now() - t0) / 1000).toFixed(1)} s`);
if (failures) {
  console.log(`${failures} failure(s)`);
  process.exit(1);
}
