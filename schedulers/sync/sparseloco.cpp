// SparseLoCo's error feedback and its sparse 2-bit parts (#13).
#include "schedulers/sync/sparseloco.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <stdexcept>

#include <fmt/format.h>

#include "schedulers/sync/exchange_policies.hpp"

namespace troupe::sched {

namespace {

/// The header: k, the entries kept of each full chunk.
constexpr std::size_t header_bytes = 4;

std::int64_t chunk_keep(std::int64_t k_full, std::int64_t len) {
  return std::min(k_full, len);
}

/// Bytes of one chunk's part: k u16 indices and k 2-bit codes.
std::size_t chunk_bytes(std::int64_t k) {
  return static_cast<std::size_t>(2 * k + (k + 3) / 4);
}

std::int64_t read_k(const quantized_rows& q) {
  std::uint32_t k = 0;
  std::memcpy(&k, q.data.data(), header_bytes);
  return k;
}

} // namespace

std::int64_t sparse_keep(double density, std::int64_t len) {
  return std::clamp<std::int64_t>(static_cast<std::int64_t>(std::ceil(density * static_cast<double>(len))), 1,
                                  std::max<std::int64_t>(len, 1));
}

quantized_rows sparse_topk_2bit(std::span<const float> x, double density, std::int64_t chunk) {
  if (chunk < 1 || chunk > 65536 || !(density > 0 && density <= 1))
    throw std::invalid_argument(fmt::format("sparse_topk_2bit: chunks of {} at density {}", chunk, density));
  quantized_rows q;
  q.format = wire_format::sparse2, q.values = static_cast<std::int64_t>(x.size()), q.cols = chunk;
  auto k_full = sparse_keep(density, chunk);
  auto k32 = static_cast<std::uint32_t>(k_full);
  q.data.resize(header_bytes);
  std::memcpy(q.data.data(), &k32, header_bytes);
  std::vector<std::uint32_t> order;
  for (std::int64_t c0 = 0; c0 < q.values; c0 += chunk) {
    auto len = std::min(chunk, q.values - c0);
    auto k = chunk_keep(k_full, len);
    const float* v = x.data() + c0;
    for (std::int64_t i = 0; i < len; ++i)
      if (!std::isfinite(v[i]))
        throw std::invalid_argument(fmt::format("sparse_topk_2bit: value {} at {} is not finite", v[i], c0 + i));
    order.resize(static_cast<std::size_t>(len));
    std::iota(order.begin(), order.end(), 0u);
    auto larger = [v](std::uint32_t a, std::uint32_t b) {
      float fa = std::fabs(v[a]), fb = std::fabs(v[b]);
      return fa > fb || (fa == fb && a < b);
    };
    std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), larger);
    order.resize(static_cast<std::size_t>(k));
    std::sort(order.begin(), order.end());
    double mean = 0;
    for (auto i : order)
      mean += std::fabs(v[i]);
    mean /= static_cast<double>(k);
    double lo = 0, hi = 0;
    int n_lo = 0, n_hi = 0;
    for (auto i : order)
      if (std::fabs(v[i]) > mean)
        hi += std::fabs(v[i]), ++n_hi;
      else
        lo += std::fabs(v[i]), ++n_lo;
    auto lo_f = static_cast<float>(n_lo ? lo / n_lo : 0.0), hi_f = static_cast<float>(n_hi ? hi / n_hi : lo_f);
    q.scales.push_back(lo_f), q.scales.push_back(hi_f);
    auto at = q.data.size();
    q.data.resize(at + chunk_bytes(k), 0);
    auto* idx = q.data.data() + at;
    auto* codes = idx + 2 * k;
    for (std::int64_t j = 0; j < k; ++j) {
      auto i = static_cast<std::uint16_t>(order[static_cast<std::size_t>(j)]);
      std::memcpy(idx + 2 * j, &i, 2);
      float val = v[i];
      unsigned code = (std::signbit(val) ? 2u : 0u) | (std::fabs(val) > mean ? 1u : 0u);
      codes[j / 4] = static_cast<std::uint8_t>(codes[j / 4] | (code << (2 * (j % 4))));
    }
  }
  return q;
}

expected<void> check_sparse(const quantized_rows& q) {
  if (q.cols > 65536)
    return make_sched_error(fmt::format("sparse chunks of {} values (at most 65536)", q.cols));
  if (q.data.size() < header_bytes)
    return make_sched_error("a sparse part without its header");
  auto k_full = read_k(q);
  if (k_full < 1 || k_full > q.cols)
    return make_sched_error(fmt::format("{} entries kept of chunks of {}", k_full, q.cols));
  std::size_t bytes = header_bytes, chunks = 0;
  for (std::int64_t c0 = 0; c0 < q.values; c0 += q.cols, ++chunks)
    bytes += chunk_bytes(chunk_keep(k_full, std::min(q.cols, q.values - c0)));
  if (q.data.size() != bytes || q.scales.size() != 2 * chunks)
    return make_sched_error(fmt::format("{} bytes and {} scales for {} values in chunks of {} keeping {}",
                                        q.data.size(), q.scales.size(), q.values, q.cols, k_full));
  const std::uint8_t* p = q.data.data() + header_bytes;
  for (std::int64_t c0 = 0; c0 < q.values; c0 += q.cols) {
    auto len = std::min(q.cols, q.values - c0);
    auto k = chunk_keep(k_full, len);
    for (std::int64_t j = 0; j < k; ++j) {
      std::uint16_t i;
      std::memcpy(&i, p + 2 * j, 2);
      if (i >= len)
        return make_sched_error(fmt::format("index {} in a chunk of {}", i, len));
    }
    p += chunk_bytes(k);
  }
  return {};
}

void accumulate_sparse(const quantized_rows& q, std::span<float> acc) {
  auto k_full = read_k(q);
  const std::uint8_t* p = q.data.data() + header_bytes;
  std::size_t chunk = 0;
  for (std::int64_t c0 = 0; c0 < q.values; c0 += q.cols, ++chunk) {
    auto k = chunk_keep(k_full, std::min(q.cols, q.values - c0));
    const std::uint8_t* codes = p + 2 * k;
    float lo = q.scales[2 * chunk], hi = q.scales[2 * chunk + 1];
    for (std::int64_t j = 0; j < k; ++j) {
      std::uint16_t i;
      std::memcpy(&i, p + 2 * j, 2);
      unsigned code = (codes[j / 4] >> (2 * (j % 4))) & 3u;
      float mag = code & 1u ? hi : lo;
      acc[static_cast<std::size_t>(c0 + i)] += code & 2u ? -mag : mag;
    }
    p += chunk_bytes(k);
  }
}

sparseloco::sparseloco(std::vector<float> start, double density, double beta, double lr)
    : global_(std::move(start)), error_(global_.size(), 0.0f), density_(density), beta_(beta), lr_(lr) {}

quantized_rows sparseloco::prepare(std::span<const float> local) {
  if (local.size() != global_.size())
    throw std::invalid_argument(
      fmt::format("sparseloco::prepare: {} local values for {}", local.size(), global_.size()));
  for (std::size_t i = 0; i < local.size(); ++i)
    error_[i] = static_cast<float>(beta_ * error_[i]) + (global_[i] - local[i]);
  auto sent = sparse_topk_2bit(error_, density_);
  std::vector<float> decoded(error_.size(), 0.0f);
  accumulate_sparse(sent, decoded);
  for (std::size_t i = 0; i < error_.size(); ++i)
    error_[i] -= decoded[i];
  return sent;
}

void sparseloco::perform(const std::vector<quantized_rows>& parts, std::span<float> local) {
  if (local.size() != global_.size())
    throw std::invalid_argument(
      fmt::format("sparseloco::perform: {} local values for {}", local.size(), global_.size()));
  auto mean = reduce_mean(parts);
  for (std::size_t i = 0; i < global_.size(); ++i) {
    global_[i] = static_cast<float>(global_[i] - lr_ * mean[i]);
    local[i] = global_[i];
  }
}

void sparseloco::save(sync_state& s) const {
  s.values["global"] = global_;
  s.values["error"] = error_;
}

void sparseloco::restore(const sync_state& s) {
  const auto& g = s.take("global", global_.size());
  error_ = s.take("error", error_.size());
  global_ = g;
}

namespace {

/// SparseLoCo (Sarfi et al. 2025, arXiv 2508.15706): each replica's sparse
/// 2-bit part goes to every other replica (a sparse all-gather), and each
/// applies the mean of all of them.
class sparseloco_policy : public gathering_policy {
public:
  explicit sparseloco_policy(const sync_setup& s)
      : gathering_policy(s, "sparseloco"),
        math_(s.start.at(0), option_number(s.spec, "density"), s.spec.outer.momentum, s.spec.outer.lr) {}
  std::vector<sync_send> prepare(int f, std::int64_t step, std::span<const float> local) override {
    if (f != 0)
      throw std::invalid_argument(fmt::format("sparseloco: fragment {} prepared (it has one)", f));
    return gather(all_replicas(setup_.replicas), step, math_.prepare(local));
  }

private:
  void apply(std::vector<quantized_rows>& parts, std::span<float> local) override { math_.perform(parts, local); }
  void save_own(sync_state& s) const override { math_.save(s); }
  void restore_own(const sync_state& s) override { math_.restore(s); }

  sparseloco math_;
};

method_settings settings() {
  // SparseLoCo (Sarfi et al. 2025, arXiv 2508.15706): α = 1 (`lr`) and the
  // error-feedback decay β = 0.95 (`momentum`); H = 50, the example.
  auto options = local_sgd_options(50, {1.0, 0.95, false});
  options.pop_back(); // its values travel as top-k in 2 bits, not quantized rows
  options.push_back(number_setting_spec("density", "the share of each chunk's entries sent (paper: 1–3%)", 0.02,
                                        -unbounded, unbounded));
  auto problems = [](const local_update_spec& l, const local_update_context&) {
    auto out = outer_problems(l);
    if (double density = option_number(l, "density"); !(density > 0 && density <= 1))
      out.push_back(
        {"density", fmt::format("must be above 0 and at most 1 (the share of each chunk sent), got {}", density)});
    return out;
  };
  return {std::move(options), nullptr, problems};
}

} // namespace

void register_sparseloco(const sync_registrar& add) {
  add("sparseloco", {"SparseLoCo: error feedback, top-k per chunk in 2 bits, a sparse all-gather",
                     [](const local_update_spec&) { return param_fragments(1); },
                     [](const local_update_spec& s) { return periodic_schedule({s.sync_every}); },
                     [](const sync_setup& s) { return std::make_unique<sparseloco_policy>(s); }, settings(), nullptr,
                     nullptr, /*rejoins=*/true,
                     // Each replica's residual is its own: a joiner's starts at zero (a
                     // copy of the donor's would send the donor's residual twice).
                     /*own=*/{"error"}});
}

} // namespace troupe::sched
