// An optimizer shard's state, free of CAF (actors/optimizer_shard.cpp): its
// slice of one pipeline position's parameters (schedulers/sync/zero_shard.hpp), the
// AdamW moments of that slice, in ZeRO stage 2 the slice's reduced gradient,
// and its checkpoint part.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "ops/adamw.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/checkpoint/safetensors.hpp"
#include "runtime/graph/graph_spec.hpp"
#include "runtime/tensor/tensor_handle.hpp"
#include "schedulers/sync/zero_shard.hpp"

namespace troupe {

/// Bytes of model state an actor holds.
struct held_bytes {
  std::int64_t params = 0, grads = 0, optimizer = 0;
};

/// Records what `actor` holds as trace counters `held:ACTOR:params|grads|optimizer`
/// (the dashboard's /metrics reads them back, runtime/trace/trace_summary.hpp).
void record_held(const std::string& actor, const held_bytes& h);

/// The stage's parameters as ZeRO partitions them (one list per model chunk).
std::vector<std::vector<sched::shard_param>> zero_params(const graph_spec& g, const actor_spec& stage);
/// The stage's layout under ZeRO over `members` replicas, for the shard of `rank`:
/// the buckets its zero_shards component cuts, a tied matrix's copies each in a
/// bucket of its own (actors/boundary/zero_shards.cpp).
sched::shard_layout stage_shard_layout(const graph_spec& g, const actor_spec& stage, int members, int rank);

/// What the stage and the shard of `stage` hold by design, from the graph alone
/// (what `troupe check` prints and a run reports): the stage 4Ψ of parameters,
/// 4Ψ of gradients (its accumulation buffer; ZeRO-2: the shard's slice
/// instead) and, without ZeRO, 8Ψ of AdamW moments; the shard 8Ψ_r of moments
/// and in stage 2 4Ψ_r of gradient, Ψ_r its slice (make_shard_layout); in an
/// elastic launch Ψ_r is its slice and the next replica's, which it mirrors.
struct zero_prediction {
  held_bytes stage, shard;
};
zero_prediction predict_held(const graph_spec& g, const actor_spec& stage);

/// One shard: its slice, its moments and (stage 2) its gradient slice.
class zero_shard {
public:
  /// For `stage` (actor index `stage_index`) at place `rank` of its ring.
  zero_shard(const graph_spec& g, const actor_spec& stage, int rank, int stage_index);

  int stage() const noexcept { return stage_index_; }
  /// Buckets a step brings: the parameter buckets, then the loss alone on the loss stage.
  int buckets() const noexcept { return static_cast<int>(layout_.buckets.size()) + (loss_ ? 1 : 0); }
  /// The loss's bucket, or -1.
  int loss_bucket() const noexcept { return loss_ ? static_cast<int>(layout_.buckets.size()) : -1; }
  const sched::shard_layout& layout() const noexcept { return layout_; }
  /// Its place in the ring: which slice of the stage it holds.
  int rank() const noexcept { return layout_.rank; }

  /// Bucket `b` is reduce-scattered: `flat` holds its summed values in this
  /// shard's chunk. Keeps the slice (stage 1: in the stage's gradients
  /// `grads`, which it holds anyway; stage 2: in its own buffer) and
  /// remembers where the parameters are. Returns the slice's Σ g².
  double keep_gradients(int b, const float* flat, const std::vector<tensor_handle>& grads);
  /// Remembers bucket `b`'s parameters (the stage's live tensors).
  void bind_parameters(int b, const std::vector<tensor_handle>& params);
  /// AdamW on the slice at rate `lr`, its gradient scaled by `clip` (< 1 when clipped).
  void update(float lr, float clip);
  /// Writes the slice's updated parameters of bucket `b` into `flat`, where the all-gather sends them from.
  void write_parameters(int b, float* flat) const;
  /// The slice's parameters (bound, updated), segment after segment.
  std::vector<float> slice_values() const;

  /// What it holds: its moments and, in stage 2, its gradient slice.
  held_bytes held() const;
  /// Its checkpoint part: `optimizer.KIND.PARAM[begin:end]` per segment; metadata `optimizer.steps`.
  std::vector<named_handle> checkpoint_tensors() const;
  std::map<std::string, std::string> checkpoint_metadata() const;
  /// Loads a part written by the same slice; errc::invalid_argument naming `file` on a mismatch.
  caf::error restore(const safetensors_file& f, const std::string& file);
  /// Whether `part` fits this slice (its header alone); the reason otherwise.
  std::optional<std::string> check_part(const safetensors_header& part) const;

private:
  ops::named_tensor view(const tensor_handle& t, const sched::shard_segment& s, std::size_t i) const;

  int zero_ = 1;
  int stage_index_ = 0;
  bool loss_ = false;
  sched::shard_layout layout_;
  std::vector<std::int64_t> slice_at_; ///< segment -> its offset in the slice
  std::unique_ptr<ops::adamw> adamw_;
  tensor_handle grad_slice_;                      ///< stage 2: the slice's reduced gradient
  std::vector<ops::named_tensor> params_, grads_; ///< per segment: views into the stage (and the slice)
};

/// Writes `values`, slice `layout`'s parameters segment after segment (as
/// zero_shard::slice_values gives them), into the stage's parameters:
/// `params[b]`, bucket b's. std::invalid_argument when the sizes differ.
void write_slice(const sched::shard_layout& layout, const std::vector<const std::vector<tensor_handle>*>& params,
                 std::span<const float> values);

/// Where a shard's checkpoints go and what it resumes from.
struct zero_checkpointing : part_checkpointing {
  /// Writes the part after `steps_done` steps; the file name (throws on a failed write).
  std::string write(const zero_shard& s, std::int64_t steps_done, const std::string& actor) const;
  /// Loads the part being resumed, if any.
  caf::error restore(zero_shard& s, const std::string& actor) const;
};

/// A shard's place: the stage it serves, the next shard of its ring, its rank.
struct zero_ring {
  const actor_spec* stage = nullptr;
  int stage_index = 0, next_index = 0, rank = 0;
};
caf::expected<zero_ring> zero_ring_of(const graph_spec& g, const actor_spec& shard);

} // namespace troupe
