// The page around dtrain's planner (dtrain_plan.js: plan/plan_request.h compiled to
// WebAssembly). The form's fields are `dtrain plan`'s flags; a field left empty is a flag not
// given. The planner answers with the report `dtrain plan --json` prints, and this file only
// draws it: every figure shown carries data-path (where it sits in that report) and data-value
// (the report's number, as JSON writes it), so a test can hold the page to the command.
'use strict';

(function () {
  let planner = null;  // {plan(requestText) -> reportText}
  let runs = 0;

  const fields = () => Array.from(document.querySelectorAll('[data-flag]'));
  const fieldFor = (flag) => document.querySelector(`[data-flag="${flag}"]`);

  // ---- flags: the form <-> the request, the address and the command line ----

  // The field's value as a request's typed value, or undefined when not given.
  function fieldValue(el) {
    const type = el.dataset.type;
    if (type === 'bool') return el.checked ? true : undefined;
    const text = el.value.trim();
    if (text === '') return undefined;
    if (type === 'int' || type === 'real') {
      const n = Number(text);
      return Number.isFinite(n) ? n : text;  // the planner names a non-number in its message
    }
    if (type === 'list') return text.split(',').map((s) => (s.trim() === '' ? s : Number(s)));
    return text;
  }

  // The request for the planner: {flag: value} in the form's order. A cluster file's JSON, when
  // given, is the cluster (what --cluster FILE reads).
  function request() {
    const flags = {};
    for (const el of fields()) {
      const v = fieldValue(el);
      if (v === undefined) continue;
      if (el.dataset.flag === 'cluster-file') {
        let parsed;
        try {
          parsed = JSON.parse(v);
        } catch (e) {
          throw {flag: 'cluster-file', message: `--cluster: the cluster file is not valid JSON (${e.message})`};
        }
        flags.cluster = parsed;
      } else if (!(el.dataset.flag === 'cluster' && 'cluster' in flags)) {
        flags[el.dataset.flag] = v;
      }
    }
    return flags;
  }

  // The field values as the address's query: #model=llama2-7b&tp=2&search=1.
  function toHash() {
    const q = new URLSearchParams();
    for (const el of fields()) {
      const v = el.dataset.type === 'bool' ? (el.checked ? '1' : '') : el.value.trim();
      if (v !== '') q.set(el.dataset.flag, v);
    }
    return q.toString();
  }

  function fromHash(hash) {
    const q = new URLSearchParams(hash.replace(/^#/, ''));
    for (const el of fields()) {
      const v = q.get(el.dataset.flag);
      if (el.dataset.type === 'bool') el.checked = v === '1' || v === 'true';
      else el.value = v === null ? '' : v;
    }
  }

  function shellQuote(s) {
    return /^[A-Za-z0-9_.,:\/=+-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
  }

  // `dtrain plan ...` for the fields given, in the form's order; a cluster file as cluster.json.
  function commandArgs() {
    const args = ['plan'];
    const hasFile = fieldFor('cluster-file').value.trim() !== '';
    for (const el of fields()) {
      const flag = el.dataset.flag;
      const v = fieldValue(el);
      if (v === undefined) continue;
      if (flag === 'cluster-file') {
        args.push('--cluster', 'cluster.json');
      } else if (flag === 'cluster' && hasFile) {
        continue;
      } else if (el.dataset.type === 'bool') {
        args.push(`--${flag}`);
      } else {
        args.push(`--${flag}`, el.value.trim().replace(/\s+/g, ''));
      }
    }
    return args;
  }

  // ---- numbers as people read them (the figures themselves stay exact in data-value) ----

  const fmt = {
    gb: (b) => `${(b / 1e9).toFixed(b >= 1e11 ? 1 : 2)} GB`,
    bytes: (b) => (b >= 1e12 ? `${(b / 1e12).toFixed(2)} TB` : b >= 1e9 ? `${(b / 1e9).toFixed(2)} GB` : b >= 1e6 ? `${(b / 1e6).toFixed(2)} MB` : `${Math.round(b)} B`),
    s: (t) => (t >= 1 ? `${t.toFixed(2)} s` : t >= 1e-3 ? `${(t * 1e3).toFixed(1)} ms` : `${(t * 1e6).toFixed(1)} us`),
    pct: (f) => `${(100 * f).toFixed(1)}%`,
    int: (n) => Math.round(n).toLocaleString('en-US'),
    num: (n) => (Math.abs(n) >= 1e6 ? n.toExponential(3) : String(Math.round(n * 100) / 100)),
    text: (x) => String(x),
  };

  function esc(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[c]));
  }

  function at(obj, path) {
    return path.split('.').reduce((o, k) => (o == null ? undefined : o[k]), obj);
  }

  // One figure: its text, with where it sits in the report and its exact value.
  function fig(report, path, format) {
    const v = at(report, path);
    if (v === undefined) return '';
    return `<span class="fig" data-path="${esc(path)}" data-value="${esc(JSON.stringify(v))}">${esc(format(v))}</span>`;
  }

  // ---- the report drawn ----

  const memoryParts = [
    ['params_bytes', 'params', '#4e79a7'],
    ['grads_bytes', 'grads', '#f28e2b'],
    ['optimizer_bytes', 'optimizer state', '#e15759'],
    ['activations_bytes', 'activations', '#76b7b2'],
    ['temporary_bytes', 'temporary', '#59a14f'],
  ];

  function memoryBar(report, base) {
    const m = at(report, base);
    const scale = Math.max(m.total_bytes, m.capacity_bytes);
    const width = 640;
    let x = 0;
    let rects = '';
    for (const [key, label, color] of memoryParts) {
      const w = (m[key] / scale) * width;
      rects += `<rect x="${x.toFixed(2)}" y="20" width="${Math.max(0, w).toFixed(2)}" height="28" fill="${color}"><title>${label}: ${fmt.gb(m[key])}</title></rect>`;
      x += w;
    }
    const cap = (m.capacity_bytes / scale) * width;
    const svg = `<svg class="membar" viewBox="0 0 ${width + 10} 60" width="${width + 10}" height="60" role="img" aria-label="memory per GPU">
      ${rects}<line x1="${cap.toFixed(2)}" x2="${cap.toFixed(2)}" y1="10" y2="56" stroke="#000" stroke-width="2" stroke-dasharray="4 2"/>
      <text x="${Math.min(cap, width - 110).toFixed(2)}" y="10" font-size="10">capacity ${esc(fmt.gb(m.capacity_bytes))}</text></svg>`;
    let rows = '';
    for (const [key, label, color] of memoryParts) {
      rows += `<tr><td><span class="swatch" style="background:${color}"></span>${label}</td><td class="n">${fig(report, `${base}.${key}`, fmt.gb)}</td></tr>`;
    }
    rows += `<tr class="total"><td>total</td><td class="n">${fig(report, `${base}.total_bytes`, fmt.gb)}</td></tr>`;
    rows += `<tr><td>capacity</td><td class="n">${fig(report, `${base}.capacity_bytes`, fmt.gb)}</td></tr>`;
    rows += `<tr><td>fits</td><td class="n">${fig(report, `${base}.fits`, (f) => (f ? 'yes' : 'NO'))}</td></tr>`;
    return `<h3>Memory per GPU (stage ${fig(report, `${base}.stage`, fmt.int)}, ${fig(report, `${base}.layers`, fmt.int)} layers)</h3>${svg}<table class="small">${rows}</table>`;
  }

  const phases = [
    ['compute_s', 'compute'], ['recompute_s', 'of which recompute'], ['tp_s', 'TP communication'],
    ['pp_s', 'pipeline sends'], ['bubble_s', 'pipeline bubble'], ['dp_s', 'DP/ZeRO communication'],
    ['dp_exposed_s', 'DP/ZeRO exposed'], ['optimizer_s', 'optimizer'],
  ];

  function stepTime(report, base) {
    const t = at(report, base);
    const extra = Object.keys(t).filter((k) => k.endsWith('_s') && !k.endsWith('per_s') && !phases.some(([p]) => p === k) &&
      !['step_s', 'predicted_step_s', 'step_no_overlap_s'].includes(k)).map((k) => [k, k.replace(/_s$/, '').replace(/_/g, ' ')]);
    const all = phases.concat(extra).filter(([k]) => typeof t[k] === 'number');
    const top = Math.max(t.step_no_overlap_s || 0, t.step_s || 0, ...all.map(([k]) => t[k])) || 1;
    let rows = '';
    for (const [k, label] of all) {
      const w = Math.max(0, (t[k] / top) * 160);
      rows += `<tr><td>${esc(label)}</td><td class="n">${fig(report, `${base}.${k}`, fmt.s)}</td><td><svg width="160" height="12"><rect width="${w.toFixed(2)}" height="12" fill="#4e79a7"/></svg></td></tr>`;
    }
    const ep = `${base.replace(/\.time$/, '')}.moe.ep_s`;
    if (typeof at(report, ep) === 'number') {
      rows += `<tr><td>EP all-to-all (MoE)</td><td class="n">${fig(report, ep, fmt.s)}</td><td><svg width="160" height="12"><rect width="${((at(report, ep) / top) * 160).toFixed(2)}" height="12" fill="#f28e2b"/></svg></td></tr>`;
    }
    rows += `<tr class="total"><td>step</td><td class="n">${fig(report, `${base}.step_s`, fmt.s)}</td><td><svg width="160" height="12"><rect width="${((t.step_s / top) * 160).toFixed(2)}" height="12" fill="#333"/></svg></td></tr>`;
    rows += `<tr><td>without overlap</td><td class="n">${fig(report, `${base}.step_no_overlap_s`, fmt.s)}</td><td></td></tr>`;
    return `<h3>Time per step (clock: ${fig(report, `${base}.clock`, fmt.text)}; ${fig(report, `${base}.step_source`, fmt.text)})</h3><table class="small">${rows}</table>`;
  }

  function summary(report, base) {
    const t = `${base}.time`;
    return `<div class="cards">
      <div><b>step</b>${fig(report, `${t}.step_s`, fmt.s)}</div>
      <div><b>MFU</b>${fig(report, `${t}.mfu`, fmt.pct)}</div>
      <div><b>HFU</b>${fig(report, `${t}.hfu`, fmt.pct)}</div>
      <div><b>tokens/s</b>${fig(report, `${t}.tokens_per_s`, fmt.int)}</div>
      <div><b>days</b>${fig(report, `${t}.days`, (d) => d.toFixed(1))}</div>
      <div><b>memory</b>${fig(report, `${base}.memory.total_bytes`, fmt.gb)}</div>
      <div><b>micro-batches</b>${fig(report, `${base}.microbatches`, fmt.int)}</div>
    </div>`;
  }

  function communication(report, base) {
    const rows = at(report, `${base}.communication`) || [];
    let body = '';
    rows.forEach((c, i) => {
      const p = `${base}.communication.${i}`;
      body += `<tr><td>${fig(report, `${p}.group`, fmt.text)}</td><td>${fig(report, `${p}.op`, fmt.text)}</td><td>${fig(report, `${p}.carries`, fmt.text)}</td>
        <td class="n">${fig(report, `${p}.ranks`, fmt.int)}</td><td class="n">${fig(report, `${p}.nodes`, fmt.int)}</td>
        <td>${fig(report, `${p}.inter_node`, (x) => (x ? 'inter-node' : 'intra-node'))}</td>
        <td class="n">${fig(report, `${p}.bytes_per_rank`, fmt.bytes)}</td><td class="n">${fig(report, `${p}.calls`, fmt.int)}</td>
        <td class="n">${fig(report, `${p}.time_s`, fmt.s)}</td><td class="n">${fig(report, `${p}.exposed_s`, fmt.s)}</td></tr>`;
    });
    const pp = at(report, `${base}.pp_bytes_per_stage`) || [];
    const ppText = pp.length ? `<p>PP bytes sent per stage: ${pp.map((_, i) => `${i}: ${fig(report, `${base}.pp_bytes_per_stage.${i}`, fmt.bytes)}`).join(', ')}</p>` : '';
    return `<h3>Communication per step, one rank: bytes per link and group</h3>
      <table class="small"><tr><th>group</th><th>collective</th><th>carries</th><th>ranks</th><th>nodes</th><th>link</th><th>bytes/rank</th><th>calls</th><th>time</th><th>exposed</th></tr>${body}</table>${ppText}`;
  }

  // Every scalar of a section not drawn above (bubble, MoE, CP, layout): name and figure.
  function facts(report, base, title) {
    const o = at(report, base);
    if (!o || typeof o !== 'object') return '';
    let rows = '';
    for (const k of Object.keys(o)) {
      const v = o[k];
      if (v !== null && typeof v === 'object') continue;
      const f = typeof v === 'number' ? (Number.isInteger(v) ? fmt.int : fmt.num) : fmt.text;
      rows += `<tr><td>${esc(k)}</td><td class="n">${fig(report, `${base}.${k}`, f)}</td></tr>`;
    }
    return `<div class="facts"><h4>${esc(title)}</h4><table class="small">${rows}</table></div>`;
  }

  // The pipeline: each stage's layers, the bubble, and the schedule's timeline as
  // `dtrain pipeline --svg` draws it (unit times; at most 2P micro-batches, so that it reads).
  function pipeline(report, base) {
    const layers = at(report, `${base}.stage_layers`) || [];
    const layout = at(report, `${base}.layout`);
    const m = at(report, `${base}.microbatches`);
    let timeline = '';
    if (layout.pp > 1 && planner.pipelineSvg) {
      const shown = Math.min(m, 2 * layout.pp);
      const args = ['pipeline', '--stages', String(layout.pp), '--microbatches', String(shown), '--schedule', layout.schedule];
      if (layout.schedule === 'interleaved') args.push('--vp', String(layout.vp));
      const svg = planner.pipelineSvg(layout.schedule, layout.pp, shown, layout.schedule === 'interleaved' ? layout.vp : 1);
      const command = ['dtrain', ...args, '--svg', 'timeline.svg'].join(' ');
      timeline = svg.startsWith('error: ')
        ? `<p class="error">${esc(svg)}</p>`
        : `<div class="timeline" data-args="${esc(JSON.stringify(args))}" data-svg="${esc(svg)}">${svg}</div>
           <p class="hint">The schedule's timeline for ${shown} of the step's ${fmt.int(m)} micro-batches, with unit forward, backward and weight times: <code>${esc(command)}</code></p>`;
    }
    return `<h3>Pipeline: ${fig(report, `${base}.layout.schedule`, fmt.text)}, P=${fig(report, `${base}.layout.pp`, fmt.int)}, v=${fig(report, `${base}.layout.vp`, fmt.int)}, M=${fig(report, `${base}.microbatches`, fmt.int)}; layers per stage ${layers.map((_, i) => fig(report, `${base}.stage_layers.${i}`, fmt.int)).join(' ')}</h3>
      <p>bubble ${fig(report, `${base}.bubble.fraction_of_total`, fmt.pct)} of the step (the clock's replay of the schedule on each stage's own times), ${fig(report, `${base}.bubble.formula_fraction_of_ideal`, fmt.pct)} of the ideal time by ${fig(report, `${base}.bubble.formula`, fmt.text)}; layout ${fig(report, `${base}.layout.flags`, fmt.text)}</p>${timeline}`;
  }

  function drawPlan(report) {
    const b = 'plan';
    return summary(report, b) + `<div class="two">${`<div>${memoryBar(report, `${b}.memory`)}</div><div>${stepTime(report, `${b}.time`)}</div>`}</div>` +
      communication(report, b) + pipeline(report, b) +
      `<div class="factsrow">${facts(report, `${b}.time`, 'time')}${facts(report, `${b}.memory`, 'memory')}${facts(report, `${b}.moe`, 'MoE')}${facts(report, `${b}.context_parallel`, 'context parallelism')}${facts(report, 'model', 'model')}</div>`;
  }

  const searchColumns = [
    ['rank', null, (r, i) => i + 1],
    ['layout', 'layout.flags', null],
    ['step', 'time.step_s', fmt.s],
    ['tokens/s', 'time.tokens_per_s', fmt.int],
    ['MFU', 'time.mfu', fmt.pct],
    ['HFU', 'time.hfu', fmt.pct],
    ['memory', 'memory.total_bytes', fmt.gb],
    ['bubble', 'bubble.fraction_of_total', fmt.pct],
    ['why', 'why', null],
  ];

  function drawSearch(report) {
    let head = '';
    searchColumns.forEach(([label], c) => {
      head += `<th data-col="${c}" title="sort">${esc(label)}</th>`;
    });
    let body = '';
    report.top.forEach((row, i) => {
      let cells = '';
      for (const [label, path, format] of searchColumns) {
        if (!path) {
          cells += `<td class="n" data-sort="${i + 1}">${i + 1}</td>`;
          continue;
        }
        const v = at(row, path);
        cells += `<td class="${typeof v === 'number' ? 'n' : ''}" data-sort="${esc(typeof v === 'number' ? v : String(v))}">${fig(report, `top.${i}.${path}`, format || fmt.text)}</td>`;
        void label;
      }
      body += `<tr data-index="${i}">${cells}</tr>`;
    });
    const explanations = report.explanations.map((e, i) => `<li>${fig(report, `explanations.${i}`, fmt.text)}</li>`).join('');
    const invalid = report.invalid_splits.map((r, i) =>
      `<tr><td>${fig(report, `invalid_splits.${i}.reason`, fmt.text)}</td><td class="n">${fig(report, `invalid_splits.${i}.count`, fmt.int)}</td><td>${fig(report, `invalid_splits.${i}.example`, fmt.text)}</td></tr>`).join('');
    const best = report.top.length ? drawPlanOf(report, 'top.0') : '<p>No layout fits.</p>';
    return `<div class="cards"><div><b>splits</b>${fig(report, 'splits', fmt.int)}</div><div><b>layouts evaluated</b>${fig(report, 'evaluated', fmt.int)}</div>
      <div><b>fit in memory</b>${fig(report, 'fitting', fmt.int)}</div><div><b>memory priced</b>${fig(report, 'memory_priced', fmt.int)}</div><div><b>replayed</b>${fig(report, 'replayed', fmt.int)}</div>
      <div><b>fixed</b>${fig(report, 'fixed', (x) => x || 'none')}</div></div>
      <h3>Best layouts (click a heading to sort, a row to open it)</h3>
      <table id="search-table" class="small sortable"><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>
      <h3>Why the others lose</h3><ul class="why">${explanations}</ul>
      <h3>Splits that cannot run, by reason</h3>${invalid ? `<table class="small"><tr><th>reason</th><th>count</th><th>example</th></tr>${invalid}</table>` : '<p>none</p>'}
      <h2>The best layout</h2>${best}`;
  }

  function drawPlanOf(report, base) {
    return summary(report, base) + `<div class="two"><div>${memoryBar(report, `${base}.memory`)}</div><div>${stepTime(report, `${base}.time`)}</div></div>` +
      communication(report, base) + pipeline(report, base);
  }

  function sortTable(table, col) {
    const body = table.tBodies[0];
    const rows = Array.from(body.rows);
    const asc = table.dataset.sortCol === String(col) ? table.dataset.sortDir !== 'asc' : true;
    rows.sort((a, b) => {
      const x = a.cells[col].dataset.sort;
      const y = b.cells[col].dataset.sort;
      const nx = Number(x);
      const ny = Number(y);
      const c = Number.isFinite(nx) && Number.isFinite(ny) ? nx - ny : x.localeCompare(y);
      return asc ? c : -c;
    });
    rows.forEach((r) => body.appendChild(r));
    table.dataset.sortCol = String(col);
    table.dataset.sortDir = asc ? 'asc' : 'desc';
  }

  // ---- running ----

  function showError(message, flag) {
    const box = document.getElementById('error');
    box.hidden = false;
    box.textContent = `error: ${message}`;
    // Next to the field the message names first (--tp 3 ...), as the command names its flag.
    const named = flag || (message.match(/--([a-z][a-z0-9-]*)/g) || []).map((m) => m.slice(2)).find((f) => fieldFor(f));
    if (named) {
      const el = fieldFor(named === 'cluster' && fieldFor('cluster-file').value.trim() ? 'cluster-file' : named);
      const note = document.createElement('div');
      note.className = 'field-error';
      note.dataset.errorFor = el.dataset.flag;
      note.textContent = `error: ${message}`;
      el.closest('label').appendChild(note);
      el.classList.add('bad');
    }
  }

  function clearErrors() {
    document.getElementById('error').hidden = true;
    document.querySelectorAll('.field-error').forEach((n) => n.remove());
    document.querySelectorAll('.bad').forEach((n) => n.classList.remove('bad'));
  }

  // The same layout, small, as `dtrain train` runs it on this machine's CPU (one thread per
  // rank): the tiny preset of the model's family, deep enough for every pipeline chunk, with two
  // micro-batches per stage. Only for dense layouts of at most 8 ranks; none otherwise.
  function trainArgs(report) {
    const l = report.plan.layout;
    const world = l.dp * l.tp * l.pp * l.cp;
    if (world > 8 || report.model.experts > 0) return null;
    const llama = report.model.family === 'llama';
    const microbatches = l.pp > 1 ? 2 * l.pp : 1;
    const args = ['train', '--model', llama ? 'llama-tiny' : 'tiny', '--layers', String(Math.max(2, l.pp * l.vp)),
      '--hidden', '128', '--heads', '8'];
    if (llama) args.push('--kv-heads', '8');
    args.push('--dp', String(l.dp), '--tp', String(l.tp), '--pp', String(l.pp), '--zero', String(l.zero_stage),
      '--micro-batch', String(l.micro_batch), '--global-batch', String(l.dp * l.micro_batch * microbatches),
      '--recompute', l.recompute);
    if (l.vp > 1) args.push('--vp', String(l.vp));
    if (l.pp > 1) args.push('--schedule', l.schedule);
    if (l.cp > 1) args.push('--cp', String(l.cp));
    if (l.cp > 1 && l.cp_algo !== 'auto') args.push('--cp-algo', l.cp_algo);
    if (l.sequence_parallel) args.push('--sequence-parallel');
    if (l.order !== 'tp-dp-pp') args.push('--rank-order', l.order);
    args.push('--steps', '20');
    return args;
  }

  function showTrain(report) {
    const box = document.getElementById('train');
    const args = report && !report.top && report.error === undefined ? trainArgs(report) : null;
    box.hidden = !args;
    const code = document.getElementById('train-command');
    code.textContent = args ? ['dtrain', ...args].join(' ') : '';
    code.dataset.args = args ? JSON.stringify(args) : '';
  }

  function run() {
    if (!planner) return;
    clearErrors();
    const hash = toHash();
    if (location.hash.replace(/^#/, '') !== hash) history.replaceState(null, '', `#${hash}`);
    const args = commandArgs();
    const command = document.getElementById('command');
    command.textContent = ['dtrain', ...args].map(shellQuote).join(' ');
    command.dataset.args = JSON.stringify(args);
    const result = document.getElementById('result');
    const status = document.getElementById('status');
    const t0 = performance.now();
    let report;
    try {
      report = JSON.parse(planner.plan(JSON.stringify(request())));
    } catch (e) {
      report = {error: e.message || String(e), flag: e.flag};
    }
    const ms = performance.now() - t0;
    if (report.error !== undefined) {
      result.innerHTML = '';
      showError(report.error, report.flag);
      status.dataset.state = 'error';
    } else {
      result.innerHTML = report.top ? drawSearch(report) : drawPlan(report);
      result.dataset.kind = report.top ? 'search' : 'plan';
      status.dataset.state = 'ok';
    }
    showTrain(report);
    runs += 1;
    status.dataset.runs = String(runs);
    status.dataset.planMs = ms.toFixed(1);
    status.textContent = `${report.error !== undefined ? 'error' : report.top ? 'search' : 'plan'} in ${ms.toFixed(0)} ms`;
    if (runs === 1) {
      const first = performance.now();  // since the navigation began
      document.body.dataset.firstPlanMs = first.toFixed(1);
    }
  }

  function setup() {
    const form = document.getElementById('form');
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      run();
    });
    let timer = 0;
    form.addEventListener('change', () => {
      clearTimeout(timer);
      timer = setTimeout(run, 50);
    });
    document.getElementById('clear').addEventListener('click', () => {
      for (const el of fields()) {
        if (el.dataset.type === 'bool') el.checked = false;
        else el.value = '';
      }
      clearErrors();
      document.getElementById('result').innerHTML = '';
    });
    for (const [button, code] of [['copy', 'command'], ['copy-train', 'train-command']]) {
      document.getElementById(button).addEventListener('click', () => {
        const text = document.getElementById(code).textContent;
        if (navigator.clipboard) navigator.clipboard.writeText(text).catch(() => {});
      });
    }
    document.getElementById('cluster-file-input').addEventListener('change', (e) => {
      const file = e.target.files[0];
      if (!file) return;
      file.text().then((text) => {
        fieldFor('cluster-file').value = text;
        run();
      });
    });
    document.getElementById('result').addEventListener('click', (e) => {
      const th = e.target.closest('th[data-col]');
      if (th) {
        sortTable(th.closest('table'), Number(th.dataset.col));
        return;
      }
      const tr = e.target.closest('#search-table tbody tr');
      if (tr) openLayout(tr);
    });
    window.addEventListener('hashchange', () => {
      if (location.hash.replace(/^#/, '') !== toHash()) {
        fromHash(location.hash);
        run();
      }
    });
  }

  // A search row opened as one layout: its flags into the layout fields, the search off.
  function openLayout(tr) {
    const flags = tr.querySelector('[data-path$=".layout.flags"]');
    if (!flags) return;
    const words = JSON.parse(flags.dataset.value).split(/\s+/);
    fieldFor('search').checked = false;
    fieldFor('top').value = '';
    for (let i = 0; i + 1 < words.length; i += 2) {
      const el = fieldFor(words[i].replace(/^--/, ''));
      if (el) el.value = words[i + 1];
    }
    run();
  }

  // The first plan: the address's flags, or a 7B model on 8 GPUs.
  function start() {
    const models = JSON.parse(planner.presets());
    const list = document.getElementById('models');
    for (const name of models) {
      const o = document.createElement('option');
      o.value = name;
      list.appendChild(o);
    }
    if (location.hash.length > 1) fromHash(location.hash);
    else fromHash('#model=llama2-7b&cluster=1x8xH100&tp=2&zero=1');
    run();
  }

  setup();
  createPlanner().then((M) => {
    document.body.dataset.plannerReadyMs = performance.now().toFixed(1);  // the wasm compiled
    planner = {
      plan: M.cwrap('plan_json', 'string', ['string']),
      presets: M.cwrap('plan_model_presets', 'string', []),
      pipelineSvg: M.cwrap('plan_pipeline_svg', 'string', ['string', 'number', 'number', 'number']),
    };
    start();
  });
})();
