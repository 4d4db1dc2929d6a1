// The sync-method registry, the periodic schedule and the mean exchange (#13).
#include "schedulers/sync_policy.hpp"

#include <algorithm>
#include <map>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>

namespace troupe::sched {

void register_builtin_sync_methods(const std::function<void(std::string, sync_method)>& add); // sync_builtin.cpp

namespace {

struct registry {
  std::mutex mu;
  std::map<std::string, sync_method, std::less<>> methods;
  std::vector<std::string> order;
};

registry& methods() {
  static registry* r = [] {
    auto* made = new registry;  // never destroyed: plugins' methods point into their libraries
    register_builtin_sync_methods([made](std::string name, sync_method m) {
      made->order.push_back(name);
      made->methods[std::move(name)] = std::move(m);
    });
    return made;
  }();
  return *r;
}

class periodic : public sync_schedule {
public:
  explicit periodic(std::vector<int> every) : every_(std::move(every)) {
    for (int e : every_)
      if (e < 1)
        throw std::invalid_argument(fmt::format("periodic_schedule: a period of {} steps", e));
  }
  std::vector<fragment_event> after_inner_step() override {
    ++step_;
    std::vector<fragment_event> out;
    for (std::size_t f = 0; f < every_.size(); ++f)
      if (step_ % every_[f] == 0)
        out.push_back({fragment_event::kind::prepare, static_cast<int>(f)});
    auto n = out.size();
    for (std::size_t i = 0; i < n; ++i)
      out.push_back({fragment_event::kind::perform, out[i].fragment});
    return out;
  }

private:
  std::vector<int> every_;
  long step_ = 0;
};

} // namespace

void register_sync_method(std::string name, sync_method method) {
  auto& r = methods();
  std::lock_guard lock(r.mu);
  if (!r.methods.contains(name))
    r.order.push_back(name);
  r.methods[std::move(name)] = std::move(method);
}

const sync_method* find_sync_method(std::string_view name) {
  auto& r = methods();
  std::lock_guard lock(r.mu);
  auto it = r.methods.find(name);
  return it == r.methods.end() ? nullptr : &it->second;
}

std::vector<std::string> sync_method_names() {
  auto& r = methods();
  std::lock_guard lock(r.mu);
  return r.order;
}

std::vector<fragment_plan> param_fragments(int pieces) {
  std::vector<fragment_plan> out;
  for (int i = 0; i < pieces; ++i)
    out.push_back({fragment_content::params, i, pieces});
  return out;
}

std::unique_ptr<sync_schedule> periodic_schedule(std::vector<int> every) {
  return std::make_unique<periodic>(std::move(every));
}

mean_exchange::mean_exchange(std::vector<int> members, int self, wire_format format, std::int64_t row)
    : members_(std::move(members)), format_(format), row_(row) {
  if (members_.empty() || !std::is_sorted(members_.begin(), members_.end()) || row < 1)
    throw std::invalid_argument("mean_exchange: members must be listed in ascending order, rows at least 1 value");
  self_ = index_of(self);
  own_parts_.resize(members_.size());
  have_.assign(members_.size(), false);
  chunks_left_ = members_.size();
}

std::size_t mean_exchange::index_of(int replica) const {
  auto it = std::lower_bound(members_.begin(), members_.end(), replica);
  if (it == members_.end() || *it != replica)
    throw std::invalid_argument(fmt::format("mean_exchange: replica {} is not a member", replica));
  return static_cast<std::size_t>(it - members_.begin());
}

std::pair<std::int64_t, std::int64_t> mean_exchange::chunk(std::size_t j) const {
  // Whole rows, as even as they divide: member j owns rows [rows·j/n, rows·(j+1)/n).
  auto rows = (values_ + row_ - 1) / row_;
  auto n = static_cast<std::int64_t>(members_.size()), i = static_cast<std::int64_t>(j);
  return {std::min(values_, rows * i / n * row_), std::min(values_, rows * (i + 1) / n * row_)};
}

std::vector<sync_send> mean_exchange::start(std::span<const float> values) {
  if (values_ >= 0)
    throw std::logic_error("mean_exchange: started twice");
  values_ = static_cast<std::int64_t>(values.size());
  mean_.assign(values.size(), 0.0f);
  std::vector<sync_send> out;
  for (std::size_t j = 0; j < members_.size(); ++j) {
    auto [b, e] = chunk(j);
    auto q = quantize_rows(values.subspan(static_cast<std::size_t>(b), static_cast<std::size_t>(e - b)), row_, format_);
    if (j == self_)
      own_parts_[self_] = std::move(q);
    else
      out.push_back({members_[j], 0, std::move(q)});
  }
  auto more = reduce_own();
  out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  return out;
}

std::vector<sync_send> mean_exchange::receive(int from, int round, quantized_rows part) {
  if (values_ < 0)
    throw std::logic_error("mean_exchange: a message before start");
  auto i = index_of(from);
  auto j = round == 0 ? self_ : i;  // round 0: a part of this member's chunk; round 1: owner i's mean
  auto [b, e] = chunk(j);
  if (round < 0 || round > 1 || i == self_ || part.values != e - b)
    throw std::invalid_argument(fmt::format("mean_exchange: round {} from replica {} with {} values (chunk of {})",
                                            round, from, part.values, e - b));
  if (auto what = check_rows(part); !what.empty())
    throw std::invalid_argument(fmt::format("mean_exchange: a malformed part from replica {}: {}", from, what));
  if (round == 0) {
    if (own_parts_[i] || have_[self_])
      throw std::invalid_argument(fmt::format("mean_exchange: replica {} sent its part twice", from));
    own_parts_[i] = std::move(part);
    return reduce_own();
  }
  if (have_[i])
    throw std::invalid_argument(fmt::format("mean_exchange: replica {} sent its mean twice", from));
  accumulate(part, std::span<float>(mean_).subspan(static_cast<std::size_t>(b), static_cast<std::size_t>(e - b)));
  have_[i] = true, --chunks_left_;
  return {};
}

std::vector<sync_send> mean_exchange::reduce_own() {
  for (const auto& p : own_parts_)
    if (!p)
      return {};
  std::vector<quantized_rows> parts;
  for (auto& p : own_parts_)
    parts.push_back(std::move(*p));
  own_parts_.assign(members_.size(), std::nullopt);
  auto m = reduce_mean(parts);  // in member order: the same sums on every replica
  auto q = quantize_rows(m, row_, format_);
  auto [b, e] = chunk(self_);
  accumulate(q, std::span<float>(mean_).subspan(static_cast<std::size_t>(b), static_cast<std::size_t>(e - b)));
  have_[self_] = true, --chunks_left_;
  std::vector<sync_send> out;
  for (std::size_t j = 0; j < members_.size(); ++j)
    if (j != self_)
      out.push_back({members_[j], 1, q});
  return out;
}

std::vector<float> mean_exchange::take() {
  if (!done())
    throw std::logic_error("mean_exchange: the mean taken before every chunk arrived");
  return std::move(mean_);
}

} // namespace troupe::sched
