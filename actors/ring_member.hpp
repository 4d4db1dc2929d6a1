// What every ring member (allreduce_peer, optimizer_shard) does alike: a
// bucket under way with its flat, padded copy and the ring messages that came
// before their turn; the chunk it sends in a phase; applying the next phase.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/send.hpp>

#include "runtime/actor/messages.hpp"
#include "runtime/trace/hang_watch.hpp"
#include "runtime/trace/trace.hpp"
#include "schedulers/sync/ring_peer.hpp"

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

/// One bucket of one step on its way round the ring: its values. Which phase
/// comes next is the ring's bookkeeping (sched::ring_peer, `ring_book`).
struct ring_flight {
  bucket_msg bucket;  ///< the stage's tensors (empty until it sends them)
  tensor_handle flat; ///< the values being reduced or gathered, padded; empty in between
  sched::ring_plan plan;
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
  /// Applies `in`, the chunk received in `phase`: added in the reduce-scatter,
  /// copied in the all-gather; a bf16 chunk widened to f32. Throws naming `who`
  /// on a chunk of the wrong size.
  void apply(int phase, const tensor_handle& in, const std::string& who, step_t step, int bucket);
};

/// A ring member's bookkeeping with tensor chunks (schedulers/sync/ring_peer.hpp).
using ring_book = sched::ring_peer<tensor_handle>;
using ring_key = sched::ring_key;

/// Runs `f` as one message's work of `step` (`what` names the message, a
/// string literal, for the hang detector): an exception becomes a failure
/// report to the actor's runner (`self->state.runner`) naming `name` and the
/// step, and the actor quits.
template <class Actor, class F>
void guarded(Actor* self, const std::string& name, const char* what, step_t step, F&& f) {
  handler_scope busy(self->state.trace_id, what);
  try {
    f();
  } catch (const std::exception& e) {
    self->send(self->state.runner, failed_atom::value, failure_msg{name, e.what(), step});
    self->quit();
  }
}

/// The graph's actors by index and their trace ids, from a connect message's directory.
void store_directory(const connect_msg& m, std::vector<caf::actor>& actors, std::vector<std::uint16_t>& ids);

/// A send span of `bytes` for a ring message of `bucket` in `step`.
void record_ring_send(std::uint16_t actor, step_t step, int bucket, std::uint64_t bytes);

/// Carries out the ring's events for a member whose state (`self->state`)
/// holds `actors`, `actor_ids`, `trace_id`, `bytes_sent` and `flights` (by
/// ring_key, a ring_flight or one derived from it): a send goes to the next
/// member (as bf16 with `wire_bf16`), an apply goes into the flight's values;
/// every other event goes to `done(event, flight iterator)`.
template <class Actor, class Done>
void run_ring(Actor* self, const ring_settings& cfg, std::vector<ring_book::event> events, Done&& done) {
  auto& st = self->state;
  for (auto& e : events) {
    auto it = st.flights.find(e.key);
    if (it == st.flights.end())
      throw std::logic_error("ring: an event for a bucket this member does not hold");
    switch (e.what) {
    case ring_book::kind::send: {
      auto copy = it->second.chunk(e.phase, cfg.wire_bf16);
      record_ring_send(st.trace_id, e.key.step, e.key.bucket, copy.nbytes());
      st.bytes_sent += static_cast<decltype(st.bytes_sent)>(copy.nbytes());
      trace_recorder::global().message_sent(st.actor_ids.at(static_cast<std::size_t>(cfg.next)));
      self->send(st.actors.at(static_cast<std::size_t>(cfg.next)), ring_atom::value,
                 ring_msg{e.key.step, e.key.bucket, e.phase, std::move(copy)});
      break;
    }
    case ring_book::kind::apply:
      it->second.apply(e.phase, e.chunk, cfg.name, e.key.step, e.key.bucket);
      break;
    default:
      done(e, it);
    }
  }
}

} // namespace troupe
