// The built-in local-update methods as sync policies (#13): DiLoCo, Streaming
// DiLoCo, NoLoCo, DES-LOC and SparseLoCo. Each exchanges only with the replicas
// its rule names; none waits on a global step.
#include <algorithm>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "schedulers/noloco.hpp"
#include "schedulers/sparseloco.hpp"
#include "schedulers/streaming_diloco.hpp"
#include "schedulers/sync_policy.hpp"

namespace troupe::sched {

namespace {

std::vector<int> all_replicas(int n) {
  std::vector<int> out(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i)
    out[static_cast<std::size_t>(i)] = i;
  return out;
}

wire_format format_of(const local_update_spec& spec) {
  auto f = parse_wire_format(spec.quantize);
  if (!f)
    throw std::invalid_argument(fmt::format("local_update.quantize: unknown format '{}'", spec.quantize));
  return *f;
}

/// Fragment f's exchange under way in `m`, or a clear error.
template <class Map>
auto& under_way(Map& m, int f, const char* who) {
  auto it = m.find(f);
  if (it == m.end())
    throw std::invalid_argument(fmt::format("{}: fragment {} has no exchange under way", who, f));
  return it->second;
}

/// torchft's fragment schedule (streaming_diloco.hpp) behind the schedule interface.
class fragment_schedule_of : public sync_schedule {
public:
  explicit fragment_schedule_of(const local_update_spec& spec) : s_(make_fragment_schedule(spec)) {}
  std::vector<fragment_event> after_inner_step() override { return s_.after_inner_step(); }

private:
  fragment_schedule s_;
};

/// Values averaged over every replica by a reduce-scatter and all-gather, one
/// exchange per fragment under way. DiLoCo's and Streaming DiLoCo's pseudo-
/// gradients (then the outer step), DES-LOC's parameters and moments (then
/// the mean is the new value).
class averaging_policy : public sync_policy {
public:
  averaging_policy(const sync_setup& s, bool outer_step)
      : setup_(s), format_(format_of(s.spec)) {
    if (outer_step)
      diloco_.emplace(s.spec, s.start);
  }
  std::vector<sync_send> prepare(int f, std::int64_t, std::span<const float> local) override {
    if (auto it = ex_.find(f); it != ex_.end() && !it->second.taken())
      throw std::invalid_argument(fmt::format("{}: fragment {} prepared twice", setup_.spec.algorithm, f));
    auto& ex = ex_.insert_or_assign(f, mean_exchange(all_replicas(setup_.replicas), setup_.replica, format_,
                                                     sync_row_values))
                 .first->second;
    for (int r : lost_)
      ex.lose(r);  // before it starts: nothing to send again
    if (diloco_)
      return ex.start(diloco_->prepare(f, local));  // the pseudo-gradient global − local
    return ex.start(local);
  }
  std::vector<sync_send> receive(int f, int from, int round, int piece, quantized_rows part) override {
    return under_way(ex_, f, "averaging").receive(from, round, piece, std::move(part));
  }
  bool ready(int f) const override {
    auto it = ex_.find(f);
    return it != ex_.end() && it->second.done() && !it->second.taken();
  }
  void perform(int f, std::span<float> local) override {
    auto mean = under_way(ex_, f, "averaging").take();  // kept: members that learn of a loss later still ask it
    if (mean.size() != local.size())
      throw std::invalid_argument(fmt::format("{}: {} averaged values for {} local ones", setup_.spec.algorithm,
                                              mean.size(), local.size()));
    if (diloco_)
      diloco_->perform(f, mean, local);  // outer SGD from the saved global, then α mixing
    else
      std::copy(mean.begin(), mean.end(), local.begin());
    ++exchanges_;
  }
  long exchanges() const override { return exchanges_; }
  std::vector<sync_send> lose(int r) override {
    lost_.push_back(r);
    std::vector<sync_send> out;
    for (auto& [f, ex] : ex_)  // the exchange under way, and the last one applied
      for (auto& s : ex.lose(r)) {
        s.fragment = f;
        out.push_back(std::move(s));
      }
    return out;
  }

private:
  sync_setup setup_;
  wire_format format_;
  std::optional<streaming_diloco> diloco_;
  std::map<int, mean_exchange> ex_;
  std::vector<int> lost_;
  long exchanges_ = 0;
};

/// Parts gathered from a set of members, one each, each member's decoded at the end.
struct gathered {
  std::vector<int> members;
  std::vector<std::optional<quantized_rows>> parts;
  std::size_t index_of(int r, const char* who) const {
    auto it = std::find(members.begin(), members.end(), r);
    if (it == members.end())
      throw std::invalid_argument(fmt::format("{}: a part from replica {}, not of this exchange", who, r));
    return static_cast<std::size_t>(it - members.begin());
  }
  void put(int r, quantized_rows q, std::int64_t values, const char* who) {
    auto i = index_of(r, who);
    if (parts[i])
      throw std::invalid_argument(fmt::format("{}: replica {} sent its part twice", who, r));
    if (auto what = check_rows(q); !what.empty() || q.values != values)
      throw std::invalid_argument(fmt::format("{}: a malformed part from replica {}: {} values of {} {}", who, r,
                                              q.values, values, what));
    parts[i] = std::move(q);
  }
  bool complete() const {
    return std::all_of(parts.begin(), parts.end(), [](const auto& p) { return p.has_value(); });
  }
  /// A member left: its part is no longer waited for (nor used, if it came).
  void drop(int r) {
    auto it = std::find(members.begin(), members.end(), r);
    if (it == members.end())
      return;
    parts.erase(parts.begin() + (it - members.begin()));
    members.erase(it);
  }
};

/// NoLoCo (Kolehmainen et al. 2025, arXiv 2506.10911; jkolehm/noloco): no
/// collective. Every H steps the replicas split into groups from a permutation
/// seeded by the step; each member sends its fast (local) and slow weights to
/// the other members of its group only, and takes noloco_outer_step.
class noloco_policy : public sync_policy {
public:
  explicit noloco_policy(const sync_setup& s)
      : setup_(s), format_(format_of(s.spec)), slow_(s.start.at(0)), momentum_(slow_.size(), 0.0f) {}
  std::vector<sync_send> prepare(int f, std::int64_t step, std::span<const float> local) override {
    if (f != 0 || local.size() != slow_.size() || current_)
      throw std::invalid_argument(fmt::format("noloco: fragment {} of {} values prepared", f, local.size()));
    gathered g;
    // The groups of all replicas, lost ones included: every member derives the
    // same ones whether or not it has heard of a loss yet; then the lost leave.
    for (auto& group : noloco_groups(setup_.replicas, setup_.spec.group, step, setup_.seed))
      if (std::find(group.begin(), group.end(), setup_.replica) != group.end())
        g.members = group;
    g.parts.resize(g.members.size());
    for (int r : lost_)
      g.drop(r);
    std::vector<float> both(local.begin(), local.end());
    both.insert(both.end(), slow_.begin(), slow_.end());
    auto q = quantize_rows(both, sync_row_values, format_);
    std::vector<sync_send> out;
    for (int m : g.members)
      if (m != setup_.replica)
        out.push_back({m, 0, 0, q});
    g.parts[g.index_of(setup_.replica, "noloco")] = std::move(q);
    current_ = std::move(g);
    return out;
  }
  std::vector<sync_send> receive(int f, int from, int, int, quantized_rows part) override {
    if (std::find(lost_.begin(), lost_.end(), from) != lost_.end())
      return {};  // a lost member's last part, late: left out
    if (f != 0 || !current_)
      throw std::invalid_argument(fmt::format("noloco: a part of fragment {} with no exchange under way", f));
    current_->put(from, std::move(part), static_cast<std::int64_t>(2 * slow_.size()), "noloco");
    return {};
  }
  std::vector<sync_send> lose(int r) override {
    lost_.push_back(r);
    if (current_)
      current_->drop(r);
    return {};
  }
  bool ready(int) const override { return current_ && current_->complete(); }
  void perform(int, std::span<float> local) override {
    if (!ready(0))
      throw std::logic_error("noloco: performed before every member's part arrived");
    auto n = slow_.size();
    std::vector<std::vector<float>> decoded;
    for (auto& p : current_->parts) {
      decoded.emplace_back(2 * n, 0.0f);
      accumulate(*p, decoded.back());
    }
    std::vector<std::span<const float>> fast, slow;
    for (const auto& d : decoded)
      fast.emplace_back(d.data(), n), slow.emplace_back(d.data() + n, n);
    noloco_outer_step(fast, slow, momentum_, slow_, local, setup_.spec.outer.lr, setup_.spec.outer.momentum);
    current_.reset();
    ++exchanges_;
  }
  long exchanges() const override { return exchanges_; }

private:
  sync_setup setup_;
  wire_format format_;
  std::vector<float> slow_, momentum_;
  std::optional<gathered> current_;
  std::vector<int> lost_;
  long exchanges_ = 0;
};

/// SparseLoCo (Sarfi et al. 2025, arXiv 2508.15706): each replica's sparse
/// 2-bit part goes to every other replica (a sparse all-gather), and each
/// applies the mean of all of them.
class sparseloco_policy : public sync_policy {
public:
  explicit sparseloco_policy(const sync_setup& s)
      : setup_(s), math_(s.start.at(0), s.spec.density, s.spec.outer.momentum, s.spec.outer.lr) {}
  std::vector<sync_send> prepare(int f, std::int64_t, std::span<const float> local) override {
    if (f != 0 || current_)
      throw std::invalid_argument(fmt::format("sparseloco: fragment {} prepared while one is under way", f));
    gathered g{all_replicas(setup_.replicas), {}};
    g.parts.resize(g.members.size());
    for (int r : lost_)
      g.drop(r);
    auto q = math_.prepare(local);
    std::vector<sync_send> out;
    for (int m : g.members)
      if (m != setup_.replica)
        out.push_back({m, 0, 0, q});
    g.parts[g.index_of(setup_.replica, "sparseloco")] = std::move(q);
    current_ = std::move(g);
    return out;
  }
  std::vector<sync_send> receive(int f, int from, int, int, quantized_rows part) override {
    if (std::find(lost_.begin(), lost_.end(), from) != lost_.end())
      return {};  // a lost member's last part, late: left out
    if (f != 0 || !current_)
      throw std::invalid_argument(fmt::format("sparseloco: a part of fragment {} with no exchange under way", f));
    current_->put(from, std::move(part), static_cast<std::int64_t>(math_.global().size()), "sparseloco");
    return {};
  }
  std::vector<sync_send> lose(int r) override {
    lost_.push_back(r);
    if (current_)
      current_->drop(r);
    return {};
  }
  bool ready(int) const override { return current_ && current_->complete(); }
  void perform(int, std::span<float> local) override {
    if (!ready(0))
      throw std::logic_error("sparseloco: performed before every replica's part arrived");
    std::vector<quantized_rows> parts;
    for (auto& p : current_->parts)
      parts.push_back(std::move(*p));
    math_.perform(parts, local);
    current_.reset();
    ++exchanges_;
  }
  long exchanges() const override { return exchanges_; }

private:
  sync_setup setup_;
  sparseloco math_;
  std::optional<gathered> current_;
  std::vector<int> lost_;
  long exchanges_ = 0;
};

} // namespace

void register_builtin_sync_methods(const std::function<void(std::string, sync_method)>& register_sync_method) {
  auto fragment_sched = [](const local_update_spec& s) -> std::unique_ptr<sync_schedule> {
    return std::make_unique<fragment_schedule_of>(s);
  };
  register_sync_method("diloco", {"DiLoCo: H inner steps, the averaged pseudo-gradient, an outer Nesterov step",
                                  [](const local_update_spec&) { return param_fragments(1); }, fragment_sched,
                                  [](const sync_setup& s) { return std::make_unique<averaging_policy>(s, true); }});
  register_sync_method("streaming_diloco",
                       {"Streaming DiLoCo: P fragments round robin, exchanged τ steps early, mixed by α",
                        [](const local_update_spec& s) { return param_fragments(s.fragments); }, fragment_sched,
                        [](const sync_setup& s) { return std::make_unique<averaging_policy>(s, true); }});
  register_sync_method("noloco", {"NoLoCo: groups from a seeded permutation, no collective",
                                  [](const local_update_spec&) { return param_fragments(1); }, fragment_sched,
                                  [](const sync_setup& s) { return std::make_unique<noloco_policy>(s); }});
  register_sync_method(
    "desloc",
    {"DES-LOC: parameters, first and second moments averaged on their own periods",
     [](const local_update_spec&) {
       return std::vector<fragment_plan>{{fragment_content::params, 0, 1},
                                         {fragment_content::exp_avg, 0, 1},
                                         {fragment_content::exp_avg_sq, 0, 1}};
     },
     [](const local_update_spec& s) {
       return periodic_schedule({s.period_params, s.period_momentum, s.period_variance});
     },
     [](const sync_setup& s) { return std::make_unique<averaging_policy>(s, false); }});
  register_sync_method("sparseloco", {"SparseLoCo: error feedback, top-k per chunk in 2 bits, a sparse all-gather",
                                      [](const local_update_spec&) { return param_fragments(1); }, fragment_sched,
                                      [](const sync_setup& s) { return std::make_unique<sparseloco_policy>(s); }});
}

} // namespace troupe::sched
