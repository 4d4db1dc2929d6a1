// The policy registry and the built-in policies: gpipe, 1f1b, interleaved_1f1b, zb_h1, table.
#include "schedulers/stage_policy.hpp"

#include <algorithm>
#include <mutex>

#include <fmt/format.h>

#include "schedulers/guided_policy.hpp"
#include "schedulers/orders.hpp"
#include "schedulers/schedule_table.hpp"

namespace troupe::sched {

namespace {

// How many actions past a late preferred one the built-in policies consider.
// One is enough to cover every swap the schedules allow (see guided_policy.hpp);
// straggler.slow.test.cpp measures the choice.
constexpr int default_look_ahead = 1;

expected<void> check_shape(std::string_view name, const policy_params& p, bool interleaved) {
  if (p.ranks < 1 || p.microbatches < 1 || p.chunks < 1)
    return make_sched_error(fmt::format("{}: stages ({}), microbatches ({}) and chunks ({}) must be at least 1", name,
                                        p.ranks, p.microbatches, p.chunks));
  if (p.rank < 0 || p.rank >= p.ranks)
    return make_sched_error(fmt::format("{}: rank {} is outside 0..{}", name, p.rank, p.ranks - 1));
  if (!interleaved && p.chunks != 1)
    return make_sched_error(fmt::format("{}: runs one model chunk per rank, not {} (use interleaved_1f1b for "
                                        "virtual stages)", name, p.chunks));
  return {};
}

int look_ahead_or(const policy_params& p, int fallback) {
  return p.look_ahead >= 0 ? p.look_ahead : fallback;
}

expected<policy_ptr> make_gpipe(const policy_params& p) {
  if (auto ok = check_shape("gpipe", p, false); !ok)
    return ok.error();
  guided_rules rules{.look_ahead = look_ahead_or(p, p.microbatches), .same_kind_only = true};
  return policy_ptr{new guided_policy("gpipe", gpipe_order(p.rank, p.ranks, p.microbatches), rules, false)};
}

expected<policy_ptr> make_1f1b(const policy_params& p) {
  if (auto ok = check_shape("1f1b", p, false); !ok)
    return ok.error();
  guided_rules rules{.in_flight_limit = std::min(p.ranks - p.rank, p.microbatches),
                     .look_ahead = look_ahead_or(p, default_look_ahead)};
  return policy_ptr{new guided_policy("1f1b", one_f_one_b_order(p.rank, p.ranks, p.microbatches), rules, false)};
}

expected<policy_ptr> make_interleaved(const policy_params& p) {
  if (auto ok = check_shape("interleaved_1f1b", p, true); !ok)
    return ok.error();
  auto order = interleaved_order(p.rank, p.ranks, p.microbatches, p.chunks);
  if (!order)
    return order.error();
  guided_rules rules{.in_flight_limit = interleaved_in_flight_limit(p.rank, p.ranks, p.microbatches, p.chunks),
                     .look_ahead = look_ahead_or(p, default_look_ahead)};
  return policy_ptr{new guided_policy("interleaved_1f1b", std::move(*order), rules, false)};
}

expected<policy_ptr> make_zb_h1(const policy_params& p) {
  if (auto ok = check_shape("zb_h1", p, false); !ok)
    return ok.error();
  int limit = std::min(p.ranks - p.rank, p.microbatches);
  guided_rules rules{.in_flight_limit = limit, .deferred_weight_limit = limit,
                     .look_ahead = look_ahead_or(p, default_look_ahead)};
  return policy_ptr{new guided_policy("zb_h1", zb_h1_order(p.rank, p.ranks, p.microbatches), rules, true)};
}

expected<policy_ptr> make_table(const policy_params& p) {
  if (auto ok = check_shape("table", p, true); !ok)
    return ok.error();
  schedule_table table = p.table;
  if (table.empty()) {
    if (p.table_file.empty())
      return make_sched_error("table: no schedule given (set a table or a table file)");
    auto loaded = load_table(p.table_file);
    if (!loaded)
      return loaded.error();
    table = std::move(*loaded);
  }
  if (auto ok = validate_table(table, p.ranks, p.microbatches, p.chunks); !ok)
    return make_sched_error("table: " + ok.error().message);
  auto& row = table[p.rank];
  guided_rules rules{.in_flight_limit = table_in_flight_peak(row), .look_ahead = look_ahead_or(p, 0)};
  return policy_ptr{new guided_policy("table", row, rules, table_splits_backward(table))};
}

struct entry {
  std::string summary;
  policy_factory factory;
};

struct registry {
  std::mutex mutex;
  std::map<std::string, entry, std::less<>> entries;

  // The explicit list of built-ins (no static self-registration to lose at link time).
  registry() {
    entries["gpipe"] = {"all forwards, then all backwards (Huang et al. 2019)", make_gpipe};
    entries["1f1b"] = {"at most stages - rank microbatches in flight, one forward one backward "
                       "(PipeDream-Flush / Megatron-LM)", make_1f1b};
    entries["interleaved_1f1b"] = {"1F1B over v model chunks per rank placed round-robin "
                                   "(Narayanan et al. 2021)", make_interleaved};
    entries["zb_h1"] = {"backward split into I and W, W deferred into idle time, 1F1B's memory "
                        "(Qi et al. 2023)", make_zb_h1};
    entries["table"] = {"replays an explicit per-rank action list from a file", make_table};
  }
};

registry& the_registry() {
  static registry r;
  return r;
}

} // namespace

expected<policy_ptr> make_policy(std::string_view name, const policy_params& params) {
  policy_factory factory;
  {
    auto& r = the_registry();
    std::lock_guard guard{r.mutex};
    if (auto it = r.entries.find(name); it != r.entries.end())
      factory = it->second.factory;
  }
  if (!factory) {
    auto names = policy_names();
    std::string known;
    for (const auto& n : names)
      known += (known.empty() ? "" : ", ") + n;
    return make_sched_error(fmt::format("unknown policy '{}' (known: {})", name, known));
  }
  return factory(params);
}

void register_policy(std::string name, std::string summary, policy_factory factory) {
  auto& r = the_registry();
  std::lock_guard guard{r.mutex};
  r.entries[std::move(name)] = {std::move(summary), std::move(factory)};
}

std::vector<std::string> policy_names() {
  auto& r = the_registry();
  std::lock_guard guard{r.mutex};
  std::vector<std::string> out;
  for (const auto& [name, e] : r.entries)
    out.push_back(name);
  return out;
}

std::string policy_summary(std::string_view name) {
  auto& r = the_registry();
  std::lock_guard guard{r.mutex};
  auto it = r.entries.find(name);
  return it == r.entries.end() ? std::string{} : it->second.summary;
}

} // namespace troupe::sched
