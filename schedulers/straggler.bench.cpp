// Report: what each emergent policy gains over `table` replaying its own
// canonical order under stragglers (100 seeds per row), beside the naive
// "backward first, whatever is ready" rule that the policies are designed to beat.
//
//   bench_straggler [SEEDS]
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "schedulers/straggler.hpp"

using namespace troupe::sched;

namespace {

// Backward first, whatever is ready, within 1F1B's in-flight bound.
struct backward_first : stage_policy {
  int limit;
  explicit backward_first(int l) : limit(l) {}
  std::string_view name() const override { return "naive"; }
  int in_flight_limit() const override { return limit; }
  std::optional<action> next(const stage_queue& q) override {
    if (!q.ready_backward(0).empty())
      return bwd(q.rank(), *q.ready_backward(0).begin());
    if (!q.ready_forward(0).empty() && q.in_flight() < limit)
      return fwd(q.rank(), *q.ready_forward(0).begin());
    return std::nullopt;
  }
};

struct shape {
  const char* policy;
  int p, m, v;
  double latency;
};

} // namespace

int main(int argc, char** argv) {
  int seeds = argc > 1 ? std::atoi(argv[1]) : 100;
  register_policy("naive_1f1b", "backward first, whatever is ready, 1F1B's bound",
                  [](const policy_params& p) -> expected<policy_ptr> {
                    return policy_ptr{new backward_first(std::min(p.ranks - p.rank, p.microbatches))};
                  });
  const shape shapes[] = {
    {"naive_1f1b", 4, 8, 1, 0},       {"naive_1f1b", 4, 16, 1, 0.1},     {"1f1b", 4, 8, 1, 0},
    {"1f1b", 4, 16, 1, 0.1},          {"1f1b", 8, 16, 1, 0},             {"interleaved_1f1b", 4, 8, 2, 0},
    {"interleaved_1f1b", 4, 16, 2, 0.1}, {"interleaved_1f1b", 8, 16, 2, 0}, {"zb_h1", 4, 8, 1, 0},
    {"zb_h1", 2, 8, 1, 0},            {"zb_h1", 4, 16, 1, 0.1},          {"zb_h1", 4, 32, 1, 0},
    {"zb_h1", 6, 12, 1, 0},           {"zb_h1", 8, 16, 1, 0.2},
  };
  fmt::print("costs F=1 B=2 (I=1 W=1), {} seeds; gain = 1 - policy mean / replay mean; the replay is `table`\n"
             "running the policy's own equal-cost order (naive_1f1b's is 1F1B's)\n\n",
             seeds);
  fmt::print("{:<17} {:>2} {:>3} {:>2} {:>4}  {:<25} {:>9} {:>9} {:>8} {:>12}\n", "policy", "p", "m", "v", "lat",
             "scenario", "policy", "replay", "gain", "win/tie/loss");
  for (const auto& s : shapes) {
    sim_config base;
    base.ranks = s.p;
    base.microbatches = s.m;
    base.chunks = s.v;
    base.latency = s.latency;
    for (const auto& scenario : standard_scenarios()) {
      // naive_1f1b's equal-cost order is 1F1B's, so its replay is 1F1B's replay.
      auto r = compare_with_replay(base, s.policy, scenario, seeds);
      if (!r) {
        fmt::print(stderr, "{}: {}\n", s.policy, r.error().message);
        return 1;
      }
      fmt::print("{:<17} {:>2} {:>3} {:>2} {:>4}  {:<25} {:>9.3f} {:>9.3f} {:>7.2f}% {:>5}/{:>3}/{:>3}\n", s.policy,
                 s.p, s.m, s.v, s.latency, scenario.name, r->policy_mean, r->replay_mean, 100 * r->gain(), r->wins,
                 r->ties, r->losses);
    }
  }
  return 0;
}
