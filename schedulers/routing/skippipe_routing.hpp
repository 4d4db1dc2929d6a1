// SkipPipe's planned paths as a routing policy (#14): the router stamps each
// microbatch with its path, so stages follow routes that skip and reorder
// positions and return to stage 0 for the loss. Plain code: no CAF.
#pragma once

#include "schedulers/routing/routing_policy.hpp"

namespace troupe::sched {

/// The routing policy `skippipe`: microbatch k of a step (k = 0 .. replicas ×
/// microbatches - 1) follows `params.paths[k]`, whose hops name stage actors
/// (`r1s3`; the start's head chunk last, `r0s0.1`). Each replica's stages form
/// the chain s0.0, s1, ..., s(S-1), s0.1 (stage 0 holds the embedding and, as its
/// second chunk, the final norm and head: ops::gpt_config::head_apart), and a
/// stage's position is its place in that chain. Every path is checked: it
/// starts on a stage-0 actor's first chunk and ends on that actor's head chunk
/// (SkipPipe's paths start and end at stage 0), visits `options["path_length"]`
/// positions, stage 0 included, and none twice. Validation follows replica 0's
/// full chain and, when L < S, also path 0 (the model with fewer layers).
expected<routing_ptr> make_skippipe_routing(const routing_params& params);

} // namespace troupe::sched
