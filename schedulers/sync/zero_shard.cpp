// ZeRO's partition of a stage's parameters (schedulers/sync/zero_shard.hpp).
#include "schedulers/sync/zero_shard.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace troupe::sched {

std::int64_t shard_layout::elements() const {
  std::int64_t n = 0;
  for (const auto& s : segments)
    n += s.elements;
  return n;
}

shard_layout make_shard_layout(const std::vector<std::vector<shard_param>>& chunks, std::int64_t bucket_bytes,
                               int members, int rank, const std::vector<param_ref>& alone) {
  shard_layout out;
  out.members = members, out.rank = rank;
  std::vector<std::vector<std::int64_t>> bytes;
  for (const auto& c : chunks) {
    auto& b = bytes.emplace_back();
    for (const auto& p : c)
      b.push_back(p.elements * 4);
  }
  out.buckets = make_buckets(bytes, bucket_bytes, alone);
  for (std::size_t b = 0; b < out.buckets.size(); ++b) {
    std::int64_t total = 0;
    for (const auto& r : out.buckets[b])
      total += chunks[static_cast<std::size_t>(r.chunk)][static_cast<std::size_t>(r.index)].elements;
    out.bucket_elements.push_back(total);
    ring_plan plan{members, rank, total};
    auto n = plan.chunk_elements();
    auto begin = plan.owned_chunk() * n, end = std::min(begin + n, total);
    std::int64_t at = 0; // the parameter's first element in the flat buffer
    for (std::size_t t = 0; t < out.buckets[b].size(); ++t) {
      const auto& r = out.buckets[b][t];
      const auto& p = chunks[static_cast<std::size_t>(r.chunk)][static_cast<std::size_t>(r.index)];
      auto lo = std::max(begin, at), hi = std::min(end, at + p.elements);
      if (lo < hi) {
        out.segments.push_back({static_cast<int>(b), static_cast<int>(t), lo - at, lo, hi - lo});
        out.names.push_back(fmt::format("{}[{}:{}]", p.name, lo - at, hi - at));
        out.decays.push_back(p.decays);
      }
      at += p.elements;
    }
  }
  return out;
}

} // namespace troupe::sched
