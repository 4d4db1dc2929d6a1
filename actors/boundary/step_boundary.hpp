// A stage's step boundary as registered components: what happens to its
// gradients and parameters once a step's backward work is done (the local
// optimizer, the DDP ring, ZeRO's optimizer shards, a local-update method's
// outer exchange), instead of modes inside the stage engine.
#pragma once

#include <any>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/error.hpp>
#include <caf/message.hpp>

#include "actors/stage/stage_model.hpp"
#include "runtime/actor/messages.hpp"
#include "runtime/checkpoint/safetensors.hpp"

namespace troupe {

struct stage_config;
struct graph_spec;
struct actor_spec;

/// What a component may use of the stage it serves (the stage engine implements it).
class stage_host {
public:
  virtual const stage_config& config() const = 0;
  /// The stage's model chunks (chunk c = virtual stage rank + c·ranks).
  virtual const std::vector<std::unique_ptr<stage_model>>& models() const = 0;
  /// Sends `m` to actor `to` of the graph (its index).
  virtual void send(int to, caf::message m) = 0;
  /// The sync that the component's sync() left running for `step` is done.
  virtual void synced(step_t step) = 0;
  /// The exchange that after_update() started has rewritten the parameters.
  virtual void exchanged() = 0;
  /// The update that apply() left running for `step` is done and the parameters are back.
  virtual void applied(step_t step) = 0;
  /// This step's Σ loss × tokens here (the loss stage; 0 elsewhere), read and
  /// replaced by a component that sums it over replicas with the gradients.
  virtual double loss_sum() const = 0;
  virtual void set_loss_sum(double v) = 0;
  /// The live state of kind `kind` (`exp_avg`, …) of the stage's optimizer, in
  /// chunk and parameter order; empty before its first update. Throws when no
  /// component keeps that kind.
  virtual std::vector<tensor_handle> optimizer_state(std::string_view kind) const = 0;
  /// The stage's whole state as its checkpoint part holds it (parameters,
  /// optimizer state and step counts; CPU handles share the live storage):
  /// what a rejoining replica starts from (#26).
  virtual safetensors_file state() = 0;

protected:
  ~stage_host() = default;
};

/// One step-boundary component of a stage. The engine calls every component of
/// the stage's stack, in order, at each point of the step; each one acts on
/// the points it has a part in. A component that cannot go on throws
/// std::runtime_error naming the stage (the actor's handler reports it).
class step_boundary {
public:
  virtual ~step_boundary() = default;
  /// Its registered name (`local_optimizer`, `ddp_ring`, …).
  virtual std::string_view type() const = 0;

  /// Before the first step, after any restore.
  virtual void start() {}
  /// A weight-gradient pass over `chunk` in `step` begins: `last` when no other
  /// pass over that chunk follows in the step; ends with end_pass().
  virtual void begin_pass(step_t step, int chunk, bool last) {}
  virtual void end_pass() {}
  /// The step's backward work is done here, and so are the syncs of the
  /// components above it in the stack (it sees the gradients they left). True
  /// when nothing must be waited for; otherwise the component calls
  /// host.synced(step) when it is.
  virtual bool sync(step_t step) { return true; }
  /// This stage's share of the global Σ g², when the component decides it (the
  /// first component that answers wins; none: the stage's own gradients).
  virtual std::optional<double> norm_share(step_t step) { return std::nullopt; }
  /// Whether it applies the update (exactly one component of a stack does).
  virtual bool applies_update() const { return false; }
  /// Applies the update of `step` at learning rate `lr`, the gradients scaled
  /// by `clip` (1: not clipped). True when done; otherwise host.applied(step)
  /// follows and the stage runs nothing meanwhile.
  virtual bool apply(step_t step, float lr, float clip) { return true; }
  /// Optimizer post-validation (`train.clip: post_validate`): applies the update
  /// of `step` unclipped before the global norm is known, keeping the
  /// parameters and optimizer state it overwrites, and the gradients. False when
  /// this component cannot (its update runs elsewhere); validated() follows.
  virtual bool apply_early(step_t step, float lr) { return false; }
  /// The norm of the step apply_early() ran is in. `keep`: the update stands
  /// and the gradients go. Otherwise the parameters and optimizer state are put
  /// back as they were before it, and the gradients stay for apply() to redo it.
  virtual void validated(bool keep) {}
  /// After the update that completes `steps_done` steps, before the next step's
  /// work. True when nothing must be waited for; otherwise host.exchanged() follows.
  virtual bool after_update(step_t steps_done) { return true; }
  /// A message from one of its peer actors; false when it is not for this component.
  virtual bool receive(const caf::message& m) { return false; }

  /// Optimizer state kinds it saves per parameter (`optimizer.KIND.NAME`).
  virtual std::vector<std::string> state_kinds() const { return {}; }
  /// Appends the tensors it checkpoints for each parameter of chunk `chunk`
  /// (`per_param[i]`: parameter i's, after the parameter itself).
  virtual void save(std::size_t chunk, std::vector<std::vector<named_handle>>& per_param) const {}
  /// Optimizer steps it has taken per chunk, when it keeps an optimizer (else nullopt).
  virtual std::optional<std::vector<long>> optimizer_steps() const { return std::nullopt; }
  /// Loads its part of a checked checkpoint; a failure changes nothing it matters to.
  virtual caf::error restore(const safetensors_file& f, const std::vector<long>& optimizer_steps,
                             const std::string& file) {
    return {};
  }
  /// The stage resumes after `steps_done` steps (once restored, before start()).
  virtual void resume_at(step_t steps_done) {}
  /// Bytes of optimizer state it holds.
  virtual std::int64_t optimizer_bytes() const { return 0; }
  /// The live state of kind `kind` (see stage_host::optimizer_state); nullopt when it keeps none.
  virtual std::optional<std::vector<tensor_handle>> state_of(std::string_view kind) const { return std::nullopt; }
};

/// One component of a stage's stack as the graph chose it: the registered
/// type, the peer actor it talks to (-1: none) and its own options.
struct boundary_choice {
  std::string type;
  int peer = -1;
  std::any options;
};

/// A component type: whether (and how) it serves a stage of a graph, and how
/// it is made. A new one is one file plus one registration line.
struct step_boundary_type {
  std::string name;
  /// Its part in stage `stage` of `g` (choice.type is filled in), or nullopt when it has none.
  std::optional<boundary_choice> (*select)(const graph_spec& g, const actor_spec& stage);
  std::unique_ptr<step_boundary> (*make)(stage_host& host, const boundary_choice& choice);
};

/// Registers a component type; a stage's stack is in registration order. A later
/// registration of the same name replaces the earlier one in its place.
void register_step_boundary(step_boundary_type t);
/// What stage `stage` of `g` runs at its step boundary: every registered type
/// that selects it, in registration order (make_step_boundaries adds the default).
std::vector<boundary_choice> select_step_boundaries(const graph_spec& g, const actor_spec& stage);
/// Makes a stage's stack, with `local_optimizer` last when no chosen component
/// applies the update (so no choices: the local optimizer alone); throws
/// std::invalid_argument naming an unknown type and the known ones, or a stack
/// without exactly one component that applies the update.
std::vector<std::unique_ptr<step_boundary>> make_step_boundaries(stage_host& host,
                                                                 const std::vector<boundary_choice>& choices);

/// The built-in components, in stack order (actors/boundary/step_boundary.cpp registers them).
step_boundary_type ddp_ring_boundary();        ///< actors/boundary/ddp_ring.cpp
step_boundary_type tied_embeddings_boundary(); ///< actors/boundary/tied_embeddings.cpp
step_boundary_type zero_shards_boundary();     ///< actors/boundary/zero_shards.cpp
step_boundary_type local_optimizer_boundary(); ///< actors/boundary/local_optimizer.cpp
step_boundary_type outer_exchange_boundary();  ///< actors/boundary/outer_exchange.cpp
void register_builtin_step_boundaries();

/// A copy of a tied matrix that stage `stage` holds (actors/boundary/tied_embeddings.cpp):
/// its parameter's name, and whether the global norm counts it (the embedding's
/// copy is counted, the head's is not). None without tied embeddings apart.
struct tied_copy {
  std::string name;
  bool counted = true;
};
std::vector<tied_copy> tied_copies_on(const graph_spec& g, const actor_spec& stage);
/// The stage actor (its index) that holds the other copy of the tied matrix:
/// its own when it holds both (V-shaped chunks); -1 without tied embeddings apart.
int tied_twin_of(const graph_spec& g, const actor_spec& stage);
/// Stages that clip by their own norm (NoLoCo's random routes) clip a tied pair
/// apart by its joint one: each stage actor holding one copy -> the lower index of the pair.
std::map<int, int> tied_norm_pairs(const graph_spec& g);
/// The sizes of the tensors that stage `stage`'s outer exchange cuts into
/// fragments, in chunk and parameter order: its parameters less the head's
/// tied copy, which follows the embedding's outer steps (actors/boundary/outer_exchange.cpp).
std::vector<std::int64_t> outer_tensor_sizes(const graph_spec& g, const actor_spec& stage);

} // namespace troupe
