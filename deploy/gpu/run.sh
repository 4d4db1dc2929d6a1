#!/bin/bash
# On the GPU machine, from the repository root, after deploy/gpu/pack.sh here:
# every GPU test, the tiny example with its stages on the GPU beside the same run
# on the CPU (the loss curves to compare), and (with BENCH=1) the GPT-2 124M
# benchmark beside PyTorch. Full logs go to $OUT.
#   run(command="OUT=$OUT BENCH=1 deploy/gpu/run.sh", carry=[".gpu-carry"])
C=$(pwd)/.gpu-carry
OUT=${OUT:-/tmp}
if [[ -f $C/pack.tar.xz ]]; then
  tar -C "$C" -xJf "$C/pack.tar.xz" || exit 1
  mkdir -p data && { [[ -s data/kjv.txt ]] || cp "$C/data/kjv.txt" data/; }
fi
lib_dir() { dirname "$(find /usr/local /opt /usr/lib -name "$1" 2>/dev/null | head -1)"; }
export LD_LIBRARY_PATH=$C/lib:$(lib_dir 'libcublasLt.so.13*'):$(lib_dir 'libnccl.so.2*'):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "host CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) ($(nproc) cores)"
"$C/bin/troupe" version
# The CPU curve the CUDA run must follow, on cores the GPU checks leave idle.
(taskset -c 8-15 "$C/bin/troupe" run examples/tiny-gpt.yaml --set train.steps=300 --no-trace \
  --summary-json "$OUT/tiny_cpu.json" > "$OUT/tiny_cpu.log" 2>&1; echo "rc=$?" >> "$OUT/tiny_cpu.log") &
cpu_ref=$!
fail=0
# Every test's output goes into one file (the device tool returns at most 8 files).
for t in "$C"/bin/test_*; do
  name=$(basename "$t")
  timeout 120 "$t" > "/tmp/$name.log" 2>&1; rc=$?
  [[ $rc -ne 0 ]] && fail=1
  { echo "=== $name rc=$rc"; cat "/tmp/$name.log"; } >> "$OUT/tests.log"
  echo "=== $name rc=$rc"
  grep -E "ERROR|FAILED|is NOT correct|exception|skipped|\[doctest\] (test cases|assertions)" "/tmp/$name.log" | head -20
done
echo "=== tiny example, 300 steps, stages on cuda"
timeout 240 "$C/bin/troupe" run examples/tiny-gpt.yaml --set pipeline.device=cuda --set train.steps=300 \
  --no-trace --summary-json "$OUT/tiny_cuda.json" > "$OUT/tiny_cuda.log" 2>&1; rc=$?
tail -8 "$OUT/tiny_cuda.log"
[[ $rc -ne 0 ]] && fail=1
wait $cpu_ref
echo "=== the same 300 steps on the CPU"
tail -4 "$OUT/tiny_cpu.log"
grep -h "val" "$OUT/tiny_cpu.log" "$OUT/tiny_cuda.log" | head -8
if [[ -n ${BENCH:-} ]]; then
  echo "=== GPT-2 124M, batch ${BATCH:=16}x1024: troupe, then PyTorch eager and torch.compile"
  timeout 150 "$C/bin/bench_gpt_cuda" "$BATCH" 10 "$OUT/troupe.csv" 2>&1 | tee "$OUT/bench.log"
  timeout 300 python3 ops/cuda/bench_gpt2_torch.py --batch "$BATCH" --steps 10 --troupe "$OUT/troupe.csv" 2>&1 |
    grep -v Warning | tee "$OUT/torch.log"
fi
skipped=$(grep -c "GPU check skipped" "$OUT/tests.log")
echo "=== every test passed: $([[ $fail == 0 ]] && echo yes || echo NO); GPU checks skipped: $skipped"
exit $fail
