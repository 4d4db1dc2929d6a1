// The outer step of DiLoCo-style training as plain arithmetic (#13).
#include "schedulers/sync/outer_optimizer.hpp"

#include <stdexcept>

#include <fmt/format.h>

namespace troupe::sched {

namespace {

void same_size(std::size_t a, std::size_t b, const char* what) {
  if (a != b)
    throw std::invalid_argument(fmt::format("{}: {} values against {}", what, a, b));
}

} // namespace

void outer_sgd::step(std::span<float> params, std::span<const float> grad) {
  same_size(params.size(), buf_.size(), "outer_sgd::step params");
  same_size(grad.size(), buf_.size(), "outer_sgd::step grad");
  auto mu = static_cast<float>(spec_.momentum), lr = static_cast<float>(spec_.lr);
  bool first = steps_++ == 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    float g = grad[i], d = g;
    if (mu != 0.0f) {
      buf_[i] = first ? g : mu * buf_[i] + g;
      d = spec_.nesterov ? g + mu * buf_[i] : buf_[i];
    }
    params[i] -= lr * d;
  }
}

void outer_sgd::load(std::vector<float> momentum, long steps) {
  same_size(momentum.size(), buf_.size(), "outer_sgd::load momentum");
  buf_ = std::move(momentum);
  steps_ = steps;
}

void pseudo_gradient(std::span<const float> global, std::span<const float> local, std::span<float> out) {
  same_size(global.size(), local.size(), "pseudo_gradient");
  same_size(out.size(), local.size(), "pseudo_gradient out");
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = global[i] - local[i];
}

void mix(std::span<const float> global, std::span<float> local, double alpha) {
  same_size(global.size(), local.size(), "mix");
  auto a = static_cast<float>(alpha);
  for (std::size_t i = 0; i < local.size(); ++i)
    local[i] = global[i] + a * (local[i] - global[i]);
}

std::vector<float> mean(const std::vector<std::vector<float>>& parts) {
  if (parts.empty())
    throw std::invalid_argument("mean of no parts");
  std::vector<float> out(parts.front().size(), 0.0f);
  for (const auto& p : parts) {
    same_size(p.size(), out.size(), "mean");
    for (std::size_t i = 0; i < out.size(); ++i)
      out[i] += p[i];
  }
  auto n = static_cast<float>(parts.size());
  for (auto& v : out)
    v /= n;
  return out;
}

} // namespace troupe::sched
