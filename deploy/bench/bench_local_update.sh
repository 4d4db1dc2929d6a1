#!/usr/bin/env bash
# Local-update training over slow links (#13, #24): 4 replicas of the main
# example's model (examples/tiny-gpt.yaml: 4 layers, d_model 128, 867,072
# parameters), 2 pipeline stages each, every replica-to-replica link emulated at
# 10 Mbit/s and 50 ms (DDP's all-reduce ring, the sync actors' links of the
# local-update methods, NoLoCo's activation hops to other replicas). Every run
# starts from the same --pretrain steps of DDP (no emulated links; the DiLoCo
# paper's protocol) and trains the same tokens (same data seed, steps, batches):
#   ddp        every-step all-reduce of f32 gradients, overlapped with the backward
#   ddp_bf16   the same with every byte it sends as bf16: gradients
#              (data_parallel.wire) and activations (pipeline.wire), NoLoCo's wire
#   diloco     outer step every H = --sync-every steps
#   streaming  Streaming DiLoCo, H, P = 2 fragments, tau = 1, alpha 0.5, int8 exchange
#   noloco     H, groups of 2, random routes, activations as bf16 (pipeline.wire)
#   desloc     parameters every K steps, moments every 3K and 6K (the paper's ratios)
#   sparseloco H, 2% of each chunk in 2 bits, error feedback beta 0.95
# Hyper-parameters are never chosen on the run reported: `--tune` runs each
# method's grid (below) once on --tune-seed and writes the best of each (lowest
# final validation loss) to --params; a report run (the default) reads that
# file, refuses it if it was tuned on the reporting --seed, and runs every
# configuration --rounds times, all of them in each round, the order rotated
# round by round, so DDP and each method share the machine's state alike. It
# writes the medians to --results with the CPU, the kernel target, the load
# before and after, the commit, the seeds and the scale; the runs' logs, traces,
# a CSV and a plot (validation loss against wall time, round 1) go to --out.
# --report runs nothing: it writes the table again from the runs in --out, with
# the machine, load and commit those runs recorded (out/report.env).
#   deploy/bench/bench_local_update.sh [--tune | --report] [--steps N] [--rounds R] [--sync-every H]
#       [--eval-every K] [--pretrain P] [--seed S] [--tune-seed T] [--params FILE]
#       [--results FILE] [--out DIR] [--only m1,m2] [--build DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
usage="usage: $0 [--tune | --report] [--steps N] [--rounds R (>= 3)] [--sync-every H] [--eval-every K] [--pretrain P] [--seed S] [--tune-seed T] [--params FILE] [--results FILE] [--out DIR] [--only m1,m2] [--build DIR]"
steps=40 rounds=3 sync_every=10 eval_every=10 pretrain=200 seed=3 tune_seed=2 tune=0 report=0
params=deploy/results/local_update_tuned.txt results="" out=runs/bench_local_update build=build only=""
while (($#)); do
  case $1 in
    --tune) tune=1; shift ;;
    --report) report=1; shift ;;
    --steps | --rounds | --sync-every | --eval-every | --pretrain | --seed | --tune-seed)
      [[ $# -ge 2 && $2 =~ ^[0-9]+$ ]] || { echo "bench_local_update: $1 takes a whole number" >&2; echo "$usage" >&2; exit 2; }
      v=${1#--}; printf -v "${v//-/_}" '%s' "$2"; shift 2 ;;
    --params | --results | --out | --only | --build)
      [[ $# -ge 2 ]] || { echo "bench_local_update: $1 takes a value" >&2; exit 2; }
      v=${1#--}; printf -v "$v" '%s' "$2"; shift 2 ;;
    -h | --help) echo "$usage"; exit 0 ;;
    *) echo "bench_local_update: unknown argument '$1'" >&2; echo "$usage" >&2; exit 2 ;;
  esac
done
((rounds >= 3 || tune)) || { echo "bench_local_update: at least 3 rounds (medians of fewer mean little)" >&2; exit 2; }
((steps > 0 && sync_every > 0 && steps % sync_every == 0)) ||
  { echo "bench_local_update: --sync-every must divide --steps (the last model is then the global one)" >&2; exit 2; }
((seed != tune_seed)) || { echo "bench_local_update: --seed and --tune-seed must differ (never tune on the run reported)" >&2; exit 2; }
((pretrain == 0 || (seed != 1 && tune_seed != 1))) ||
  { echo "bench_local_update: data seed 1 is the pretraining's; pick others" >&2; exit 2; }
troupe="$here/$build/deploy/troupe"
[[ -x $troupe ]] || { echo "bench_local_update: build first ($troupe)" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
link="bandwidth: 10Mbit/s, latency: 50ms"
replicas=4 stages=2
H=$sync_every

# Each method's grid: the fragments of its local_update line tried on --tune-seed.
declare -A grid
grid[diloco]="outer: {lr: 0.7, momentum: 0.9, nesterov: true}|outer: {lr: 1.0, momentum: 0.9, nesterov: true}"
grid[streaming]="alpha: 0.5, outer: {lr: 0.7, momentum: 0.9, nesterov: true}|alpha: 0.5, outer: {lr: 1.0, momentum: 0.9, nesterov: true}"
grid[noloco]="outer: {lr: 0.7, momentum: 0.5, nesterov: true}|outer: {lr: 1.0, momentum: 0.5, nesterov: true}"
grid[desloc]="periods: {params: $((H / 5 > 0 ? H / 5 : 1)), momentum: $((3 * (H / 5 > 0 ? H / 5 : 1))), variance: $((6 * (H / 5 > 0 ? H / 5 : 1)))}|periods: {params: $((H / 2)), momentum: $((3 * H / 2)), variance: $((3 * H))}"
grid[sparseloco]="outer: {lr: 1.0, momentum: 0.95}|outer: {lr: 2.0, momentum: 0.95}|outer: {lr: 3.0, momentum: 0.95}"

links() { # suffix: every ordered pair of replicas at each position
  local s a b
  for ((s = 0; s < stages; s++)); do
    for ((a = 0; a < replicas; a++)); do
      for ((b = 0; b < replicas; b++)); do
        ((a == b)) || echo "  - {from: r${a}s${s}$1, to: r${b}s${s}$1, $link}"
      done
    done
  done
}

init=""
graph() { # method, data seed, tuned fragment
  local m=$1 data_seed=$2 tuned=${3:-} wire=f32 s a b
  [[ $m == noloco || $m == ddp_bf16 ]] && wire=bf16
  cat <<YAML
model:    {layers: 4, d_model: 128, heads: 4, context: 64, vocab: 256}
data:     {corpus: $here/data/kjv.txt, batch: 6, seed: $data_seed}
train:    {steps: $steps, lr: 1.0e-3, weight_decay: 0.1, warmup: 10, eval_every: $eval_every, eval_batches: 4${init:+, init: $init}}
pipeline: {stages: $stages, microbatches: 2, schedule: 1f1b, wire: $wire}
data_parallel: {replicas: $replicas$([[ $m == ddp_bf16 ]] && echo ", wire: bf16")}
YAML
  case $m in
    diloco) echo "local_update: {algorithm: diloco, sync_every: $H, $tuned}" ;;
    streaming) echo "local_update: {algorithm: streaming_diloco, sync_every: $H, fragments: 2, delay: 1, quantize: int8, $tuned}" ;;
    noloco) echo "local_update: {algorithm: noloco, sync_every: $H, group: 2, route: random, $tuned}" ;;
    desloc) echo "local_update: {algorithm: desloc, $tuned}" ;;
    sparseloco) echo "local_update: {algorithm: sparseloco, sync_every: $H, density: 0.02, $tuned}" ;;
  esac
  [[ $m == pretrain ]] && return
  echo "channels:"
  if [[ $m == ddp* ]]; then
    for ((s = 0; s < stages; s++)); do
      for ((a = 0; a < replicas; a++)); do
        echo "  - {from: r${a}s${s}_ar, to: r$(((a + 1) % replicas))s${s}_ar, $link}"
      done
    done
  else
    links _sync
  fi
  if [[ $m == noloco ]]; then # activations to the next stage of another replica
    for ((a = 0; a < replicas; a++)); do
      for ((b = 0; b < replicas; b++)); do
        ((a == b)) || echo "  - {from: r${a}s0, to: r${b}s1, $link}"
      done
    done
  fi
}

# One run: writes $out/NAME.{yaml,log,json,trace.json}, each log line stamped
# with the seconds since the start.
run() { # name method data_seed tuned
  local name=$1 start
  graph "$2" "$3" "${4:-}" >"$out/$name.yaml"
  start=$(date +%s.%N)
  (cd "$out" && "$troupe" run "$name.yaml" --trace "$out/$name.trace.json" --summary-json "$out/$name.json" 2>&1) |
    while IFS= read -r line; do
      printf '%s %s\n' "$(awk -v s="$start" -v n="$(date +%s.%N)" 'BEGIN {printf "%.3f", n - s}')" "$line"
    done >"$out/$name.log" || { tail -20 "$out/$name.log" >&2; exit 1; }
  [[ -s $out/$name.json ]] || { tail -20 "$out/$name.log" >&2; exit 1; }
  echo "$name: $(tail -1 "$out/$name.log" | cut -d' ' -f1) s, val loss $(field "$out/$name.json" val_loss)" >&2
}
field() { python3 -c "import json,sys; v=json.load(open(sys.argv[1])).get(sys.argv[2]); print('nan' if v is None else v)" "$1" "$2"; }

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
commit="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!deploy/results' || echo '+changes')"
((report)) || echo "machine: ${cpu:-unknown CPU}, $(nproc) cores, load $load_before; commit $commit; $steps steps from $pretrain of DDP, H = $H, $replicas replicas x $stages stages, links $link" >&2

if ((pretrain > 0 && !report)); then
  init="$out/pretrain$pretrain/ckpt"
  if [[ ! -f $init/latest ]]; then
    mkdir -p "$out/pretrain$pretrain"
    { (steps=$pretrain init="" graph pretrain 1); echo "checkpoint: {dir: ckpt, every: $pretrain}"; } >"$out/pretrain$pretrain/pretrain.yaml"
    echo "pretraining: $pretrain steps of DDP (no emulated links, data seed 1) -> $init" >&2
    (cd "$out/pretrain$pretrain" && "$troupe" run pretrain.yaml --no-trace >pretrain.log 2>&1) ||
      { tail -20 "$out/pretrain$pretrain/pretrain.log" >&2; exit 1; }
  fi
fi

methods=(diloco streaming noloco desloc sparseloco)
if ((tune)); then
  [[ -n $only ]] && IFS=, read -r -a methods <<<"$only"
  tmp_params=$(mktemp)
  {
    echo "# bench_local_update.sh --tune: each method's grid run once on data seed $tune_seed ($steps steps from"
    echo "# $pretrain of DDP, H = $H), the lowest final validation loss kept. $(date -u +%F), commit $commit, ${cpu:-unknown CPU},"
    echo "# load $load_before. Read by report runs, which refuse a reporting seed equal to the tuning seed."
    echo "tune_seed	$tune_seed"
    echo "scale	steps $steps, pretrain $pretrain, H $H"
  } >"$tmp_params"
  for m in "${methods[@]}"; do
    [[ -n ${grid[$m]:-} ]] || { echo "bench_local_update: no method '$m' (known: ${!grid[*]})" >&2; exit 2; }
    IFS='|' read -r -a options <<<"${grid[$m]}"
    best="" best_loss=""
    for k in "${!options[@]}"; do
      run "tune_${m}_$k" "$m" "$tune_seed" "${options[$k]}"
      loss=$(field "$out/tune_${m}_$k.json" val_loss)
      echo "# $m {${options[$k]}}: final val loss $loss" >>"$tmp_params"
      if [[ -z $best ]] || awk -v a="$loss" -v b="$best_loss" 'BEGIN {exit !(a < b)}'; then best=${options[$k]} best_loss=$loss; fi
    done
    echo "$m	$best" >>"$tmp_params"
  done
  mv "$tmp_params" "$params"
  echo "tuned on data seed $tune_seed: $params" >&2
  cat "$params"
  exit 0
fi

[[ -f $params ]] || { echo "bench_local_update: no tuned parameters in $params: run with --tune first (on another seed)" >&2; exit 2; }
tuned_on=$(awk -F'\t' '$1 == "tune_seed" {print $2}' "$params")
[[ -n $tuned_on ]] || { echo "bench_local_update: $params names no tune_seed" >&2; exit 2; }
((tuned_on != seed)) || { echo "bench_local_update: $params was tuned on seed $seed, the seed to report: pick another --seed" >&2; exit 2; }
scale="steps $steps, pretrain $pretrain, H $H"
tuned_scale=$(awk -F'\t' '$1 == "scale" {print $2}' "$params")
[[ $tuned_scale == "$scale" ]] ||
  { echo "bench_local_update: $params was tuned at '$tuned_scale', this run is '$scale': tune again at this scale" >&2; exit 2; }
configs=(ddp ddp_bf16 "${methods[@]}")
[[ -n $only ]] && IFS=, read -r -a configs <<<"$only"
declare -A tuned
for m in "${configs[@]}"; do
  [[ $m == ddp || $m == ddp_bf16 ]] && continue
  tuned[$m]=$(awk -F'\t' -v m="$m" '$1 == m {print $2}' "$params")
  [[ -n ${tuned[$m]} ]] || { echo "bench_local_update: $params has no line for '$m'" >&2; exit 2; }
done
n=${#configs[@]}
if ((report)); then
  [[ -f $out/report.env ]] || { echo "bench_local_update: no runs recorded in $out (report.env)" >&2; exit 2; }
  source "$out/report.env"
  reported="; this table written again by --report at commit $commit from those runs"
  [[ ${run_configs[*]} == "${configs[*]}" && $run_rounds == "$rounds" && $run_scale == "$scale" && $run_seed == "$seed" ]] ||
    { echo "bench_local_update: $out holds ${run_configs[*]}, $run_rounds rounds, $run_scale, seed $run_seed: ask for those" >&2; exit 2; }
else
  for ((r = 1; r <= rounds; r++)); do
    for ((i = 0; i < n; i++)); do  # round r starts (r - 1) places further along the list
      m=${configs[$(((i + r - 1) % n))]}
      run "$m.r$r" "$m" "$seed" "${tuned[$m]:-}"
    done
  done
  run_load_before=$load_before run_load_after=$(cut -d' ' -f1-3 /proc/loadavg) run_commit=$commit
  run_when=$(date -u '+%F %H:%M UTC') run_kernel=$(field "$out/${configs[0]}.r1.json" kernel_target) run_cpu="${cpu:-unknown CPU}, $(nproc) cores"
  run_configs=("${configs[@]}") run_rounds=$rounds run_scale=$scale run_seed=$seed reported=""
  declare -p run_load_before run_load_after run_commit run_when run_kernel run_cpu run_configs run_rounds run_scale run_seed >"$out/report.env"
fi
results=${results:-deploy/results/local_update_10mbit_${steps}steps.md}

python3 - "$out" "$rounds" "$results" "${configs[@]}" <<PY
import json, math, re, statistics, sys
out, rounds, results, configs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
tuned = {l.split("\t")[0]: l.rstrip("\n").split("\t")[1] for l in open("$params") if "\t" in l and not l.startswith("#")}

def one(name):
    s = json.load(open(f"{out}/{name}.json"))
    curve, wall = [], 0.0
    for line in open(f"{out}/{name}.log"):
        t, _, rest = line.partition(" ")
        wall = float(t)
        v = re.search(r"validation after step (\d+): loss ([0-9.]+)", rest)
        if v and rest.startswith("r0s"):
            curve.append((float(t), int(v.group(1)), float(v.group(2))))
    # Peak offered rate: the most bytes replica 0's sync or all-reduce actors sent in a 1 s window.
    t = json.load(open(f"{out}/{name}.trace.json"))
    ev = t["traceEvents"] if isinstance(t, dict) else t
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("ph") == "M" and e.get("name") == "thread_name"}
    mine = []
    for e in ev:
        n = names.get((e.get("pid"), e.get("tid")), "")
        if re.fullmatch(r"r0s\d+_(sync|ar)", n) and e.get("name", "").startswith("send") and e.get("args", {}).get("bytes"):
            mine.append((e["ts"] / 1e6, int(e["args"]["bytes"])))
    mine.sort()
    peak, j, acc = 0.0, 0, 0
    for ts, b in mine:
        acc += b
        while mine[j][0] < ts - 1.0:
            acc -= mine[j][1]; j += 1
        peak = max(peak, acc)
    return dict(sent=sum(b for _, b in mine), wall=wall, curve=curve, val=s.get("val_loss"), peak=peak * 8 / 1e6)

runs = {m: [one(f"{m}.r{r}") for r in range(1, rounds + 1)] for m in configs}
med = lambda xs: statistics.median(xs) if xs else float("nan")
ddp = runs.get("ddp")
target = None
if ddp and ddp[0]["curve"]:
    c = ddp[0]["curve"]
    half = [x for x in c if x[1] <= max(x[1] for x in c) / 2]
    target = (half or c)[-1][2]
def to_target(r):
    hit = [c[0] for c in r["curve"] if target is not None and c[1] > 0 and c[2] <= target]  # not the starting point
    return hit[0] if hit else None
rows = {}
for m, rs in runs.items():
    tts = [to_target(r) for r in rs]
    rows[m] = dict(sent=rs[0]["sent"], peak=rs[0]["peak"], wall=med([r["wall"] for r in rs]),
                   walls=[r["wall"] for r in rs], tt=med([x for x in tts if x is not None]) if all(x is not None for x in tts) else None,
                   val=med([r["val"] for r in rs]), vals=[r["val"] for r in rs], curve=rs[0]["curve"])
def ratio(a, b):
    return f"{a / b:,.1f}x" if a and b else "-"
lines = []
w = lines.append
w("# Local-update methods against DDP over 10 Mbit/s links")
w("")
w("\`deploy/bench/bench_local_update.sh\` (#13, #24): 4 replicas x 2 pipeline stages of the main example's model (867,072 parameters),")
w("every replica-to-replica link emulated at 10 Mbit/s and 50 ms; every run starts from the same $pretrain steps of DDP without")
w("emulated links (train.init) and trains $steps more steps on data seed $seed (batch 6 x 2 microbatches per replica), validation")
w("every $eval_every steps on 4 batches. Each configuration ran $rounds times (rounds of all of them, the order rotated each")
w("round); times are medians over the rounds, validation losses medians too (each round's loss is listed).")
w("")
w(f"- machine: $run_cpu; kernel target $run_kernel")
w(f"- load (1, 5, 15 min): $run_load_before before, $run_load_after after")
w(f"- runs at commit $run_commit, $run_when$reported")
w(f"- hyper-parameters: chosen by \`--tune\` on data seed $tuned_on ($(basename "$params")), reported on data seed $seed")
w(f"- H = $H for DiLoCo, Streaming DiLoCo, NoLoCo and SparseLoCo; target: DDP's (f32) validation loss at half its run, " +
  (f"{target:.4f}" if target else "(no DDP run)") + "; s to target: the first validation after step 0 at or below it")
w("")
w("| method | settings (tuned on seed $tuned_on) | bytes sent, replica 0 | DDP f32 / this | DDP bf16 / this | peak offered Mbit/s, replica 0 (1 s) | wall s (median) | wall s, each round | s to target | / DDP f32 | / DDP bf16 | final val loss | each round | vs DDP f32 | vs DDP bf16 |")
w("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
settings = {"ddp": "f32 gradients, f32 activations", "ddp_bf16": "data_parallel.wire: bf16, pipeline.wire: bf16"}
base = {k: rows.get(k) for k in ("ddp", "ddp_bf16")}
for m, r in rows.items():
    cells = [m, settings.get(m, tuned.get(m, "")), f"{r['sent']:,}"]
    cells += [ratio(base[k]["sent"], r["sent"]) if base[k] else "-" for k in ("ddp", "ddp_bf16")]
    cells += [f"{r['peak']:.2f}", f"{r['wall']:.1f}", " ".join(f"{x:.1f}" for x in r["walls"])]
    cells.append(f"{r['tt']:.1f}" if r["tt"] is not None else "not reached")
    cells += [f"{r['tt'] / base[k]['tt']:.3f}" if r["tt"] is not None and base[k] and base[k]["tt"] else "-" for k in ("ddp", "ddp_bf16")]
    cells += [f"{r['val']:.4f}", " ".join(f"{x:.4f}" for x in r["vals"])]
    cells += [f"{100 * (r['val'] / base[k]['val'] - 1):+.2f}%" if base[k] else "-" for k in ("ddp", "ddp_bf16")]
    w("| " + " | ".join(cells) + " |")
w("")
w("Bytes are what replica 0's all-reduce or sync actors sent (trace send spans); the same every round.")
text = "\n".join(lines) + "\n"
open(results, "w").write(text)
print(text)
with open(f"{out}/summary.csv", "w") as csv:
    csv.write("method,bytes_sent,peak_mbit_s,wall_s_median,to_target_s_median,final_val_loss_median\n")
    for m, r in rows.items():
        csv.write(f"{m},{r['sent']},{r['peak']:.3f},{r['wall']:.2f},{r['tt'] if r['tt'] is not None else ''},{r['val']}\n")
# The plot: validation loss against wall time, round 1, one line per configuration (log time axis).
colors = ["#000000", "#7f7f7f", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"]
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
    print(f"plot: {out}/local_update.svg, numbers: {out}/summary.csv, table: {results}")
PY
