// The published per-rank orders of the built-in schedules, as closed forms of
// (rank, p, m, v): what each policy prefers, and what `table` replays.
#pragma once

#include <vector>

#include "schedulers/policies/action.hpp"
#include "schedulers/expected.hpp"

namespace troupe::sched {

/// GPipe (Huang et al. 2019): every forward, then every backward, in microbatch order.
std::vector<action> gpipe_order(int rank, int ranks, int microbatches);

/// 1F1B / PipeDream-Flush (Narayanan et al. 2021, Megatron-LM's 1F1B): w = min(p - rank, m)
/// warm-up forwards, then one backward and one forward alternately, then the remaining backwards.
std::vector<action> one_f_one_b_order(int rank, int ranks, int microbatches);

/// Interleaved 1F1B (Narayanan et al. 2021, section 2.2.2; Megatron-LM's
/// forward_backward_pipelining_with_interleaving): v chunks per rank, chunk c
/// is virtual stage rank + c*p; forwards go through chunks in groups of p
/// microbatches, backwards through the chunks in reverse; warm-up count
/// (p - rank - 1)*2 + (v - 1)*p, or all of them when m == p. Needs m % p == 0.
expected<std::vector<action>> interleaved_order(int rank, int ranks, int microbatches, int chunks);

/// The in-flight bound interleaved 1F1B reaches on `rank`: its warm-up count + 1, at most m*v.
int interleaved_in_flight_limit(int rank, int ranks, int microbatches, int chunks);

/// ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", section 3.1): 1F1B's
/// order with each backward split into I (input gradient, sent upstream at once)
/// and W (weight gradient), and W deferred: w = min(p - rank, m) warm-up
/// forwards, then I_k, F_{k+w}, W_{k-rank}, and the deferred W passes at the end.
/// Later ranks defer more W passes, so the I passes climb the pipeline sooner and
/// the deferred W passes fill the cool-down: with F = I = W the idle time per rank
/// is (p-1)*F, a third of 1F1B's (p-1)*(F+B). Activations held (F..I) stay at 1F1B's
/// p - rank; rank r also keeps the W state of at most r + 1 microbatches.
std::vector<action> zb_h1_order(int rank, int ranks, int microbatches);

} // namespace troupe::sched
