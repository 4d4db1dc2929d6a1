// Training-step throughput of the GPU GPT at GPT-2 124M size (12 layers, 12 heads,
// d_model 768, context 1024, vocab 50257) on random tokens: tokens/s and MFU.
//
//   bench_gpt_cuda [batch=16] [timed_steps=10] [result_file]
//
// FLOPs per step: gpt_step_flops = 6·(12·L·C² + V·C)·tokens + 12·L·C·T·tokens
// (matrix products forward + backward, causal attention counted in full), over
// the H100 SXM's dense bf16 peak of 989 TFLOP/s.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "ops/adamw.hpp"
#include "ops/cuda/gpt_cuda.hpp"

using namespace troupe;
using namespace troupe::ops;

namespace {
#define BENCH_OK(expr)                                                                                                 \
  do {                                                                                                                 \
    auto st_ = (expr);                                                                                                 \
    if (!st_.ok()) {                                                                                                   \
      std::fprintf(stderr, "bench_gpt_cuda: %s\n", st_.message().c_str());                                             \
      return 1;                                                                                                        \
    }                                                                                                                  \
  } while (0)
constexpr double peak_flops = 989e12;
} // namespace

int main(int argc, char** argv) {
  const int batch = argc > 1 ? std::atoi(argv[1]) : 16;
  const int timed = argc > 2 ? std::atoi(argv[2]) : 10;
  const char* result_file = argc > 3 ? argv[3] : nullptr;
  if (!gpu::cuda_available()) {
    std::printf("bench_gpt_cuda: no CUDA device\n");
    return 0;
  }
  gpt_config cfg;
  cfg.layers = 12, cfg.heads = 12, cfg.d_model = 768, cfg.context = 1024, cfg.vocab = 50257;
  const int T = cfg.context;
  gpt_cuda model(cfg, 0, cfg.layers, batch);
  auto t0 = std::chrono::steady_clock::now();
  BENCH_OK(model.init());
  adamw opt(model.params(), {}, model.stream());
  // AdamW on the f32 masters, then their bf16 copy: what a stage's update does.
  auto update = [&]() -> gpu::status {
    try {
      opt.step(model.params(), model.grads(), 3e-4f);
    } catch (const std::exception& e) {
      return gpu::status::failure(e.what());
    }
    return model.params_updated();
  };
  std::printf("init (host draw + upload) %.1f s, %lld parameters\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
              (long long)model.param_count());

  std::mt19937 rng(42);
  auto tokens = tensor_handle::empty({batch, T}, dtype::i32), targets = tensor_handle::empty({batch, T}, dtype::i32);
  for (long i = 0; i < tokens.numel(); ++i) {
    tokens.data<std::int32_t>()[i] = std::int32_t(rng() % unsigned(cfg.vocab));
    targets.data<std::int32_t>()[i] = std::int32_t(rng() % unsigned(cfg.vocab));
  }
  auto dtok = tensor_handle::empty({batch, T}, dtype::i32, device::cuda(0));
  auto dtgt = tensor_handle::empty({batch, T}, dtype::i32, device::cuda(0));
  if (cudaMemcpy(dtok.raw(), tokens.raw(), tokens.nbytes(), cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(dtgt.raw(), targets.raw(), targets.nbytes(), cudaMemcpyHostToDevice) != cudaSuccess) {
    std::fprintf(stderr, "bench_gpt_cuda: token upload failed\n");
    return 1;
  }

  cudaEvent_t start, fwd_done, bwd_done, stop;
  for (auto* e : {&start, &fwd_done, &bwd_done, &stop})
    cudaEventCreate(e);
  const double tokens_per_step = double(batch) * T;
  const double flops = gpt_step_flops(cfg, batch, T);
  // Median step time (seconds) of `timed` steps after 3 warm-up steps; < 0 on failure.
  auto measure = [&](bool fused, const char* label) -> double {
    model.set_fused_epilogues(fused);
    std::vector<double> ms, fwd_ms, bwd_ms;
    float first_loss = 0, loss = 0;
    for (int s = 0; s < 3 + timed; ++s) {
      cudaEventRecord(start, model.stream());
      tensor_handle out, dx;
      gpu::status st;
      if (!(st = model.zero_grads()).ok() || !(st = model.forward(0, dtok, dtgt, out)).ok() ||
          (cudaEventRecord(fwd_done, model.stream()), !(st = model.backward(0, {}, 1.0f, dx)).ok()) ||
          (cudaEventRecord(bwd_done, model.stream()), !(st = update()).ok()) ||
          (cudaEventRecord(stop, model.stream()), !(st = model.loss(loss)).ok())) {
        std::fprintf(stderr, "bench_gpt_cuda: %s\n", st.message().c_str());
        return -1;
      }
      if (s == 0)
        first_loss = loss;
      float e = 0, f = 0, b = 0;
      cudaEventElapsedTime(&e, start, stop);
      cudaEventElapsedTime(&f, start, fwd_done);
      cudaEventElapsedTime(&b, fwd_done, bwd_done);
      if (s >= 3)
        ms.push_back(e), fwd_ms.push_back(f), bwd_ms.push_back(b);
    }
    for (auto* v : {&ms, &fwd_ms, &bwd_ms})
      std::sort(v->begin(), v->end());
    const double med = ms[ms.size() / 2] * 1e-3;
    std::printf("%s: loss first %.4f last %.4f (same batch each step)\n", label, first_loss, loss);
    std::printf("%s batch %d x %d: step %.2f ms (min %.2f), %.0f tokens/s, %.1f TFLOP/s, MFU %.1f%%\n", label, batch, T,
                med * 1e3, ms.front(), tokens_per_step / med, flops / med / 1e12, flops / med / peak_flops * 100);
    std::printf("        median phases: zero+forward %.2f ms, backward %.2f ms, AdamW+rest %.2f ms\n",
                fwd_ms[fwd_ms.size() / 2], bwd_ms[bwd_ms.size() / 2],
                med * 1e3 - fwd_ms[fwd_ms.size() / 2] - bwd_ms[bwd_ms.size() / 2]);
    return med;
  };
  if (measure(false, "troupe, separate bias/GELU kernels") < 0)
    return 1;
  const double med = measure(true, "troupe, cuBLASLt fused epilogues");
  if (med < 0)
    return 1;
  const double tps = tokens_per_step / med, mfu = flops / med / peak_flops;
  if (result_file)
    if (FILE* f = std::fopen(result_file, "w")) {
      std::fprintf(f, "troupe,%d,%.3f,%.0f,%.4f\n", batch, med * 1e3, tps, mfu);
      std::fclose(f);
    }
  return 0;
}
