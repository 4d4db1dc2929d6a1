// The messages of local-update training (#13): a stage's values to its sync
// actor, quantized pseudo-gradients between the sync actors of one position,
// and the new values back. Registered in runtime/actor/actor_system.cpp.
//
//  - `(outer_atom, outer_local_msg)`       stage -> its sync actor actor: the start
//                                          values (once), a fragment to prepare
//                                          or to perform the exchange with, or
//                                          that a checkpoint is due (`save`)
//  - `(outer_part_atom, outer_part_msg)`   sync actor -> the sync actors of other
//                                          replicas at its position, as its policy says
//  - `(outer_done_atom, outer_result_msg)` sync actor -> its stage: the fragment's
//                                          new local values; the stage goes on
//  - `(rejoin_atom, rejoin_msg)`           loader -> the stages of the donor and the
//                                          sync actors of every live replica: a
//                                          lost replica comes back (#26)
//  - `(state_atom, state_msg)`             the donor's stage or sync actor -> the
//                                          joiner's: its state, for it to start from
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/atom.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

#include "runtime/actor/errors.hpp"
#include "runtime/actor/messages.hpp"
#include "runtime/actor/route.hpp"
#include "runtime/tensor/tensor_handle.hpp"

namespace troupe {

using outer_atom = caf::atom_constant<caf::atom("outer")>;
using outer_part_atom = caf::atom_constant<caf::atom("outerpart")>;
using outer_done_atom = caf::atom_constant<caf::atom("outerdone")>;
/// `(replica_lost_atom, int32 replica)`: a replica left the run (its node was
/// lost); local-update training goes on without it (the launcher tells the sync
/// actors and the loader of every other node).
using replica_lost_atom = caf::atom_constant<caf::atom("replost")>;
/// `(replica_back_atom, int32 replica)`: the lost replica's node is back (its
/// channels reconnected); the loader decides when it rejoins (rejoin_msg).
using replica_back_atom = caf::atom_constant<caf::atom("repback")>;
using rejoin_atom = caf::atom_constant<caf::atom("rejoin")>;
using state_atom = caf::atom_constant<caf::atom("state")>;

/// What a stage hands its sync actor after an inner step.
struct outer_local_msg {
  /// `save`: the checkpoint after `step` inner steps is due; the sync actor
  /// writes its part once the performs of that step are applied.
  enum kind_t : std::int32_t { start = 0, prepare = 1, perform = 2, save = 3 };
  step_t step = 0;           ///< inner steps done
  std::int32_t fragment = 0; ///< -1 with `start` (every fragment) and `save`
  std::int32_t kind = start;
  std::vector<std::vector<float>> values; ///< one list per fragment it is about
};

/// One message of a fragment's exchange between the sync actors of one
/// position, as it travels (schedulers/sync/sync_policy.hpp, schedulers/sync/quantize.hpp):
/// from `replica`, in the policy's round `round`, about its piece `piece`.
struct outer_part_msg {
  step_t step = 0; ///< the inner step it was prepared after
  std::int32_t fragment = 0, replica = 0, round = 0, piece = 0, format = 0;
  std::int64_t values = 0, cols = 0;
  std::vector<std::uint8_t> data;
  std::vector<float> scales;
};

/// A fragment's values after the exchange, for its stage to load.
struct outer_result_msg {
  step_t step = 0;
  std::int32_t fragment = 0;
  std::vector<float> values;
};

/// A lost replica comes back (#26): it trains from step `steps` on (0-based),
/// starting from the state the live replica `donor` has after `steps` steps.
/// The sync actors take it into the exchanges prepared after more steps; the
/// donor's actors send their state to its counterpart `to` (an actor index; -1
/// for the other replicas' sync actors).
struct rejoin_msg {
  std::int32_t replica = 0;
  step_t steps = 0;
  std::int32_t donor = 0;
  std::int32_t to = -1;
  /// How many times the loader had heard `replica` was lost when it decided: a
  /// sync actor that has heard of more losses since takes no part in it (the
  /// replica was lost again on its way back).
  std::int32_t losses = 0;
};

/// A live replica's state for a rejoining one (#26): what its actor writes as a
/// checkpoint part (tensors and metadata), in memory, after `steps` steps. The
/// tensors travel as one byte blob (CAF skips a tensor_handle, not a list of
/// them); to_state_msg and state_file convert.
struct state_msg {
  step_t steps = 0;
  std::int32_t replica = 0; ///< the donor
  std::vector<std::string> names;
  std::vector<std::int32_t> types;       ///< each tensor's dtype
  std::vector<std::int64_t> dims;        ///< each tensor's rank, then its dimensions
  tensor_handle bytes;                   ///< u8: every tensor's bytes, in order
  std::vector<std::string> keys, values; ///< the metadata
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rejoin_msg& x) {
  return f(caf::meta::type_name("rejoin_msg"), x.replica, x.steps, x.donor, x.to, x.losses,
           caf::meta::load_callback([&] {
             return x.replica >= 0 && x.steps >= 0 && x.donor >= 0 && x.to >= -1 && x.losses >= 0
                      ? caf::error{}
                      : make_error(errc::malformed_frame, "rejoin of replica " + std::to_string(x.replica) +
                                                            " at step " + std::to_string(x.steps) + " malformed");
           }));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, state_msg& x) {
  return f(caf::meta::type_name("state_msg"), x.steps, x.replica, x.names, x.types, x.dims, x.bytes, x.keys, x.values,
           caf::meta::load_callback([&] {
             return x.steps >= 0 && x.names.size() == x.types.size() && x.keys.size() == x.values.size()
                      ? caf::error{}
                      : make_error(errc::malformed_frame, "a replica's state with " + std::to_string(x.names.size()) +
                                                            " names for " + std::to_string(x.types.size()) +
                                                            " tensors, malformed");
           }));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, outer_local_msg& x) {
  return f(caf::meta::type_name("outer_local_msg"), x.step, x.fragment, x.kind, x.values);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, outer_part_msg& x) {
  return f(caf::meta::type_name("outer_part_msg"), x.step, x.fragment, x.replica, x.round, x.piece, x.format, x.values,
           x.cols, x.data, x.scales, caf::meta::load_callback([&] {
             return x.fragment >= 0 && x.replica >= 0 && x.round >= 0 && x.piece >= 0 && x.values >= 0 && x.cols >= 0
                      ? caf::error{}
                      : make_error(errc::malformed_frame, "outer part of fragment " + std::to_string(x.fragment) +
                                                            " from replica " + std::to_string(x.replica) +
                                                            " malformed");
           }));
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, outer_result_msg& x) {
  return f(caf::meta::type_name("outer_result_msg"), x.step, x.fragment, x.values);
}

struct safetensors_file;
/// The state message of `f`'s tensors (CPU; copied into one blob) and metadata.
state_msg to_state_msg(step_t steps, int replica, const safetensors_file& f);
/// The tensors and metadata a state message carries; std::invalid_argument
/// saying what does not add up (the sizes against the blob, a dtype).
safetensors_file state_file(const state_msg& m);

} // namespace troupe
