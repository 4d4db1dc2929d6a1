// bench_gpt: troupe vs PyTorch training speed on the configs A and B
// (forward + backward + AdamW per step, one thread), against the sgemm peak.
// Also trains config A for --loss-steps steps (default 200) on the King James Bible
// text in f32 and in bf16 and prints both losses.
// Usage: bench_gpt [--runs N] [--config A|B|all] [--no-torch] [--no-bf16] [--loss-steps N]
// The troupe side of deploy/bench/bench_cpu_vs_torch.sh, one measurement per call, as
// `key value...` lines: bench_gpt --round A|B [--runs N] | --sgemm N | --kernels
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/gemm_f32.hpp"
#include "kernels/cpu/target.hpp"
#include "ops/adamw.hpp"
#include "ops/gpt.hpp"
#include "ops/lr_schedule.hpp"
#include "runtime/actor/errors.hpp"

using namespace troupe;
using clock_type = std::chrono::steady_clock;

namespace {

struct bench_config {
  const char* name;
  ops::gpt_config model;
  int batch;
  int steps; // steps per timed run
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// CPU seconds this process has used: unlike wall time, not inflated when other
/// programs share the cores (this machine has two, shared by several jobs).
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

/// Best single-thread sgemm rate over a few shapes, each the median of several calls.
double sgemm_peak_gflops() {
  double best = 0;
  for (auto [m, n, k] : {std::tuple{1024, 1024, 256}, {1024, 1024, 1024}, {768, 1536, 512}, {1024, 768, 256}}) {
    std::vector<float> a(std::size_t(m) * k, 0.5f), b(std::size_t(k) * n, 0.25f), c(std::size_t(m) * n);
    std::vector<double> rates;
    for (int r = 0; r < 7; ++r) {
      double c0 = cpu_seconds();
      kernels::cpu::sgemm(false, true, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, c.data(), n);
      rates.push_back(2.0 * m * n * k / (cpu_seconds() - c0) / 1e9);
    }
    best = std::max(best, median(rates));
  }
  return best;
}

/// Single-thread rate of one n×n×n product by `gemm`: the median of 7 calls after one
/// warm-up. deploy/bench/bench_cpu_vs_torch.sh calls the faster of OpenBLAS's and troupe's
/// own this core's physical limit (OpenBLAS alone is no limit where it falls back to a
/// generic core for a CPU model it does not know).
template <class Gemm>
double sgemm_gflops(int n, Gemm gemm) {
  std::vector<float> a(std::size_t(n) * n, 0.5f), b(std::size_t(n) * n, 0.25f), c(std::size_t(n) * n);
  std::vector<double> rates;
  for (int r = 0; r < 8; ++r) {
    double c0 = cpu_seconds();
    gemm(n, a.data(), b.data(), c.data());
    if (r > 0)
      rates.push_back(2.0 * n * n * double(n) / (cpu_seconds() - c0) / 1e9);
  }
  return median(rates);
}

struct troupe_result {
  double ms, wall_ms, loss_first, loss_last;
  std::size_t activation_bytes, activation_formula;
};

troupe_result run_troupe(const bench_config& bc, int runs) {
  ops::gpt_range model(bc.model, 0, bc.model.layers);
  ops::adamw opt(model.params());
  const long b = bc.batch, t = bc.model.context;
  auto tokens = tensor_handle::empty({b, t}, dtype::i32), targets = tensor_handle::empty({b, t}, dtype::i32);
  std::mt19937 rng(0);
  for (long i = 0; i < b * t; ++i) {
    tokens.data<std::int32_t>()[i] = std::int32_t(rng() % std::uint32_t(bc.model.vocab));
    targets.data<std::int32_t>()[i] = std::int32_t(rng() % std::uint32_t(bc.model.vocab));
  }
  auto& pool = storage_pool::for_device(device::cpu());
  troupe_result res{};
  auto step = [&](bool measure_memory) {
    model.zero_grads();
    auto live0 = pool.stats().bytes_live;
    auto loss = *model.forward(0, tokens, targets).data<float>();
    if (measure_memory)
      res.activation_bytes = pool.stats().bytes_live - live0;
    model.backward(0);
    opt.step(model.params(), model.grads(), 1e-3f);
    return loss;
  };
  res.loss_first = step(true);
  for (int i = 0; i < 2; ++i)
    step(false);
  std::vector<double> ms, wall;
  for (int r = 0; r < runs; ++r) {
    auto t0 = clock_type::now();
    double c0 = cpu_seconds();
    for (int s = 0; s < bc.steps; ++s)
      res.loss_last = step(false);
    ms.push_back((cpu_seconds() - c0) * 1000.0 / bc.steps);
    wall.push_back(seconds_since(t0) * 1000.0 / bc.steps);
  }
  res.ms = median(ms);
  res.wall_ms = median(wall);
  res.activation_formula = model.cache_bytes(bc.batch, bc.model.context);
  return res;
}

struct torch_result {
  double ms = -1, wall_ms = -1;
};

/// Median ms/step of PyTorch via tests/torch/bench_gpt.py; negative when unavailable.
torch_result run_torch(const bench_config& bc, int runs) {
  const char* src = std::getenv("TROUPE_SOURCE_DIR");
  std::string script = std::string(src ? src : ".") + "/tests/torch/bench_gpt.py";
  auto cmd = fmt::format("/usr/bin/python3 {} {} {} {} {} {} {} {} {} 2>&1", script, bc.model.layers, bc.model.d_model,
                         bc.model.heads, bc.model.context, bc.batch, bc.model.vocab, runs, bc.steps);
  FILE* p = popen(cmd.c_str(), "r");
  torch_result res;
  if (!p)
    return res;
  char line[512];
  std::string out;
  while (std::fgets(line, sizeof line, p)) {
    out += line;
    std::sscanf(line, "torch_ms_per_step %lf %lf", &res.ms, &res.wall_ms);
  }
  if (pclose(p) != 0 || res.ms < 0) {
    std::fprintf(stderr, "bench_gpt: PyTorch run failed (%s):\n%s\n", cmd.c_str(), out.c_str());
    return {};
  }
  return res;
}

/// Byte corpus: the KJV Bible (Debian's bible-kjv), else a license text, else a pattern.
std::string load_corpus() {
  std::string text;
  if (FILE* p = popen("bible -l10000 gen1:1-rev22:21 2>/dev/null | head -c 4000000", "r")) {
    char buf[65536];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
      text.append(buf, n);
    pclose(p);
  }
  if (text.size() < 100000)
    if (FILE* f = std::fopen("/usr/share/common-licenses/GPL-3", "rb")) {
      text.clear();
      char buf[65536];
      std::size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, f)) > 0)
        text.append(buf, n);
      std::fclose(f);
    }
  if (text.size() < 10000)
    for (int i = 0; i < 200000; ++i)
      text.push_back(char('a' + (i * 7 + i / 13) % 26));
  return text;
}

struct loss_result {
  double first, last; ///< loss of step 0, mean loss of the last 10 steps
  double ms;          ///< median CPU ms per step
};

/// Trains a fresh model for `steps` steps on random windows of `corpus` (same seed, so
/// f32 and bf16 see the same data from the same initial weights).
loss_result train_on_text(ops::gpt_config cfg, int batch, int steps, const std::string& corpus) {
  ops::gpt_range model(cfg, 0, cfg.layers);
  ops::adamw opt(model.params());
  const long t = cfg.context;
  auto tokens = tensor_handle::empty({batch, t}, dtype::i32), targets = tensor_handle::empty({batch, t}, dtype::i32);
  std::mt19937_64 rng(1);
  ops::warmup_cosine lr{.max_lr = 1e-3f, .min_lr = 1e-4f, .warmup = 20, .total = steps};
  loss_result res{};
  std::vector<double> losses, ms;
  for (int s = 0; s < steps; ++s) {
    for (long b = 0; b < batch; ++b) {
      std::size_t start = rng() % (corpus.size() - std::size_t(t) - 1);
      for (long i = 0; i < t; ++i) {
        tokens.data<std::int32_t>()[b * t + i] = static_cast<unsigned char>(corpus[start + std::size_t(i)]);
        targets.data<std::int32_t>()[b * t + i] = static_cast<unsigned char>(corpus[start + std::size_t(i) + 1]);
      }
    }
    double c0 = cpu_seconds();
    model.zero_grads();
    losses.push_back(*model.forward(0, tokens, targets).data<float>());
    model.backward(0);
    opt.step(model.params(), model.grads(), lr.at(s));
    ms.push_back((cpu_seconds() - c0) * 1000.0);
  }
  res.first = losses.front();
  int tail = std::min(10, steps);
  for (int i = steps - tail; i < steps; ++i)
    res.last += losses[std::size_t(i)] / tail;
  res.ms = median(ms);
  return res;
}

} // namespace

int main(int argc, char** argv) {
  if (auto err = kernels::cpu::kernel_target_from_env()) {
    std::fprintf(stderr, "bench_gpt: %s\n", error_message(err).c_str());
    return 2;
  }
  kernels::cpu::set_blas_threads(1);
  int runs = 5;
  std::string which = "all", round;
  bool torch = true, bf16 = true;
  int loss_steps = 200;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--kernels")) {
      std::printf("kernel_target %s\nblas_core %s\nkernel_summary %s\n", kernels::cpu::kernel_target().c_str(),
                  kernels::cpu::blas_core().c_str(), kernels::cpu::kernel_summary().c_str());
      return 0;
    }
    if (!std::strcmp(argv[i], "--sgemm") && i + 1 < argc) {
      int n = std::atoi(argv[++i]);
      double blas = sgemm_gflops(n, [](int n, const float* a, const float* b, float* c) {
        kernels::cpu::sgemm(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
      });
      double own = sgemm_gflops(n, [](int n, const float* a, const float* b, float* c) {
        kernels::cpu::sgemm_fused(false, false, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n, {});
      });
      std::printf("sgemm_gflops %d %.2f %.2f\n", n, blas, own);
      return 0;
    }
    if (!std::strcmp(argv[i], "--round") && i + 1 < argc)
      round = argv[++i];
    else if (!std::strcmp(argv[i], "--runs") && i + 1 < argc)
      runs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--config") && i + 1 < argc)
      which = argv[++i];
    else if (!std::strcmp(argv[i], "--no-torch"))
      torch = false;
    else if (!std::strcmp(argv[i], "--no-bf16"))
      bf16 = false;
    else if (!std::strcmp(argv[i], "--loss-steps") && i + 1 < argc)
      loss_steps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_gpt [--runs N] [--config A|B|all] [--no-torch] [--no-bf16] [--loss-steps N]\n"
                           "       bench_gpt --round A|B [--runs N] | --sgemm N | --kernels\n");
      return 2;
    }
  }
  std::vector<bench_config> configs = {
    {"A", {.layers = 4, .d_model = 128, .heads = 4, .context = 64, .vocab = 256}, 12, 10},
    {"B", {.layers = 4, .d_model = 256, .heads = 4, .context = 128, .vocab = 256}, 8, 4},
  };
  if (!round.empty()) { // one side of one alternating round: the median of `runs` timed runs
    for (auto& bc : configs)
      if (round == bc.name) {
        auto r = run_troupe(bc, runs);
        std::printf("config %s layers %d d_model %d context %d batch %d steps_per_run %d\n", bc.name, bc.model.layers,
                    bc.model.d_model, bc.model.context, bc.batch, bc.steps);
        std::printf("step_flop %.6g\ntroupe_ms_per_step %.3f %.3f\n",
                    ops::gpt_step_flops(bc.model, bc.batch, bc.model.context), r.ms, r.wall_ms);
        return 0;
      }
    std::fprintf(stderr, "bench_gpt: unknown config '%s' (valid: A, B)\n", round.c_str());
    return 2;
  }
  double peak = sgemm_peak_gflops();
  std::printf("single-thread sgemm peak (measured): %.1f GFLOP/s; BLAS threads %d\n\n", peak,
              kernels::cpu::blas_threads());
  std::printf("ms/step = median CPU time per step (wall time in brackets; the cores here are shared)\n");
  std::printf("%-8s %16s %18s %14s %10s %8s %12s %14s\n", "config", "troupe ms/step", "torch f32 ms/step",
              "tokens/s ratio", "GFLOP/s", "% peak", "act MiB/mb", "loss");
  for (auto& bc : configs) {
    if (which != "all" && which != bc.name)
      continue;
    // PyTorch runs before and after troupe's, so load from other jobs on the shared
    // cores during the measurement falls on both sides alike.
    auto th = torch ? run_torch(bc, (runs + 1) / 2) : torch_result{};
    auto tr = run_troupe(bc, runs);
    auto half = bc;
    half.model.precision = ops::precision::bf16;
    auto tb = bf16 ? run_troupe(half, runs) : troupe_result{};
    if (torch && th.ms > 0) {
      auto after = run_torch(bc, (runs + 1) / 2);
      if (after.ms > 0)
        th = {0.5 * (th.ms + after.ms), 0.5 * (th.wall_ms + after.wall_ms)};
    }
    const double flops = ops::gpt_step_flops(bc.model, bc.batch, bc.model.context);
    auto row = [&](std::string name, const troupe_result& r) {
      double gflops = flops / (r.ms * 1e-3) / 1e9;
      std::printf("%-8s %16s %18s %14s %10.1f %7.0f%% %12.2f %6.3f→%.3f\n", name.c_str(),
                  fmt::format("{:.2f} [{:.1f}]", r.ms, r.wall_ms).c_str(),
                  th.ms > 0 ? fmt::format("{:.2f} [{:.1f}]", th.ms, th.wall_ms).c_str() : "n/a",
                  th.ms > 0 ? fmt::format("{:.2f}x", th.ms / r.ms).c_str() : "n/a", gflops, 100.0 * gflops / peak,
                  double(r.activation_bytes) / (1 << 20), r.loss_first, r.loss_last);
    };
    row(bc.name, tr);
    if (bf16)
      row(std::string(bc.name) + " bf16", tb);
    std::printf("         (activation cache by formula: %.2f MiB per microbatch)\n",
                double(tr.activation_formula) / (1 << 20));
  }
  if (loss_steps > 0) {
    auto corpus = load_corpus();
    auto cfg = configs[0];
    std::printf("\nconfig A trained %d steps on %zu bytes of text (warmup + cosine lr 1e-3):\n", loss_steps,
                corpus.size());
    for (auto p : {ops::precision::f32, ops::precision::bf16}) {
      cfg.model.precision = p;
      auto r = train_on_text(cfg.model, cfg.batch, loss_steps, corpus);
      std::printf("  %-4s loss %.4f at step 0, %.4f over the last 10 steps (%.2f ms/step)\n",
                  p == ops::precision::f32 ? "f32" : "bf16", r.first, r.last, r.ms);
    }
  }
  return 0;
}
