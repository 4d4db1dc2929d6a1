// Report: how much each emergent policy gains over replaying its own canonical
// order under stragglers, for several pipeline shapes and look-ahead settings.
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "schedulers/straggler.hpp"

using namespace troupe::sched;

int main(int argc, char** argv) {
  int seeds = argc > 1 ? std::atoi(argv[1]) : 100;
  struct shape {
    const char* policy;
    int p, m, v;
  };
  const shape shapes[] = {{"1f1b", 4, 8, 1},  {"1f1b", 4, 16, 1}, {"1f1b", 8, 16, 1},
                          {"interleaved_1f1b", 4, 8, 2}, {"interleaved_1f1b", 4, 16, 2},
                          {"zb_h1", 4, 8, 1}, {"zb_h1", 4, 16, 1}, {"zb_h1", 8, 16, 1}};
  int look_aheads[] = {1, 2, 4};
  double latencies[] = {0, 0.1};
  fmt::print("{:<17} {:>2} {:>3} {:>2} {:>4} {:>3}  {:<25} {:>9} {:>9} {:>7} {:>12} {:>7}\n", "policy", "p", "m", "v",
             "lat", "la", "scenario", "policy", "replay", "gain", "win/tie/loss", "worst");
  for (const auto& s : shapes)
    for (double lat : latencies)
      for (int la : look_aheads)
        for (const auto& sc : standard_scenarios()) {
          sim_config base;
          base.ranks = s.p;
          base.microbatches = s.m;
          base.chunks = s.v;
          base.latency = lat;
          policy_params params;
          params.look_ahead = la;
          auto r = compare_with_replay(base, s.policy, sc, seeds, params);
          if (!r) {
            fmt::print(stderr, "{}: {}\n", s.policy, r.error().message);
            return 1;
          }
          fmt::print("{:<17} {:>2} {:>3} {:>2} {:>4} {:>3}  {:<25} {:>9.3f} {:>9.3f} {:>6.2f}% {:>4}/{:>3}/{:>3} {:>6.2f}%\n",
                     s.policy, s.p, s.m, s.v, lat, la, sc.name, r->policy_mean, r->replay_mean, 100 * r->gain(),
                     r->wins, r->ties, r->losses, 100 * r->worst);
        }
  return 0;
}
