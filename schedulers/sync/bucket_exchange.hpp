// DDP's gradient buckets summed over the replicas by direct exchanges, so that
// a replica can leave in the middle of a step (#26): one mean_exchange (in its
// summing form) per bucket of each step, instead of the ring, whose every
// chunk passes through every member. Plain code: the allreduce peer's direct
// form (actors/allreduce_direct.cpp) hands it its stage's buckets and the
// other replicas' messages, and sends what it returns.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "schedulers/sync/sync_policy.hpp"

namespace troupe::sched {

/// One message of a bucket's exchange: sync_send's, and whose bucket.
struct bucket_send {
  std::int64_t step = 0;
  int bucket = 0;
  sync_send send;
};

/// A bucket whose sum over the replicas (those still here) is complete.
struct bucket_sum {
  std::int64_t step = 0;
  int bucket = 0;
  std::vector<float> values;
};

/// One replica's side of the bucket exchanges of one stage position. Every
/// replica sums each bucket the same way: a chunk's sum is made once, by its
/// owner, in replica order, and is every survivor's (mean_exchange), so the
/// replicas left apply the same gradients bit for bit whenever a replica is
/// lost, its share of the step it was lost in in or out.
///
/// A message may come before this replica's own bucket: it waits. An exchange
/// stays answerable until this replica starts a bucket of the step after the
/// next (a survivor that learns of a loss late may still need its sums; no
/// member can be further behind, since none finishes a step's exchange
/// without every living member's parts of it).
class bucket_exchanges {
public:
  /// `replicas` members, this one `self`; values travel as `format`.
  bucket_exchanges(int replicas, int self, wire_format format);

  /// This replica's bucket `bucket` of step `step`: what to send.
  std::vector<bucket_send> start(std::int64_t step, int bucket, std::span<const float> values);
  /// A message from replica `from` about bucket `bucket` of step `step`: what to send on.
  std::vector<bucket_send> receive(std::int64_t step, int bucket, int from, int round, int piece, quantized_rows part);
  /// Replica `r` left the run: exchanges under way stop waiting for it, later
  /// ones leave it out. What to send (parts that now go to another owner).
  std::vector<bucket_send> lose(int r);
  /// Replica `r`, lost before, is back with a live replica's state (#26): the
  /// buckets of step `from` on include it again (none of them has started here:
  /// the step being dealt comes before `from`).
  void rejoin(int r, std::int64_t from);
  /// The buckets whose sums completed since the last call, in (step, bucket) order.
  std::vector<bucket_sum> take_done();
  /// Exchanges held (under way, or kept for members that learn of a loss late).
  std::size_t held() const noexcept { return ex_.size(); }

private:
  using key = std::pair<std::int64_t, int>;
  struct early_part {
    int from, round, piece;
    quantized_rows part;
  };
  /// Its members are fixed when this replica's bucket starts it: messages that
  /// come before wait, so a rejoin decided meanwhile still counts.
  struct entry {
    std::optional<mean_exchange> ex; ///< once this replica's bucket is in
    bool taken = false;
    std::vector<early_part> early; ///< messages that came before this replica's bucket
  };
  /// Whether replica `r` is out of step `step`'s exchanges.
  bool out(int r, std::int64_t step) const;
  void collect(const key& k, std::vector<sync_send> sends, std::vector<bucket_send>& out) const;

  int replicas_, self_;
  wire_format format_;
  std::vector<int> lost_;
  std::map<int, std::int64_t> back_; ///< lost replicas coming back -> the first step they are in
  std::map<key, entry> ex_;
};

} // namespace troupe::sched
