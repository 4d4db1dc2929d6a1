// The dashboard page: receives the runtime's WebSocket feed (actors, spans,
// counters, statistics) and keeps the timeline, actor graph and charts current.
import { Lane, Timeline, KIND_COLORS } from './timeline.js';
import { ActorGraph } from './graph.js';
import { Charts, VAL_COLOR } from './charts.js';

const $ = (id) => document.getElementById(id);

const model = {
  actors: [], kinds: [], lanes: new Map(), series: new Map(), memory: new Map(), outer: new Map(), stats: null,
  live: true, finished: false, spans: 0, minT: Infinity, maxT: -Infinity, serverNow: 0, serverNowAt: 0,
  laneList() { return this.actors.map((a) => this.lanes.get(a.id)).filter(Boolean); },
  extent() { return [this.minT === Infinity ? 0 : this.minT, this.maxT === -Infinity ? 1 : this.maxT]; },
  origin() { return this.minT === Infinity ? 0 : this.minT; },
  /// The latest time to show: the server's clock, advanced smoothly between frames while live.
  now() {
    if (!this.live || this.finished) return this.maxT === -Infinity ? 0 : this.maxT;
    return Math.max(this.serverNow + (performance.now() - this.serverNowAt) * 1000, this.maxT);
  },
  onFollowChange(on) { $('follow').checked = on; },
  reset() {
    this.actors = []; this.lanes = new Map(); this.series = new Map(); this.memory = new Map(); this.outer = new Map(); this.stats = null;
    this.finished = false; this.spans = 0; this.minT = Infinity; this.maxT = -Infinity;
  },
};

const timeline = new Timeline($('timeline'), $('tooltip'), model);
const graph = new ActorGraph($('graph'), $('graph-rings'));
const charts = new Charts($('loss-chart'), $('tps-chart'));
let chartsDirty = false, graphDirty = false, memoryDirty = false, outerDirty = false;

function setStatus(text, cls) {
  const s = $('status');
  s.textContent = text;
  s.className = `badge ${cls}`;
}

function fmt(v, digits) { return v === null || v === undefined ? '-' : Number(v).toFixed(digits); }

function legend() {
  $('legend').replaceChildren(...model.kinds.map((k) => {
    const span = document.createElement('span');
    span.innerHTML = `<i style="background:${KIND_COLORS[k] ?? '#999'}"></i>${k}`;
    return span;
  }));
}

function onFrame(f) {
  if (f.hello) {
    model.reset();
    model.kinds = f.hello.kinds;
    model.live = f.hello.live;
    $('title').textContent = f.hello.title ?? '';
    legend();
    setStatus(model.live ? 'live' : 'finished trace', model.live ? 'live' : 'finished');
    if (!model.live) timeline.setFollow(false);
  }
  if (f.actors) {
    // A multi-process run (`troupe launch`) has actors on several nodes: lanes
    // go by node and say which, e.g. `n1 s2`; one process's lanes keep their names.
    const multi = f.actors.some((a) => a.node !== f.actors[0].node);
    model.actors = [...f.actors].sort((a, b) => a.node - b.node || a.id - b.id);
    for (const a of model.actors) {
      a.label = multi ? `n${a.node} ${a.name}` : a.name;
      if (model.lanes.has(a.id)) model.lanes.get(a.id).actor = a;
      else model.lanes.set(a.id, new Lane(a));
    }
    graphDirty = true;
  }
  if (f.spans) {
    const s = f.spans, byActor = new Map();
    for (let i = 0; i < s.length; i += 6) {
      const id = s[i];
      if (!byActor.has(id)) byActor.set(id, []);
      byActor.get(id).push([s[i + 2], s[i + 3], s[i + 1], s[i + 4], s[i + 5]]);
      if (s[i + 2] < model.minT) model.minT = s[i + 2];
      if (s[i + 2] + s[i + 3] > model.maxT) model.maxT = s[i + 2] + s[i + 3];
    }
    for (const [id, rows] of byActor) {
      if (!model.lanes.has(id)) model.lanes.set(id, new Lane({ id, name: `actor${id}`, label: `actor${id}`, type: '', node: 0 }));
      model.lanes.get(id).add(rows);
    }
    model.spans += s.length / 6;
    timeline.dirty = true;
  }
  if (f.counters) {
    for (const [name, , value, step] of f.counters) {
      const held = /^held:(.+):(params|grads|optimizer)$/.exec(name); // what an actor holds (record_held)
      if (held) {
        if (!model.memory.has(held[1])) model.memory.set(held[1], {});
        model.memory.get(held[1])[held[2]] = value;
        memoryDirty = true;
        continue;
      }
      const outer = /^outer:(.+):(steps|bytes)$/.exec(name); // a sync actor's progress (outer_sync.cpp)
      if (outer) {
        if (!model.outer.has(outer[1])) model.outer.set(outer[1], {});
        model.outer.get(outer[1])[outer[2]] = value;
        outerDirty = true;
        continue;
      }
      if (!model.series.has(name)) model.series.set(name, new Map());
      if (value !== null) model.series.get(name).set(step + 1, value);
    }
    chartsDirty = true;
  }
  if (f.stats) {
    model.stats = f.stats;
    model.serverNow = f.stats.now; model.serverNowAt = performance.now();
    const st = f.stats;
    $('m-step').textContent = st.step >= 0 ? st.step + 1 : '-';
    $('m-loss').textContent = fmt(st.loss, 4);
    // Validation runs before training and every eval_every steps: say which
    // step its value is from (step 0: before the first).
    const hasVal = st.val_loss !== null && st.val_loss !== undefined;
    $('m-val').textContent = hasVal ? `${fmt(st.val_loss, 4)} @ step ${st.val_step + 1}` : '-';
    $('m-val').title = !hasVal ? 'no validation yet'
      : st.val_step < 0 ? 'validation loss before training' : `validation loss after step ${st.val_step + 1}`;
    $('m-tps').textContent = st.tokens_per_s ? Math.round(st.tokens_per_s).toLocaleString() : '-';
    $('m-bubble').textContent = st.bubble === null ? '-' : `${(100 * st.bubble).toFixed(1)}%`;
    $('m-spans').textContent = `${model.spans.toLocaleString()}${st.dropped ? ` (${st.dropped} dropped)` : ''}`;
    graphDirty = true;
  }
  if (f.finished) {
    model.finished = true;
    setStatus(model.live ? 'run finished' : 'finished trace', 'finished');
    if (!model.live) timeline.fitAll();
  }
}

function connect() {
  const ws = new WebSocket(`${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/ws`);
  ws.onmessage = (e) => onFrame(JSON.parse(e.data));
  ws.onclose = () => {
    if (model.finished) return;
    setStatus('disconnected: retrying', 'down');
    setTimeout(connect, 2000);
  };
}

$('follow').addEventListener('change', (e) => timeline.setFollow(e.target.checked));
$('window').addEventListener('change', (e) => { timeline.setWindow(Number(e.target.value)); timeline.setFollow(true); $('follow').checked = true; });
$('fit').addEventListener('click', () => timeline.fitAll());

/// A table row of `texts`, one cell each.
function row(texts) {
  const tr = document.createElement('tr');
  for (const text of texts) {
    const td = document.createElement('td');
    td.textContent = text;
    tr.append(td);
  }
  return tr;
}

/// The rows of table `id` as drawn: first cell -> the others.
function tableRows(id) {
  return Object.fromEntries([...$(id).querySelectorAll('tbody tr')].map((tr) => {
    const cells = [...tr.children].map((td) => td.textContent);
    return [cells[0], cells.slice(1)];
  }));
}

/// The memory table: one row per actor that reported what it holds, in bytes.
function drawMemory() {
  const rows = [...model.memory.entries()].sort(([a], [b]) => a.localeCompare(b, undefined, { numeric: true }));
  const num = (v) => (v === undefined || v === null ? '-' : Math.round(v).toLocaleString());
  $('memory').querySelector('tbody').replaceChildren(...rows.map(([actor, m]) => {
    const total = (m.params ?? 0) + (m.grads ?? 0) + (m.optimizer ?? 0);
    const id = model.actors.find((a) => a.name === actor)?.id;
    const sent = model.stats?.actors?.find((a) => a.id === id)?.bytes_sent;
    return row([actor, num(m.params), num(m.grads), num(m.optimizer), num(total), num(sent)]);
  }));
  $('memory-section').hidden = rows.length === 0;
}

/// The outer-exchange table: one row per sync actor, its outer steps and bytes sent.
function drawOuter() {
  const rows = [...model.outer.entries()].sort(([a], [b]) => a.localeCompare(b, undefined, { numeric: true }));
  const num = (v) => (v === undefined || v === null ? '-' : Math.round(v).toLocaleString());
  $('outer').querySelector('tbody').replaceChildren(...rows.map(([actor, o]) => row([actor, num(o.steps), num(o.bytes)])));
  $('outer-section').hidden = rows.length === 0;
}

/// The stragglers table: the top-k slowest actors by step time, slowest first.
function drawStragglers() {
  const st = model.stats?.stragglers;
  const top = st?.top ?? [];
  $('stragglers').querySelector('tbody').replaceChildren(...top.map((name) => {
    const a = st.actors[name];
    const verdict = a.chronic ? 'chronic'
      : a.stalls.length ? `one-off stall at step ${a.stalls.map((s) => s + 1).join(', ')}` : '-';
    return row([name, String(a.steps), fmt(a.min_ms, 2), fmt(a.median_ms, 2), fmt(a.max_ms, 2), fmt(a.ewma, 2),
      fmt(a.peak_ratio, 2), verdict]);
  }));
  $('stragglers-section').hidden = top.length === 0;
}

let lastCharts = 0;
function frame(t) {
  if (timeline.dirty || (timeline.follow && model.live && !model.finished)) timeline.draw();
  if (memoryDirty || (graphDirty && model.memory.size)) { drawMemory(); memoryDirty = false; } // sent: from the stats
  if (outerDirty) { drawOuter(); outerDirty = false; }
  if (graphDirty) { graph.update(model.actors, model.stats); drawStragglers(); graphDirty = false; }
  if (chartsDirty && t - lastCharts > 400) { charts.update(model.series); chartsDirty = false; lastCharts = t; }
  requestAnimationFrame(frame);
}
requestAnimationFrame(frame);
connect();

/// For tests and the console: what the page shows now.
window.troupeDashboard = {
  lanes: () => model.laneList().map((l) => ({ id: l.actor.id, name: l.actor.name, node: l.actor.node, label: l.actor.label,
    spans: l.size, drawn: l.drawn })),
  lossPoints: () => charts.lossPoints,
  /// Points of each replica's own loss line, by replica number.
  replicaLossPoints: () => charts.replicaLossPoints(),
  /// The memory table as drawn: actor -> [params, grads, optimizer, total, sent] as shown.
  memory: () => tableRows('memory'),
  /// The outer-exchange table as drawn: sync actor -> [outer steps, bytes sent] as shown.
  outer: () => tableRows('outer'),
  /// The stragglers table as drawn, slowest first: [actor, steps, min, median, max, ewma, peak, verdict].
  stragglers: () => [...$('stragglers').querySelectorAll('tbody tr')].map((tr) => [...tr.children].map((td) => td.textContent)),
  /// Each validation value's step, value and marker position in the loss chart's canvas.
  valMarkers: () => charts.valMarkers(),
  valColor: VAL_COLOR,
  headline: () => Object.fromEntries([...document.querySelectorAll('#headline div')].map((d) =>
    [d.querySelector('dt').textContent, d.querySelector('dd').textContent])),
  stats: () => model.stats,
  finished: () => model.finished,
  fitAll: () => timeline.fitAll(),
  redraw: () => timeline.draw(),
};
