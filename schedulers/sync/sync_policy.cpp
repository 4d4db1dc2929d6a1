// The sync-method registry, the periodic schedule and the mean exchange (#13).
#include "schedulers/sync/sync_policy.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "schedulers/named_registry.hpp"

namespace troupe::sched {

void register_builtin_sync_methods(const sync_registrar& add); // sync_builtin.cpp

namespace {

named_registry<sync_method>& methods() {
  static auto* r = [] {
    auto* made = new named_registry<sync_method>; // never destroyed: plugins' methods point into their libraries
    register_builtin_sync_methods(
      [made](std::string name, sync_method m) { made->add(std::move(name), std::move(m)); });
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
  methods().add(std::move(name), std::move(method));
}

const sync_method* find_sync_method(std::string_view name) {
  return methods().find(name);
}

std::vector<std::string> sync_method_names() {
  return methods().names();
}

std::vector<fragment_plan> param_fragments(int pieces) {
  std::vector<fragment_plan> out;
  for (int i = 0; i < pieces; ++i)
    out.push_back({fragment_content::params, i, pieces});
  return out;
}

int piece_of(std::int64_t before, std::int64_t total, int pieces) {
  return static_cast<int>(std::min<std::int64_t>(pieces - 1, before * pieces / std::max<std::int64_t>(total, 1)));
}

std::vector<std::size_t> fragment_sizes(const std::vector<fragment_plan>& plan,
                                        const std::vector<std::int64_t>& tensors) {
  std::int64_t total = 0;
  for (auto n : tensors)
    total += n;
  std::vector<std::size_t> out;
  for (const auto& f : plan) {
    std::int64_t n = 0, before = 0;
    if (f.content == fragment_content::params)
      for (auto t : tensors) {
        n += piece_of(before, total, f.pieces) == f.piece ? t : 0;
        before += t;
      }
    out.push_back(static_cast<std::size_t>(n));
  }
  return out;
}

std::unique_ptr<sync_schedule> periodic_schedule(std::vector<int> every) {
  return std::make_unique<periodic>(std::move(every));
}

std::vector<sync_send> sync_policy::lose(int r) {
  throw std::runtime_error(fmt::format("this local-update method cannot go on without replica {}: it has no rule for "
                                       "a lost replica",
                                       r));
}

long performs_through(const sync_method& method, const local_update_spec& spec, std::int64_t steps) {
  auto schedule = method.schedule(spec);
  long n = 0;
  for (std::int64_t s = 0; s < steps; ++s)
    for (auto e : schedule->after_inner_step())
      n += e.what == fragment_event::kind::perform;
  return n;
}

std::int64_t first_quiet_step(const sync_method& method, const local_update_spec& spec, std::int64_t from,
                              std::int64_t end) {
  if (from <= 0)
    return end > 0 ? 0 : -1;
  auto schedule = method.schedule(spec);
  std::set<int> under_way;
  for (std::int64_t steps = 1; steps < end; ++steps) {
    for (auto e : schedule->after_inner_step())
      if (e.what == fragment_event::kind::prepare)
        under_way.insert(e.fragment);
      else
        under_way.erase(e.fragment);
    if (steps >= from && under_way.empty())
      return steps;
  }
  return -1;
}

void forget_own(const sync_method& method, sync_state& state) {
  for (const auto& name : method.own)
    if (auto v = state.values.find(name); v != state.values.end())
      std::fill(v->second.begin(), v->second.end(), 0.0f);
}

void sync_policy::rejoin(int r, std::int64_t) {
  throw std::runtime_error(
    fmt::format("this local-update method cannot take replica {} back: it has no rule for a rejoining replica", r));
}

mean_exchange::mean_exchange(std::vector<int> members, int self, wire_format format, std::int64_t row, bool sum)
    : members_(std::move(members)), format_(format), row_(row), sum_(sum) {
  if (members_.empty() || !std::is_sorted(members_.begin(), members_.end()) || row < 1)
    throw std::invalid_argument("mean_exchange: members must be listed in ascending order, rows at least 1 value");
  self_ = index_of(self);
  auto n = members_.size();
  alive_.assign(n, true);
  parts_.assign(n, std::vector<std::optional<quantized_rows>>(n));
  reduced_.assign(n, false);
  held_.assign(n, std::nullopt);
}

std::size_t mean_exchange::index_of(int replica) const {
  auto it = std::lower_bound(members_.begin(), members_.end(), replica);
  if (it == members_.end() || *it != replica)
    throw std::invalid_argument(fmt::format("mean_exchange: replica {} is not a member", replica));
  return static_cast<std::size_t>(it - members_.begin());
}

std::size_t mean_exchange::owner(std::size_t c) const {
  if (alive_[c])
    return c;
  for (std::size_t m = 0; m < alive_.size(); ++m) // a lost member's chunks: the lowest member still here
    if (alive_[m])
      return m;
  return self_;
}

std::pair<std::int64_t, std::int64_t> mean_exchange::chunk(std::size_t j) const {
  // Whole rows, as even as they divide: member j owns rows [rows·j/n, rows·(j+1)/n).
  auto rows = (values_ + row_ - 1) / row_;
  auto n = static_cast<std::int64_t>(members_.size()), i = static_cast<std::int64_t>(j);
  return {std::min(values_, rows * i / n * row_), std::min(values_, rows * (i + 1) / n * row_)};
}

bool mean_exchange::done() const noexcept {
  return values_ >= 0 && std::all_of(held_.begin(), held_.end(), [](const auto& h) { return h.has_value(); });
}

std::vector<sync_send> mean_exchange::start(std::span<const float> values) {
  if (values_ >= 0)
    throw std::logic_error("mean_exchange: started twice");
  values_ = static_cast<std::int64_t>(values.size());
  mean_.assign(values.size(), 0.0f);
  std::vector<sync_send> out;
  for (std::size_t j = 0; j < members_.size(); ++j) {
    auto [b, e] = chunk(j);
    own_.push_back(
      quantize_rows(values.subspan(static_cast<std::size_t>(b), static_cast<std::size_t>(e - b)), row_, format_));
    if (auto o = owner(j); o == self_)
      parts_[j][self_] = own_.back();
    else
      out.push_back({members_[o], 0, static_cast<int>(j), own_.back()});
  }
  auto more = reduce_ready();
  out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  return out;
}

std::vector<sync_send> mean_exchange::receive(int from, int round, int piece, quantized_rows part) {
  if (values_ < 0)
    throw std::logic_error("mean_exchange: a message before start");
  auto i = index_of(from);
  if (round < 0 || round > 1 || piece < 0 || static_cast<std::size_t>(piece) >= members_.size() || i == self_)
    throw std::invalid_argument(fmt::format("mean_exchange: round {}, piece {} from replica {}", round, piece, from));
  auto c = static_cast<std::size_t>(piece);
  auto [b, e] = chunk(c);
  if (part.values != e - b)
    throw std::invalid_argument(fmt::format("mean_exchange: {} values of piece {} from replica {} (a chunk of {})",
                                            part.values, piece, from, e - b));
  if (auto ok = check_rows(part); !ok)
    throw std::invalid_argument(
      fmt::format("mean_exchange: a malformed part from replica {}: {}", from, ok.error().message));
  if (!alive_[i])
    return {}; // from a member this one knows is lost: too late, its chunks are another's now
  if (round == 0) {
    // A part for this chunk's owner: this member, or this member once it learns
    // that the chunk's owner is gone. A repeat after a loss is the same part;
    // once the chunk is reduced here, no part counts any more.
    if (!reduced_[c] && !parts_[c][i])
      parts_[c][i] = std::move(part);
    return reduce_ready();
  }
  // A mean of the chunk: from its owner, or, after its owner was lost, from a
  // member that had the lost owner's mean, reporting it to the new owner. The
  // first counts: every copy of a chunk's mean is the same bytes.
  if (!held_[c]) {
    accumulate(part, std::span<float>(mean_).subspan(static_cast<std::size_t>(b), static_cast<std::size_t>(e - b)));
    held_[c] = std::move(part);
  }
  return reduce_ready();
}

std::vector<sync_send> mean_exchange::reduce_ready() {
  std::vector<sync_send> out;
  for (std::size_t c = 0; c < members_.size(); ++c) {
    if (reduced_[c] || owner(c) != self_)
      continue;
    if (!held_[c]) {                     // no mean of this chunk anywhere yet: average the living members' parts
      std::vector<quantized_rows> parts; // in member order: the same sums on every replica
      bool all = true;
      for (std::size_t m = 0; m < members_.size() && all; ++m)
        if (alive_[m]) {
          all = parts_[c][m].has_value();
          if (all)
            parts.push_back(*parts_[c][m]);
        }
      if (!all)
        continue;
      auto q = quantize_rows(sum_ ? reduce_sum(parts) : reduce_mean(parts), row_, format_);
      auto [b, e] = chunk(c);
      accumulate(q, std::span<float>(mean_).subspan(static_cast<std::size_t>(b), static_cast<std::size_t>(e - b)));
      held_[c] = std::move(q);
    }
    // Once a chunk's mean exists it is the chunk's mean for every member: a lost
    // owner's, held here or reported by a member that had it, goes out as it is.
    // Its parts are no longer needed (an owner that is here owns it for good).
    reduced_[c] = true;
    for (auto& p : parts_[c])
      p.reset();
    for (std::size_t m = 0; m < members_.size(); ++m)
      if (m != self_ && alive_[m])
        out.push_back({members_[m], 1, static_cast<int>(c), *held_[c]});
  }
  return out;
}

std::vector<sync_send> mean_exchange::lose(int replica) {
  auto r = index_of(replica);
  if (!alive_[r])
    return {};
  if (r == self_)
    throw std::invalid_argument(fmt::format("mean_exchange: replica {} told of its own loss", replica));
  std::vector<std::size_t> before(members_.size());
  for (std::size_t c = 0; c < members_.size(); ++c)
    before[c] = owner(c);
  alive_[r] = false;
  std::vector<sync_send> out;
  if (values_ >= 0)
    for (std::size_t c = 0; c < members_.size(); ++c)
      if (auto o = owner(c); o != before[c]) {
        if (o == self_) {
          parts_[c][self_] = own_[c];
        } else {
          // The lost owner's mean, if it reached this member, goes first: the
          // new owner then has it before this member's part, and a mean that one
          // survivor has (and may already have applied) becomes every survivor's.
          if (held_[c])
            out.push_back({members_[o], 1, static_cast<int>(c), *held_[c]});
          // Then the part again: it may have gone to the lost member, and the new owner needs every part.
          out.push_back({members_[o], 0, static_cast<int>(c), own_[c]});
        }
      }
  if (values_ >= 0) {
    auto more = reduce_ready();
    out.insert(out.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  return out;
}

std::vector<float> mean_exchange::take() {
  if (!done() || taken_)
    throw std::logic_error("mean_exchange: the mean taken before every chunk arrived, or twice");
  taken_ = true;
  return std::move(mean_); // what answers later (held_, own_) stays
}

} // namespace troupe::sched
