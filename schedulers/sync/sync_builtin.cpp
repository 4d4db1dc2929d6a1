// The built-in local-update methods as sync policies (#13): DiLoCo, Streaming
// DiLoCo, NoLoCo, DES-LOC and SparseLoCo. Each exchanges only with the replicas
// its rule names; none waits on a global step.
#include <algorithm>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "schedulers/sync/noloco.hpp"
#include "schedulers/sync/sparseloco.hpp"
#include "schedulers/sync/streaming_diloco.hpp"
#include "schedulers/sync/sync_policy.hpp"

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
  averaging_policy(const sync_setup& s, bool outer_step) : setup_(s), format_(format_of(s.spec)) {
    if (outer_step)
      diloco_.emplace(s.spec, s.start);
  }
  std::vector<sync_send> prepare(int f, std::int64_t, std::span<const float> local) override {
    if (auto it = ex_.find(f); it != ex_.end() && !it->second.taken())
      throw std::invalid_argument(fmt::format("{}: fragment {} prepared twice", setup_.spec.algorithm, f));
    if (diloco_)
      return start(f, diloco_->prepare(f, local)); // the pseudo-gradient global − local
    return start(f, {local.begin(), local.end()});
  }
  std::vector<sync_send> receive(int f, int from, int round, int piece, quantized_rows part) override {
    return under_way(ex_, f, "averaging").receive(from, round, piece, std::move(part));
  }
  bool ready(int f) const override {
    auto it = ex_.find(f);
    return it != ex_.end() && it->second.done() && !it->second.taken();
  }
  void perform(int f, std::span<float> local) override {
    auto mean = under_way(ex_, f, "averaging").take(); // kept: members that learn of a loss later still ask it
    if (mean.size() != local.size())
      throw std::invalid_argument(
        fmt::format("{}: {} averaged values for {} local ones", setup_.spec.algorithm, mean.size(), local.size()));
    if (diloco_)
      diloco_->perform(f, mean, local); // outer SGD from the saved global, then α mixing
    else
      std::copy(mean.begin(), mean.end(), local.begin());
    input_.erase(f);
    ++exchanges_;
  }
  /// The saved globals and outer momentum (DiLoCo), the count, and the input
  /// of each exchange under way (`exchange.F`).
  sync_state save() const override {
    sync_state s;
    if (diloco_)
      diloco_->save(s);
    s.counts["performed"] = exchanges_;
    for (const auto& [f, values] : input_)
      s.values[fmt::format("exchange.{}", f)] = values;
    return s;
  }
  std::vector<sync_send> restore(const sync_state& s) override {
    if (diloco_)
      diloco_->restore(s);
    exchanges_ = static_cast<long>(s.count("performed"));
    std::vector<sync_send> out;
    for (const auto& [name, values] : s.values) {
      if (!name.starts_with("exchange."))
        continue;
      int f = std::stoi(name.substr(9));
      if (f < 0 || f >= static_cast<int>(setup_.start.size()) ||
          (diloco_ && values.size() != diloco_->global(f).size()))
        throw std::invalid_argument(
          fmt::format("'{}' holds {} values, not an exchange of this stage", name, values.size()));
      for (auto& m : start(f, values)) {
        m.fragment = f;
        out.push_back(std::move(m));
      }
    }
    return out;
  }
  long exchanges() const override { return exchanges_; }
  std::vector<sync_send> lose(int r) override {
    lost_.push_back(r);
    std::vector<sync_send> out;
    for (auto& [f, ex] : ex_) // the exchange under way, and the last one applied
      for (auto& s : ex.lose(r)) {
        s.fragment = f;
        out.push_back(std::move(s));
      }
    return out;
  }

private:
  /// Starts fragment `f`'s exchange of `values` (kept until it is performed, for a checkpoint).
  std::vector<sync_send> start(int f, std::vector<float> values) {
    auto& ex =
      ex_.insert_or_assign(f, mean_exchange(all_replicas(setup_.replicas), setup_.replica, format_, sync_row_values))
        .first->second;
    for (int r : lost_)
      ex.lose(r); // before it starts: nothing to send again
    return ex.start(input_.insert_or_assign(f, std::move(values)).first->second);
  }

  sync_setup setup_;
  wire_format format_;
  std::optional<streaming_diloco> diloco_;
  std::map<int, mean_exchange> ex_;
  std::map<int, std::vector<float>> input_; ///< fragment -> what this replica put into its exchange under way
  std::vector<int> lost_;
  long exchanges_ = 0;
};

/// A method whose exchange is one round: each member sends its one part to
/// the other members it names, and applies what all of them sent (NoLoCo's
/// groups, SparseLoCo's sparse all-gather). A lost member is no longer waited
/// for, and its late part is left out.
class gathering_policy : public sync_policy {
public:
  std::vector<sync_send> receive(int f, int from, int, int, quantized_rows part) override {
    if (std::find(lost_.begin(), lost_.end(), from) != lost_.end())
      return {}; // a lost member's last part, late: left out
    if (f != 0 || members_.empty())
      throw std::invalid_argument(fmt::format("{}: a part of fragment {} with no exchange under way", name_, f));
    auto i = index_of(from);
    if (parts_[i])
      throw std::invalid_argument(fmt::format("{}: replica {} sent its part twice", name_, from));
    if (auto ok = check_rows(part); !ok || part.values != values_)
      throw std::invalid_argument(fmt::format("{}: a malformed part from replica {}: {} values of {} {}", name_, from,
                                              part.values, values_, ok ? "" : ok.error().message));
    parts_[i] = std::move(part);
    return {};
  }
  std::vector<sync_send> lose(int r) override {
    lost_.push_back(r);
    drop(r);
    return {};
  }
  bool ready(int) const override {
    return !members_.empty() && std::all_of(parts_.begin(), parts_.end(), [](const auto& p) { return p.has_value(); });
  }
  void perform(int, std::span<float> local) override {
    if (!ready(0))
      throw std::logic_error(fmt::format("{}: performed before every member's part arrived", name_));
    std::vector<quantized_rows> parts; // in member order
    for (auto& p : parts_)
      parts.push_back(std::move(*p));
    apply(parts, local);
    members_.clear(), parts_.clear();
    ++exchanges_;
  }
  long exchanges() const override { return exchanges_; }
  /// Its exchanges prepare and perform after the same inner step, so none is
  /// under way between steps, where checkpoints fall.
  sync_state save() const override {
    if (!members_.empty())
      throw std::logic_error(fmt::format("{}: a checkpoint while an exchange is under way", name_));
    sync_state s;
    s.counts["performed"] = exchanges_;
    save_own(s);
    return s;
  }
  std::vector<sync_send> restore(const sync_state& s) override {
    restore_own(s);
    exchanges_ = static_cast<long>(s.count("performed"));
    return {};
  }

protected:
  gathering_policy(const sync_setup& s, const char* name) : setup_(s), name_(name) {}
  /// What the method keeps across exchanges, into and out of a checkpoint.
  virtual void save_own(sync_state& s) const = 0;
  virtual void restore_own(const sync_state& s) = 0;
  /// Starts an exchange among `members` (this replica among them, lost ones
  /// left out here) with this replica's `part` of `values` values: what to send.
  std::vector<sync_send> gather(std::vector<int> members, quantized_rows part) {
    if (!members_.empty())
      throw std::invalid_argument(fmt::format("{}: an exchange prepared while one is under way", name_));
    members_ = std::move(members);
    parts_.assign(members_.size(), std::nullopt);
    for (int r : lost_)
      drop(r);
    values_ = part.values;
    std::vector<sync_send> out;
    for (int m : members_)
      if (m != setup_.replica)
        out.push_back({m, 0, 0, part});
    parts_[index_of(setup_.replica)] = std::move(part);
    return out;
  }
  /// Applies the parts of every member still here (member order) to `local`.
  virtual void apply(std::vector<quantized_rows>& parts, std::span<float> local) = 0;

  sync_setup setup_;

private:
  std::size_t index_of(int r) const {
    auto it = std::find(members_.begin(), members_.end(), r);
    if (it == members_.end())
      throw std::invalid_argument(fmt::format("{}: a part from replica {}, not of this exchange", name_, r));
    return static_cast<std::size_t>(it - members_.begin());
  }
  void drop(int r) {
    if (auto it = std::find(members_.begin(), members_.end(), r); it != members_.end()) {
      parts_.erase(parts_.begin() + (it - members_.begin()));
      members_.erase(it);
    }
  }

  const char* name_;
  std::vector<int> members_, lost_;
  std::vector<std::optional<quantized_rows>> parts_;
  std::int64_t values_ = 0;
  long exchanges_ = 0;
};

/// NoLoCo (Kolehmainen et al. 2025, arXiv 2506.10911; jkolehm/noloco): no
/// collective. Every H steps the replicas split into groups from a permutation
/// seeded by the step; each member sends its fast (local) and slow weights to
/// the other members of its group only, and takes noloco_outer_step.
class noloco_policy : public gathering_policy {
public:
  explicit noloco_policy(const sync_setup& s)
      : gathering_policy(s, "noloco"), format_(format_of(s.spec)), slow_(s.start.at(0)), momentum_(slow_.size(), 0.0f) {
  }
  std::vector<sync_send> prepare(int f, std::int64_t step, std::span<const float> local) override {
    if (f != 0 || local.size() != slow_.size())
      throw std::invalid_argument(fmt::format("noloco: fragment {} of {} values prepared", f, local.size()));
    // The groups of all replicas, lost ones included: every member derives the
    // same ones whether or not it has heard of a loss yet; then the lost leave.
    std::vector<int> mine;
    for (auto& group : noloco_groups(setup_.replicas, setup_.spec.group, step, setup_.seed))
      if (std::find(group.begin(), group.end(), setup_.replica) != group.end())
        mine = group;
    std::vector<float> both(local.begin(), local.end());
    both.insert(both.end(), slow_.begin(), slow_.end());
    return gather(std::move(mine), quantize_rows(both, sync_row_values, format_));
  }

private:
  void apply(std::vector<quantized_rows>& parts, std::span<float> local) override {
    auto n = slow_.size();
    std::vector<std::vector<float>> decoded;
    for (const auto& p : parts) {
      decoded.emplace_back(2 * n, 0.0f);
      accumulate(p, decoded.back());
    }
    std::vector<std::span<const float>> fast, slow;
    for (const auto& d : decoded)
      fast.emplace_back(d.data(), n), slow.emplace_back(d.data() + n, n);
    noloco_outer_step(fast, slow, momentum_, slow_, local, setup_.spec.outer.lr, setup_.spec.outer.momentum);
  }
  void save_own(sync_state& s) const override {
    s.values["slow"] = slow_;
    s.values["momentum"] = momentum_;
  }
  void restore_own(const sync_state& s) override {
    const auto& slow = s.take("slow", slow_.size());
    momentum_ = s.take("momentum", momentum_.size());
    slow_ = slow;
  }

  wire_format format_;
  std::vector<float> slow_, momentum_;
};

/// SparseLoCo (Sarfi et al. 2025, arXiv 2508.15706): each replica's sparse
/// 2-bit part goes to every other replica (a sparse all-gather), and each
/// applies the mean of all of them.
class sparseloco_policy : public gathering_policy {
public:
  explicit sparseloco_policy(const sync_setup& s)
      : gathering_policy(s, "sparseloco"),
        math_(s.start.at(0), s.spec.density, s.spec.outer.momentum, s.spec.outer.lr) {}
  std::vector<sync_send> prepare(int f, std::int64_t, std::span<const float> local) override {
    if (f != 0)
      throw std::invalid_argument(fmt::format("sparseloco: fragment {} prepared (it has one)", f));
    return gather(all_replicas(setup_.replicas), math_.prepare(local));
  }

private:
  void apply(std::vector<quantized_rows>& parts, std::span<float> local) override { math_.perform(parts, local); }
  void save_own(sync_state& s) const override { math_.save(s); }
  void restore_own(const sync_state& s) override { math_.restore(s); }

  sparseloco math_;
};

} // namespace

void register_builtin_sync_methods(const std::function<void(std::string, sync_method)>& register_sync_method) {
  auto fragment_sched = [](const local_update_spec& s) -> std::unique_ptr<sync_schedule> {
    return std::make_unique<fragment_schedule_of>(s);
  };
  auto whole = [](const local_update_spec&) { return param_fragments(1); };
  register_sync_method(
    "diloco", {"DiLoCo: H inner steps, the averaged pseudo-gradient, an outer Nesterov step", whole, fragment_sched,
               [](const sync_setup& s) { return std::make_unique<averaging_policy>(s, true); }, diloco_settings()});
  register_sync_method("streaming_diloco",
                       {"Streaming DiLoCo: P fragments round robin, exchanged τ steps early, mixed by α",
                        [](const local_update_spec& s) { return param_fragments(s.fragments); }, fragment_sched,
                        [](const sync_setup& s) { return std::make_unique<averaging_policy>(s, true); },
                        streaming_diloco_settings()});
  register_sync_method("noloco",
                       {"NoLoCo: groups from a seeded permutation, no collective", whole, fragment_sched,
                        [](const sync_setup& s) { return std::make_unique<noloco_policy>(s); }, noloco_settings()});
  register_sync_method("desloc", {"DES-LOC: parameters, first and second moments averaged on their own periods",
                                  [](const local_update_spec&) {
                                    return std::vector<fragment_plan>{{fragment_content::params, 0, 1},
                                                                      {fragment_content::exp_avg, 0, 1},
                                                                      {fragment_content::exp_avg_sq, 0, 1}};
                                  },
                                  [](const local_update_spec& s) {
                                    return periodic_schedule({s.period_params, s.period_momentum, s.period_variance});
                                  },
                                  [](const sync_setup& s) { return std::make_unique<averaging_policy>(s, false); },
                                  desloc_settings()});
  register_sync_method(
    "sparseloco", {"SparseLoCo: error feedback, top-k per chunk in 2 bits, a sparse all-gather", whole, fragment_sched,
                   [](const sync_setup& s) { return std::make_unique<sparseloco_policy>(s); }, sparseloco_settings()});
}

} // namespace troupe::sched
