// The list of built-in actor types: one registration line per type.
#include "actors/builtin.hpp"

namespace troupe {

void register_builtin_actors() {
  static const bool once = [] {
    register_actor_type("data_loader", {spawn_data_loader, data_loader_info()},
                        "byte-level batches from the corpus, sent on the first stage's credit");
    register_actor_type("pipeline_stage", {spawn_pipeline_stage, pipeline_stage_info()},
                        "a contiguous range of GPT layers with its optimizer shard and schedule policy");
    register_actor_type("allreduce_peer", {spawn_allreduce_peer, allreduce_peer_info()},
                        "sums one stage's gradient buckets over its replicas in a ring, during the backward");
    register_actor_type("optimizer_shard", {spawn_optimizer_shard, optimizer_shard_info()},
                        "ZeRO: reduce-scatters a stage's gradients, updates its slice's AdamW state, all-gathers "
                        "the parameters");
    register_actor_type("outer_sync", {spawn_outer_sync, outer_sync_info()},
                        "exchanges one stage's fragments with its replicas every H steps (DiLoCo, Streaming DiLoCo)");
    register_section_expander(
        "pipeline", {expand_pipeline, true},
        "a data_loader, pipeline_stage actors and their chain (also the default graph)");
    return true;
  }();
  (void)once;
}

} // namespace troupe
