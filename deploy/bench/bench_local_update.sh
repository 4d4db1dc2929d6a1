#!/usr/bin/env bash
# Local-update training over slow links (#13): 4 replicas of the main example's
# model (examples/tiny-gpt.yaml: 4 layers, d_model 128, 867,072 parameters), 2
# pipeline stages each, every replica-to-replica link emulated at 10 Mbit/s and
# 50 ms (the all-reduce ring of DDP, the sync actors' links of the local-update
# methods, and NoLoCo's activation hops to other replicas), the same tokens for
# each method (same seed, steps and batches):
#   ddp        every-step all-reduce, overlapped with the backward
#   diloco     H = 50
#   streaming  Streaming DiLoCo, P = 2, tau = 5, alpha = 0.5, int8 exchange
#   noloco     H = 50, groups of 2, random routes, outer lr 1.0 (the paper's 0.7 was
#              +5.7% against DDP's final loss here, 1.0 +3.9%), momentum 0.5;
#              activations and gradients cross the replica links as bf16
#              (pipeline.wire: every other method's stage traffic stays in its
#              own replica's chain, off the emulated links)
#   desloc     parameters every 8 steps, moments every 24 and 48 (16/48/96 was +5.6%,
#              8/24/48 +4.2%; DES-LOC has no byte target, it still sends ~5x less than DDP)
#   sparseloco H = 25, 2% of each chunk in 2 bits (H divides the run, so its last model is the global one),
#              alpha (outer lr) 3: the mean of 4 replicas' different top-k picks dilutes each entry, and
#              alpha 1 was +9.4% against DDP's final loss here, 2 +5.6%, 3 +3.3%; beta 0.95
# It prints, per method: the exchange bytes replica 0 sent (all its sync or
# all-reduce actors), DDP's bytes over them, the peak rate replica 0 offered its
# links (from the trace: the most exchange bytes its actors sent in any 1-second
# window; the emulated links then pace them at 10 Mbit/s each),
# wall time, the wall time to DDP's validation loss at half its run, and the
# final validation loss against DDP's; and writes a plot (validation loss
# against wall time, SVG) and the numbers (CSV) to --out.
#   deploy/bench/bench_local_update.sh [--steps N] [--eval-every K] [--pretrain P] [--out DIR] [--only m1,m2] [--build DIR] [--report]
# --only runs some methods; --report runs nothing and reports every method whose
# results are in --out (so DDP's long run and the others can be taken apart).
# --pretrain P first trains P steps of DDP (no emulated links: its bytes and time
# are the same for every method and not counted) and starts every method from
# its weights (train.init, fresh optimizer state, the data from another seed):
# the DiLoCo paper's protocol (Douillard et al. 2023, section 3: 24k steps of
# pretraining before the comparison), since averaging replicas that start from
# random weights costs more than it gains in short runs.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
steps=100 eval_every=10 pretrain=0 out=runs/bench_local_update build=build only="" report=0
while (($#)); do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --eval-every) eval_every=$2; shift 2 ;;
    --pretrain) pretrain=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --report) report=1; shift ;;
    *) echo "usage: $0 [--steps N] [--eval-every K] [--pretrain P] [--out DIR] [--only m1,m2] [--build DIR] [--report]" >&2; exit 2 ;;
  esac
done
troupe="$here/$build/deploy/troupe"
[[ -x $troupe ]] || { echo "bench_local_update: build first ($troupe)" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
link="bandwidth: 10Mbit/s, latency: 50ms"
replicas=4 stages=2

links() { # suffix: every ordered pair of replicas at each position
  local s a b
  for ((s = 0; s < stages; s++)); do
    for ((a = 0; a < replicas; a++)); do
      for ((b = 0; b < replicas; b++)); do
        ((a == b)) && continue
        echo "  - {from: r${a}s${s}$1, to: r${b}s${s}$1, $link}"
      done
    done
  done
}

init=""
graph() { # method
  local seed=1
  [[ -n $init ]] && seed=2  # not the pretraining's batches again
  cat <<YAML
model:    {layers: 4, d_model: 128, heads: 4, context: 64, vocab: 256}
data:     {corpus: $here/data/kjv.txt, batch: 6, seed: $seed}
train:    {steps: $steps, lr: 1.0e-3, weight_decay: 0.1, warmup: 10, eval_every: $eval_every, eval_batches: 4${init:+, init: $init}}
pipeline: {stages: $stages, microbatches: 2, schedule: 1f1b$([[ $1 == noloco ]] && echo ", wire: bf16")}
data_parallel: {replicas: $replicas}
YAML
  case $1 in
    ddp)
      echo "channels:"
      local a
      for ((s = 0; s < stages; s++)); do
        for ((a = 0; a < replicas; a++)); do
          echo "  - {from: r${a}s${s}_ar, to: r$(((a + 1) % replicas))s${s}_ar, $link}"
        done
      done ;;
    diloco) echo "local_update: {algorithm: diloco, sync_every: 50}" ;;
    streaming) echo "local_update: {algorithm: streaming_diloco, sync_every: 50, fragments: 2, delay: 5, alpha: 0.5, quantize: int8}" ;;
    noloco) echo "local_update: {algorithm: noloco, sync_every: 50, group: 2, route: random, outer: {lr: 1.0, momentum: 0.5, nesterov: true}}" ;;
    desloc) echo "local_update: {algorithm: desloc, periods: {params: 8, momentum: 24, variance: 48}}" ;;
    sparseloco) echo "local_update: {algorithm: sparseloco, sync_every: 25, density: 0.02, outer: {lr: 3.0, momentum: 0.95}}" ;;
  esac
  if [[ $1 != ddp && $1 != pretrain ]]; then
    echo "channels:"
    links _sync
  fi
  if [[ $1 == noloco ]]; then # activations to the next stage of another replica
    local a b
    for ((a = 0; a < replicas; a++)); do
      for ((b = 0; b < replicas; b++)); do
        ((a == b)) || echo "  - {from: r${a}s0, to: r${b}s1, $link}"
      done
    done
  fi
}

all=(ddp diloco streaming noloco desloc sparseloco)
methods=("${all[@]}")
[[ -n $only ]] && IFS=, read -r -a methods <<<"$only"
((report)) && methods=()
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "machine: ${cpu:-unknown CPU}, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); $steps steps, $replicas replicas x $stages stages, links $link"
if ((pretrain > 0)); then
  init="$out/pretrain/ckpt"
  if [[ ! -f $init/latest && ${#methods[@]} -gt 0 ]]; then
    mkdir -p "$out/pretrain"
    { (steps=$pretrain init="" graph pretrain); echo "checkpoint: {dir: ckpt, every: $pretrain}"; } >"$out/pretrain/pretrain.yaml"
    echo "pretraining: $pretrain steps of DDP (no emulated links) -> $init"
    (cd "$out/pretrain" && "$troupe" run pretrain.yaml --no-trace >pretrain.log 2>&1) || { tail -20 "$out/pretrain/pretrain.log" >&2; exit 1; }
    grep "val loss" "$out/pretrain/pretrain.log" | sed 's/^/  /'
  fi
fi
for m in "${methods[@]}"; do
  graph "$m" >"$out/$m.yaml"
  start=$(date +%s.%N)
  # Each validation line stamped with the seconds since the start.
  (cd "$out" && "$troupe" run "$m.yaml" --trace "$out/$m.trace.json" --summary-json "$out/$m.json" 2>&1) |
    while IFS= read -r line; do
      printf '%s %s\n' "$(awk -v s="$start" -v n="$(date +%s.%N)" 'BEGIN {printf "%.3f", n - s}')" "$line"
    done >"$out/$m.log" || { tail -20 "$out/$m.log" >&2; exit 1; }
  echo "$m: done in $(tail -1 "$out/$m.log" | cut -d' ' -f1) s"
done

present=()
for m in "${all[@]}"; do [[ -f $out/$m.json ]] && present+=("$m"); done
python3 - "$out" "${present[@]}" <<'PY'
import json, re, sys
out, methods = sys.argv[1], sys.argv[2:]
rows = {}
for m in methods:
    s = json.load(open(f"{out}/{m}.json"))
    curve, wall = [], 0.0
    for line in open(f"{out}/{m}.log"):
        t, _, rest = line.partition(" ")
        wall = float(t)
        v = re.search(r"validation after step (\d+): loss ([0-9.]+)", rest)
        if v and rest.startswith("r0s"):
            curve.append((float(t), int(v.group(1)), float(v.group(2))))
    # Peak offered rate: the most bytes replica 0's sync or all-reduce actors sent in a 1 s window.
    t = json.load(open(f"{out}/{m}.trace.json"))
    ev = t["traceEvents"] if isinstance(t, dict) else t
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
    sends = {}
    for e in ev:
        n = names.get((e.get("pid"), e.get("tid")), "")
        if re.fullmatch(r"r\d+s\d+_(sync|ar)", n) and e.get("name", "").startswith("send") and e.get("args", {}).get("bytes"):
            sends.setdefault(n, []).append((e["ts"] / 1e6, int(e["args"]["bytes"])))
    mine = sorted(x for n, xs in sends.items() if n.startswith("r0s") for x in xs)
    peak, j, acc = 0.0, 0, 0
    for ts, b in mine:
        acc += b
        while mine[j][0] < ts - 1.0:
            acc -= mine[j][1]; j += 1
        peak = max(peak, acc)
    sent = sum(b for n, xs in sends.items() if n.startswith("r0s") for _, b in xs)
    rows[m] = dict(sent=sent, wall=wall, curve=curve, val=s.get("val_loss"), peak=peak * 8 / 1e6)
ddp = rows.get("ddp")
target = None
if ddp and ddp["curve"]:
    half = [c for c in ddp["curve"] if c[1] <= max(c[1] for c in ddp["curve"]) / 2]
    target = (half or ddp["curve"])[-1][2]
def to_target(r):
    hit = [c[0] for c in r["curve"] if target is not None and c[2] <= target]
    return hit[0] if hit else None
print()
print(f"target: DDP's validation loss at half its run, {target:.4f}" if target else "target: (no DDP run)")
print("| method | bytes sent, replica 0 | DDP / method | peak offered Mbit/s, replica 0 (1 s) | wall s | s to target | / DDP's | final val loss | vs DDP |")
print("|---|---|---|---|---|---|---|---|---|")
with open(f"{out}/summary.csv", "w") as csv:
    csv.write("method,bytes_sent,ratio,peak_mbit_s,wall_s,to_target_s,final_val_loss\n")
    for m, r in rows.items():
        ratio = ddp["sent"] / r["sent"] if ddp and r["sent"] else float("nan")
        tt = to_target(r)
        tt_ddp = to_target(ddp) if ddp else None
        rel = f"{tt / tt_ddp:.3f}" if tt is not None and tt_ddp else "-"
        vs = f"{100 * (r['val'] / ddp['val'] - 1):+.2f}%" if ddp and r["val"] else "-"
        print(f"| {m} | {r['sent']:,} | {ratio:,.1f}x | {r['peak']:.2f} | {r['wall']:.1f} | "
              f"{tt if tt is not None else float('nan'):.1f} | {rel} | {r['val']:.4f} | {vs} |")
        csv.write(f"{m},{r['sent']},{ratio:.2f},{r['peak']:.3f},{r['wall']:.2f},{tt if tt is not None else ''},{r['val']}\n")
# The plot: validation loss against wall time, one line per method (log time axis).
import math
colors = ["#000000", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"]
pts = [(t, l) for r in rows.values() for t, _, l in r["curve"] if t > 0]
if pts:
    t0, t1 = math.log10(min(p[0] for p in pts)), math.log10(max(p[0] for p in pts))
    l0, l1 = min(p[1] for p in pts), max(p[1] for p in pts)
    W, H, L, B = 720, 440, 70, 50
    x = lambda t: L + (math.log10(t) - t0) / max(t1 - t0, 1e-9) * (W - L - 170)
    y = lambda l: 20 + (l1 - l) / max(l1 - l0, 1e-9) * (H - 20 - B)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<line x1="{L}" y1="{H-B}" x2="{W-170}" y2="{H-B}" stroke="black"/><line x1="{L}" y1="20" x2="{L}" y2="{H-B}" stroke="black"/>',
           f'<text x="{(W-170+L)/2}" y="{H-12}" text-anchor="middle">wall time, s (log scale)</text>',
           f'<text x="16" y="{(H-B)/2}" transform="rotate(-90 16 {(H-B)/2})" text-anchor="middle">validation loss (nats/byte)</text>']
    for k in range(math.floor(t0), math.ceil(t1) + 1):
        for mult in (1, 2, 5):
            t = mult * 10 ** k
            if 10 ** t0 <= t <= 10 ** t1:
                svg.append(f'<line x1="{x(t):.1f}" y1="{H-B}" x2="{x(t):.1f}" y2="{H-B+5}" stroke="black"/><text x="{x(t):.1f}" y="{H-B+18}" text-anchor="middle">{t:g}</text>')
    for i in range(6):
        l = l0 + (l1 - l0) * i / 5
        svg.append(f'<text x="{L-6}" y="{y(l)+4:.1f}" text-anchor="end">{l:.2f}</text><line x1="{L-4}" y1="{y(l):.1f}" x2="{L}" y2="{y(l):.1f}" stroke="black"/>')
    if target:
        svg.append(f'<line x1="{L}" y1="{y(target):.1f}" x2="{W-170}" y2="{y(target):.1f}" stroke="#999" stroke-dasharray="4 3"/>')
    for i, (m, r) in enumerate(rows.items()):
        c = colors[i % len(colors)]
        line = " ".join(f"{x(t):.1f},{y(l):.1f}" for t, _, l in r["curve"] if t > 0)
        svg.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="{line}"/>')
        svg.append(f'<text x="{W-160}" y="{40 + 18 * i}" fill="{c}">{m}</text>')
    svg.append("</svg>")
    open(f"{out}/local_update.svg", "w").write("\n".join(svg))
    print(f"\nplot: {out}/local_update.svg, numbers: {out}/summary.csv")
PY
