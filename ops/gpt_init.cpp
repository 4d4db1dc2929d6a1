// GPT parameters: names, shapes and GPT-2 initialisation from a per-parameter seed,
// so any layer range draws exactly the weights the whole model draws.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

#include <fmt/format.h>

#include "ops/gpt_impl.hpp"
#include "runtime/tensor/random.hpp"

namespace troupe::ops {

namespace {

std::uint64_t name_hash(std::string_view name) {
  std::uint64_t h = 0xcbf29ce484222325ull; // FNV-1a
  for (char ch : name)
    h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001b3ull;
  return h;
}

/// Fills `t` with normal(0, stddev) from a stream seeded by (seed, name): Box-Muller.
void fill_normal(tensor_handle& t, std::uint64_t seed, std::string_view name, double stddev) {
  std::uint64_t state = seed ^ name_hash(name);
  splitmix64(state);
  float* x = t.data<float>();
  const long n = t.numel();
  for (long i = 0; i < n; i += 2) {
    double u1 = (double(splitmix64(state) >> 11) + 1.0) * 0x1.0p-53; // (0, 1]
    double u2 = double(splitmix64(state) >> 11) * 0x1.0p-53;
    double r = std::sqrt(-2.0 * std::log(u1)) * stddev;
    x[i] = float(r * std::cos(2.0 * std::numbers::pi * u2));
    if (i + 1 < n)
      x[i + 1] = float(r * std::sin(2.0 * std::numbers::pi * u2));
  }
}

void fill_value(tensor_handle& t, float v) {
  float* x = t.data<float>();
  for (long i = 0; i < t.numel(); ++i)
    x[i] = v;
}

} // namespace

std::vector<gpt_param_spec> gpt_param_specs(const gpt_config& cfg, int begin, int end) {
  const std::int64_t c = cfg.d_model;
  const double std0 = 0.02, std_resid = 0.02 / std::sqrt(2.0 * cfg.layers);
  std::vector<gpt_param_spec> out;
  auto add = [&](std::string name, shape_t shape, double stddev, float fill) {
    out.push_back({std::move(name), shape, stddev, fill});
  };
  if (begin == 0) {
    add("wte", {cfg.vocab, c}, std0, 0);
    add("wpe", {cfg.context, c}, std0, 0);
  }
  for (int l = begin; l < end; ++l) {
    auto n = [&](const char* suffix) { return fmt::format("h.{}.{}", l, suffix); };
    add(n("ln_1.weight"), {c}, 0, 1.0f);
    add(n("ln_1.bias"), {c}, 0, 0.0f);
    add(n("attn.c_attn.weight"), {3 * c, c}, std0, 0);
    add(n("attn.c_attn.bias"), {3 * c}, 0, 0.0f);
    add(n("attn.c_proj.weight"), {c, c}, std_resid, 0);
    add(n("attn.c_proj.bias"), {c}, 0, 0.0f);
    add(n("ln_2.weight"), {c}, 0, 1.0f);
    add(n("ln_2.bias"), {c}, 0, 0.0f);
    add(n("mlp.c_fc.weight"), {4 * c, c}, std0, 0);
    add(n("mlp.c_fc.bias"), {4 * c}, 0, 0.0f);
    add(n("mlp.c_proj.weight"), {c, 4 * c}, std_resid, 0);
    add(n("mlp.c_proj.bias"), {c}, 0, 0.0f);
  }
  if (holds_head(cfg, begin, end)) {
    add("ln_f.weight", {c}, 0, 1.0f);
    add("ln_f.bias", {c}, 0, 0.0f);
    add("lm_head.weight", {cfg.vocab, c}, std0, 0);
  }
  return out;
}

void gpt_range::impl::init_params() {
  for (auto& p : gpt_param_specs(cfg, begin, end)) {
    auto t = tensor_handle::empty(p.shape);
    if (p.stddev > 0)
      fill_normal(t, cfg.seed, p.name, p.stddev);
    else
      fill_value(t, p.fill);
    grads.push_back({p.name, tensor_handle::zeros(p.shape)});
    params.push_back({std::move(p.name), t});
  }
}

std::size_t gpt_range::cache_bytes(int batch, int seq) const {
  const auto& cfg = impl_->cfg;
  const std::size_t bt = std::size_t(batch) * std::size_t(seq), c = std::size_t(cfg.d_model);
  // Per block: x, ln1, qkv (3), att, x_mid, ln2, fc (4), act (4) = 16 BTC; 4 row
  // statistics; attention's per-head row statistics (lse).
  std::size_t per_block = 16 * bt * c + 4 * bt + bt * std::size_t(cfg.heads);
  std::size_t floats = per_block * std::size_t(impl_->local_layers());
  if (impl_->last())
    floats += 2 * bt * c + 2 * bt + bt * std::size_t(cfg.vocab); // x, lnf, stats, dlogits
  if (impl_->first())
    floats += bt; // tokens
  return floats * 4;
}

double gpt_step_flops(const gpt_config& cfg, int batch, int seq) {
  const double c = cfg.d_model, t = seq;
  double per_token = cfg.layers * (24.0 * c * c + 4.0 * t * c) + 2.0 * c * cfg.vocab;
  return 3.0 * per_token * double(batch) * t;
}

std::int64_t gpt_parameter_count(const gpt_config& cfg, int begin, int end) {
  std::int64_t n = 0;
  for (const auto& p : gpt_param_specs(cfg, begin, std::max(begin, end)))
    n += p.shape.numel();
  return n;
}

} // namespace troupe::ops
