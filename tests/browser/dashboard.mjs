// Browser test of the dashboard, driven by Playwright (playwright-core) and
// Debian's headless chromium:
//   live:      opens `troupe run --dashboard` during a real training run, checks
//              that every actor's lane shows spans and the loss chart gains points,
//              and saves a screenshot;
//   launch:    the same for `troupe launch --dashboard` on two node processes:
//              one page shows the lanes of both nodes, each labelled with its node;
//   synthetic: opens `troupe dash` on a 64-actor, 100,000-span trace and checks
//              that it loads and redraws quickly;
//   validation: opens `troupe dash` on the trace of a real run that validates
//              every 10 steps and checks that the header says which step its
//              validation loss is from, and that the chart draws each value as
//              a marker with no line between them (by the canvas's pixels);
//   replicas:  opens `troupe dash` on the trace of a 2-replica ZeRO-2 run and checks
//              that the loss chart has a line per replica with a point per step,
//              and that the memory table shows what each stage and shard holds;
//              then on a 4-replica Streaming DiLoCo run, each replica's loss line
//              and every sync actor's outer steps and exchange bytes; on both, that
//              the actor graph is the grid (positions across, replicas down, each
//              shard or sync actor beside its stage), ring links shown on demand.
// usage: node tests/browser/dashboard.mjs live|launch|synthetic|validation|replicas --troupe PATH --out DIR [--steps N]
//
// The live and launch runs must outlast the page's first look at them, on any machine: the
// browser starts before troupe does, and the run is long enough (200 steps,
// about 20 s here, 10 s on a fast machine) that the page sees the loss chart
// grow from a point well before the last step.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const require = createRequire(path.join(root, 'runtime/trace/dashboard/package.json'));
const { chromium } = require('playwright-core');

const mode = process.argv[2];
const opt = (name, fallback) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : fallback;
};
const troupe = opt('troupe', path.join(root, 'build/deploy/troupe'));
const outDir = opt('out', os.tmpdir());
const steps = Number(opt('steps', '200'));
const chromiumPath = process.env.CHROMIUM ?? '/usr/bin/chromium';

let passed = 0, failed = 0;
function check(ok, what) {
  if (ok) { passed++; console.log(`ok: ${what}`); } else { failed++; console.error(`FAIL: ${what}`); }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const children = [];

/// Starts troupe and resolves with its dashboard URL once printed.
function startTroupe(args) {
  const proc = spawn(troupe, args, { cwd: root, env: process.env });
  children.push(proc);
  let out = '';
  const exited = new Promise((resolve) => proc.on('exit', (code) => resolve(code)));
  const url = new Promise((resolve, reject) => {
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/(http:\/\/127\.0\.0\.1:\d+\/)/);
      if (m) resolve(m[1]);
    });
    proc.stderr.on('data', (d) => process.stderr.write(d));
    proc.on('exit', (code) => reject(new Error(`troupe exited (${code}) before printing a URL:\n${out}`)));
    setTimeout(() => reject(new Error(`no dashboard URL after 60 s:\n${out}`)), 60000);
  });
  return { proc, url, exited, output: () => out };
}

/// Runs troupe with `args` to its end; resolves with its exit code and output.
function runToEnd(args) {
  const proc = spawn(troupe, args, { cwd: root, env: process.env });
  children.push(proc);
  let out = '';
  proc.stdout.on('data', (d) => { out += d; });
  proc.stderr.on('data', (d) => { out += d; });
  return new Promise((resolve) => proc.on('exit', (code) => resolve({ code, out })));
}

async function launch() {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'troupe-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: chromiumPath,
    headless: true,
    viewport: { width: 1400, height: 1000 },
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--no-first-run'],
  });
  return { context, profile };
}

/// Polls `fn` in the page until it returns truthy or `ms` pass; returns the last value.
async function waitFor(page, fn, arg, ms) {
  const end = Date.now() + ms;
  let v;
  while (Date.now() < end) {
    v = await page.evaluate(fn, arg).catch(() => undefined);
    if (v) return v;
    await sleep(200);
  }
  return v;
}

/// The page's lanes once `ok(lanes)` holds, or the last ones seen after `ms`.
async function waitForLanes(page, ok, ms) {
  const end = Date.now() + ms;
  let lanes = [];
  while (Date.now() < end) {
    lanes = await page.evaluate(() => window.troupeDashboard?.lanes() ?? []).catch(() => []);
    if (ok(lanes)) break;
    await sleep(200);
  }
  return lanes;
}

/// Watches a training run's dashboard while it goes on: the browser starts
/// first, then troupe with `args`. Once `lanesReady(lanes)` holds (or 90 s
/// pass) `checkLanes` judges the lanes; `metrics` lists [pattern, what] that
/// /metrics must show while the run still goes.
async function watchRun(args, lanesReady, checkLanes, metrics, shotName, atEnd = async () => {}) {
  const { context, profile } = await launch();
  const page = context.pages()[0] ?? await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  const run = startTroupe(args);
  const url = await run.url;
  await page.goto(url);
  checkLanes(await waitForLanes(page, lanesReady, 90000));
  const first = await waitFor(page, () => window.troupeDashboard.lossPoints() || 0, null, 90000);
  check(first > 0 && first < steps, `the loss chart has points (${first}) before the last step (${steps})`);
  const more = await waitFor(page, (n) => {
    const p = window.troupeDashboard.lossPoints();
    return p > n ? p : 0;
  }, first, 90000);
  check(more > first, `the loss chart gains points as steps complete (${first} -> ${more})`);
  const stillRunning = run.proc.exitCode === null;
  const shot = path.join(outDir, shotName);
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`screenshot: ${shot} (taken ${stillRunning ? 'during' : 'after'} the run)`);
  const text = stillRunning ? await fetch(new URL('/metrics', url)).then((r) => r.text(), (e) => String(e)) : '';
  check(stillRunning, 'the run was still going when /metrics was read');
  for (const [re, what] of metrics) check(re.test(text), `/metrics lists ${what}`);
  const code = await run.exited;
  check(code === 0, `troupe ${args[0]} exited with 0 (got ${code})`);
  const fin = await waitFor(page, () => window.troupeDashboard.finished(), null, 5000);
  check(fin === true, 'the page shows the run finished');
  await atEnd(page);
  check(errors.length === 0, `no page errors (${errors.join('; ')})`);
  await context.close();
  fs.rmSync(profile, { recursive: true, force: true });
}

const hasSpans = (l) => l.spans > 0 && l.drawn > 0;

/// For each point, how many pixels of the validation colour the loss chart's
/// canvas has within `r` pixels of it.
function valColoured(page, points, r) {
  return page.evaluate(({ points, r }) => {
    const ctx = document.querySelector('#loss-chart canvas').getContext('2d');
    const hex = window.troupeDashboard.valColor;
    const want = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
    return points.map(({ x, y }) => {
      const d = ctx.getImageData(Math.round(x) - r, Math.round(y) - r, 2 * r + 1, 2 * r + 1).data;
      let n = 0;
      for (let i = 0; i < d.length; i += 4)
        if (d[i + 3] > 200 && want.every((c, k) => Math.abs(d[i + k] - c) < 30)) n++;
      return n;
    });
  }, { points, r });
}

/// The header's validation loss names the step it was measured after, the one
/// the page's statistics give.
async function checkValHeader(page, lastStep) {
  const { head, st } = await page.evaluate(() => ({ head: window.troupeDashboard.headline(),
    st: window.troupeDashboard.stats() }));
  check(st.val_loss !== null && st.val_step + 1 === lastStep,
    `the latest validation is after step ${lastStep} (stats: val_step ${st.val_step})`);
  const want = `${Number(st.val_loss).toFixed(4)} @ step ${lastStep}`;
  check(head['val loss'] === want, `the header shows "val loss ${want}" (got "${head['val loss']}")`);
}

async function live() {
  // The tiny example has a data loader and four pipeline stages.
  const evalEvery = Math.max(1, Math.floor(steps / 4));
  await watchRun(['run', 'examples/tiny-gpt.yaml', '--steps', String(steps), '--set', `train.eval_every=${evalEvery}`,
    '--no-trace', '--dashboard', '127.0.0.1:0'],
    (l) => l.length === 5 && l.every(hasSpans),
    (lanes) => {
      check(lanes.length === 5, `five actor lanes (${JSON.stringify(lanes.map((l) => l.name))})`);
      for (const l of lanes) check(hasSpans(l), `lane ${l.name} shows spans (${l.drawn} drawn of ${l.spans})`);
    },
    [[/troupe_actor_busy_fraction\{actor="s0"/, 'per-actor busy fractions'],
      [/troupe_actor_mailbox_depth\{actor="s3"/, 'per-actor mailbox depths']],
    'dashboard-live.png',
    async (page) => {
      // One marker for each validation, and the header says the latest one's step.
      const want = [0];  // validation before training, then every eval_every steps and after the last
      for (let s = evalEvery; s <= steps; s += evalEvery) want.push(s);
      if (want.at(-1) !== steps) want.push(steps);
      const markers = await waitFor(page, (n) => {
        const m = window.troupeDashboard.valMarkers();
        return m.length === n ? m : 0;
      }, want.length, 5000);
      check(JSON.stringify((markers || []).map((m) => m.step)) === JSON.stringify(want),
        `a validation marker at each of steps ${want.join(', ')} (${JSON.stringify((markers || []).map((m) => m.step))})`);
      await checkValHeader(page, steps);
    });
}

async function launchRun() {
  // Two nodes: the loader, s0 and s1 on node 0, s2 and s3 on node 1, and a
  // channel actor on each side for every actor of the other.
  const workers = [['loader', 0], ['s0', 0], ['s1', 0], ['s2', 1], ['s3', 1]];
  const find = (lanes, name, node) => lanes.find((l) => l.name === name && l.node === node);
  await watchRun(['launch', 'examples/two-nodes.yaml', '--steps', String(steps), '--no-trace', '--dashboard',
    '127.0.0.1:0'],
    (l) => workers.every(([name, node]) => { const x = find(l, name, node); return x && hasSpans(x); }),
    (lanes) => {
      for (const [name, node] of workers) {
        const l = find(lanes, name, node);
        check(l && hasSpans(l), `lane ${name} of node ${node} shows spans (${l?.drawn} drawn of ${l?.spans})`);
        check(l?.label === `n${node} ${name}`, `its label names its node (${l?.label})`);
      }
      const nodes = lanes.map((l) => l.node);
      check(nodes.every((n, i) => i === 0 || nodes[i - 1] <= n), `lanes go by node (${nodes.join(',')})`);
      check(lanes.some((l) => l.node === 1 && l.name.startsWith('to ')), 'node 1\'s channel actors have lanes');
    },
    [[/troupe_actor_busy_fraction\{actor="s0",type="pipeline_stage",node="0"\}/, 's0 on node 0'],
      [/troupe_actor_busy_fraction\{actor="s3",type="pipeline_stage",node="1"\}/, 's3 on node 1']],
    'dashboard-launch.png');
}

/// A Chrome trace with `actors` lanes and `spans` spans, as troupe's exporter writes them.
function syntheticTrace(file, actors, spans) {
  const ev = [{ ph: 'M', name: 'process_name', pid: 0, tid: 0, args: { name: 'node 0' } }];
  for (let a = 0; a < actors; a++)
    ev.push({ ph: 'M', name: 'thread_name', pid: 0, tid: a, args: { name: `stage${a}`, type: 'pipeline_stage' } });
  const per = Math.ceil(spans / actors);
  for (let a = 0; a < actors; a++)
    for (let i = 0; i < per; i++) {
      const kind = ['forward', 'backward_input', 'backward_weight'][i % 3];
      ev.push({ ph: 'X', name: `${kind} mb${i % 16}`, cat: kind, pid: 0, tid: a, ts: i * 1000 + a * 7, dur: 600,
        args: { step: Math.floor(i / 48), microbatch: i % 16, bytes: 0, mailbox: 0 } });
    }
  for (let s = 0; s < per / 48; s++)
    ev.push({ ph: 'C', name: 'loss', pid: 0, tid: 0, ts: s * 48000 + 47000, args: { value: 5 - s * 0.01 } });
  fs.writeFileSync(file, JSON.stringify({ traceEvents: ev }));
  return per * actors;
}

async function synthetic() {
  const file = path.join(outDir, 'synthetic-64x100k.json');
  const total = syntheticTrace(file, 64, 100000);
  const dash = startTroupe(['dash', file, '--dashboard', '127.0.0.1:0']);
  const url = await dash.url;
  const { context, profile } = await launch();
  const page = context.pages()[0] ?? await context.newPage();
  const t0 = Date.now();
  await page.goto(url);
  const loaded = await waitFor(page, (total) => {
    const l = window.troupeDashboard?.lanes() ?? [];
    const n = l.reduce((s, x) => s + x.spans, 0);
    return n === total && window.troupeDashboard.finished() ? n : 0;
  }, total, 60000);
  const loadMs = Date.now() - t0;
  check(loaded === total, `all ${total} spans reached the page (${loaded}) in ${loadMs} ms`);
  check(loadMs < 15000, 'the page loaded within 15 s');
  // Redraw time over the whole run (every span in view) and zoomed in, with wheel events as a user would.
  const whole = await page.evaluate((total) => {
    window.troupeDashboard.fitAll();
    const t = [];
    for (let i = 0; i < 10; i++) { const a = performance.now(); window.troupeDashboard.redraw(); t.push(performance.now() - a); }
    return t.sort((a, b) => a - b)[5];
  }, total);
  check(whole < 100, `a redraw with all ${total} spans in view takes ${whole.toFixed(1)} ms (< 100)`);
  const box = await page.locator('#timeline').boundingBox();
  const z0 = Date.now();
  for (let i = 0; i < 10; i++) await page.mouse.wheel(0, -200), await page.mouse.move(box.x + 600, box.y + 200);
  const zoomMs = (Date.now() - z0) / 10;
  check(zoomMs < 200, `zoom steps respond in ${zoomMs.toFixed(0)} ms each (< 200)`);
  const lanes = await page.evaluate(() => window.troupeDashboard.lanes());
  check(lanes.length === 64, `64 lanes (${lanes.length})`);
  await page.evaluate(() => window.troupeDashboard.fitAll());
  await sleep(300);
  await page.screenshot({ path: path.join(outDir, 'dashboard-synthetic.png'), fullPage: false });
  await context.close();
  fs.rmSync(profile, { recursive: true, force: true });
  dash.proc.kill('SIGINT');
  check((await dash.exited) === 0, 'troupe dash stops cleanly on SIGINT');
}

/// `troupe dash TRACE` and a browser page on it, collecting the page's errors.
async function openTrace(trace) {
  const dash = startTroupe(['dash', trace, '--address', '127.0.0.1:0']);
  const url = await dash.url;
  const { context, profile } = await launch();
  const page = context.pages()[0] ?? await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(url);
  return { dash, context, profile, page, errors };
}

/// Closes what openTrace opened, after a screenshot of the page to `shot` and a
/// check that the page raised no errors.
async function closeTrace({ dash, context, profile, page, errors }, shot) {
  await page.screenshot({ path: path.join(outDir, shot), fullPage: true });
  check(errors.length === 0, `no page errors (${errors.join('; ')})`);
  await context.close();
  fs.rmSync(profile, { recursive: true, force: true });
  dash.proc.kill('SIGINT');
  await dash.exited;
}

async function validation() {
  const evalEvery = 10, total = 40, trace = path.join(outDir, 'validation-trace.json');
  const run = await runToEnd(['run', 'examples/tiny-gpt.yaml', '--steps', String(total), '--set',
    `train.eval_every=${evalEvery}`, '--trace', trace]);
  check(run.code === 0, `the run that validates every ${evalEvery} steps exited with 0 (${run.code})\n${run.code ? run.out : ''}`);
  const opened = await openTrace(trace);
  const { page } = opened;
  const want = [0, 10, 20, 30, 40];  // before training, then every 10 steps
  let markers = await waitFor(page, (n) => {
    const m = window.troupeDashboard?.valMarkers() ?? [];
    return window.troupeDashboard.finished() && m.length === n ? m : 0;
  }, want.length, 30000);
  await sleep(800);  // the chart draws at most every 0.4 s
  markers = await page.evaluate(() => window.troupeDashboard.valMarkers());
  check(JSON.stringify(markers.map((m) => m.step)) === JSON.stringify(want),
    `one validation marker at each of steps ${want.join(', ')} (${JSON.stringify(markers.map((m) => m.step))})`);
  await checkValHeader(page, total);
  // A marker is drawn at every value, and nothing of its colour halfway between two.
  const at = await valColoured(page, markers, 2);
  check(at.every((n) => n > 0), `every validation value is drawn as a marker (${at.join(', ')} pixels of its colour)`);
  const halfway = markers.slice(1).map((m, i) => ({ x: (m.x + markers[i].x) / 2, y: (m.y + markers[i].y) / 2 }));
  const between = await valColoured(page, halfway, 3);
  check(between.every((n) => n === 0), `no validation line between markers (${between.join(', ')} pixels halfway)`);
  await closeTrace(opened, 'dashboard-validation.png');
}

/// The actor graph's boxes as drawn: name -> centre, from each box's <g> transform and <rect>.
function graphBoxes(page) {
  return page.evaluate(() => Object.fromEntries([...document.querySelectorAll('#graph g')].map((g) => {
    const m = /translate\(([-\d.]+),\s*([-\d.]+)\)/.exec(g.getAttribute('transform') ?? '');
    const r = g.querySelector('rect');
    const w = Number(r?.getAttribute('width') ?? 0), h = Number(r?.getAttribute('height') ?? 0);
    return [g.querySelector('text')?.textContent, m ? { x: Number(m[1]), y: Number(m[2]), cx: Number(m[1]) + w / 2,
      cy: Number(m[2]) + h / 2 } : null];
  })));
}

/// Links drawn between two helpers (shards, all-reduce peers, sync actors): each
/// path's ends, matched to the nearest box centre.
async function helperLinks(page, boxes, isHelper) {
  const ends = await page.evaluate(() => [...document.querySelectorAll('#graph path.edge')]
    .filter((p) => getComputedStyle(p).display !== 'none' && getComputedStyle(p).visibility !== 'hidden')
    .map((p) => (p.getAttribute('d').match(/[-\d.]+/g) ?? []).map(Number)));
  const nearest = (x, y) => Object.entries(boxes).filter(([, b]) => b)
    .reduce((best, [n, b]) => { const d = Math.hypot(b.cx - x, b.cy - y); return d < best[1] ? [n, d] : best; }, ['', Infinity])[0];
  return ends.filter((e) => e.length >= 4 && isHelper(nearest(e[0], e[1])) && isHelper(nearest(e.at(-2), e.at(-1)))).length;
}

/// The actor graph of a replicated run is its grid: one column per stage position,
/// one row per replica, in order; each helper (`<stage>_<suffix>`) nearer its own
/// stage than any other; ring links between helpers hidden until the toggle shows them.
async function checkGrid(page, replicas, positions, suffix) {
  const boxes = await graphBoxes(page);
  const stage = (r, s) => boxes[`r${r}s${s}`];
  const all = [];
  for (let r = 0; r < replicas; r++) for (let s = 0; s < positions; s++) all.push([r, s]);
  check(all.every(([r, s]) => stage(r, s)), `the graph has a box for every stage (${Object.keys(boxes).join(', ')})`);
  if (!all.every(([r, s]) => stage(r, s))) return;
  check(all.every(([r, s]) => stage(r, s).x === stage(0, s).x),
    `stages of one position share an x (${all.map(([r, s]) => `r${r}s${s}:${stage(r, s).x}`).join(' ')})`);
  check(all.every(([r, s]) => stage(r, s).y === stage(r, 0).y),
    `stages of one replica share a y (${all.map(([r, s]) => `r${r}s${s}:${stage(r, s).y}`).join(' ')})`);
  check(all.every(([r, s]) => r === 0 || stage(r, s).y > stage(r - 1, s).y), 'replicas go down in order');
  check(all.every(([r, s]) => s === 0 || stage(r, s).x > stage(r, s - 1).x), 'positions go across in order');
  const d = (a, b) => Math.hypot(a.cx - b.cx, a.cy - b.cy);
  const far = all.filter(([r, s]) => {
    const h = boxes[`r${r}s${s}${suffix}`];
    return !h || all.some(([r2, s2]) => (r2 !== r || s2 !== s) && d(h, stage(r2, s2)) <= d(h, stage(r, s)));
  });
  check(far.length === 0, `every ${suffix} actor is beside its own stage (not: ${far.map(([r, s]) => `r${r}s${s}${suffix}`).join(', ')})`);
  const isHelper = (n) => n.endsWith(suffix);
  const before = await helperLinks(page, boxes, isHelper);
  check(before === 0, `no ring or exchange links before the toggle (${before})`);
  const clicked = await page.click('#graph-rings', { timeout: 2000 }).then(() => true, () => false);
  check(clicked, 'the page has the "show ring and exchange links" toggle');
  await sleep(300);
  const after = await helperLinks(page, await graphBoxes(page), isHelper);
  check(after > 0, `ring or exchange links after the toggle (${after})`);
}

async function replicas() {
  const total = 12, trace = path.join(outDir, 'replicas-trace.json');
  const run = await runToEnd(['run', 'examples/ddp.yaml', '--steps', String(total), '--set', 'data_parallel.zero=2',
    '--set', 'train.eval_every=0', '--trace', trace]);
  check(run.code === 0, `the 2-replica ZeRO-2 run exited with 0 (${run.code})\n${run.code ? run.out : ''}`);
  const opened = await openTrace(trace);
  const { page } = opened;
  await waitFor(page, () => window.troupeDashboard?.finished() ?? false, null, 30000);
  await sleep(800);  // the chart draws at most every 0.4 s
  const points = await page.evaluate(() => window.troupeDashboard.replicaLossPoints());
  check(JSON.stringify(points) === JSON.stringify({ 0: total, 1: total }),
    `a loss line per replica with a point per step (${JSON.stringify(points)})`);
  const memory = await page.evaluate(() => window.troupeDashboard.memory());
  const n = (text) => Number(String(text).replaceAll(',', '').replaceAll('\u202f', '').replaceAll('.', ''));
  for (const actor of ['r0s0', 'r1s1', 'r0s0_os', 'r1s1_os']) {
    const row = memory[actor];
    check(row !== undefined && row.length === 5 && n(row[3]) === n(row[0]) + n(row[1]) + n(row[2]) && n(row[3]) > 0,
      `the memory table shows ${actor}: params, grads, optimizer and their total (${JSON.stringify(row)})`);
  }
  // The shards' ring traffic: every shard sent tensor bytes over the run.
  check(['r0s0_os', 'r1s1_os'].every((a) => memory[a] && n(memory[a][4]) > 0),
    `the table shows the bytes each shard sent (${JSON.stringify(['r0s0_os', 'r1s1_os'].map((a) => memory[a]?.[4]))})`);
  // ZeRO-2: the stage keeps no optimizer state and gives its gradients back between steps; its shard holds both.
  check(memory.r0s0 && n(memory.r0s0[1]) === 0 && n(memory.r0s0[2]) === 0 && n(memory.r0s0_os[2]) > 0,
    `a ZeRO-2 stage holds parameters only, its shard the optimizer state (${JSON.stringify([memory.r0s0, memory.r0s0_os])})`);
  await checkGrid(page, 2, 2, '_os');
  await closeTrace(opened, 'dashboard-replicas.png');
  await localUpdate();
}

/// Local-update training: each replica's loss line and every sync actor's outer
/// steps and exchange bytes, from a 4-replica Streaming DiLoCo run (12 steps,
/// a fragment every 2 steps: 6 outer steps per sync actor).
async function localUpdate() {
  const total = 12, trace = path.join(outDir, 'local-update-trace.json');
  const run = await runToEnd(['run', 'examples/streaming_diloco.yaml', '--steps', String(total),
    '--set', 'local_update.sync_every=4', '--set', 'local_update.delay=1', '--set', 'pipeline.microbatches=2',
    '--set', 'train.eval_every=0', '--set', 'train.warmup=2', '--trace', trace]);
  check(run.code === 0, `the 4-replica Streaming DiLoCo run exited with 0 (${run.code})\n${run.code ? run.out : ''}`);
  const opened = await openTrace(trace);
  const { page } = opened;
  await waitFor(page, () => window.troupeDashboard?.finished() ?? false, null, 30000);
  await sleep(800);
  const points = await page.evaluate(() => window.troupeDashboard.replicaLossPoints());
  check(JSON.stringify(points) === JSON.stringify({ 0: total, 1: total, 2: total, 3: total }),
    `a loss line per replica of the local-update run (${JSON.stringify(points)})`);
  const outer = await page.evaluate(() => window.troupeDashboard.outer());
  const n = (text) => Number(String(text).replaceAll(',', '').replaceAll('\u202f', '').replaceAll('.', ''));
  const syncs = [0, 1, 2, 3].flatMap((r) => [0, 1].map((s) => `r${r}s${s}_sync`));
  check(Object.keys(outer).length === syncs.length && syncs.every((a) => outer[a] && n(outer[a][0]) === 6 && n(outer[a][1]) > 0),
    `the outer table shows each sync actor's 6 outer steps and the bytes it sent (${JSON.stringify(outer)})`);
  await checkGrid(page, 4, 2, '_sync');
  await closeTrace(opened, 'dashboard-local-update.png');
}

/// Stragglers: a 2-replica pipeline whose r1s1 is 3x slow and whose r1s0
/// stalls once; the "Slowest actors" table ranks r1s1 first as chronic and
/// calls r1s0's stall a one-off.
async function stragglers() {
  const graph = path.join(outDir, 'stragglers.yaml'), trace = path.join(outDir, 'stragglers-trace.json');
  fs.writeFileSync(graph, ['model: {layers: 4, d_model: 64, heads: 2, context: 16, vocab: 256}',
    'data: {corpus: kjv, batch: 16, seed: 7}', 'train: {steps: 30, lr: 3.0e-3, warmup: 2, eval_batches: 2}',
    'pipeline: {stages: 2, microbatches: 4, schedule: 1f1b}', 'data_parallel: {replicas: 2}',
    'actors:', '  - {name: r1s1, slowdown: 3}', '  - {name: r1s0, stall: {step: 10, for: 0.4s}}', ''].join('\n'));
  const run = await runToEnd(['run', graph, '--trace', trace]);
  check(run.code === 0, `the straggler run exited with 0 (${run.code})\n${run.code ? run.out : ''}`);
  const opened = await openTrace(trace);
  const { page } = opened;
  await waitFor(page, () => window.troupeDashboard?.finished() ?? false, null, 30000);
  await sleep(500);
  const rows = await page.evaluate(() => window.troupeDashboard.stragglers());
  check(rows.length === 4, `the table has a row for each of the 4 stages (${JSON.stringify(rows)})`);
  check(rows[0]?.[0] === 'r1s1' && rows[0]?.[7] === 'chronic', `r1s1 is first and chronic (${JSON.stringify(rows[0])})`);
  const stalled = rows.find((r) => r[0] === 'r1s0');
  check(/^one-off stall at step (.*, )?10(,|$)/.test(stalled?.[7] ?? ''), `r1s0's stall is a one-off at step 10 (${JSON.stringify(stalled)})`);
  check(rows.every((r) => Number(r[2]) <= Number(r[3]) && Number(r[3]) <= Number(r[4])), 'min <= median <= max in every row');
  await closeTrace(opened, 'dashboard-stragglers.png');
}

try {
  if (mode === 'live') await live();
  else if (mode === 'stragglers') await stragglers();
  else if (mode === 'launch') await launchRun();
  else if (mode === 'synthetic') await synthetic();
  else if (mode === 'validation') await validation();
  else if (mode === 'replicas') await replicas();
  else { console.error('usage: dashboard.mjs live|launch|synthetic|validation|replicas|stragglers --troupe PATH --out DIR [--steps N]'); process.exit(2); }
} catch (e) {
  failed++;
  console.error(`FAIL: ${e.stack ?? e}`);
}
for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
