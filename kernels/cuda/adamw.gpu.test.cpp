// Checks the fused AdamW step over several steps against a double-precision host loop.
#include <cmath>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cuda/adamw.hpp"
#include "kernels/cuda/test_support.hpp"

using namespace troupe::gpu;
using namespace troupe::gpu::testing;
using bf16 = __nv_bfloat16;

TEST_CASE_TEMPLATE("AdamW updates f32 master weights, moments and the bf16 copy like PyTorch's AdamW", G, float, bf16) {
  TROUPE_REQUIRE_GPU_OR_SKIP();
  std::size_t n = 20011;
  auto p0 = random_normal(n, 1);
  device_buffer<float> master(p0), m(std::vector<float>(n, 0.0f)), v(std::vector<float>(n, 0.0f));
  device_buffer<bf16> copy(n);
  std::vector<double> rp(p0.begin(), p0.end()), rm(n, 0.0), rv(n, 0.0);
  adamw_config cfg{.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 0.25f};
  for (long step = 1; step <= 3; ++step) {
    auto g = rounded<G>(random_normal(n, 10 + (std::uint32_t)step));
    device_buffer<G> dg(g);
    cfg.step = step;
    TROUPE_REQUIRE_OK(adamw_step(master.get(), m.get(), v.get(), copy.get(), dg.get(), (std::int64_t)n, cfg, nullptr));
    double bc1 = 1.0 - std::pow((double)cfg.beta1, (double)step), bc2 = 1.0 - std::pow((double)cfg.beta2, (double)step);
    for (std::size_t i = 0; i < n; ++i) {
      double gi = g[i] * (double)cfg.grad_scale;
      rm[i] = cfg.beta1 * rm[i] + (1.0 - cfg.beta1) * gi;
      rv[i] = cfg.beta2 * rv[i] + (1.0 - cfg.beta2) * gi * gi;
      rp[i] =
        rp[i] * (1.0 - (double)cfg.lr * cfg.weight_decay) - cfg.lr * (rm[i] / bc1) / (std::sqrt(rv[i] / bc2) + cfg.eps);
    }
    INFO("step " << step);
    check_close<float>("adamw master", master.download(), rp);
    check_close<float>("adamw m", m.download(), rm);
    check_close<float>("adamw v", v.download(), rv);
    check_close<bf16>("adamw bf16 copy", copy.download(), rp);
  }
}
