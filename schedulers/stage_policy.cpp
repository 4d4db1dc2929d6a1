// The policy registry and the built-in policies: gpipe, 1f1b, interleaved_1f1b, zb_h1, table.
#include "schedulers/stage_policy.hpp"

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

#include "schedulers/guided_policy.hpp"
#include "schedulers/orders.hpp"
#include "schedulers/schedule_table.hpp"

namespace troupe::sched {

namespace {

// How the built-in policies stray from their published orders: measured with
// bench_straggler (100 seeds; jitter 30%, one rank 1.5x slower, one microbatch
// 4x slower; p x m in 2x8, 4x8, 4x16, 4x32, 6x12, 8x8, 8x16; latency 0 to 0.2).
//
// - 1F1B and interleaved 1F1B: none. Within their in-flight bound the only
//   freedom is to run a ready backward while the preferred forward is late, and
//   that never won a seed: the forward feeds the downstream ranks, which are on
//   the critical path, while the upstream rank does not need the gradient before
//   its own next forward. (Preferring backwards whenever one is ready, the naive
//   rule, loses 8-13% when one rank is 1.5x slower.) Forwards of other chunks
//   overtaking (interleaved) lost too, and so did letting the producer announce
//   when it started the late forward: a backward costs about two forwards, more
//   than is ever left of a forward already under way. So these policies keep the
//   order and wait; their order is what the in-flight bound leaves them.
// - ZB-H1: a deferred W may fill a wait for a forward once the rank has idled
//   twice the longer of W's and F's measured costs: a wait that long means the
//   forward's producer is slow (jitter alone rarely delays a pass by more than
//   its cost), and W is work the rank must do anyway. Letting W fill waits for I
//   passes (the gradient chain that ends the step) lost under jitter, as did a
//   shorter patience, or one counted in W's cost alone when W is small.
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

// Reads pairs PC ("FB,IW": a B may run before a late preferred F, a W before a late I).
expected<std::array<std::array<bool, 4>, 4>> parse_pairs(std::string_view name, std::string_view key,
                                                          std::string_view text) {
  std::array<std::array<bool, 4>, 4> out{};
  constexpr std::string_view kinds = "FBIW";
  for (std::size_t i = 0; i < text.size();) {
    if (text[i] == ',' || text[i] == ' ') {
      ++i;
      continue;
    }
    auto a = kinds.find(text[i]);
    auto b = i + 1 < text.size() ? kinds.find(text[i + 1]) : std::string_view::npos;
    if (a == std::string_view::npos || b == std::string_view::npos)
      return make_sched_error(fmt::format("{}: {} '{}': expected pairs of F, B, I, W such as FB,IW", name, key, text));
    out[a][b] = true;
    i += 2;
  }
  return out;
}

// Overrides of the overtaking rules from options: `overtakes` and
// `overtakes_when_idle` (pairs, see guided_rules) and `patience` (a number).
expected<guided_rules> apply_options(std::string_view name, const policy_params& p, guided_rules rules) {
  for (auto [key, field] : {std::pair{"overtakes", &rules.overtakes},
                            std::pair{"overtakes_when_idle", &rules.overtakes_when_idle}})
    if (auto it = p.options.find(key); it != p.options.end()) {
      auto pairs = parse_pairs(name, key, it->second);
      if (!pairs)
        return pairs.error();
      *field = *pairs;
    }
  if (auto it = p.options.find("patience"); it != p.options.end()) {
    char* end = nullptr;
    rules.patience = std::strtod(it->second.c_str(), &end);
    if (end == it->second.c_str() || *end != 0 || rules.patience < 0)
      return make_sched_error(fmt::format("{}: patience must be a non-negative number, not '{}'", name, it->second));
  }
  return rules;
}

expected<policy_ptr> make_guided(std::string_view name, std::vector<action> order, guided_rules rules,
                                 const policy_params& p, bool split) {
  auto r = apply_options(name, p, rules);
  if (!r)
    return r.error();
  return policy_ptr{new guided_policy(std::string{name}, std::move(order), *r, split)};
}

constexpr int F = 0, B = 1, I = 2, W = 3;

expected<policy_ptr> make_gpipe(const policy_params& p) {
  if (auto ok = check_shape("gpipe", p, false); !ok)
    return ok.error();
  guided_rules rules{.look_ahead = look_ahead_or(p, p.microbatches)};
  rules.overtakes[F][F] = rules.overtakes[B][B] = true;  // keep the phases: all forwards, then all backwards
  return make_guided("gpipe", gpipe_order(p.rank, p.ranks, p.microbatches), rules, p, false);
}

expected<policy_ptr> make_1f1b(const policy_params& p) {
  if (auto ok = check_shape("1f1b", p, false); !ok)
    return ok.error();
  guided_rules rules{.in_flight_limit = std::min(p.ranks - p.rank, p.microbatches),
                     .look_ahead = look_ahead_or(p, default_look_ahead)};
  return make_guided("1f1b", one_f_one_b_order(p.rank, p.ranks, p.microbatches), rules, p, false);
}

expected<policy_ptr> make_interleaved(const policy_params& p) {
  if (auto ok = check_shape("interleaved_1f1b", p, true); !ok)
    return ok.error();
  auto order = interleaved_order(p.rank, p.ranks, p.microbatches, p.chunks);
  if (!order)
    return order.error();
  guided_rules rules{.in_flight_limit = interleaved_in_flight_limit(p.rank, p.ranks, p.microbatches, p.chunks),
                     .look_ahead = look_ahead_or(p, default_look_ahead)};
  return make_guided("interleaved_1f1b", std::move(*order), rules, p, false);
}

expected<policy_ptr> make_zb_h1(const policy_params& p) {
  if (auto ok = check_shape("zb_h1", p, false); !ok)
    return ok.error();
  int limit = std::min(p.ranks - p.rank, p.microbatches);
  int wlimit = std::min(p.rank + 1, p.microbatches);  // the W passes zb_h1_order defers
  guided_rules rules{.in_flight_limit = limit, .deferred_weight_limit = wlimit,
                     .look_ahead = look_ahead_or(p, default_look_ahead)};
  // A deferred W may fill a long wait for a forward (see the file comment).
  rules.overtakes_when_idle[F][W] = true;
  return make_guided("zb_h1", zb_h1_order(p.rank, p.ranks, p.microbatches), rules, p, true);
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
  return make_guided("table", row, rules, p, table_splits_backward(table));
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
