// What a graph's actors will hold in memory, estimated from the graph alone
// before anything is built, and whether it fits this machine: `check` and
// `run` refuse a graph that cannot (d_model 100000 passed check and died at
// run with std::bad_alloc naming actor 'stage').
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/graph/graph_spec.hpp"

namespace troupe {

/// One layer holder's (or optimizer shard's) estimate, in bytes.
struct actor_memory {
  std::string actor;
  std::int64_t state = 0;       ///< parameters, gradients and optimizer state (f32, AdamW)
  std::int64_t activations = 0; ///< kept for backward, at the schedule's in-flight bound
  int in_flight = 0;            ///< microbatches whose activations it holds at most
  bool host = true;             ///< in this machine's memory (a stage on a GPU holds it there)
  std::int64_t total() const { return state + activations; }
};

/// Every layer holder of `g` and, with ZeRO, its optimizer shard. Activations
/// per layer follow Korthikanti et al. 2022 (34 s·b·h + 5 a·s²·b bytes at 16
/// bits, doubled for f32), plus the logits and their gradient on the head's stage.
std::vector<actor_memory> estimate_memory(const graph_spec& g);

/// This machine's physical memory in bytes (0 when unknown).
std::int64_t machine_memory();

/// Why `g` cannot run here: its actors' estimate for one process (the total
/// over cluster.nodes when it has them) passes `available` bytes; nothing when it fits.
std::optional<std::string> memory_problem(const graph_spec& g, std::int64_t available);

} // namespace troupe
