// ZeRO's partition of a stage's parameters among the optimizer shards of its
// ring (Rajbhandari et al. 2020, stages 1 and 2): which elements each shard
// owns the optimizer state (and, in stage 2, the gradient) of. Free of CAF.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedulers/sync/ring_allreduce.hpp"

namespace troupe::sched {

/// A parameter as the partition sees it.
struct shard_param {
  std::string name;
  std::int64_t elements = 0;
  bool decays = false; ///< AdamW decays it (a matrix or an embedding, rank >= 2)
};

/// A run of one parameter's elements inside a shard's slice.
struct shard_segment {
  int bucket = 0;          ///< the bucket (make_buckets order)
  int tensor = 0;          ///< the parameter's place in that bucket
  std::int64_t offset = 0; ///< its first element within the parameter
  std::int64_t flat = 0;   ///< its first element within the bucket's flat buffer
  std::int64_t elements = 0;
};

/// The slice of one stage's parameters that optimizer shard `rank` of
/// `members` owns. The rule: the gradients are cut into buckets exactly as the
/// stage sends them (make_buckets over `bucket_bytes`); each bucket's P
/// parameter elements are cut as the ring cuts them (ring_plan: padded to a
/// multiple of `members`, chunks of ceil(P / members)); the shard owns the
/// chunk its ring member holds summed after the reduce-scatter,
/// (rank + 1) mod members, less the padding. Every element has exactly one
/// owner, so the shards' slices add up to the stage's Ψ; a shard owns Ψ/members
/// exactly when every bucket's P is a multiple of `members`, and otherwise
/// ceil(P/members) or fewer of each bucket (DeepSpeed pads its flat group once
/// instead; the ring's cut keeps a bucket's reduce-scatter and the ownership the same).
struct shard_layout {
  std::vector<std::vector<param_ref>> buckets; ///< parameters of each bucket
  std::vector<std::int64_t> bucket_elements;   ///< parameter elements of each bucket
  std::vector<shard_segment> segments;         ///< this shard's runs, bucket by bucket
  std::vector<std::string> names;              ///< a name per segment: `PARAM[begin:end]`
  std::vector<bool> decays;                    ///< per segment
  int members = 1;
  int rank = 0;
  /// Elements this shard owns.
  std::int64_t elements() const;
};

/// The layout over `chunks` (one list of parameters per model chunk, in the
/// model's order; f32 gradients of 4 bytes an element), with the parameters of
/// `alone` each in a bucket of its own, as the stage cuts them (make_buckets).
shard_layout make_shard_layout(const std::vector<std::vector<shard_param>>& chunks, std::int64_t bucket_bytes,
                               int members, int rank, const std::vector<param_ref>& alone = {});

} // namespace troupe::sched
