// The actor types every troupe build provides, registered by one explicit call.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include <caf/expected.hpp>

#include "ops/gpt.hpp"
#include "runtime/actor/registry.hpp"
#include "runtime/checkpoint/safetensors.hpp"

namespace troupe {

caf::expected<caf::actor> spawn_data_loader(spawn_context& ctx);
caf::expected<caf::actor> spawn_pipeline_stage(spawn_context& ctx);
caf::expected<caf::actor> spawn_allreduce_peer(spawn_context& ctx);
/// Its direct form in an elastic DDP launch (graph_spec::elastic_ddp; actors/allreduce_direct.cpp).
caf::expected<caf::actor> spawn_allreduce_direct(spawn_context& ctx);
caf::expected<caf::actor> spawn_optimizer_shard(spawn_context& ctx);
/// Its direct form in an elastic ZeRO launch (graph_spec::elastic_ddp; actors/optimizer_shard_direct.cpp).
caf::expected<caf::actor> spawn_optimizer_shard_direct(spawn_context& ctx);
caf::expected<caf::actor> spawn_outer_sync(spawn_context& ctx);

/// What the loader knows of each type: its keys and its role (actor_role).
actor_type_info data_loader_info();
actor_type_info pipeline_stage_info();
actor_type_info allreduce_peer_info();
actor_type_info optimizer_shard_info();
actor_type_info outer_sync_info();
/// DistCA's separate attention servers (#15): core-attention shards for any stage.
caf::expected<caf::actor> spawn_attention_server(spawn_context& ctx);
actor_type_info attention_server_info();

/// The checks of pipeline_stage entries before anything runs
/// (actors/stage/pipeline_stage_check.cpp): a `table` schedule runs to completion on
/// the graph's pipeline under the simulated clock (the first stage reports it);
/// a checkpoint part holds the stage's tensors with their shapes and dtypes.
void check_pipeline_stage(const actor_spec& a, const graph_spec& g, diagnostics& out);
/// A pipeline_stage's or outer_sync's `stall: {step: 5, for: 3s}` as (0-based
/// step, seconds), or why it is not one.
caf::expected<std::pair<std::int64_t, double>> parse_stall(const YAML::Node& n);
/// Adds the positioned error of `a`'s `stall:`, if it has one that is not one.
void check_stall(const actor_spec& a, diagnostics& out);
std::optional<std::string> check_stage_checkpoint(const graph_spec& g, const actor_spec& a,
                                                  const safetensors_header& part);
/// The parameters of each of `a`'s layer ranges (actors/stage/stage_init_file.cpp).
std::vector<std::vector<ops::gpt_param_spec>> stage_param_specs(const graph_spec& g, const actor_spec& a);
/// A warm start from a Hugging Face weights file: whether `file` holds the
/// parameters of `a`'s layers (the role's check_init_file), and those
/// parameters under troupe's names as a part stage_engine::load_weights takes.
std::optional<std::string> check_stage_init_file(const graph_spec& g, const actor_spec& a,
                                                 const std::filesystem::path& file);
caf::expected<safetensors_file> read_stage_init_file(const graph_spec& g, const actor_spec& a,
                                                     const std::filesystem::path& file);

/// The `pipeline:` shorthand: a data_loader, `stages` pipeline_stage actors with
/// even contiguous layers (every p-th chunk with `virtual:`), and their chain of channels.
void expand_pipeline(section_expansion& e);

/// With `data_parallel: {replicas: R}`, the `pipeline:` shorthand's all-reduce
/// rings: an allreduce_peer `NAME_ar` beside every stage `NAME` (`stage(r, s)`
/// names them), channels both ways between the two, and one from each peer to
/// the peer of the next replica at the same position.
void expand_allreduce_ring(section_expansion& e, int replicas, const std::function<std::string(int, int)>& stage);
/// With `data_parallel.zero: 1 | 2`, the same rings made of optimizer_shard
/// actors `NAME_os` (actors/optimizer_shard.cpp) instead of all-reduce peers.
void expand_zero_shards(section_expansion& e, int replicas, const std::function<std::string(int, int)>& stage);
/// How the helpers beside one position's stages talk: each to the next
/// replica's (a ring), or each to every other replica's.
enum class helper_links { ring, all_pairs };
/// A `type` actor `NAME` + `suffix` beside every stage `NAME`, channels both
/// ways between the two, and between the helpers of one position as `links` says.
void expand_ring(section_expansion& e, int replicas, const std::function<std::string(int, int)>& stage,
                 const std::string& type, const std::string& suffix, helper_links links = helper_links::ring);
/// What every helper beside a stage shares: the `stage:` key, placed with it.
actor_type_info stage_helper_info();
/// Whether helper `a` names a stage it serves (`stage: NAME`); reports it otherwise.
bool check_serves_stage(const actor_spec& a, const graph_spec& g, diagnostics& out);

/// With `local_update:`, the `pipeline:` shorthand's sync actors instead of the
/// all-reduce rings (#13): an outer_sync `NAME_sync` beside every stage `NAME`,
/// channels both ways between the two, and from each to the outer_sync of every
/// other replica at the same position (actors/outer_sync.cpp).
void expand_outer_sync(section_expansion& e, int replicas, const std::function<std::string(int, int)>& stage);
/// The helper of type `type` whose `stage:` names `stage` (its index in g.actors), or -1.
int helper_of(const graph_spec& g, const std::string& type, const std::string& stage);
/// The actor type beside each stage that sums its gradients every step:
/// `optimizer_shard` under ZeRO, else `allreduce_peer` (what leaves and
/// rejoins with a replica in an elastic launch, graph_spec::elastic_ddp).
const char* every_step_sync_type(const graph_spec& g) noexcept;

/// Registers data_loader, pipeline_stage and the `pipeline:` expander (idempotent).
void register_builtin_actors();

} // namespace troupe
