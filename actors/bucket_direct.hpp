// What the direct forms of a stage's every-step sync share (an elastic launch,
// graph_spec::elastic_ddp, #26): the all-reduce peer's
// (actors/allreduce_direct.cpp) and ZeRO's optimizer shard's
// (actors/optimizer_shard_direct.cpp) both sum the stage's gradient buckets by
// direct exchanges (schedulers/sync/bucket_exchange.hpp) with the actors of
// the same type beside the other replicas' stages at that position.
#pragma once

#include <array>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "actors/ring_member.hpp"
#include "runtime/actor/outer_messages.hpp"
#include "runtime/graph/graph_spec.hpp"
#include "runtime/tensor/tensor_handle.hpp"
#include "schedulers/sync/bucket_exchange.hpp"

namespace troupe {

/// The replicas whose direct ZeRO shards hold slice `k` of `replicas`: k and
/// k−1 (each shard keeps its own slice and the next one's; the coordinator
/// reads it to foresee a loss that takes both).
inline std::array<int, 2> slice_holders(int k, int replicas) {
  return {k, (k + replicas - 1) % replicas};
}

/// A bucket's tensors as one run of values, in order.
std::vector<float> flat_values(const std::vector<tensor_handle>& tensors);
/// Writes `values` (as flat_values cut them) back into `tensors`.
void write_values(const std::vector<tensor_handle>& tensors, const float* values);

/// The message of one part of a bucket exchange from replica `replica` (its payload moved out of `b`).
outer_part_msg part_message(sched::bucket_send& b, int replica);
/// Sends every part `sends` holds to its replica's actor (`peers`, by replica)
/// from replica `replica`, counting its bytes in `bytes_sent` and the trace.
template <class Self>
void send_parts(Self* self, const std::vector<int>& peers, int replica, std::vector<sched::bucket_send>& sends,
                std::uint64_t& bytes_sent) {
  auto& st = self->state;
  for (auto& b : sends) {
    auto bytes = b.send.payload.wire_bytes();
    bytes_sent += bytes;
    record_ring_send(st.trace_id, b.step, b.bucket, bytes);
    self->send(st.actors.at(static_cast<std::size_t>(peers.at(static_cast<std::size_t>(b.send.to)))),
               outer_part_atom::value, part_message(b, replica));
  }
}
/// A received part's values as the exchanges take them (moved out of `m`).
sched::quantized_rows part_rows(outer_part_msg& m);

/// The actor of type `type` beside the stage with `stage`'s layers in every
/// replica of its sync group (actor indices, by replica; `stage`'s own
/// included); an error naming `who` and the replica that has none.
caf::expected<std::vector<int>> position_peers(const graph_spec& g, const actor_spec& stage, const std::string& type,
                                               const std::string& who);

} // namespace troupe
