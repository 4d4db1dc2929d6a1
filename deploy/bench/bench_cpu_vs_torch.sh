#!/usr/bin/env bash
# troupe against PyTorch on the CPU (issue 24, Done-when 2): the same GPT trained
# with one thread each, forward + backward + AdamW per step, for config A (4 layers
# d128 ctx64 batch 12) and B (4 layers d256 ctx128 batch 8). The two sides run in
# alternating rounds (troupe first in odd rounds, PyTorch first in even ones), so
# load from other work falls on both; each round also measures a single-thread
# 1536^3 OpenBLAS sgemm, this core's physical limit. The table (medians over rounds,
# with the CPU, kernel target, BLAS core, load and commit) is printed and written to
# deploy/results/cpu_vs_torch_<kernel target>.md.
#   deploy/bench/bench_cpu_vs_torch.sh [--rounds N] [--runs N] [--build DIR] [--out FILE]
# TROUPE_CPU_TARGET=avx2 (or sse4, baseline) caps troupe's kernels as on a CPU
# without AVX-512; PyTorch and OpenBLAS still choose their own kernels.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
rounds=3 runs=5 build=$root/build out=""
usage="usage: $0 [--rounds N (>= 3)] [--runs N] [--build DIR] [--out FILE]"
while (($#)); do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) echo "$usage"; exit 0 ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
((rounds >= 3)) || { echo "bench_cpu_vs_torch: at least 3 rounds (medians of fewer mean little)" >&2; exit 2; }
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "bench_cpu_vs_torch: installing PyTorch (deploy/setup.sh --bench)" >&2
  "$root/deploy/setup.sh" --bench
fi
[[ -f $build/build.ninja || -f $build/Makefile ]] ||
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target bench_gpt >/dev/null
bench=$build/ops/bench_gpt
# One thread each: troupe's sgemm is single-threaded by default; PyTorch sets its own
# (torch.set_num_threads(1)), these keep OpenMP and OpenBLAS pools from growing.
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 TROUPE_BLAS_THREADS=1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bench" --kernels > "$tmp/kernels.txt"  # refuses a TROUPE_CPU_TARGET this CPU does not run
env -u TROUPE_CPU_TARGET "$bench" --kernels > "$tmp/kernels_best.txt"
/usr/bin/python3 - > "$tmp/torch.txt" <<'PY'
import torch
cap = [l.split(":", 1)[1].strip() for l in torch.__config__.show().splitlines() if "CPU capability" in l]
print("torch_version", torch.__version__)
print("torch_capability", cap[0] if cap else "unknown")
PY
{
  echo "cpu_model $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)"
  echo "cpu_simd $(grep -m1 -o -w -E 'avx512f|avx512_bf16|avx2|fma|sse4_2' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "load_before $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "commit $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- . ':!deploy/results' || echo '+changes')"
  echo "date $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "cpu_target_env ${TROUPE_CPU_TARGET:-}"
  # Caps a caller may give both sides on the command line (this script sets none):
  # OpenBLAS's core, PyTorch's ATen and oneDNN instruction sets.
  echo "baseline_env $( (env | grep -E '^(OPENBLAS_CORE|ATEN_CPU_CAPABILITY|DNNL_MAX_CPU_ISA)' || echo none) | sort | tr '\n' ' ')"
  echo "rounds $rounds"
  echo "runs $runs"
} > "$tmp/machine.txt"

declare -A torch_args=([A]="4 128 4 64 12 256" [B]="4 256 4 128 8 256")
torch_side() {  # CONFIG STEPS_PER_RUN
  /usr/bin/python3 "$root/tests/torch/bench_gpt.py" ${torch_args[$1]} "$runs" "$2" |
    sed -n "s/^torch_ms_per_step /torch $1 /p"
}
troupe_side() {  # CONFIG
  "$bench" --round "$1" --runs "$runs" > "$tmp/round.txt"
  steps[$1]=$(sed -n 's/.* steps_per_run \([0-9]*\)$/\1/p' "$tmp/round.txt")
  echo "flop $1 $(sed -n 's/^step_flop //p' "$tmp/round.txt")"
  sed -n "s/^troupe_ms_per_step /troupe $1 /p" "$tmp/round.txt"
}
declare -A steps=()
for ((r = 1; r <= rounds; r++)); do
  echo "round $r of $rounds ..." >&2
  echo "sgemm $("$bench" --sgemm 1536 | cut -d' ' -f3-4)" >> "$tmp/rows.txt"
  for c in A B; do
    if ((r % 2)) || [[ -z ${steps[$c]:-} ]]; then
      troupe_side "$c" >> "$tmp/rows.txt"
      torch_side "$c" "${steps[$c]}" >> "$tmp/rows.txt"
    else
      torch_side "$c" "${steps[$c]}" >> "$tmp/rows.txt"
      troupe_side "$c" >> "$tmp/rows.txt"
    fi
  done
done
echo "load_after $(cut -d' ' -f1-3 /proc/loadavg)" >> "$tmp/machine.txt"

target=$(sed -n 's/^kernel_target //p' "$tmp/kernels.txt")
out=${out:-$root/deploy/results/cpu_vs_torch_$target.md}
/usr/bin/python3 - "$tmp" "$out" <<'PY'
import statistics, sys
tmp, out = sys.argv[1], sys.argv[2]
def kv(name):
    d = {}
    for line in open(f"{tmp}/{name}"):
        k, _, v = line.rstrip("\n").partition(" ")
        d[k] = v
    return d
m, k, best, t = kv("machine.txt"), kv("kernels.txt"), kv("kernels_best.txt"), kv("torch.txt")
rows = [l.split() for l in open(f"{tmp}/rows.txt")]
sgemm_blas = [float(r[1]) for r in rows if r[0] == "sgemm"]
sgemm_own = [float(r[2]) for r in rows if r[0] == "sgemm"]
sgemm = [max(a, b) for a, b in zip(sgemm_blas, sgemm_own)]
peak = statistics.median(sgemm)
med = lambda side, c, i: statistics.median(float(r[i]) for r in rows if r[0] == side and r[1] == c)
each = lambda side, c: " ".join(f"{float(r[2]):.1f}" for r in rows if r[0] == side and r[1] == c)
flop = {r[1]: float(r[2]) for r in rows if r[0] == "flop"}
target = k["kernel_target"]
capped = m.get("cpu_target_env", "")
target_text = f"**{target}**" + (f" (capped by TROUPE_CPU_TARGET={capped}; this CPU's best is {best['kernel_target']})"
                                  if target != best["kernel_target"] or capped else " (the best this CPU runs)")
lines = [
    f"# troupe vs PyTorch on the CPU, one thread each: kernel target {target}", "",
    "`deploy/bench/bench_cpu_vs_torch.sh` (issue 24): the same GPT trained with one thread each, forward + backward + "
    "AdamW per step (troupe: `bench_gpt --round`, ops/gpt.bench.cpp; PyTorch: tests/torch/bench_gpt.py), "
    f"{m['rounds']} alternating rounds (troupe first in odd rounds, PyTorch first in even ones), each side "
    f"the median of {m['runs']} timed runs per round after 3 warm-up steps; the table gives medians over rounds of "
    "CPU time per step (process CPU time: not inflated by other jobs on the shared cores; wall time in brackets).", "",
    f"- CPU: {m['cpu_model']} ({m['cpu_simd'].strip()})",
    f"- troupe kernels: {target_text}; OpenBLAS core {k['blas_core']} ({k['kernel_summary']})",
    f"- PyTorch {t['torch_version']} (Debian python3-torch, /usr/bin/python3), ATen CPU capability {t['torch_capability']}",
    f"- physical limit: the faster single-thread 1536³ sgemm of OpenBLAS (median {statistics.median(sgemm_blas):.1f} "
    f"GFLOP/s) and troupe's own kernel (median {statistics.median(sgemm_own):.1f}), per round: median **{peak:.1f} "
    f"GFLOP/s** (rounds: {', '.join(f'{s:.1f}' for s in sgemm)}), measured in this run",
    f"- environment given to both sides: {m['baseline_env']}",
    f"- load average (1/5/15 min): {m['load_before']} before, {m['load_after']} after (2 cores)",
    f"- commit {m['commit']}, {m['date']}", "",
    "| config | troupe ms/step | PyTorch ms/step | troupe speed ÷ PyTorch's | troupe GFLOP/s (of sgemm) | PyTorch GFLOP/s (of sgemm) |",
    "|---|---|---|---|---|---|",
]
names = {"A": "A: 4L d128 ctx64 b12", "B": "B: 4L d256 ctx128 b8"}
for c in ("A", "B"):
    tr, th = med("troupe", c, 2), med("torch", c, 2)
    trw, thw = med("troupe", c, 3), med("torch", c, 3)
    gt, gp = flop[c] / tr / 1e6, flop[c] / th / 1e6
    lines.append(f"| {names[c]} | {tr:.2f} [{trw:.2f}] | {th:.2f} [{thw:.2f}] | **{th / tr:.2f}×** | "
                 f"{gt:.1f} ({100 * gt / peak:.0f}%) | {gp:.1f} ({100 * gp / peak:.0f}%) |")
lines += ["", "Per round (CPU ms/step, in round order):", ""]
for c in ("A", "B"):
    lines.append(f"- {c}: troupe {each('troupe', c)}; PyTorch {each('torch', c)}")
lines += ["", f"GFLOP per step (forward + backward, ops::gpt_step_flops): "
          + ", ".join(f"{c} {flop[c] / 1e9:.3f}" for c in ("A", "B")) + "."]
if k["blas_core"] in ("Prescott", "Core2", "Nehalem", "Katmai", "Coppermine", "Northwood", "Banias", "Atom", "unknown"):
    lines += ["", f"OpenBLAS chose the {k['blas_core']} core: a generic kernel it falls back to for a CPU model it "
              f"does not know (this one: {m['cpu_model']}), far below what the vector units can do, so the limit "
              "above is troupe's own sgemm. PyTorch's BLAS is the same OpenBLAS (libblas.so.3) and is slowed by it "
              "too; OpenBLAS's core-type variable given on the command line, for both sides, shows PyTorch at its "
              "best (this script sets none; README's CPU section has the command)."]
if target != best["kernel_target"] and "ATEN_CPU_CAPABILITY" not in m["baseline_env"]:
    lines += ["", f"This row is pessimistic for troupe: TROUPE_CPU_TARGET caps only troupe's own kernels "
              f"(Highway) at {target}. PyTorch is not capped (its ATen kernels run at {t['torch_capability']} "
              f"and oneDNN picks its own instructions, AVX-512 where the CPU has it), nor is OpenBLAS under both "
              f"sides' large products (core {k['blas_core']}). A CPU that really lacks AVX-512 slows PyTorch's "
              f"side too."]
text = "\n".join(lines) + "\n"
open(out, "w").write(text)
print(text)
print(f"written to {out}")
PY
