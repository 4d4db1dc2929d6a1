// The policy registry (names, summaries, option keys) and `table`; the rule
// policies gpipe, 1f1b, interleaved_1f1b and zb_h1 live in rule_policies.cpp,
// the V-shaped zbv, v_half and v_min in v_policies.cpp.
#include "schedulers/policies/stage_policy.hpp"

#include <charconv>
#include <mutex>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "schedulers/policies/guided_policy.hpp"
#include "schedulers/policies/rule_policies.hpp"
#include "schedulers/policies/schedule_table.hpp"
#include "schedulers/policies/v_policies.hpp"

namespace troupe::sched {

namespace {

std::string join_keys(const std::vector<policy_option>& options) {
  std::string out;
  for (const auto& o : options)
    out += (out.empty() ? "" : ", ") + o.key;
  return out.empty() ? "none" : out;
}

// The microbatches a table row runs forwards for, in order.
std::set<int> microbatches_of(const std::vector<action>& row) {
  std::set<int> out;
  for (const auto& a : row)
    if (a.kind == op_kind::forward)
      out.insert(a.microbatch);
  return out;
}

// `table` learns m from its rows, which must all cover the same microbatches.
expected<policy_ptr> make_table(const policy_params& p) {
  if (p.ranks < 1 || p.chunks < 1)
    return make_sched_error(fmt::format("table: stages ({}) and chunks ({}) must be at least 1", p.ranks, p.chunks));
  if (p.rank < 0 || p.rank >= p.ranks)
    return make_sched_error(fmt::format("table: rank {} is outside 0..{}", p.rank, p.ranks - 1));
  schedule_table table = p.table;
  if (table.empty()) {
    if (p.table_file.empty())
      return make_sched_error("table: no schedule given (set a table or a table file)");
    auto loaded = load_table(p.table_file);
    if (!loaded)
      return loaded.error();
    table = std::move(*loaded);
  }
  if (static_cast<int>(table.size()) != p.ranks)
    return make_sched_error(
      fmt::format("table: the table has {} rank lines but the pipeline has {} ranks", table.size(), p.ranks));
  auto first = microbatches_of(table[0]);
  for (std::size_t r = 1; r < table.size(); ++r)
    if (microbatches_of(table[r]) != first)
      return make_sched_error(fmt::format("table: rank {} runs forwards for microbatches {{{}}} but rank 0 for {{{}}}; "
                                          "every rank's line must cover the same microbatches",
                                          r, fmt::join(microbatches_of(table[r]), ", "), fmt::join(first, ", ")));
  int m = first.empty() ? 0 : *first.rbegin() + 1;
  if (m == 0)
    return make_sched_error("table: rank 0's line runs no forward");
  if (auto ok = validate_table(table, p.ranks, m, p.chunks); !ok)
    return make_sched_error("table: " + ok.error().message);
  auto& row = table[p.rank];
  return policy_ptr{new guided_policy("table", row, table_in_flight_peak(row), table_splits_backward(table))};
}

struct entry {
  std::string summary;
  policy_factory factory;
  std::vector<policy_option> options;
};

struct registry {
  std::mutex mutex;
  std::map<std::string, entry, std::less<>> entries;

  // The explicit list of built-ins (no static self-registration to lose at link time).
  registry() {
    entries["gpipe"] = {"all forwards first, a backward when no forward is ready (Huang et al. 2019)", make_gpipe,
                        rule_options(false)};
    entries["1f1b"] = {"a ready forward while fewer than stages - rank are in flight, else a ready backward "
                       "(PipeDream-Flush / Megatron-LM)",
                       make_one_f_one_b, rule_options(false)};
    entries["interleaved_1f1b"] = {"1F1B over v model chunks per rank placed round-robin, within Megatron's "
                                   "warm-up + 1 in flight (Narayanan et al. 2021)",
                                   make_interleaved_1f1b, rule_options(false)};
    entries["zb_h1"] = {"backward split into I and W, W deferred into idle time (at most rank + 1), 1F1B's memory "
                        "(Qi et al. 2023)",
                        make_zb_h1, rule_options(true)};
    entries["zbv"] = {"ZB-V: two chunks per rank in a V, backward split into I and W, W filling idle time, 1F1B's "
                      "memory (Qi et al. 2023)",
                      make_zbv, v_options()};
    entries["v_half"] = {"the V rule within (p+2)//2 microbatches' activations, half of 1F1B's (Qi et al. 2024)",
                         make_v_half, v_options()};
    entries["v_min"] = {"the V rule within (p+4)//3 microbatches' activations, a third of 1F1B's (Qi et al. 2024)",
                        make_v_min, v_options()};
    entries["dualpipev"] = {"DualPipeV: two chunks per rank in a V, a forward fused with the other chunk's backward "
                            "(F&B) where a rank holds both, 2p + 1 chunk activations (DeepSeek 2025)",
                            make_dualpipev,
                            {int_option("max_in_flight",
                                        "most chunk activations held between actions "
                                        "(one more during an F&B)",
                                        2)}};
    entries["table"] = {"replays an explicit per-rank action list from a file", make_table, {}};
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
  for (const auto& [key, value] : params.options)
    if (auto ok = check_policy_option(name, key, value); !ok)
      return ok.error();
  return factory(params);
}

chunk_placement policy_placement(std::string_view name, policy_params params) {
  params.rank = 0;
  auto made = make_policy(name, params);
  return made ? (*made)->placement() : chunk_placement::round_robin;
}

void register_policy(std::string name, std::string summary, policy_factory factory,
                     std::vector<policy_option> options) {
  auto& r = the_registry();
  std::lock_guard guard{r.mutex};
  r.entries[std::move(name)] = {std::move(summary), std::move(factory), std::move(options)};
}

std::vector<policy_option> policy_options(std::string_view name) {
  auto& r = the_registry();
  std::lock_guard guard{r.mutex};
  auto it = r.entries.find(name);
  return it == r.entries.end() ? std::vector<policy_option>{} : it->second.options;
}

expected<void> check_policy_option(std::string_view name, std::string_view key, std::string_view value) {
  auto options = policy_options(name);
  for (const auto& o : options)
    if (o.key == key) {
      if (o.accepts && !o.accepts(value))
        return make_sched_error(fmt::format("{}: option {} must be {}, not '{}'", name, key, o.expected, value));
      return {};
    }
  return make_sched_error(fmt::format("{}: unknown option '{}' (known: {})", name, key, join_keys(options)));
}

policy_option int_option(std::string key, std::string summary, int low) {
  return {std::move(key), std::move(summary), fmt::format("an integer of at least {}", low), [low](std::string_view v) {
            int x = 0;
            auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
            return ec == std::errc{} && ptr == v.data() + v.size() && x >= low;
          }};
}

expected<int> int_setting(std::string_view policy, const policy_params& params, const std::string& key, int low,
                          int fallback) {
  auto it = params.options.find(key);
  if (it == params.options.end())
    return fallback;
  const auto& v = it->second;
  int x = 0;
  auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc{} || ptr != v.data() + v.size() || x < low)
    return make_sched_error(
      fmt::format("{}: option {} must be an integer of at least {}, not '{}'", policy, key, low, v));
  return x;
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
