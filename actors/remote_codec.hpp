// The data-plane messages that cross processes: a table of frame kinds, each a
// verb and its payload, encoded by the payload's own inspect()
// (runtime/transport/wire.hpp): fields in `meta`, tensor bytes as blobs (never
// copied on the sending side, except that a device tensor is copied to the host first).
#pragma once

#include <cstdint>
#include <functional>

#include <caf/actor.hpp>
#include <caf/behavior.hpp>

#include "actors/stage/pipeline_messages.hpp"
#include "runtime/actor/messages.hpp"
#include "runtime/actor/outer_messages.hpp"
#include "runtime/transport/transport.hpp"
#include "runtime/transport/wire.hpp"

namespace troupe::remote {

/// Frame kinds of the data plane (control frames use 100 and up).
enum class data_kind : std::uint16_t {
  batch = 1,
  eval_batch,
  activation,
  eval_activation,
  gradient,
  norm,
  credit,
  clip,
  plan,
  ring,
  hops,
  outer_part,
  attention_task,
  attention_result,
  tied_grad,
  tied_value,
  rejoin,
  state,
};

/// What each kind carries. A new data-plane message is one line here (its
/// struct's inspect() is its wire form); channels and deliver() read this table.
using data_table = wire::table<
  wire::entry<data_kind::batch, forward_atom, batch_msg>, wire::entry<data_kind::eval_batch, eval_atom, batch_msg>,
  wire::entry<data_kind::activation, forward_atom, activation_msg>,
  wire::entry<data_kind::eval_activation, eval_atom, activation_msg>,
  wire::entry<data_kind::gradient, backward_atom, gradient_msg>,
  wire::entry<data_kind::norm, norm_atom, step_t, double, std::int32_t>, // step, Σ g², from
  wire::entry<data_kind::credit, credit_atom, credit_msg>,
  wire::entry<data_kind::clip, clip_atom, step_t, double>, // step, global Σ g²
  wire::entry<data_kind::plan, plan_atom, step_plan_msg>,
  wire::entry<data_kind::ring, ring_atom, ring_msg>, // an all-reduce peer's chunk to the next peer
  wire::entry<data_kind::hops, hops_atom, step_t, std::int32_t, std::int32_t>, // step, from, count
  wire::entry<data_kind::outer_part, outer_part_atom, outer_part_msg>,         // a pseudo-gradient to another replica
  wire::entry<data_kind::attention_task, attention_atom, attention_task_msg>,  // a shard to an attention server
  wire::entry<data_kind::attention_result, attention_atom, attention_result_msg>, // the server's answer
  wire::entry<data_kind::tied_grad, tied_atom, tied_grad_msg>,   // a tied embedding's gradient to its twin stage
  wire::entry<data_kind::tied_value, tied_atom, tied_value_msg>, // the tied matrix after an outer step, to the head
  wire::entry<data_kind::rejoin, rejoin_atom, rejoin_msg>,       // a lost replica comes back (#26)
  wire::entry<data_kind::state, state_atom, state_msg>>;         // a live replica's state, to the joiner's

/// The frame that carries `(Atom::value, xs...)` to actor `dest` (its index in
/// graph_spec::actors): `encode(3, forward_atom{}, m)`.
template <class Atom, class... Ts>
net::frame encode(std::uint16_t dest, Atom, const Ts&... xs) {
  return wire::write(data_table::tag_of<Atom, Ts...>(), dest, xs...);
}

namespace detail {
template <class Ship, class Atom, class... Ts>
auto encoder(std::uint16_t dest, Ship ship, std::tuple<Atom, Ts...>*) {
  return [=](Atom, const Ts&... xs) { ship(encode(dest, Atom{}, xs...)); };
}
template <class Ship, class... Entries, class... Extra>
caf::behavior encoders(std::uint16_t dest, Ship ship, wire::table<Entries...>*, Extra... extra) {
  return {encoder(dest, ship, static_cast<typename Entries::values*>(nullptr))..., std::move(extra)...};
}
} // namespace detail

/// One handler per kind of the table: each message it takes is encoded for
/// actor `dest` and handed to `ship(net::frame)` (a channel's behavior), beside
/// the `extra` handlers.
template <class Ship, class... Extra>
caf::behavior encoders(std::uint16_t dest, Ship ship, Extra... extra) {
  return detail::encoders(dest, std::move(ship), static_cast<data_table*>(nullptr), std::move(extra)...);
}

/// Decodes `f` and sends its message to `local(dest)`, anonymously. An error
/// (what and where) for anything it cannot decode, and when `local` knows no
/// such actor (returns an invalid handle); nothing is sent then.
caf::error deliver(net::frame&& f, const std::function<caf::actor(std::uint16_t)>& local);

} // namespace troupe::remote
