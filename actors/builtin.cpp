// The list of built-in actor types: one registration line per type.
#include "actors/builtin.hpp"

#include "actors/data/token_source.hpp"
#include "schedulers/sync/sync_policy.hpp"

namespace troupe {

void register_builtin_actors() {
  static const bool once = [] {
    register_actor_type("data_loader", {spawn_data_loader, data_loader_info()},
                        "batches from the data source, sent on the first stage's credit");
    // The data source kinds: one registration line each; `data:` accepts each one's key and settings.
    register_data_source(text_source_kind());
    register_data_source(token_file_source_kind());
    register_data_source(jsonl_source_kind());
    set_data_sources([] {
      std::vector<data_source_info> out;
      for (const auto& k : registered_data_sources())
        out.push_back(k.info);
      return out;
    });
    register_actor_type("pipeline_stage", {spawn_pipeline_stage, pipeline_stage_info()},
                        "a contiguous range of GPT layers with its optimizer shard and schedule policy");
    register_actor_type("allreduce_peer", {spawn_allreduce_peer, allreduce_peer_info()},
                        "sums one stage's gradient buckets over its replicas in a ring, during the backward");
    register_actor_type("optimizer_shard", {spawn_optimizer_shard, optimizer_shard_info()},
                        "ZeRO: reduce-scatters a stage's gradients, updates its slice's AdamW state, all-gathers "
                        "the parameters");
    register_actor_type("outer_sync", {spawn_outer_sync, outer_sync_info()},
                        "runs one stage's local-update sync policy: DiLoCo, Streaming DiLoCo, NoLoCo, DES-LOC, "
                        "SparseLoCo or a plugin's");
    register_actor_type("attention_server", {spawn_attention_server, attention_server_info()},
                        "runs core-attention shards for the stages (DistCA's attention servers, `attention: "
                        "{servers: N}`)");
    // local_update.algorithm accepts every registered sync method, plugins' included,
    // and each method's keys are the ones it registered.
    set_local_update_methods([] {
      std::vector<local_update_method_info> out;
      for (const auto& name : sched::sync_method_names())
        if (const auto* m = sched::find_sync_method(name))
          out.push_back({name, m->summary, m->settings.options, m->settings.configure, m->settings.problems});
      return out;
    });
    register_section_expander("pipeline", {expand_pipeline, true},
                              "a data_loader, pipeline_stage actors and their chain (also the default graph)");
    return true;
  }();
  (void)once;
}

} // namespace troupe
