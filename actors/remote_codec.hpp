// The data-plane messages that cross processes, as wire frames: fields in
// `meta`, tensor bytes as blobs (never copied on the sending side, except that
// a device tensor is copied to the host first).
#pragma once

#include <cstdint>
#include <functional>

#include <caf/actor.hpp>

#include "runtime/actor/messages.hpp"
#include "runtime/actor/outer_messages.hpp"
#include "runtime/transport/transport.hpp"

namespace troupe::remote {

/// Frame kinds of the data plane (control frames use 100 and up).
enum class data_kind : std::uint16_t {
  batch = 1,        ///< (forward_atom, batch_msg)
  eval_batch,       ///< (eval_atom, batch_msg)
  activation,       ///< (forward_atom, activation_msg)
  eval_activation,  ///< (eval_atom, activation_msg)
  gradient,         ///< (backward_atom, gradient_msg)
  norm,             ///< (norm_atom, step_t, double, int32 from)
  credit,           ///< (credit_atom, credit_msg)
  clip,             ///< (clip_atom, step_t, double)
  plan,             ///< (plan_atom, step_plan_msg)
  ring,             ///< (ring_atom, ring_msg): an all-reduce peer's chunk to the next peer
  hops,             ///< (hops_atom, step_t, int32 from, int32 count): least_loaded's per-step counts
  outer_part,       ///< (outer_part_atom, outer_part_msg): a replica's pseudo-gradient to another replica's sync actor
  attention_task,   ///< (attention_atom, attention_task_msg): a core-attention shard to an attention server
  attention_result, ///< (attention_atom, attention_result_msg): the server's answer
};

/// `dest` is the receiving actor's index in graph_spec::actors.
net::frame encode(std::uint16_t dest, const batch_msg& m, bool eval);
net::frame encode(std::uint16_t dest, const activation_msg& m, bool eval);
net::frame encode(std::uint16_t dest, const gradient_msg& m);
net::frame encode_norm(std::uint16_t dest, step_t step, double sq_norm, std::int32_t from);
net::frame encode_clip(std::uint16_t dest, step_t step, double total_sq);
net::frame encode(std::uint16_t dest, const credit_msg& m);
net::frame encode(std::uint16_t dest, const step_plan_msg& m);
net::frame encode(std::uint16_t dest, const ring_msg& m);
net::frame encode_hops(std::uint16_t dest, step_t step, std::int32_t from, std::int32_t count);
net::frame encode(std::uint16_t dest, const outer_part_msg& m);
net::frame encode(std::uint16_t dest, const attention_task_msg& m);
net::frame encode(std::uint16_t dest, const attention_result_msg& m);

/// Decodes `f` and sends its message to `local(dest)`, anonymously. Throws
/// malformed_input (runtime/transport/bytes.hpp) on anything it cannot decode, and when
/// `local` knows no such actor (returns an invalid handle).
void deliver(net::frame&& f, const std::function<caf::actor(std::uint16_t)>& local);

} // namespace troupe::remote
