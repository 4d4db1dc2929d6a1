// The timeline: one lane per actor on a canvas, spans coloured by kind, wheel
// zoom, drag pan, and a "follow the last N seconds" mode for live runs.

export const KIND_COLORS = {
  forward: '#4e79a7', backward_input: '#f28e2b', backward_weight: '#edc948', backward: '#e15759',
  send: '#76b7b2', receive: '#59a14f', optimizer: '#b07aa1', idle: '#555b66', eval: '#ff9da7', attention: '#8cd17d', other: '#9c755f',
};

const LANE_H = 18;
const AXIS_H = 22;
const LABEL_W = 120;

/// Spans of one actor, kept sorted by begin time (struct of arrays).
export class Lane {
  constructor(actor) {
    this.actor = actor;
    this.b = []; this.d = []; this.k = []; this.mb = []; this.step = [];
    this.maxDur = 0;
    this.drawn = 0; // spans drawn in the last frame (for tests and the tooltip)
  }
  get size() { return this.b.length; }
  /// Adds a batch of [begin, dur, kind, step, mb] rows.
  add(rows) {
    rows.sort((x, y) => x[0] - y[0]);
    const inOrder = this.b.length === 0 || rows[0][0] >= this.b[this.b.length - 1];
    for (const r of rows) {
      this.b.push(r[0]); this.d.push(r[1]); this.k.push(r[2]); this.step.push(r[3]); this.mb.push(r[4]);
      if (r[1] > this.maxDur) this.maxDur = r[1];
    }
    if (!inOrder) this.resort();
  }
  resort() {
    const idx = this.b.map((_, i) => i).sort((x, y) => this.b[x] - this.b[y]);
    for (const f of ['b', 'd', 'k', 'step', 'mb']) { const a = this[f]; this[f] = idx.map((i) => a[i]); }
  }
  /// First index whose span could reach time t.
  firstFrom(t) {
    let lo = 0, hi = this.b.length;
    const from = t - this.maxDur;
    while (lo < hi) { const m = (lo + hi) >> 1; if (this.b[m] < from) lo = m + 1; else hi = m; }
    return lo;
  }
}

export class Timeline {
  constructor(canvas, tooltip, model) {
    this.canvas = canvas; this.tooltip = tooltip; this.model = model;
    this.ctx = canvas.getContext('2d');
    this.view = { t0: 0, t1: 10e6 }; // microseconds
    this.follow = true;
    this.windowUs = 10e6;
    this.dirty = true;
    this.attach();
  }

  setFollow(on) { this.follow = on; this.dirty = true; }
  setWindow(seconds) { this.windowUs = seconds * 1e6; this.dirty = true; }
  fitAll() {
    const [a, b] = this.model.extent();
    this.follow = false;
    this.view = { t0: a, t1: Math.max(b, a + 1) };
    this.dirty = true;
    this.model.onFollowChange?.(false);
  }

  attach() {
    const c = this.canvas;
    c.addEventListener('wheel', (e) => {
      e.preventDefault();
      const { t0, t1 } = this.view;
      const x = this.timeAt(e.offsetX);
      const f = Math.exp(e.deltaY * 0.0015);
      const span = Math.max(10, (t1 - t0) * f);
      const r = (x - t0) / (t1 - t0);
      this.view = { t0: x - r * span, t1: x - r * span + span };
      this.follow = false; this.model.onFollowChange?.(false);
      this.dirty = true;
    }, { passive: false });
    let drag = null;
    c.addEventListener('mousedown', (e) => { drag = { x: e.clientX, t0: this.view.t0, t1: this.view.t1 }; c.style.cursor = 'grabbing'; });
    window.addEventListener('mouseup', () => { drag = null; c.style.cursor = 'grab'; });
    window.addEventListener('mousemove', (e) => {
      if (!drag) return;
      const us = (drag.t1 - drag.t0) / Math.max(1, this.plotWidth());
      const dt = (e.clientX - drag.x) * us;
      if (dt !== 0 && this.follow) { this.follow = false; this.model.onFollowChange?.(false); }
      this.view = { t0: drag.t0 - dt, t1: drag.t1 - dt };
      this.dirty = true;
    });
    c.addEventListener('dblclick', () => this.fitAll());
    c.addEventListener('mousemove', (e) => this.hover(e));
    c.addEventListener('mouseleave', () => { this.tooltip.hidden = true; });
    window.addEventListener('resize', () => { this.dirty = true; });
  }

  plotWidth() { return this.canvas.clientWidth - LABEL_W; }
  timeAt(px) { return this.view.t0 + ((px - LABEL_W) / Math.max(1, this.plotWidth())) * (this.view.t1 - this.view.t0); }

  hover(e) {
    const lanes = this.model.laneList();
    const i = Math.floor((e.offsetY - AXIS_H) / LANE_H);
    if (i < 0 || i >= lanes.length || e.offsetX < LABEL_W) { this.tooltip.hidden = true; return; }
    const lane = lanes[i], t = this.timeAt(e.offsetX);
    const tol = (3 * (this.view.t1 - this.view.t0)) / this.plotWidth();
    let hit = -1;
    for (let j = lane.firstFrom(t - tol); j < lane.size && lane.b[j] <= t + tol; j++)
      if (lane.b[j] - tol <= t && t <= lane.b[j] + lane.d[j] + tol) hit = j;
    if (hit < 0) { this.tooltip.hidden = true; return; }
    const kind = this.model.kinds[lane.k[hit]] ?? '?';
    this.tooltip.textContent = `${lane.actor.label}: ${kind}\nstep ${lane.step[hit]} microbatch ${lane.mb[hit]}\n` +
      `${(lane.d[hit] / 1000).toFixed(3)} ms at ${((lane.b[hit] - this.model.origin()) / 1e6).toFixed(3)} s`;
    this.tooltip.style.left = `${e.offsetX + 12}px`;
    this.tooltip.style.top = `${e.offsetY + 12}px`;
    this.tooltip.hidden = false;
  }

  draw() {
    const lanes = this.model.laneList();
    const dpr = window.devicePixelRatio || 1;
    const w = this.canvas.clientWidth, h = AXIS_H + lanes.length * LANE_H + 4;
    if (this.canvas.width !== Math.round(w * dpr) || this.canvas.height !== Math.round(h * dpr)) {
      this.canvas.width = Math.round(w * dpr); this.canvas.height = Math.round(h * dpr);
      this.canvas.style.height = `${h}px`;
    }
    if (this.follow) {
      const end = this.model.now();
      this.view = { t0: end - this.windowUs, t1: end };
    }
    const ctx = this.ctx;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = '#15171c'; ctx.fillRect(0, 0, w, h);
    const { t0, t1 } = this.view;
    const pw = Math.max(1, w - LABEL_W), scale = pw / Math.max(1e-9, t1 - t0);
    this.drawAxis(ctx, w, h, t0, t1, scale);
    ctx.font = '11px system-ui, sans-serif';
    const colors = this.model.kinds.map((k) => KIND_COLORS[k] ?? '#999');
    lanes.forEach((lane, i) => {
      const y = AXIS_H + i * LANE_H;
      ctx.fillStyle = i % 2 ? '#1a1d23' : '#1f222a';
      ctx.fillRect(LABEL_W, y, pw, LANE_H);
      ctx.fillStyle = '#cfd3da';
      ctx.fillText(lane.actor.label.slice(0, 18), 4, y + 13);
      // Spans closer than a pixel merge into one bar (coloured by its first span), so a
      // zoomed-out lane costs about one rectangle per run of work, not one per span.
      let drawn = 0, runX0 = 0, runX1 = -Infinity, runKind = -1, tickPx = -1;
      const flush = () => {
        if (runX1 === -Infinity) return;
        ctx.fillStyle = colors[runKind];
        ctx.fillRect(runX0, y + 2, Math.max(1, runX1 - runX0), LANE_H - 6);
      };
      for (let j = lane.firstFrom(t0); j < lane.size && lane.b[j] <= t1; j++) {
        const x0 = Math.max(LABEL_W, LABEL_W + (lane.b[j] - t0) * scale);
        const x1 = Math.min(w, LABEL_W + (lane.b[j] + lane.d[j] - t0) * scale);
        if (x1 < LABEL_W) continue;
        drawn++;
        const k = lane.k[j];
        if (lane.d[j] === 0) { // an instant (send, receive): a tick at the lane's foot
          const px = Math.floor(x0);
          if (px !== tickPx) { ctx.fillStyle = colors[k]; ctx.fillRect(px, y + LANE_H - 6, 1, 5); tickPx = px; }
          continue;
        }
        if (x0 <= runX1 + 1 && (k === runKind || x1 - x0 < 2 || runX1 - runX0 < 2)) {
          if (x1 > runX1) runX1 = x1;
          continue;
        }
        flush();
        runX0 = x0; runX1 = x1; runKind = k;
      }
      flush();
      lane.drawn = drawn;
    });
    this.dirty = false;
  }

  drawAxis(ctx, w, h, t0, t1, scale) {
    const origin = this.model.origin();
    const range = (t1 - t0) / 1e6;
    const steps = [0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600];
    const tick = steps.find((s) => range / s <= 10) ?? 1200;
    ctx.fillStyle = '#9aa0aa'; ctx.strokeStyle = '#2e323c'; ctx.font = '10px system-ui, sans-serif';
    const first = Math.ceil((t0 - origin) / 1e6 / tick) * tick;
    for (let s = first; s <= (t1 - origin) / 1e6; s += tick) {
      const x = LABEL_W + ((origin + s * 1e6) - t0) * scale;
      ctx.beginPath(); ctx.moveTo(x + 0.5, AXIS_H - 4); ctx.lineTo(x + 0.5, h); ctx.stroke();
      ctx.fillText(`${+s.toFixed(4)} s`, x + 2, 12);
    }
  }
}
