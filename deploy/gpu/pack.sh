#!/bin/bash
# Packs what the GPU checks and the GPT-2 benchmark need into .gpu-carry/ (git
# ignored) for the `device` tool's machine, whose image has CUDA but none of
# troupe's Debian libraries: every gpu-labelled test program, troupe,
# bench_gpt_cuda, troupe's libraries, the system libraries they load and the
# corpus, in one xz archive (what travels is capped at 64 MiB; unpacked it is
# about 60 MiB, packed about a third of that).
#   B=build-gpu deploy/gpu/pack.sh      then, on the device: deploy/gpu/run.sh
set -euo pipefail
R=$(cd "$(dirname "$0")/../.." && pwd)
B=${B:-$R/build}
C=$R/.gpu-carry
rm -rf "$C"
mkdir -p "$C/bin" "$C/lib"
# The gpu-labelled tests as CTest lists them (each is one program).
(cd "$B" && ctest -N -L gpu) | awk '/Test +#/ {print $3}' | while read -r name; do
  prog=$(find "$B" -maxdepth 2 -type f -executable -name "test_${name//./_}" | head -1)
  [[ -n $prog ]] && cp "$prog" "$C/bin/"
done
cp "$B/deploy/troupe" "$B/ops/bench_gpt_cuda" "$B/kernels/bench_cuda_kernels" "$C/bin/"
cp "$B"/*/libtroupe_*.so "$C/lib/"
for f in "$C"/bin/* "$C"/lib/*.so; do ldd "$f"; done | awk '$3 ~ /^\/(usr\/)?lib\/x86_64/ {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*|libpthread|libdl|librt)\.so' | xargs -r -I{} cp -L {} "$C/lib/"
strip --strip-unneeded "$C"/bin/* "$C"/lib/*.so* 2>/dev/null || true
mkdir -p "$C/data"
cp "$R/data/kjv.txt" "$C/data/"
tar -C "$C" -cJf "$C/pack.tar.xz" bin lib data
rm -rf "$C/bin" "$C/lib" "$C/data"
ls -la "$C"
