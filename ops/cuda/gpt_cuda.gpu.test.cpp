// Checks the GPU GPT against the CPU gpt_range: same loss, gradients and weights
// after an AdamW step to bf16 tolerance, and layer ranges that chain like the whole.
#include <cmath>
#include <random>
#include <vector>

#include <doctest/doctest.h>

#include "kernels/cuda/check.hpp"
#include "ops/adamw.hpp"
#include "ops/cuda/gpt_cuda.hpp"
#include "ops/gpt.hpp"
#include "ops/testing_grad.hpp"

using namespace troupe;
using namespace troupe::ops;
using testing::random_tokens;

namespace {

#define REQUIRE_GPU_OK(expr)                                                                                           \
  do {                                                                                                                 \
    auto st_ = (expr);                                                                                                 \
    INFO(st_.message());                                                                                               \
    REQUIRE(st_.ok());                                                                                                 \
  } while (0)

gpt_config tiny() {
  gpt_config c;
  c.layers = 4, c.heads = 4, c.d_model = 128, c.context = 64, c.vocab = 256;
  return c;
}

/// ‖a − b‖ / ‖b‖; infinity when anything is not finite, so NaN never passes.
double rel_err(const std::vector<float>& a, const float* b, std::size_t n) {
  if (a.size() != n)
    return INFINITY;
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i]))
      return INFINITY;
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

/// cos∠(a − a0, b − b0): the direction of two updates of the same start.
double update_cosine(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& a0) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    double da = double(a[i]) - a0[i], db = double(b[i]) - a0[i];
    if (!std::isfinite(da) || !std::isfinite(db))
      return -1;
    ab += da * db, aa += da * da, bb += db * db;
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : (aa == bb ? 1.0 : -1.0);
}

} // namespace

TEST_CASE("a training step of the tiny GPT on the GPU matches the CPU gpt_range to bf16 tolerance") {
  if (!gpu::cuda_available()) {
    MESSAGE("no CUDA device: GPU check skipped");
    return;
  }
  const auto cfg = tiny();
  const int B = 12, T = cfg.context;
  auto tokens = random_tokens(B, T, cfg.vocab, 1), targets = random_tokens(B, T, cfg.vocab, 2);
  gpt_range cpu(cfg, 0, cfg.layers);
  gpt_cuda gpu_model(cfg, 0, cfg.layers, B);
  REQUIRE_GPU_OK(gpu_model.init());
  adamw cpu_opt(cpu.params()), gpu_opt(gpu_model.params(), {}, gpu_model.stream());
  auto names = gpu_model.param_names();
  REQUIRE(names.size() == cpu.params().size());

  std::vector<std::vector<float>> start;
  for (std::size_t i = 0; i < names.size(); ++i) {
    CHECK(names[i] == cpu.params()[i].name);
    std::vector<float> p;
    REQUIRE_GPU_OK(gpu_model.download_param(names[i], p));
    const auto& cp = cpu.params()[i].value;
    CHECK(rel_err(p, cp.data<float>(), std::size_t(cp.numel())) == 0.0); // identical initial weights
    start.push_back(p);
  }

  // Each step: loss and gradients against the CPU; the GPU's AdamW exactly against
  // a double-precision AdamW fed the GPU's own gradients; the weights against the
  // CPU's within what bf16 gradient noise can move them (Adam's first steps move a
  // weight by about ±lr whatever the gradient's size, so a near-zero gradient whose
  // sign differs moves it 2·lr the other way).
  const float lr = 1e-3f;
  const adamw_options o;
  std::vector<std::vector<double>> hm(names.size()), hv(names.size());
  std::vector<std::vector<float>> gpu_prev = start;
  for (int step = 1; step <= 2; ++step) {
    CAPTURE(step);
    cpu.zero_grads();
    float cpu_loss = *cpu.forward(0, tokens, targets).data<float>();
    cpu.backward(0);
    REQUIRE_GPU_OK(gpu_model.zero_grads());
    tensor_handle out, dx;
    REQUIRE_GPU_OK(gpu_model.forward(0, tokens, targets, out));
    CHECK(out.device().is_cuda());
    REQUIRE_GPU_OK(gpu_model.backward(0, {}, 1.0f, dx));
    float gpu_loss = NAN;
    REQUIRE_GPU_OK(gpu_model.loss(gpu_loss));
    MESSAGE("loss cpu " << cpu_loss << " gpu " << gpu_loss);
    REQUIRE(std::isfinite(gpu_loss));
    CHECK(std::abs(gpu_loss - cpu_loss) <= 1e-2 * std::abs(cpu_loss));

    double worst_grad = 0;
    std::string worst_name;
    std::vector<std::vector<float>> gg(names.size());
    for (std::size_t i = 0; i < names.size(); ++i) {
      REQUIRE_GPU_OK(gpu_model.download_grad(names[i], gg[i]));
      const auto& cg = cpu.grads()[i].value;
      double e = rel_err(gg[i], cg.data<float>(), std::size_t(cg.numel()));
      CAPTURE(names[i]);
      CHECK(e < 5e-2);
      if (!(e <= worst_grad))
        worst_grad = e, worst_name = names[i];
    }
    MESSAGE("worst gradient relative error " << worst_grad << " (" << worst_name << ")");

    cpu_opt.step(cpu.params(), cpu.grads(), lr);
    gpu_opt.step(gpu_model.params(), gpu_model.grads(), lr);
    REQUIRE_GPU_OK(gpu_model.params_updated());
    const double bc1 = 1 - std::pow(double(o.beta1), step), bc2 = 1 - std::pow(double(o.beta2), step);
    double worst_opt = 0, worst_matrix = 0, worst_cos = 1, worst_abs = 0;
    for (std::size_t i = 0; i < names.size(); ++i) {
      CAPTURE(names[i]);
      std::vector<float> p;
      REQUIRE_GPU_OK(gpu_model.download_param(names[i], p));
      const auto& cp = cpu.params()[i].value;
      const bool matrix = cp.rank() >= 2;
      std::vector<float> c(cp.data<float>(), cp.data<float>() + cp.numel());
      REQUIRE(p.size() == c.size());
      hm[i].resize(p.size(), 0.0), hv[i].resize(p.size(), 0.0);
      double opt_err = 0, abs_err = 0;
      for (std::size_t j = 0; j < p.size(); ++j) {
        const double g = gg[i][j];
        hm[i][j] = o.beta1 * hm[i][j] + (1 - o.beta1) * g;
        hv[i][j] = o.beta2 * hv[i][j] + (1 - o.beta2) * g * g;
        const double ref = gpu_prev[i][j] * (1 - lr * (matrix ? o.weight_decay : 0.0f)) -
                           lr * (hm[i][j] / bc1) / (std::sqrt(hv[i][j] / bc2) + o.eps);
        const double d = std::abs(p[j] - ref) / (1e-3 * lr + 1e-6 * std::abs(ref));
        opt_err = std::isfinite(d) && std::isfinite(p[j]) ? std::max(opt_err, d) : INFINITY;
        const double a = std::abs(double(p[j]) - c[j]);
        abs_err = std::isfinite(a) ? std::max(abs_err, a) : INFINITY;
      }
      CHECK(opt_err <= 1.0);                     // the GPU AdamW is AdamW
      CHECK(abs_err <= 2.02 * lr * step + 1e-6); // no weight strays further than sign noise allows
      worst_opt = std::max(worst_opt, opt_err), worst_abs = std::max(worst_abs, abs_err);
      if (matrix) {
        double e = rel_err(p, c.data(), c.size()), cs = update_cosine(p, c, start[i]);
        CHECK(e < 3e-2);
        CHECK(cs > 0.9);
        worst_matrix = std::max(worst_matrix, std::isfinite(e) ? e : INFINITY);
        worst_cos = std::min(worst_cos, cs);
      }
      start[i] = c;
      gpu_prev[i] = p;
    }
    MESSAGE("after AdamW: GPU vs double AdamW worst " << worst_opt << " of tolerance; vs CPU: worst |dp| " << worst_abs
                                                      << " (lr " << lr << "), worst matrix relative error "
                                                      << worst_matrix << ", worst matrix update cosine " << worst_cos);
  }
}

TEST_CASE("two GPU layer ranges chained by their activations and gradients compute what the whole model does") {
  if (!gpu::cuda_available()) {
    MESSAGE("no CUDA device: GPU check skipped");
    return;
  }
  const auto cfg = tiny();
  const int B = 4, T = 48; // a shorter sequence than the context
  auto tokens = random_tokens(B, T, cfg.vocab, 3), targets = random_tokens(B, T, cfg.vocab, 4);
  gpt_cuda whole(cfg, 0, cfg.layers, B), front(cfg, 0, 2, B), back(cfg, 2, cfg.layers, B);
  REQUIRE_GPU_OK(whole.init());
  REQUIRE_GPU_OK(front.init());
  REQUIRE_GPU_OK(back.init());
  tensor_handle loss_t, act, dx, none;
  REQUIRE_GPU_OK(whole.forward(7, tokens, targets, loss_t));
  REQUIRE_GPU_OK(whole.backward(7, {}, 0.5f, dx));
  REQUIRE_GPU_OK(front.forward(7, tokens, {}, act));
  REQUIRE(act.type() == dtype::bf16);
  REQUIRE(act.shape() == shape_t{B, T, cfg.d_model});
  REQUIRE_GPU_OK(front.synchronize());
  REQUIRE_GPU_OK(back.forward(7, act, targets, loss_t));
  REQUIRE_GPU_OK(back.backward(7, {}, 0.5f, dx));
  REQUIRE(dx.shape() == shape_t{B, T, cfg.d_model});
  REQUIRE_GPU_OK(back.synchronize());
  REQUIRE_GPU_OK(front.backward(7, dx, 1.0f, none));
  CHECK(!none.defined());
  float lw = NAN, lb = NAN;
  REQUIRE_GPU_OK(whole.loss(lw));
  REQUIRE_GPU_OK(back.loss(lb));
  REQUIRE(std::isfinite(lw));
  CHECK(std::abs(lw - lb) <= 1e-5 * std::abs(lw));
  for (auto* part : {&front, &back})
    for (const auto& n : part->param_names()) {
      std::vector<float> a, b;
      REQUIRE_GPU_OK(part->download_grad(n, a));
      REQUIRE_GPU_OK(whole.download_grad(n, b));
      CAPTURE(n);
      CHECK(rel_err(a, b.data(), b.size()) < 1e-3);
    }
  // Errors come back as values naming the call.
  auto st = whole.backward(99, {}, 1.0f, dx);
  CHECK(!st.ok());
  CHECK(st.message().find("gpt_cuda::backward") != std::string::npos);
}

TEST_CASE("the fused cuBLASLt epilogues compute what the separate bias, GELU and residual kernels do") {
  if (!gpu::cuda_available()) {
    MESSAGE("no CUDA device: GPU check skipped");
    return;
  }
  const auto cfg = tiny();
  const int B = 6, T = cfg.context;
  auto tokens = random_tokens(B, T, cfg.vocab, 5), targets = random_tokens(B, T, cfg.vocab, 6);
  gpt_cuda fused(cfg, 0, cfg.layers, B), plain(cfg, 0, cfg.layers, B);
  REQUIRE_GPU_OK(fused.init());
  REQUIRE_GPU_OK(plain.init());
  plain.set_fused_epilogues(false);
  float lf = NAN, lp = NAN;
  for (auto* m : {&fused, &plain}) {
    tensor_handle out, dx;
    REQUIRE_GPU_OK(m->forward(0, tokens, targets, out));
    REQUIRE_GPU_OK(m->backward(0, {}, 1.0f, dx));
  }
  REQUIRE_GPU_OK(fused.loss(lf));
  REQUIRE_GPU_OK(plain.loss(lp));
  MESSAGE("loss fused " << lf << " separate " << lp);
  REQUIRE(std::isfinite(lf));
  CHECK(std::abs(lf - lp) <= 2e-3 * std::abs(lp));
  double worst = 0;
  for (const auto& n : fused.param_names()) {
    std::vector<float> a, b;
    REQUIRE_GPU_OK(fused.download_grad(n, a));
    REQUIRE_GPU_OK(plain.download_grad(n, b));
    CAPTURE(n);
    double e = rel_err(a, b.data(), b.size());
    CHECK(e < 3e-2);
    worst = std::max(worst, std::isfinite(e) ? e : INFINITY);
  }
  MESSAGE("worst gradient relative difference fused vs separate " << worst);
}

TEST_CASE("backward_input then backward_weight on the GPU accumulates what the fused backward does") {
  if (!gpu::cuda_available()) {
    MESSAGE("no CUDA device: GPU check skipped");
    return;
  }
  const auto cfg = tiny();
  const int B = 4, T = cfg.context;
  auto tokens = random_tokens(B, T, cfg.vocab, 8), targets = random_tokens(B, T, cfg.vocab, 9);
  gpt_cuda fused(cfg, 0, cfg.layers, B), front(cfg, 0, 2, B), back(cfg, 2, cfg.layers, B);
  for (auto* m : {&fused, &front, &back})
    REQUIRE_GPU_OK(m->init());
  tensor_handle out, dx, act, none;
  REQUIRE_GPU_OK(fused.forward(1, tokens, targets, out));
  REQUIRE_GPU_OK(fused.backward(1, {}, 0.25f, dx));
  // Two microbatches in flight on the split ranges, weights deferred.
  for (int mb : {1, 2}) {
    REQUIRE_GPU_OK(front.forward(mb, tokens, {}, act));
    REQUIRE_GPU_OK(front.synchronize());
    REQUIRE_GPU_OK(back.forward(mb, act, targets, out));
  }
  for (int mb : {1, 2}) {
    REQUIRE_GPU_OK(back.backward_input(mb, {}, 0.125f, dx));
    REQUIRE_GPU_OK(back.synchronize());
    REQUIRE_GPU_OK(front.backward_input(mb, dx, 1.0f, none));
    CHECK(!none.defined());
  }
  CHECK(!back.backward_input(1, {}, 1.0f, dx).ok()); // already ran
  for (int mb : {2, 1}) {
    REQUIRE_GPU_OK(back.backward_weight(mb));
    REQUIRE_GPU_OK(front.backward_weight(mb));
  }
  CHECK(!front.backward_weight(1).ok()); // released
  for (auto* part : {&front, &back})
    for (const auto& n : part->param_names()) {
      std::vector<float> a, b;
      REQUIRE_GPU_OK(part->download_grad(n, a));
      REQUIRE_GPU_OK(fused.download_grad(n, b));
      CAPTURE(n);
      CHECK(rel_err(a, b.data(), b.size()) < 2e-3); // 2 × 0.125 = 0.25
    }
}
