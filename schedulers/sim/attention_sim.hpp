// Core attention under the simulated clock (#16, DistCA #15): a round of
// microbatches (one per replica) priced from its documents' causal pairs, with
// attention colocated on each replica or balanced over in-place servers by
// plan_attention, the moved q/k/v/out bytes on the servers' links, and the
// nano-batches' ping-pong hiding that communication behind compute.
#pragma once

#include <cstdint>
#include <vector>

#include "schedulers/planners/attention_planner.hpp"
#include "schedulers/sim/cost_model.hpp"

namespace troupe::sched {

/// What one layer's forward costs, split as DistCA splits it: core attention by
/// causal pairs (flash attention: 4·h FLOPs a pair, QKᵀ and PV, at the attention
/// efficiency, no s² scores in memory) and the rest by tokens (24·h² FLOPs a
/// token at the matmul efficiency, its memory-bound ops, the tensor-parallel
/// all-reduces). A backward is the device's backward_ratio of the compute.
struct attention_costs {
  double linear = 0;      ///< seconds per token
  double pair = 0;        ///< seconds per causal pair
  double query_bytes = 0; ///< a moved query token sends q and gets its output back
  double kv_bytes = 0;    ///< a moved key token's k and v, once per destination
  double backward_ratio = 2;
  link_spec link; ///< between two servers (replicas of one position)
};
attention_costs attention_costs_of(const transformer_shape& m, const cost_settings& s, const link_spec& link);

/// A round's documents: [replica][nano-batch] -> the lengths of the document
/// pieces its sequences hold (a window cuts a longer document).
using round_documents = std::vector<std::vector<std::vector<std::int64_t>>>;

/// One round of one layer.
struct round_time {
  std::vector<double> forward, backward;   ///< per replica: seconds of the layer for its microbatch
  std::vector<std::int64_t> before, after; ///< pairs per server, over the nano-batches
  double worst_after = 1;                  ///< the most imbalanced nano-batch plan's max / average after
  double bytes = 0;                        ///< moved, forward, summed over the servers
};

/// Prices a round. `in_place` false: each replica runs its own documents'
/// attention (the replica drawing long documents is the straggler). True: each
/// nano-batch's documents, at home on their replica's server, balanced by
/// plan_attention within `tolerance`; a server's time is its tokens' linear
/// work plus the pairs it serves, a nano-batch's moved bytes (in and out of
/// the server, on `link`) hidden behind the compute of the round's other
/// nano-batches on it (with one nano-batch, exposed); every replica waits for
/// the slowest server, whose answers it needs. The backward moves twice the
/// bytes (q, k, v, the output gradient there; their gradients back).
round_time price_round(const round_documents& docs, const attention_costs& c, bool in_place, double tolerance);

} // namespace troupe::sched
