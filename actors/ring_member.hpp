// What every ring member (allreduce_peer, optimizer_shard) does alike: a
// bucket under way with its flat, padded copy and the ring messages that came
// before their turn; the chunk it sends in a phase; applying the next phase.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/send.hpp>

#include "runtime/actor/messages.hpp"
#include "schedulers/sync/ring_allreduce.hpp"

namespace troupe {

/// A ring member's place: the stage it serves, the next member, its rank.
struct ring_settings {
  std::string name;
  int stage = 0;          ///< the stage it serves (actor index)
  int next = 0;           ///< the next member of the ring (actor index)
  int members = 1;        ///< replicas in the ring
  int rank = 0;           ///< its replica: its place in the ring
  bool wire_bf16 = false; ///< `data_parallel.wire: bf16`: chunks go as bf16
};

/// One bucket of one step on its way round the ring.
struct ring_flight {
  bucket_msg bucket;  ///< the stage's tensors (empty until it sends them)
  tensor_handle flat; ///< the values being reduced or gathered, padded; empty in between
  sched::ring_plan plan;
  int phase = 0;                      ///< the next phase to receive
  std::map<int, tensor_handle> early; ///< phase -> chunk that came before its turn
  std::int64_t started_ns = 0;

  /// Takes the stage's bucket: copies its tensors into a fresh flat buffer, zero-padded.
  void take(bucket_msg m, int members, int rank);
  /// Copies the flat buffer's values back into `into`, in order (the stage's tensors).
  void write_back(const std::vector<tensor_handle>& into) const;
  /// A copy of the chunk this member sends in `phase` (the receiver may keep it).
  /// As `bf16` it is rounded to bf16 (nearest even), half the bytes; in the
  /// all-gather the member's own values are rounded alike first, so every member
  /// ends with the same values.
  tensor_handle chunk(int phase, bool bf16 = false);
  /// Applies the received chunk of the current phase if it is here (added in the
  /// reduce-scatter, copied in the all-gather; a bf16 chunk widened to f32) and
  /// moves to the next phase; false when it has not come yet. Throws naming `who`
  /// on a chunk of the wrong size.
  bool apply_next(const std::string& who, step_t step, int bucket);
};

/// Runs `f` as one message's work: an exception becomes a failure report to
/// the actor's runner (`self->state.runner`) naming `name`, and the actor quits.
template <class Actor, class F>
void guarded(Actor* self, const std::string& name, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    self->send(self->state.runner, failed_atom::value, failure_msg{name, e.what()});
    self->quit();
  }
}

/// A chunk from the previous member, kept under its phase until the bucket's
/// flight gets there: the flight of (step, bucket) in `flights` (made if new).
template <class Flights>
auto keep_chunk(Flights& flights, ring_msg& m) {
  auto it = flights.try_emplace({m.step, static_cast<int>(m.bucket)}).first;
  it->second.early[m.phase] = std::move(m.chunk);
  return it;
}

/// The graph's actors by index and their trace ids, from a connect message's directory.
void store_directory(const connect_msg& m, std::vector<caf::actor>& actors, std::vector<std::uint16_t>& ids);

/// A send span of `bytes` for a ring message of `bucket` in `step`.
void record_ring_send(std::uint16_t actor, step_t step, int bucket, std::uint64_t bytes);

} // namespace troupe
