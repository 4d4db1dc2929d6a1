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
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/atom.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

#include "runtime/actor/errors.hpp"
#include "runtime/actor/route.hpp"

namespace troupe {

using outer_atom = caf::atom_constant<caf::atom("outer")>;
using outer_part_atom = caf::atom_constant<caf::atom("outerpart")>;
using outer_done_atom = caf::atom_constant<caf::atom("outerdone")>;
/// `(replica_lost_atom, int32 replica)`: a replica left the run (its node was
/// lost); local-update training goes on without it (the launcher tells the sync
/// actors and the loader of every other node).
using replica_lost_atom = caf::atom_constant<caf::atom("replost")>;

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

} // namespace troupe
