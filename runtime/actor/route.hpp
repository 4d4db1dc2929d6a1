// A microbatch's route (the stage actors it visits forward, in order, and so
// the way its gradient returns) and a step's plan for one stage: plain types
// (no CAF), shared by actors, routers and schedulers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe {

/// One stop of a route: the actor (its index in the graph's actor list, the
/// same in every process) and which of its model chunks the microbatch runs.
struct hop {
  std::int32_t actor = 0;
  std::int32_t chunk = 0;
  friend bool operator==(const hop&, const hop&) = default;
};

/// The hops of one microbatch, first (the embedding) to last (the loss).
using route_t = std::vector<hop>;

/// What a step holds for one stage actor, from the router before the step's
/// first microbatch: how many hops of the step's routes visit it (it completes
/// the step when it has run that many backwards), the tokens of the whole step
/// (the loss of a microbatch is scaled by its tokens over these), and the
/// global-norm reduction: `participants` stage actors, rooted at `reducer`.
struct step_plan_msg {
  std::int64_t step = 0;
  std::int32_t hops = 0;
  std::int64_t tokens = 0;
  std::int32_t participants = 1;
  std::int32_t reducer = 0; ///< actor index (graph order)
};

/// Prints a route as `3.0 4.0 5.1` (actor.chunk per hop).
inline std::string to_string(const route_t& r) {
  std::string out;
  for (const auto& h : r) {
    if (!out.empty())
      out += ' ';
    out += std::to_string(h.actor);
    out += '.';
    out += std::to_string(h.chunk);
  }
  return out;
}

} // namespace troupe
