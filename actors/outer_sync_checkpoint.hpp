// A local-update sync actor's checkpoint part (#25 item 4): its method's state
// (sched::sync_policy::save) as f32 tensors `sync.NAME` and counts `sync.NAME`
// in the metadata, beside the actor's own bookkeeping: the exchanges it
// performed and the ones under way when the checkpoint was taken.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/actor/messages.hpp"
#include "runtime/checkpoint/safetensors.hpp"
#include "runtime/graph/graph_spec.hpp"
#include "schedulers/sync/sync_policy.hpp"

namespace troupe {

/// What an outer_sync actor's part holds.
struct outer_sync_saved {
  sched::sync_state state;
  long performed = 0;             ///< `outer.performed`: exchanges applied so far
  std::map<int, step_t> prepared; ///< `outer.prepared` ("F:STEP,…"): exchanges under way, by fragment
};

std::vector<named_handle> outer_sync_tensors(const sched::sync_state& s);
std::map<std::string, std::string> outer_sync_metadata(const outer_sync_saved& s);
/// A part read back (its values, or zeros of their sizes when `f` is null:
/// the header alone); std::invalid_argument saying what is malformed.
outer_sync_saved read_outer_sync_part(const safetensors_header& h, const safetensors_file* f);

/// An outer_sync's place: its replica among `replicas` (with replica groups,
/// its group among the groups).
struct sync_place {
  int replica = 0, replicas = 1;
};
sync_place sync_place_of(const graph_spec& g, const actor_spec& stage);

/// The local_update settings a part must agree on with the graph (its checkpoint identity).
std::map<std::string, std::string> outer_sync_identity(const graph_spec& g, const actor_spec& a);
/// Whether `part` fits outer_sync `a` of `g`, from its header: its method takes
/// up what it holds, in the sizes of the stage's fragments; the reason otherwise.
std::optional<std::string> check_outer_sync_part(const graph_spec& g, const actor_spec& a,
                                                 const safetensors_header& part);

} // namespace troupe
