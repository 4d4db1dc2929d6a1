// Loss (training and validation) and tokens/s over steps, drawn with uPlot.
// Validation is measured every eval_every steps: its values are markers, not a
// line (a line would invent the values between two measurements). With
// replicas, each replica's loss over its own microbatches (`loss:rN` counters)
// is a thin line of its own beside the step's loss.
import uPlot from 'uplot';

function options(title, series, width) {
  return {
    width, height: 220, title: '',
    scales: { x: { time: false } },
    axes: [
      { label: 'step', stroke: '#9aa0aa', grid: { stroke: '#2e323c' } },
      { stroke: '#9aa0aa', grid: { stroke: '#2e323c' }, size: 60 },
    ],
    series: [{ label: 'step' }, ...series],
    legend: { show: true },
  };
}

export const VAL_COLOR = '#f28e2b';
const REPLICA_COLORS = ['#76b7b2', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac', '#e15759', '#8cd17d'];

export class Charts {
  constructor(lossEl, tpsEl) {
    this.lossEl = lossEl; this.tpsEl = tpsEl;
    const w = Math.max(300, lossEl.clientWidth);
    this.loss = new uPlot(options('loss', [
      { label: 'train loss', stroke: '#4e79a7', width: 2, spanGaps: true },
      { label: 'val loss', stroke: VAL_COLOR, width: 2, paths: () => null,
        points: { show: true, size: 9, stroke: VAL_COLOR, fill: VAL_COLOR } },
    ], w), [[], [], []], lossEl);
    this.tps = new uPlot(options('tokens/s', [
      { label: 'tokens/s', stroke: '#59a14f', width: 2, spanGaps: true },
    ], w), [[], []], tpsEl);
    this.lossPoints = 0;
    this.replicas = []; // replica numbers with a series in the loss chart, in series order after the first three
    window.addEventListener('resize', () => this.resize());
  }

  /// Where each validation marker of the chart as drawn is, in its canvas pixels.
  valMarkers() {
    const [steps, , val] = this.loss.data;
    return steps.map((step, i) => [step, val[i]]).filter(([, v]) => v !== null && v !== undefined).map(([step, value]) => ({
      step, value, x: this.loss.valToPos(step, 'x', true), y: this.loss.valToPos(value, 'y', true),
    }));
  }

  resize() {
    const w = Math.max(300, this.lossEl.clientWidth);
    this.loss.setSize({ width: w, height: 220 });
    this.tps.setSize({ width: Math.max(300, this.tpsEl.clientWidth), height: 220 });
  }

  /// Points drawn per replica's own loss line, by replica number.
  replicaLossPoints() {
    return Object.fromEntries(this.replicas.map((r, i) => [r, this.loss.data[3 + i].filter((v) => v !== null).length]));
  }

  /// series: Map name -> Map step -> value.
  update(series) {
    const train = series.get('loss') ?? new Map(), val = series.get('val_loss') ?? new Map();
    const replicas = [...series.keys()].map((n) => /^loss:r(\d+)$/.exec(n)).filter((m) => m).map((m) => Number(m[1]))
      .sort((a, b) => a - b);
    for (const r of replicas.filter((r) => !this.replicas.includes(r))) {
      this.loss.addSeries({ label: `replica ${r}`, stroke: REPLICA_COLORS[r % REPLICA_COLORS.length], width: 1,
        spanGaps: true }, 3 + this.replicas.length);
      this.replicas.push(r);
    }
    const own = this.replicas.map((r) => series.get(`loss:r${r}`));
    const steps = [...new Set([...train.keys(), ...val.keys(), ...own.flatMap((m) => [...m.keys()])])].sort((a, b) => a - b);
    this.loss.setData([steps, steps.map((s) => train.get(s) ?? null), steps.map((s) => val.get(s) ?? null),
      ...own.map((m) => steps.map((s) => m.get(s) ?? null))]);
    this.lossPoints = train.size;
    const tps = series.get('tokens_per_s') ?? new Map();
    const ts = [...tps.keys()].sort((a, b) => a - b);
    this.tps.setData([ts, ts.map((s) => tps.get(s))]);
  }
}
