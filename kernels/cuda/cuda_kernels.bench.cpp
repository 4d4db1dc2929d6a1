// Micro-benchmark of the CUDA kernels at GPT-2 124M sizes: cuBLAS GEMM and the
// fused attention in TFLOP/s, the memory-bound kernels in GB/s, as a table.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels/cuda/adamw.hpp"
#include "kernels/cuda/attention.hpp"
#include "kernels/cuda/cross_entropy.hpp"
#include "kernels/cuda/elementwise.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/layer_norm.hpp"
#include "kernels/cuda/sum_squares.hpp"

namespace {

using namespace troupe::gpu;
using bf16 = __nv_bfloat16;

void die(const status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.message().c_str());
    std::exit(1);
  }
}

void die(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "error: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

template <typename T>
T* alloc(std::size_t n, float value = 0.01f) {
  void* p = nullptr;
  die(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc");
  die(fill(static_cast<T*>(p), value, static_cast<std::int64_t>(n), nullptr));
  return static_cast<T*>(p);
}

/// Mean milliseconds of `f` over `iters` runs after `warmup` runs.
double time_ms(const std::function<void()>& f, int warmup = 3, int iters = 10) {
  for (int i = 0; i < warmup; ++i)
    f();
  cudaEvent_t a, b;
  die(cudaEventCreate(&a), "event");
  die(cudaEventCreate(&b), "event");
  die(cudaEventRecord(a), "record");
  for (int i = 0; i < iters; ++i)
    f();
  die(cudaEventRecord(b), "record");
  die(cudaEventSynchronize(b), "sync");
  float ms = 0.0f;
  die(cudaEventElapsedTime(&ms, a, b), "elapsed");
  return ms / iters;
}

void row(const std::string& name, double ms, double flops, double bytes) {
  std::printf("| %-44s | %9.3f | %8.1f | %8.1f |\n", name.c_str(), ms, flops > 0 ? flops / ms / 1e9 : 0.0,
              bytes > 0 ? bytes / ms / 1e6 : 0.0);
}

} // namespace

int main() {
  if (!cuda_available()) {
    std::printf("no CUDA device: nothing to benchmark\n");
    return 0;
  }
  cudaDeviceProp prop{};
  die(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("device: %s, %d SMs\n\n", prop.name, prop.multiProcessorCount);
  std::printf("| %-44s | %9s | %8s | %8s |\n", "kernel", "ms", "TFLOP/s", "GB/s");
  std::printf("|%s|%s|%s|%s|\n", std::string(46, '-').c_str(), std::string(11, '-').c_str(),
              std::string(10, '-').c_str(), std::string(10, '-').c_str());

  blas_handle h;
  die(h.init());
  const int tokens = 8192, c = 768, vocab = 50304;
  struct mm {
    const char* name;
    int m, n, k;
  };
  for (auto [name, m, n, k] :
       {mm{"gemm bf16 qkv 8192x2304x768", tokens, 3 * c, c}, mm{"gemm bf16 fc 8192x3072x768", tokens, 4 * c, c},
        mm{"gemm bf16 proj 8192x768x3072", tokens, c, 4 * c}, mm{"gemm bf16 lm head 8192x50304x768", tokens, vocab, c},
        mm{"gemm bf16 8192^3", 8192, 8192, 8192}}) {
    auto* a = alloc<bf16>((std::size_t)m * k);
    auto* b = alloc<bf16>((std::size_t)n * k);
    auto* out = alloc<bf16>((std::size_t)m * n);
    gemm_shape s{.m = m, .n = n, .k = k, .trans_b = true}; // y = x W^T, as a linear layer
    double ms = time_ms([&] { die(gemm(h.get(), nullptr, s, a, b, out)); });
    row(name, ms, 2.0 * m * n * k, 0);
    cudaFree(a), cudaFree(b), cudaFree(out);
  }
  {
    int n = 4096;
    auto* a = alloc<float>((std::size_t)n * n);
    auto* b = alloc<float>((std::size_t)n * n);
    auto* out = alloc<float>((std::size_t)n * n);
    gemm_shape s{.m = n, .n = n, .k = n};
    double ms = time_ms([&] { die(gemm(h.get(), nullptr, s, a, b, out)); });
    row("gemm f32 (no TF32) 4096^3", ms, 2.0 * n * n * n, 0);
    cudaFree(a), cudaFree(b), cudaFree(out);
  }
  for (attention_shape s : {attention_shape{.batch = 8, .heads = 12, .seq_len = 1024, .head_dim = 64},
                            attention_shape{.batch = 4, .heads = 16, .seq_len = 2048, .head_dim = 128}}) {
    std::size_t total = (std::size_t)s.batch * s.heads * s.seq_len * s.head_dim;
    std::size_t rows = (std::size_t)s.batch * s.heads * s.seq_len;
    auto *q = alloc<bf16>(total, 0.1f), *k = alloc<bf16>(total, 0.2f), *v = alloc<bf16>(total, 0.3f);
    auto *o = alloc<bf16>(total), *dq = alloc<bf16>(total), *dk = alloc<bf16>(total), *dv = alloc<bf16>(total);
    auto *lse = alloc<float>(rows), *delta = alloc<float>(attention_backward_workspace(s));
    std::string shape = " B" + std::to_string(s.batch) + " H" + std::to_string(s.heads) + " T" +
                        std::to_string(s.seq_len) + " D" + std::to_string(s.head_dim);
    // Causal: half of the 4 * T^2 * D multiply-adds per head; backward counted as 2.5x forward.
    double fwd_flops = 4.0 * s.batch * s.heads * (double)s.seq_len * s.seq_len * s.head_dim / 2;
    double ms = time_ms([&] { die(attention_forward(o, lse, q, k, v, s, nullptr)); });
    row("attention fwd bf16" + shape, ms, fwd_flops, 0);
    ms = time_ms([&] { die(attention_backward(dq, dk, dv, delta, o, q, k, v, o, lse, s, nullptr)); });
    row("attention bwd bf16" + shape, ms, 2.5 * fwd_flops, 0);
    for (void* p : {(void*)q, (void*)k, (void*)v, (void*)o, (void*)dq, (void*)dk, (void*)dv, (void*)lse, (void*)delta})
      cudaFree(p);
  }
  {
    std::size_t n = (std::size_t)tokens * c;
    auto *x = alloc<bf16>(n), *y = alloc<bf16>(n), *g = alloc<bf16>(n, 1.0f);
    auto *mean = alloc<float>(tokens), *rstd = alloc<float>(tokens), *dg = alloc<float>(c), *db = alloc<float>(c);
    double ms = time_ms([&] { die(layer_norm_forward(y, mean, rstd, x, g, g, tokens, c, 1e-5f, nullptr)); });
    row("layer norm fwd bf16 8192x768", ms, 0, 2.0 * n * 2);
    ms = time_ms([&] { die(layer_norm_backward(y, dg, db, x, x, g, mean, rstd, tokens, c, nullptr)); });
    row("layer norm bwd bf16 8192x768", ms, 0, 3.0 * n * 2);
    std::size_t h4 = 4 * n;
    auto *a = alloc<bf16>(h4), *b = alloc<bf16>(h4);
    ms = time_ms([&] { die(gelu_forward(b, a, (std::int64_t)h4, nullptr)); });
    row("gelu fwd bf16 8192x3072", ms, 0, 2.0 * h4 * 2);
    ms = time_ms([&] { die(gelu_backward(b, a, b, (std::int64_t)h4, nullptr)); });
    row("gelu bwd bf16 8192x3072", ms, 0, 3.0 * h4 * 2);
    ms = time_ms([&] { die(residual_add(y, x, y, (std::int64_t)n, nullptr)); });
    row("residual add bf16 8192x768", ms, 0, 3.0 * n * 2);
    for (void* p : {(void*)x, (void*)y, (void*)g, (void*)mean, (void*)rstd, (void*)dg, (void*)db, (void*)a, (void*)b})
      cudaFree(p);
  }
  {
    std::size_t n = (std::size_t)tokens * vocab;
    auto* logits = alloc<bf16>(n);
    auto *loss = alloc<float>(1), *rl = alloc<float>(tokens);
    std::int32_t *count = nullptr, *targets = nullptr;
    die(cudaMalloc(&count, 4), "cudaMalloc");
    die(cudaMalloc(&targets, tokens * 4), "cudaMalloc");
    die(cudaMemset(targets, 0, tokens * 4), "cudaMemset");
    double ms = time_ms([&] {
      die(
        cross_entropy_forward_backward({loss, rl, count}, logits, logits, targets, tokens, vocab, -100, 1.0f, nullptr));
    });
    row("cross-entropy fwd+bwd bf16 8192x50304", ms, 0, 2.0 * n * 2);
    cudaFree(logits), cudaFree(loss), cudaFree(rl), cudaFree(count), cudaFree(targets);
  }
  {
    std::size_t n = 124'000'000;
    auto *p = alloc<float>(n), *m = alloc<float>(n), *v = alloc<float>(n), *g = alloc<float>(n);
    auto* copy = alloc<bf16>(n);
    adamw_config cfg{.lr = 1e-4f, .weight_decay = 0.1f};
    double ms = time_ms([&] { die(adamw_step(p, m, v, copy, g, (std::int64_t)n, cfg, nullptr)); });
    row("adamw f32 master + bf16 copy, 124M params", ms, 0, n * (4.0 * 7 + 2));
    double* acc = nullptr;
    die(cudaMalloc(&acc, sizeof(double)), "cudaMalloc");
    ms = time_ms([&] { die(sum_squares(acc, g, (std::int64_t)n, nullptr)); });
    row("sum of squares f32 (grad norm), 124M", ms, 0, n * 4.0);
    ms = time_ms([&] { die(scale(g, 0.5f, (std::int64_t)n, nullptr)); });
    row("scale f32 (grad clip), 124M", ms, 0, n * 8.0);
    cudaFree(p), cudaFree(m), cudaFree(v), cudaFree(g), cudaFree(copy), cudaFree(acc);
  }
  return 0;
}
