#!/bin/bash
# On the GPU machine, from the repository root, after deploy/gpu/pack.sh here:
# every GPU test, the tiny example with its stages on the GPU, and (with BENCH=1)
# the GPT-2 124M benchmark beside PyTorch. Full logs go to $OUT.
#   run(command="OUT=$OUT BENCH=1 deploy/gpu/run.sh", carry=[".gpu-carry", "data"])
C=$(pwd)/.gpu-carry
OUT=${OUT:-/tmp}
lib_dir() { dirname "$(find /usr/local /opt /usr/lib -name "$1" 2>/dev/null | head -1)"; }
export LD_LIBRARY_PATH=$C/lib:$(lib_dir 'libcublasLt.so.13*'):$(lib_dir 'libnccl.so.2*'):/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
fail=0
for t in "$C"/bin/test_*; do
  name=$(basename "$t")
  timeout 300 "$t" > "$OUT/$name.log" 2>&1; rc=$?
  [[ $rc -ne 0 ]] && fail=1
  echo "=== $name rc=$rc"
  grep -E "ERROR|FAILED|is NOT correct|exception|skipped|\[doctest\] (test cases|assertions)" "$OUT/$name.log" | head -20
done
echo "=== tiny example, 300 steps, stages on cuda"
timeout 300 "$C/bin/troupe" run examples/tiny-gpt.yaml --set pipeline.device=cuda --set train.steps=300 \
  --no-trace > "$OUT/tiny_cuda.log" 2>&1; rc=$?
tail -8 "$OUT/tiny_cuda.log"
[[ $rc -ne 0 ]] && fail=1
if [[ -n ${BENCH:-} ]]; then
  echo "=== GPT-2 124M, batch ${BATCH:=16}x1024: troupe, then PyTorch eager and torch.compile"
  timeout 150 "$C/bin/bench_gpt_cuda" "$BATCH" 10 "$OUT/troupe.csv" 2>&1 | tee "$OUT/bench.log"
  timeout 300 python3 ops/cuda/bench_gpt2_torch.py --batch "$BATCH" --steps 10 --troupe "$OUT/troupe.csv" 2>&1 |
    grep -v Warning | tee "$OUT/torch.log"
fi
skipped=$(cat "$OUT"/test_*.log | grep -c "GPU check skipped")
echo "=== every test passed: $([[ $fail == 0 ]] && echo yes || echo NO); GPU checks skipped: $skipped"
exit $fail
