#!/usr/bin/env bash
# Healing against checkpoint-restart (#26 item 5): the main example's model
# (examples/tiny-gpt.yaml: 4 layers, d_model 128) as 4 DiLoCo replicas (or,
# with --method ddp, DDP replicas; --method zero, ZeRO-1 replicas whose shards
# mirror each other's slices), one stage each, on 4 node processes of this
# machine (`troupe launch`, pinned to
# its cores). A seeded schedule kills one node (1, 2 or 3: node 0 also runs the
# loader) every --interval seconds; the node comes back --down seconds later
# (cluster.restart_delay). Three ways, the same graph otherwise:
#   healing   the run goes on without the replica; launch starts the node again,
#             and the replica rejoins with a live replica's state
#   restart   cluster.elastic: false: the whole launch stops and resumes from its
#             latest checkpoint, taken every K steps (K chosen by --tune)
#   clean     no failures
# Each round runs all three, the order rotated round by round; the table has
# the medians of the time to step --steps and of the final validation loss, and
# the plot validation loss against wall time (round 1). `--tune` runs the
# restart way once per K of the grid on --tune-seed, and writes the fastest K to
# --params; a report run refuses a K tuned on its own seed.
#   deploy/bench/bench_healing.sh [--method diloco|ddp|zero] [--tune] [--steps S] [--interval N] [--down D] [--rounds R]
#       [--seed X] [--tune-seed Y] [--params FILE] [--results FILE] [--out DIR] [--build DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
exec python3 - "$here" "$@" <<'PY'
import argparse, json, math, os, random, re, signal, statistics, subprocess, sys, threading, time

here = sys.argv[1]
p = argparse.ArgumentParser(prog="bench_healing.sh")
p.add_argument("--tune", action="store_true")
p.add_argument("--method", choices=["diloco", "ddp", "zero"], default="diloco")
p.add_argument("--steps", type=int, default=800)
p.add_argument("--interval", type=float, default=60.0)
p.add_argument("--down", type=float, default=5.0)
p.add_argument("--rounds", type=int, default=3)
p.add_argument("--seed", type=int, default=3)
p.add_argument("--tune-seed", type=int, default=2)
p.add_argument("--k-grid", default="50,100,200")
p.add_argument("--params", default=None)   # default: deploy/results/healing[_ddp]_tuned.txt
p.add_argument("--results", default=None)  # default: deploy/results/healing[_ddp].md
p.add_argument("--out", default="runs/bench_healing")
p.add_argument("--build", default="build")
a = p.parse_args(sys.argv[2:])
suffix = "" if a.method == "diloco" else "_" + a.method
a.params = a.params or f"deploy/results/healing{suffix}_tuned.txt"
a.results = a.results or f"deploy/results/healing{suffix}.md"
def die(msg):
    print(f"bench_healing: {msg}", file=sys.stderr)
    sys.exit(2)
if a.steps < 100 or a.interval <= 0 or a.down < 0:
    die("--steps at least 100, --interval above 0, --down at least 0")
if not a.tune and a.rounds < 3:
    die("at least 3 rounds (medians of fewer mean little)")
if a.seed == a.tune_seed:
    die("--seed and --tune-seed must differ (never tune on the run reported)")
troupe = os.path.join(here, a.build, "deploy", "troupe")
if not os.access(troupe, os.X_OK):
    die(f"build first ({troupe})")
out = os.path.abspath(a.out)
os.makedirs(out, exist_ok=True)
H = 20  # DiLoCo's inner steps
eval_every = max(a.steps // 15, 1)

def graph(mode, seed, k):
    restart = "" if mode == "clean" else f", restart: 1000, restart_delay: {a.down:g}"
    elastic = ", elastic: false" if mode == "restart" else ""
    return (f"model:    {{layers: 4, d_model: 128, heads: 4, context: 64, vocab: 256}}\n"
            f"data:     {{corpus: {here}/data/kjv.txt, batch: 6, seed: {seed}}}\n"
            f"train:    {{steps: {a.steps}, lr: 1.0e-3, weight_decay: 0.1, warmup: 100, eval_every: {eval_every}, eval_batches: 8}}\n"
            f"pipeline: {{stages: 1, microbatches: 2}}\n"
            f"data_parallel: {{replicas: 4{', zero: 1' if a.method == 'zero' else ''}}}\n"
            + (f"local_update: {{algorithm: diloco, sync_every: {H}}}\n" if a.method == "diloco" else "") +
            f"cluster:  {{launcher: local, nodes: 4, pin: true{restart}{elastic}}}\n"
            f"checkpoint: {{dir: ck, every: {k if mode == 'restart' else a.steps}, keep: 2}}\n")

def node_pids(node):
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            cmd = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        words = [w.decode(errors="replace") for w in cmd]
        if len(words) > 4 and words[1] == "node" and "--node" in words and words[words.index("--node") + 1] == str(node) \
                and words[0] == troupe:
            found.append(int(d))
    return found

def kernel_target(d):  # a launch's summary does not carry it; `troupe check --json` does
    r = subprocess.run([troupe, "check", "graph.yaml", "--json"], cwd=d, capture_output=True, text=True)
    try:
        return json.loads(r.stdout).get("kernel_target", "?")
    except ValueError:
        return "?"

def run(name, mode, seed, k, schedule_seed):
    d = os.path.join(out, name)
    subprocess.run(["rm", "-rf", d], check=True)
    os.makedirs(d)
    open(os.path.join(d, "graph.yaml"), "w").write(graph(mode, seed, k))
    log = open(os.path.join(d, "log.txt"), "w")
    rng = random.Random(schedule_seed)
    start = time.monotonic()
    proc = subprocess.Popen([troupe, "launch", "graph.yaml", "--no-trace", "--summary-json", "summary.json"], cwd=d,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    kills, curve = [], []
    def read():  # each line stamped with the seconds since the start
        for line in proc.stdout:
            now = time.monotonic() - start
            log.write(f"{now:9.3f} {line}")
            m = re.search(r"validation after step (\d+): loss ([0-9.]+)", line)
            if m:
                curve.append((now, int(m.group(1)), float(m.group(2))))
    reader = threading.Thread(target=read)
    reader.start()
    next_kill = a.interval
    while proc.poll() is None:
        now = time.monotonic() - start
        if mode != "clean" and now >= next_kill:
            node = rng.choice([1, 2, 3])
            pids = node_pids(node)
            if len(pids) == 1:
                os.kill(pids[0], signal.SIGKILL)
                kills.append((round(now, 1), node))
            log.write(f"{now:9.3f} bench: kill node {node}: {'done' if len(pids) == 1 else 'not running'}\n")
            next_kill += a.interval
        time.sleep(0.05)
    reader.join()
    wall = time.monotonic() - start
    log.close()
    summary = {}
    try:
        summary = json.load(open(os.path.join(d, "summary.json")))
    except (OSError, ValueError):
        pass
    r = {"name": name, "mode": mode, "code": proc.returncode, "wall": wall, "kills": kills, "curve": curve,
         "val": summary.get("val_loss"), "kernel": kernel_target(d)}
    print(f"{name}: exit {r['code']}, {wall:.1f} s, {len(kills)} kills, val loss {r['val']}", file=sys.stderr)
    if r["code"] != 0:
        print(open(os.path.join(d, "log.txt")).read()[-3000:], file=sys.stderr)
        die(f"{name} failed")
    json.dump(r, open(os.path.join(d, "result.json"), "w"))
    return r

cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown CPU")
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
if subprocess.run(["git", "diff", "--quiet", "HEAD", "--", ".", ":!deploy/results"]).returncode:
    commit += "+changes"
load_before = open("/proc/loadavg").read().split()[:3]
print(f"machine: {cpu}, {os.cpu_count()} cores, load {' '.join(load_before)}; commit {commit}; {a.steps} steps, "
      f"a kill every {a.interval:g} s, down {a.down:g} s", file=sys.stderr)

if a.tune:
    best = None
    for k in [int(x) for x in a.k_grid.split(",")]:
        r = run(f"tune_k{k}", "restart", a.tune_seed, k, a.tune_seed)
        if best is None or r["wall"] < best[1]:
            best = (k, r["wall"])
    os.makedirs(os.path.dirname(a.params) or ".", exist_ok=True)
    open(a.params, "w").write(f"k={best[0]}\ntuned_on={a.tune_seed}\nsteps={a.steps}\ninterval={a.interval:g}\n"
                              f"down={a.down:g}\ncommit={commit}\n")
    print(f"checkpoint every {best[0]} steps restarts fastest ({best[1]:.1f} s) on seed {a.tune_seed} -> {a.params}")
    sys.exit(0)

try:
    tuned = dict(l.strip().split("=", 1) for l in open(a.params) if "=" in l)
except OSError:
    die(f"no {a.params}: run with --tune first (K is chosen on another seed)")
if int(tuned["tuned_on"]) == a.seed:
    die(f"{a.params} was tuned on seed {a.seed}, the seed reported: tune on another")
K = int(tuned["k"])
modes = ["healing", "restart", "clean"]
runs = {m: [] for m in modes}
for rnd in range(a.rounds):
    order = modes[rnd % 3:] + modes[:rnd % 3]
    for m in order:  # the same kill schedule for both ways that fail
        runs[m].append(run(f"{m}.r{rnd + 1}", m, a.seed, K, 1000 + rnd))
load_after = open("/proc/loadavg").read().split()[:3]

med = lambda xs: statistics.median(xs)
clean_val = med([r["val"] for r in runs["clean"]])
lines = [f"# Healing against checkpoint-restart ({a.steps} steps, a node killed every {a.interval:g} s, down {a.down:g} s)", "",
         f"`deploy/bench/bench_healing.sh --method {a.method} --steps {a.steps} --interval {a.interval:g} --down {a.down:g} --rounds {a.rounds} --seed {a.seed}`", "",
         f"- machine: {cpu}, {os.cpu_count()} cores; kernel target {runs['clean'][0]['kernel']}",
         f"- load (1, 5, 15 min): {' '.join(load_before)} before, {' '.join(load_after)} after",
         f"- commit {commit}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
         f"- the main example's model as 4 " + (f"DiLoCo replicas (H = {H})" if a.method == "diloco" else "DDP replicas (direct bucket exchanges)" if a.method == "ddp" else "ZeRO-1 replicas (direct bucket exchanges, each slice on two shards)") + ", one stage and one node process each, pinned; "
         f"kills pick node 1, 2 or 3 (seeded; node 0 also runs the loader); checkpoint-restart saves every K = {K} steps "
         f"(the fastest of {a.k_grid} on seed {tuned['tuned_on']}); healing and clean save only the last step", "",
         "| way | s to step %d (median) | each round | / healing | kills, each round | final val loss (median) | each round | vs clean |" % a.steps,
         "|---|---|---|---|---|---|---|---|"]
heal_wall = med([r["wall"] for r in runs["healing"]])
for m in modes:
    rs = runs[m]
    w = med([r["wall"] for r in rs])
    v = med([r["val"] for r in rs])
    walls = " ".join("%.1f" % r["wall"] for r in rs)
    kills = " ".join(str(len(r["kills"])) for r in rs)
    vals = " ".join("%.4f" % r["val"] for r in rs)
    lines.append(f"| {m} | {w:.1f} | {walls} | {w / heal_wall:.2f} | {kills} | {v:.4f} | {vals} | {100 * (v / clean_val - 1):+.2f}% |")
lines += ["", "Time to step S is the launch's wall time, start to exit (it exits after the last step). Healing's "
          "replica is out while its node is down and until it rejoins (the replicas left take its microbatches "
          "meanwhile, `cluster.batch_on_loss: keep`, so every step trains on the same sequences); "
          "checkpoint-restart redoes the steps since its last checkpoint and starts every node again."]
text = "\n".join(lines) + "\n"
open(a.results, "w").write(text)
print(text)
base = os.path.splitext(a.results)[0]
with open(base + ".csv", "w") as csv:
    csv.write("way,round,wall_s,kills,final_val_loss\n")
    for m in modes:
        for i, r in enumerate(runs[m]):
            csv.write(f"{m},{i + 1},{r['wall']:.2f},{len(r['kills'])},{r['val']}\n")
# The plot: validation loss against wall time, round 1, one line per way; kills marked.
W, Ht, L, B = 720, 440, 70, 50
pts = [(t, l) for m in modes for t, _, l in runs[m][0]["curve"]]
t1 = max(t for t, _ in pts)
l0, l1 = min(l for _, l in pts), max(l for _, l in pts)
x = lambda t: L + t / t1 * (W - L - 170)
y = lambda l: 20 + (l1 - l) / max(l1 - l0, 1e-9) * (Ht - 20 - B)
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{Ht}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{Ht}" fill="white"/>',
       f'<line x1="{L}" y1="{Ht-B}" x2="{W-170}" y2="{Ht-B}" stroke="black"/><line x1="{L}" y1="20" x2="{L}" y2="{Ht-B}" stroke="black"/>',
       f'<text x="{(W-170+L)/2}" y="{Ht-12}" text-anchor="middle">wall time, s</text>',
       f'<text x="16" y="{(Ht-B)/2}" transform="rotate(-90 16 {(Ht-B)/2})" text-anchor="middle">validation loss (nats/byte)</text>']
step = 10 ** math.floor(math.log10(t1 / 2)) if t1 > 2 else 1
for i in range(int(t1 // step) + 1):
    t = i * step
    svg.append(f'<line x1="{x(t):.1f}" y1="{Ht-B}" x2="{x(t):.1f}" y2="{Ht-B+5}" stroke="black"/><text x="{x(t):.1f}" y="{Ht-B+18}" text-anchor="middle">{t:g}</text>')
for i in range(6):
    l = l0 + (l1 - l0) * i / 5
    svg.append(f'<text x="{L-6}" y="{y(l)+4:.1f}" text-anchor="end">{l:.2f}</text><line x1="{L-4}" y1="{y(l):.1f}" x2="{L}" y2="{y(l):.1f}" stroke="black"/>')
colors = {"healing": "#2ca02c", "restart": "#d62728", "clean": "#000000"}
for i, m in enumerate(modes):
    r = runs[m][0]
    svg.append(f'<polyline fill="none" stroke="{colors[m]}" stroke-width="2" points="{" ".join(f"{x(t):.1f},{y(l):.1f}" for t, _, l in r["curve"])}"/>')
    for t, node in r["kills"]:
        svg.append(f'<line x1="{x(t):.1f}" y1="20" x2="{x(t):.1f}" y2="{Ht-B}" stroke="{colors[m]}" stroke-opacity="0.3" stroke-dasharray="2 3"/>')
    svg.append(f'<text x="{W-160}" y="{40 + 18 * i}" fill="{colors[m]}">{m}</text>')
svg.append(f'<text x="{W-160}" y="{40 + 18 * 3}" fill="#555">dashed: kills</text>')
svg.append("</svg>")
open(base + ".svg", "w").write("\n".join(svg))
print(f"plot: {base}.svg, numbers: {base}.csv, table: {a.results}")
PY
