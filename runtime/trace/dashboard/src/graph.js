// The actor graph: actors as boxes coloured by how busy they were in the recent
// window, channels as arrows, with mailbox depth and messages in flight.

const SVG = 'http://www.w3.org/2000/svg';
const NODE_W = 112, NODE_H = 46, GAP_X = 56, GAP_Y = 34;

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

export class ActorGraph {
  constructor(svg) {
    this.svg = svg;
    this.key = '';
    this.nodes = new Map();
  }

  /// Lays out data loaders and other actors without the stage role on the first row, stages after, in id order.
  layout(actors) {
    const width = Math.max(300, this.svg.clientWidth || 900);
    const cols = Math.max(1, Math.floor((width + GAP_X) / (NODE_W + GAP_X)));
    const first = actors.filter((a) => a.role !== 'stage');
    const stages = actors.filter((a) => a.role === 'stage');
    const pos = new Map();
    let row = 0;
    for (const group of [first, stages]) {
      group.forEach((a, i) => {
        const r = row + Math.floor(i / cols), c = i % cols;
        pos.set(a.id, { x: 10 + c * (NODE_W + GAP_X), y: 10 + r * (NODE_H + GAP_Y) });
      });
      if (group.length) row += Math.ceil(group.length / cols);
    }
    return { pos, height: 20 + row * (NODE_H + GAP_Y) };
  }

  update(actors, stats) {
    const channels = stats?.channels ?? [];
    const key = actors.map((a) => a.id).join(',') + '|' + channels.map((c) => `${c.from}>${c.to}`).join(',') +
      '|' + (this.svg.clientWidth || 0);
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
    const { pos, height } = this.layout(actors);
    svg.setAttribute('height', height);
    const defs = el('defs', {}, svg);
    const m = el('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' }, defs);
    el('path', { d: 'M 0 0 L 10 5 L 0 10 z', fill: '#9ca3af' }, m);
    this.edges = new Map();
    for (const c of channels) {
      const a = pos.get(c.from), b = pos.get(c.to);
      if (!a || !b) continue;
      // Opposite directions between the same pair are drawn apart.
      const off = c.from < c.to ? -7 : 7;
      const ax = a.x + NODE_W / 2, ay = a.y + NODE_H / 2 + off, bx = b.x + NODE_W / 2, by = b.y + NODE_H / 2 + off;
      const dx = bx - ax, dy = by - ay, len = Math.hypot(dx, dy) || 1;
      const sx = ax + (dx / len) * (NODE_W / 2), ex = bx - (dx / len) * (NODE_W / 2);
      const sy = ay + (dy / len) * (NODE_H / 2), ey = by - (dy / len) * (NODE_H / 2);
      el('path', { class: 'edge', d: `M ${sx} ${sy} L ${ex} ${ey}`, 'marker-end': 'url(#arrow)' }, svg);
      const label = el('text', { class: 'edge-label', x: (sx + ex) / 2, y: (sy + ey) / 2 + (off < 0 ? -4 : 12) }, svg);
      this.edges.set(`${c.from}>${c.to}`, { label });
    }
    this.nodes = new Map();
    for (const a of actors) {
      const p = pos.get(a.id);
      const g = el('g', { transform: `translate(${p.x},${p.y})` }, svg);
      const rect = el('rect', { width: NODE_W, height: NODE_H, rx: 6, stroke: '#0b0c0f', fill: busyColor(0) }, g);
      const name = el('text', { x: NODE_W / 2, y: 18, 'font-weight': 'bold' }, g);
      name.textContent = a.label ?? a.name;
      const busy = el('text', { x: NODE_W / 2, y: 35 }, g);
      this.nodes.set(a.id, { rect, busy });
    }
  }
}
