// bench_kernels: throughput of every CPU kernel at the sizes of the GPT configs
// (CPU time, so other jobs on the shared cores inflate it less than wall time).
#include <algorithm>
#include <array>
#include <cstdio>
#include <tuple>
#include <ctime>
#include <functional>
#include <random>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/cross_entropy.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/gelu.hpp"
#include "kernels/cpu/gemm.hpp"
#include "kernels/cpu/gemm_bf16.hpp"
#include "kernels/cpu/gemm_f32.hpp"
#include "kernels/cpu/layer_norm.hpp"
#include "kernels/cpu/optimizer.hpp"
#include "kernels/cpu/small_gemm.hpp"

using namespace troupe::kernels::cpu;

namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

/// Runs `f` for about 0.2 s and prints the time per call and a rate (`work` units per call).
void bench(const char* name, double work, const char* unit, const std::function<void()>& f) {
  f();
  long reps = 0, batch = 1;
  double t0 = cpu_seconds(), t = 0;
  while (t < 0.2) { // the CPU-time clock is a system call here: read it once per batch
    for (long i = 0; i < batch; ++i)
      f();
    reps += batch;
    batch *= 2;
    t = cpu_seconds() - t0;
  }
  double per = t / double(reps);
  std::printf("%-44s %10.1f us %10.1f %s\n", name, per * 1e6, work / per / 1e9, unit);
}

std::vector<float> randv(std::size_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v)
    x = d(rng);
  return v;
}

} // namespace

int main() {
  for (auto [m, n, k, ta, tb] : std::vector<std::tuple<int, int, int, bool, bool>>{{768, 384, 128, false, true},
                                                                                   {768, 512, 128, false, true},
                                                                                   {768, 128, 512, false, true},
                                                                                   {768, 128, 384, false, false},
                                                                                   {768, 128, 512, false, false},
                                                                                   {768, 512, 128, false, false},
                                                                                   {384, 128, 768, true, false},
                                                                                   {128, 512, 768, true, false},
                                                                                   {512, 128, 768, true, false},
                                                                                   {1024, 1024, 256, false, true},
                                                                                   {1024, 256, 1024, false, false},
                                                                                   {1024, 256, 1024, true, false}}) {
    auto a = randv(std::size_t(m) * k), b = randv(std::size_t(k) * n);
    std::vector<float> c(std::size_t(m) * n);
    char name[96];
    std::snprintf(name, sizeof name, "sgemm %c%c %dx%dx%d", ta ? 't' : 'n', tb ? 't' : 'n', m, n, k);
    bench(name, 2.0 * m * n * k, "GFLOP/s",
          [&] { sgemm(ta, tb, m, n, k, 1.0f, a.data(), ta ? m : k, b.data(), tb ? k : n, 1.0f, c.data(), n); });
    std::snprintf(name, sizeof name, "sgemm_fused %c%c %dx%dx%d", ta ? 't' : 'n', tb ? 't' : 'n', m, n, k);
    bench(name, 2.0 * m * n * k, "GFLOP/s", [&] {
      sgemm_fused(ta, tb, m, n, k, 1.0f, a.data(), ta ? m : k, b.data(), tb ? k : n, 1.0f, c.data(), n, {});
    });
    std::snprintf(name, sizeof name, "sgemm_bf16 %c%c %dx%dx%d", ta ? 't' : 'n', tb ? 't' : 'n', m, n, k);
    bench(name, 2.0 * m * n * k, "GFLOP/s",
          [&] { sgemm_bf16(ta, tb, m, n, k, 1.0f, a.data(), ta ? m : k, b.data(), tb ? k : n, 1.0f, c.data(), n); });
  }
  for (auto [m, n, k] : std::vector<std::array<int, 3>>{{8, 32, 64}, {8, 64, 32}, {8, 32, 128}, {8, 128, 64}}) {
    auto a = randv(std::size_t(m) * k), b = randv(std::size_t(k) * n);
    std::vector<float> c(std::size_t(m) * n);
    char name[96];
    std::snprintf(name, sizeof name, "small_gemm %dx%dx%d", m, n, k);
    bench(name, 2.0 * m * n * k, "GFLOP/s",
          [&] { small_gemm(m, n, k, 1.0f, a.data(), k, 1, b.data(), n, c.data(), n, false); });
  }
  for (auto s : {attention_shape{12, 64, 4, 32}, attention_shape{8, 128, 4, 64}}) {
    const long c = s.heads * s.head_dim;
    auto qkv = randv(std::size_t(s.batch * s.seq * 3 * c)), dout = randv(std::size_t(s.batch * s.seq * c));
    std::vector<float> out(std::size_t(s.batch * s.seq * c)), p(std::size_t(s.batch * s.heads * s.seq));
    std::vector<float> dqkv(qkv.size()),
      scratch(std::size_t(std::max(attention_forward_scratch(s), attention_backward_scratch(s))));
    double flops = 2.0 * s.batch * s.heads * s.seq * s.seq * s.head_dim; // causal half of QKᵀ and PV
    char name[96];
    std::snprintf(name, sizeof name, "attention fwd B%ld T%ld H%ld d%ld", s.batch, s.seq, s.heads, s.head_dim);
    bench(name, flops, "GFLOP/s", [&] { attention_forward(qkv.data(), out.data(), p.data(), scratch.data(), s); });
    std::snprintf(name, sizeof name, "attention bwd B%ld T%ld H%ld d%ld", s.batch, s.seq, s.heads, s.head_dim);
    bench(name, 2 * flops, "GFLOP/s", // not counting the recomputed QKᵀ
          [&] { attention_backward(dout.data(), qkv.data(), p.data(), dqkv.data(), scratch.data(), s); });
  }
  const long rows = 1024, cols = 256, n4 = rows * cols * 4;
  auto x = randv(std::size_t(rows * cols)), g = randv(std::size_t(cols)), dy = randv(std::size_t(rows * cols));
  std::vector<float> y(x.size()), mean(rows), rstd(rows), dg(cols), db(cols),
    big = randv(std::size_t(n4)), big2(static_cast<std::size_t>(n4)), dbig = randv(std::size_t(n4));
  double bytes = 4.0 * rows * cols;
  bench("layer_norm_forward 1024x256", 2 * bytes, "GB/s", [&] {
    layer_norm_forward(x.data(), g.data(), g.data(), y.data(), mean.data(), rstd.data(), rows, cols, 1e-5f);
  });
  bench("layer_norm_backward_input 1024x256", 3 * bytes, "GB/s", [&] {
    layer_norm_backward_input(dy.data(), x.data(), mean.data(), rstd.data(), g.data(), y.data(), rows, cols);
  });
  bench("layer_norm_backward_weight 1024x256", 2 * bytes, "GB/s", [&] {
    layer_norm_backward_weight(dy.data(), x.data(), mean.data(), rstd.data(), dg.data(), db.data(), rows, cols);
  });
  bench("gelu_forward 1024x1024", 8.0 * n4, "GB/s", [&] { gelu_forward(big.data(), big2.data(), n4); });
  bench("gelu_backward 1024x1024", 12.0 * n4, "GB/s", [&] { gelu_backward(dbig.data(), big.data(), big2.data(), n4); });
  bench("broadcast_rows 1024x1024", 4.0 * n4, "GB/s", [&] { broadcast_rows(big.data(), big2.data(), 1024, 1024); });
  bench("column_sum_add 1024x1024", 4.0 * n4, "GB/s", [&] { column_sum_add(big.data(), big2.data(), 1024, 1024); });
  std::vector<std::int32_t> t(rows);
  for (long i = 0; i < rows; ++i)
    t[std::size_t(i)] = std::int32_t(i % cols);
  bench("cross_entropy_backward 1024x256", 2 * bytes, "GB/s",
        [&] { cross_entropy_backward(x.data(), t.data(), y.data(), rows, cols, -1, 1.0f); });
  std::vector<float> m(static_cast<std::size_t>(n4)), v(static_cast<std::size_t>(n4));
  bench("adamw_update 4M", 4.0 * 5 * n4, "GB/s", [&] {
    adamw_update(big2.data(), dbig.data(), m.data(), v.data(), n4, {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.5f, 0.5f});
  });
  return 0;
}
