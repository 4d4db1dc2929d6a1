// bench_gpt: troupe vs PyTorch training speed on the configs A and B
// (forward + backward + AdamW per step, one thread), against the sgemm peak.
// Usage: bench_gpt [--runs N] [--config A|B|all] [--no-torch]
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
#include "ops/gpt.hpp"

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

struct troupe_result {
  double ms, wall_ms, loss_first, loss_last;
  std::size_t activation_bytes, activation_formula;
};

troupe_result run_troupe(const bench_config& bc, int runs) {
  ops::gpt_range model(bc.model, 0, bc.model.layers);
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
    model.step(1e-3f);
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
  auto cmd = fmt::format("/usr/bin/python3 {} {} {} {} {} {} {} {} {} 2>&1", script, bc.model.layers,
                         bc.model.d_model, bc.model.heads, bc.model.context, bc.batch, bc.model.vocab, runs, bc.steps);
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

} // namespace

int main(int argc, char** argv) {
  int runs = 5;
  std::string which = "all";
  bool torch = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--runs") && i + 1 < argc)
      runs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--config") && i + 1 < argc)
      which = argv[++i];
    else if (!std::strcmp(argv[i], "--no-torch"))
      torch = false;
    else {
      std::fprintf(stderr, "usage: bench_gpt [--runs N] [--config A|B|all] [--no-torch]\n");
      return 2;
    }
  }
  std::vector<bench_config> configs = {
    {"A", {.layers = 4, .d_model = 128, .heads = 4, .context = 64, .vocab = 256}, 12, 10},
    {"B", {.layers = 4, .d_model = 256, .heads = 4, .context = 128, .vocab = 256}, 8, 4},
  };
  double peak = sgemm_peak_gflops();
  std::printf("single-thread sgemm peak (measured): %.1f GFLOP/s; BLAS threads %d\n\n", peak,
              kernels::cpu::blas_threads());
  std::printf("ms/step = median CPU time per step (wall time in brackets; the cores here are shared)\n");
  std::printf("%-6s %18s %18s %14s %10s %8s %12s %14s\n", "config", "troupe ms/step", "torch ms/step",
              "tokens/s ratio", "GFLOP/s", "% peak", "act MiB/mb", "loss");
  for (auto& bc : configs) {
    if (which != "all" && which != bc.name)
      continue;
    auto tr = run_troupe(bc, runs);
    auto th = torch ? run_torch(bc, runs) : torch_result{};
    double gflops = ops::gpt_step_flops(bc.model, bc.batch, bc.model.context) / (tr.ms * 1e-3) / 1e9;
    std::printf("%-6s %18s %18s %14s %10.1f %7.0f%% %12.2f %6.3f→%.3f\n", bc.name,
                fmt::format("{:.2f} [{:.1f}]", tr.ms, tr.wall_ms).c_str(),
                th.ms > 0 ? fmt::format("{:.2f} [{:.1f}]", th.ms, th.wall_ms).c_str() : "n/a",
                th.ms > 0 ? fmt::format("{:.2f}x", th.ms / tr.ms).c_str() : "n/a", gflops, 100.0 * gflops / peak,
                double(tr.activation_bytes) / (1 << 20), tr.loss_first, tr.loss_last);
    std::printf("       (activation cache by formula: %.2f MiB per microbatch)\n",
                double(tr.activation_formula) / (1 << 20));
  }
  return 0;
}
