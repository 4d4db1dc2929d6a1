// The mean over every replica and the one-round gather that the built-in
// local-update methods share (#13).
#include "schedulers/sync/exchange_policies.hpp"

#include <algorithm>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

namespace troupe::sched {

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

namespace {

/// Fragment f's exchange under way in `m`, or a clear error.
template <class Map>
auto& under_way(Map& m, int f, const char* who) {
  auto it = m.find(f);
  if (it == m.end())
    throw std::invalid_argument(fmt::format("{}: fragment {} has no exchange under way", who, f));
  return it->second;
}

/// Values averaged over every replica by a reduce-scatter and all-gather, one
/// exchange per fragment under way; the outer rule, where there is one, says
/// what goes in and what the mean makes of the local values.
class averaging_policy : public sync_policy {
public:
  averaging_policy(const sync_setup& s, std::unique_ptr<outer_rule> outer)
      : setup_(s), format_(format_of(s.spec)), outer_(std::move(outer)) {}
  std::vector<sync_send> prepare(int f, std::int64_t step, std::span<const float> local) override {
    if (auto it = ex_.find(f); it != ex_.end() && !it->second.taken())
      throw std::invalid_argument(fmt::format("{}: fragment {} prepared twice", setup_.spec.algorithm, f));
    if (outer_)
      return start(f, step, outer_->prepare(f, local)); // DiLoCo: the pseudo-gradient global − local
    return start(f, step, {local.begin(), local.end()});
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
    if (outer_)
      outer_->perform(f, mean, local); // DiLoCo: outer SGD from the saved global, then α mixing
    else
      std::copy(mean.begin(), mean.end(), local.begin());
    input_.erase(f);
    ++exchanges_;
  }
  /// The outer rule's state, the count, and the input
  /// of each exchange under way (`exchange.F`).
  sync_state save() const override {
    sync_state s;
    if (outer_)
      outer_->save(s);
    s.counts["performed"] = exchanges_;
    for (const auto& [f, values] : input_)
      s.values[fmt::format("exchange.{}", f)] = values;
    return s;
  }
  std::vector<sync_send> restore(const sync_state& s) override {
    if (outer_)
      outer_->restore(s);
    exchanges_ = static_cast<long>(s.count("performed"));
    std::vector<sync_send> out;
    for (const auto& [name, values] : s.values) {
      if (!name.starts_with("exchange."))
        continue;
      int f = std::stoi(name.substr(9));
      if (f < 0 || f >= static_cast<int>(setup_.start.size()) || (outer_ && values.size() != outer_->values(f)))
        throw std::invalid_argument(
          fmt::format("'{}' holds {} values, not an exchange of this stage", name, values.size()));
      for (auto& m : start(f, -1, values)) { // a resumed exchange: with the replicas lost before, none back
        m.fragment = f;
        out.push_back(std::move(m));
      }
    }
    return out;
  }
  long exchanges() const override { return exchanges_; }
  std::vector<sync_send> lose(int r) override {
    if (!back_.erase(r)) // lost again after it came back: it is still in lost_
      lost_.push_back(r);
    std::vector<sync_send> out;
    for (auto& [f, ex] : ex_) // the exchange under way, and the last one applied
      for (auto& s : ex.lose(r)) {
        s.fragment = f;
        out.push_back(std::move(s));
      }
    return out;
  }

  void rejoin(int r, std::int64_t after) override {
    if (std::find(lost_.begin(), lost_.end(), r) == lost_.end() || back_.count(r))
      throw std::invalid_argument(fmt::format("{}: replica {} rejoins, but it was not lost", setup_.spec.algorithm, r));
    back_[r] = after;
  }

private:
  /// Starts fragment `f`'s exchange of `values` prepared after `step` inner
  /// steps (kept until it is performed, for a checkpoint).
  std::vector<sync_send> start(int f, std::int64_t step, std::vector<float> values) {
    auto& ex =
      ex_.insert_or_assign(f, mean_exchange(all_replicas(setup_.replicas), setup_.replica, format_, sync_row_values))
        .first->second;
    for (int r : lost_)
      if (auto b = back_.find(r); b == back_.end() || step <= b->second)
        ex.lose(r); // before it starts: nothing to send again
    return ex.start(input_.insert_or_assign(f, std::move(values)).first->second);
  }

  sync_setup setup_;
  wire_format format_;
  std::unique_ptr<outer_rule> outer_;
  std::map<int, mean_exchange> ex_;
  std::map<int, std::vector<float>> input_; ///< fragment -> what this replica put into its exchange under way
  std::vector<int> lost_;
  std::map<int, std::int64_t> back_; ///< lost replicas that came back -> in the exchanges prepared after more steps
  long exchanges_ = 0;
};

} // namespace

std::unique_ptr<sync_policy> make_averaging_policy(const sync_setup& s, std::unique_ptr<outer_rule> outer) {
  return std::make_unique<averaging_policy>(s, std::move(outer));
}

bool gathering_policy::is_lost(int r) const {
  return std::find(lost_.begin(), lost_.end(), r) != lost_.end();
}

std::vector<sync_send> gathering_policy::receive(int f, int from, int round, int piece, quantized_rows part) {
  if (is_lost(from))
    return {}; // a lost member's last message, late: left out (a survivor that had its part forwards it)
  if (f != 0 || members_.empty())
    throw std::invalid_argument(fmt::format("{}: a part of fragment {} with no exchange under way", name_, f));
  if (!under_way_)
    return {}; // about the exchange this member already applied: it needed nothing more
  auto i = index_of(from);
  if (round == 2) { // the sender has no part of lost member `piece`
    heard_[index_of(piece)][i] = true;
    return {};
  }
  if (round != 0 && round != 1)
    throw std::invalid_argument(fmt::format("{}: round {} from replica {}", name_, round, from));
  auto whose = round == 0 ? i : index_of(piece); // round 1: a lost member's part, forwarded by `from`
  if (round == 0 && parts_[i]) {
    if (std::any_of(heard_[i].begin(), heard_[i].end(), [](bool h) { return h; }))
      return {}; // forwarded already by a survivor that heard of its loss before this member did
    throw std::invalid_argument(fmt::format("{}: replica {} sent its part twice", name_, from));
  }
  if (auto ok = check_rows(part); !ok || part.values != values_)
    throw std::invalid_argument(fmt::format("{}: a malformed part from replica {}: {} values of {} {}", name_, from,
                                            part.values, values_, ok ? "" : ok.error().message));
  if (round == 1)
    heard_[whose][i] = true;
  if (!parts_[whose])
    parts_[whose] = std::move(part); // every copy of a member's part is the same bytes
  return {};
}

std::vector<sync_send> gathering_policy::report(int r) const {
  auto about = index_of(r);
  std::vector<sync_send> out;
  for (int m : members_)
    if (m != setup_.replica && !is_lost(m)) {
      if (parts_[about])
        out.push_back({m, 1, r, *parts_[about], 0});
      else
        out.push_back({m, 2, r, quantized_rows{}, 0}); // fragment 0: lose() answers for every fragment
    }
  return out;
}

std::vector<sync_send> gathering_policy::lose(int r) {
  if (is_lost(r)) {
    back_.erase(r); // lost again on its way back: it stays out
    return {};
  }
  lost_.push_back(r);
  // The exchange under way, or the last one applied (a member still in it may
  // wait for this one's word): its members learn whether this one has r's part.
  if (std::find(members_.begin(), members_.end(), r) == members_.end())
    return {};
  return report(r);
}

void gathering_policy::rejoin(int r, std::int64_t after) {
  if (!is_lost(r) || back_.count(r))
    throw std::invalid_argument(fmt::format("{}: replica {} rejoins, but it was not lost", name_, r));
  back_[r] = after;
}

bool gathering_policy::ready(int) const {
  if (!under_way_)
    return false;
  for (std::size_t i = 0; i < members_.size(); ++i) {
    if (parts_[i])
      continue;
    if (!is_lost(members_[i]))
      return false;
    for (std::size_t k = 0; k < members_.size(); ++k) // a lost member's part: every living one's word that it has none
      if (members_[k] != setup_.replica && !is_lost(members_[k]) && !heard_[i][k])
        return false;
  }
  return true;
}

void gathering_policy::perform(int, std::span<float> local) {
  if (!ready(0))
    throw std::logic_error(fmt::format("{}: performed before every member's part arrived", name_));
  std::vector<quantized_rows> parts; // in member order: a lost member's too where any survivor had it
  for (const auto& p : parts_)
    if (p)
      parts.push_back(*p);
  apply(parts, local);
  under_way_ = false; // members_ and parts_ stay, to answer a loss heard of later
  ++exchanges_;
}

sync_state gathering_policy::save() const {
  if (under_way_)
    throw std::logic_error(fmt::format("{}: a checkpoint while an exchange is under way", name_));
  sync_state s;
  s.counts["performed"] = exchanges_;
  save_own(s);
  return s;
}

std::vector<sync_send> gathering_policy::restore(const sync_state& s) {
  restore_own(s);
  exchanges_ = static_cast<long>(s.count("performed"));
  return {};
}

std::vector<sync_send> gathering_policy::gather(std::vector<int> members, std::int64_t step, quantized_rows part) {
  if (under_way_)
    throw std::invalid_argument(fmt::format("{}: an exchange prepared while one is under way", name_));
  for (auto it = back_.begin(); it != back_.end();) // replicas back from this exchange on
    if (step > it->second) {
      std::erase(lost_, it->first);
      it = back_.erase(it);
    } else {
      ++it;
    }
  members_ = std::move(members);
  auto n = members_.size();
  parts_.assign(n, std::nullopt);
  heard_.assign(n, std::vector<bool>(n, false));
  values_ = part.values;
  under_way_ = true;
  std::vector<sync_send> out;
  for (int m : members_)
    if (m != setup_.replica && !is_lost(m))
      out.push_back({m, 0, 0, part});
  parts_[index_of(setup_.replica)] = std::move(part);
  for (int m : members_) // members lost before: this one has no part of theirs (it drops their messages)
    if (is_lost(m))
      for (auto& s : report(m))
        out.push_back(std::move(s));
  return out;
}

std::size_t gathering_policy::index_of(int r) const {
  auto it = std::find(members_.begin(), members_.end(), r);
  if (it == members_.end())
    throw std::invalid_argument(fmt::format("{}: a part from replica {}, not of this exchange", name_, r));
  return static_cast<std::size_t>(it - members_.begin());
}

} // namespace troupe::sched
