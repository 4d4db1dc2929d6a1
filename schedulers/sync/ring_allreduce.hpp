// The data-parallel sync policy's arithmetic, free of CAF and of tensors: how a
// stage's gradients are cut into buckets, and the ring all-reduce of one bucket
// (reduce-scatter, then all-gather) as each ring member sees it.
#pragma once

#include <cstdint>
#include <vector>

namespace troupe::sched {

/// A parameter of a stage: its model chunk and its index in that chunk's list.
struct param_ref {
  int chunk = 0;
  int index = 0;
  friend bool operator==(const param_ref&, const param_ref&) = default;
};

/// Cuts a stage's parameters into buckets in the order backward completes their
/// gradients: chunks from last to first, each chunk's parameters from last to
/// first (the head before the blocks, the blocks from the top, the embeddings
/// last). A bucket closes once it holds at least `bucket_bytes`; a parameter is
/// never split. `bytes[c][i]` is the gradient size of parameter i of chunk c.
/// The parameters of `alone` (a tied matrix's copies, whose gradients are final
/// only at the step boundary) go each in a bucket of its own, after the others.
std::vector<std::vector<param_ref>> make_buckets(const std::vector<std::vector<std::int64_t>>& bytes,
                                                 std::int64_t bucket_bytes, const std::vector<param_ref>& alone = {});

/// The ring all-reduce of one bucket of `elements` values among `members`, as
/// member `rank` runs it. The bucket is padded with zeros to a multiple of
/// `members` and cut into `members` equal chunks; a member sends to rank + 1
/// and receives from rank - 1. Phases 0 .. members - 2 reduce-scatter (the
/// received chunk is added in), phases members - 1 .. 2·members - 3 all-gather
/// (it is copied). Phase 0's send starts the ring; every later send is the chunk
/// the previous phase received. Each member sends 2(n-1)/n of the padded bucket.
struct ring_plan {
  int members = 1;
  int rank = 0;
  std::int64_t elements = 0;

  /// Elements after padding: the smallest multiple of `members` not below `elements`.
  std::int64_t padded() const { return (elements + members - 1) / members * members; }
  std::int64_t chunk_elements() const { return padded() / members; }
  /// Messages each member sends (and receives): 2(members - 1).
  int phases() const { return 2 * (members - 1); }
  /// The chunk this member sends in `phase`.
  int send_chunk(int phase) const;
  /// The chunk it receives in `phase` (from rank - 1).
  int recv_chunk(int phase) const;
  /// Whether the chunk received in `phase` is added in (reduce-scatter) or copied (all-gather).
  bool adds(int phase) const { return phase < members - 1; }
  /// The chunk this member holds summed once the reduce-scatter (phases 0 ..
  /// members - 2) is done: the one its all-gather sends first, rank + 1.
  int owned_chunk() const { return (rank + 1) % members; }
};

} // namespace troupe::sched
