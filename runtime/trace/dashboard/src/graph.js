// The actor graph: actors as boxes coloured by how busy they were in the recent
// window, channels as arrows, with mailbox depth and messages in flight. A
// replicated pipeline is drawn as its grid (positions across, replicas down),
// each stage's shard, all-reduce peer or sync actor just below it.

const SVG = 'http://www.w3.org/2000/svg';
const NODE_W = 112, NODE_H = 46, GAP_X = 56, GAP_Y = 34, HELPER_H = 30, HELPER_GAP = 6, HEADER_GAP = 50;

function el(name, attrs, parent) {
  const e = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  parent?.appendChild(e);
  return e;
}

/// Busy fraction 0..1 to a colour from slate (idle) through teal to amber (saturated).
export function busyColor(f) {
  const stops = [[0, [55, 62, 75]], [0.5, [38, 139, 125]], [1, [230, 160, 40]]];
  f = Math.max(0, Math.min(1, f || 0));
  let i = 0;
  while (i < stops.length - 2 && f > stops[i + 1][0]) i++;
  const [a, ca] = stops[i], [b, cb] = stops[i + 1];
  const t = (f - a) / (b - a);
  return `rgb(${ca.map((c, j) => Math.round(c + (cb[j] - c) * t)).join(',')})`;
}

/// Where an actor sits in the grid: { replica, position } for a stage, { of }
/// (the stage it serves) for a shard, all-reduce peer or sync actor, null for
/// the rest. The trace says so (`replica`, `position`, `of`); traces older than
/// those fields are read from the pipeline shorthand's names (`r1s2`, `s2`,
/// `r1s2_os`, `r1s2_ar`, `r1s2_sync`).
export function placeOf(a) {
  if (a.role === 'stage') {
    if (Number.isInteger(a.replica) && a.replica >= 0 && Number.isInteger(a.position) && a.position >= 0)
      return { replica: a.replica, position: a.position };
    const m = /^(?:r(\d+))?s(\d+)$/.exec(a.name);
    return m ? { replica: Number(m[1] ?? 0), position: Number(m[2]) } : null;
  }
  if (a.of) return { of: a.of };
  const h = /^(.+)_(os|ar|sync)$/.exec(a.name);
  return h ? { of: h[1] } : null;
}

/// The grid layout, or null when some stage has no place in it (hand-written
/// graphs, interleaved or SkipPipe names the shorthand did not give) or two share one.
export function gridLayout(actors) {
  const stages = new Map(), cell = new Set(), helpers = [], header = [];
  for (const a of actors) {
    const p = placeOf(a);
    if (a.role === 'stage') {
      if (!p || cell.has(`${p.replica},${p.position}`)) return null;
      cell.add(`${p.replica},${p.position}`);
      stages.set(a.name, { actor: a, ...p, helpers: [] });
    } else if (p) helpers.push([a, p.of]);
    else header.push(a);
  }
  if (!stages.size) return null;
  for (const [a, of] of helpers) {
    const s = stages.get(of);
    if (s) s.helpers.push(a); else header.push(a);
  }
  // Rows and columns go by the replicas and positions present (a SkipPipe grid may lack some).
  const replicas = [...new Set([...stages.values()].map((s) => s.replica))].sort((a, b) => a - b);
  const positions = [...new Set([...stages.values()].map((s) => s.position))].sort((a, b) => a - b);
  const most = Math.max(0, ...[...stages.values()].map((s) => s.helpers.length));
  const rowH = NODE_H + most * (HELPER_H + HELPER_GAP) + GAP_Y;
  const top = header.length ? 10 + NODE_H + HEADER_GAP : 10;
  const pos = new Map(), helperOf = new Map();
  header.forEach((a, i) => pos.set(a.id, { x: 10 + i * (NODE_W + GAP_X), y: 10, h: NODE_H }));
  for (const s of stages.values()) {
    const x = 10 + positions.indexOf(s.position) * (NODE_W + GAP_X), y = top + replicas.indexOf(s.replica) * rowH;
    pos.set(s.actor.id, { x, y, h: NODE_H });
    s.helpers.forEach((a, i) => {
      pos.set(a.id, { x, y: y + NODE_H + HELPER_GAP + i * (HELPER_H + HELPER_GAP), h: HELPER_H });
      helperOf.set(a.id, s.actor.id);
    });
  }
  // Ring and exchange links: each position's helpers of one type, replica to next
  // replica down its column (the trace records no messages between them).
  const rings = [];
  for (const p of positions) {
    const column = replicas.map((r) => [...stages.values()].find((s) => s.replica === r && s.position === p)).filter(Boolean);
    const types = new Set(column.flatMap((s) => s.helpers.map((h) => h.type)));
    for (const t of types) {
      const ring = column.map((s) => s.helpers.find((h) => h.type === t)).filter(Boolean).map((h) => h.id);
      if (ring.length > 1) rings.push(ring);
    }
  }
  const cols = Math.max(header.length, positions.length);
  return { pos, helperOf, rings, width: 20 + cols * (NODE_W + GAP_X), height: top + replicas.length * rowH - GAP_Y + 10 };
}

export class ActorGraph {
  constructor(svg, ringToggle) {
    this.svg = svg;
    this.key = '';
    this.nodes = new Map();
    this.showRings = ringToggle?.checked ?? false;
    ringToggle?.addEventListener('change', () => { this.showRings = ringToggle.checked; this.key = ''; this.update(this.actors, this.stats); });
  }

  /// Without a grid: data loaders and other actors without the stage role on the first row, stages after, in id order.
  flowLayout(actors, width) {
    const cols = Math.max(1, Math.floor((width + GAP_X) / (NODE_W + GAP_X)));
    const first = actors.filter((a) => a.role !== 'stage');
    const stages = actors.filter((a) => a.role === 'stage');
    const pos = new Map();
    let row = 0;
    for (const group of [first, stages]) {
      group.forEach((a, i) => {
        const r = row + Math.floor(i / cols), c = i % cols;
        pos.set(a.id, { x: 10 + c * (NODE_W + GAP_X), y: 10 + r * (NODE_H + GAP_Y), h: NODE_H });
      });
      if (group.length) row += Math.ceil(group.length / cols);
    }
    return { pos, helperOf: new Map(), rings: [], width, height: 20 + row * (NODE_H + GAP_Y) };
  }

  /// The grid when the actors form one; wide grids scroll rather than wrap.
  layout(actors) {
    const width = Math.max(300, this.svg.parentElement?.clientWidth || 900);
    return gridLayout(actors) ?? this.flowLayout(actors, width);
  }

  update(actors, stats) {
    this.actors = actors;
    this.stats = stats;
    const channels = stats?.channels ?? [];
    const key = actors.map((a) => a.id).join(',') + '|' + channels.map((c) => `${c.from}>${c.to}`).join(',') +
      '|' + (this.svg.parentElement?.clientWidth || 0) + '|' + this.showRings;
    if (key !== this.key) this.rebuild(actors, channels, key);
    const byId = new Map((stats?.actors ?? []).map((a) => [a.id, a]));
    for (const [id, n] of this.nodes) {
      const s = byId.get(id);
      n.rect.setAttribute('fill', busyColor(s?.busy));
      n.busy.textContent = `busy ${s ? Math.round(100 * (s.busy ?? 0)) : 0}% · mbox ${s?.mailbox ?? 0}`;
    }
    for (const c of channels) {
      const e = this.edges.get(`${c.from}>${c.to}`);
      if (e) e.label.textContent = c.in_flight ? String(c.in_flight) : '';
    }
  }

  rebuild(actors, channels, key) {
    this.key = key;
    const svg = this.svg;
    svg.replaceChildren();
    const { pos, helperOf, rings, width, height } = this.layout(actors);
    svg.setAttribute('height', height);
    svg.setAttribute('width', width);
    const defs = el('defs', {}, svg);
    const m = el('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' }, defs);
    el('path', { d: 'M 0 0 L 10 5 L 0 10 z', fill: '#9ca3af' }, m);
    this.edges = new Map();
    for (const c of channels) {
      const a = pos.get(c.from), b = pos.get(c.to);
      if (!a || !b) continue;
      // Ring and exchange links (helper to helper) cross the whole grid: drawn on demand.
      const ring = helperOf.has(c.from) && helperOf.has(c.to);
      if (ring && !this.showRings) continue;
      // Opposite directions between the same pair are drawn apart.
      const off = c.from < c.to ? -7 : 7;
      const ax = a.x + NODE_W / 2, ay = a.y + a.h / 2 + off, bx = b.x + NODE_W / 2, by = b.y + b.h / 2 + off;
      const dx = bx - ax, dy = by - ay, len = Math.hypot(dx, dy) || 1;
      // Leave each box where the line crosses its edge.
      const cut = (h) => Math.min(NODE_W / 2 / (Math.abs(dx / len) || 1e-9), h / 2 / (Math.abs(dy / len) || 1e-9));
      const ca = cut(a.h), cb = cut(b.h);
      const sx = ax + (dx / len) * ca, ex = bx - (dx / len) * cb;
      const sy = ay + (dy / len) * ca, ey = by - (dy / len) * cb;
      el('path', { class: ring ? 'edge ring' : 'edge', d: `M ${sx} ${sy} L ${ex} ${ey}`, 'marker-end': 'url(#arrow)',
        'data-from': c.from, 'data-to': c.to }, svg);
      const label = el('text', { class: 'edge-label', x: (sx + ex) / 2, y: (sy + ey) / 2 + (off < 0 ? -4 : 12) }, svg);
      this.edges.set(`${c.from}>${c.to}`, { label });
    }
    // Each link leaves a helper's right edge and bows into the gap beside its
    // column, so it passes no stage; the ring's closing link bows further.
    for (const ring of this.showRings ? rings : []) {
      const link = (a, b, bow) => {
        const x = a.x + NODE_W, y1 = a.y + a.h / 2, y2 = b.y + b.h / 2;
        el('path', { class: 'edge ring', d: `M ${x} ${y1} C ${x + bow} ${y1} ${x + bow} ${y2} ${x} ${y2}` }, svg);
      };
      ring.slice(1).forEach((id, i) => link(pos.get(ring[i]), pos.get(id), GAP_X / 2));
      if (ring.length > 2) link(pos.get(ring.at(-1)), pos.get(ring[0]), GAP_X * 0.8);
    }
    this.nodes = new Map();
    for (const a of actors) {
      const p = pos.get(a.id);
      const small = p.h < NODE_H;
      const g = el('g', { transform: `translate(${p.x},${p.y})`, 'data-actor': a.name, class: small ? 'helper' : 'actor' }, svg);
      const rect = el('rect', { width: NODE_W, height: p.h, rx: 6, stroke: '#0b0c0f', fill: busyColor(0) }, g);
      const name = el('text', { x: NODE_W / 2, y: small ? 12 : 18, 'font-weight': 'bold' }, g);
      name.textContent = a.label ?? a.name;
      const busy = el('text', { x: NODE_W / 2, y: small ? 25 : 35, class: small ? 'small' : '' }, g);
      this.nodes.set(a.id, { rect, busy });
    }
  }
}
