// Buckets and the ring all-reduce's chunk order (schedulers/sync/ring_allreduce.hpp).
#include "schedulers/sync/ring_allreduce.hpp"

#include <algorithm>

namespace troupe::sched {

namespace {
int wrap(int i, int n) {
  return ((i % n) + n) % n;
}
} // namespace

std::vector<std::vector<param_ref>> make_buckets(const std::vector<std::vector<std::int64_t>>& bytes,
                                                 std::int64_t bucket_bytes, const std::vector<param_ref>& alone) {
  std::vector<std::vector<param_ref>> out;
  std::vector<param_ref> open;
  std::int64_t held = 0;
  for (int c = static_cast<int>(bytes.size()) - 1; c >= 0; --c)
    for (int i = static_cast<int>(bytes[static_cast<std::size_t>(c)].size()) - 1; i >= 0; --i) {
      if (std::find(alone.begin(), alone.end(), param_ref{c, i}) != alone.end())
        continue;
      open.push_back({c, i});
      held += bytes[static_cast<std::size_t>(c)][static_cast<std::size_t>(i)];
      if (held >= bucket_bytes)
        out.push_back(std::move(open)), open.clear(), held = 0;
    }
  if (!open.empty())
    out.push_back(std::move(open));
  for (const auto& p : alone)
    out.push_back({p});
  return out;
}

int ring_plan::send_chunk(int phase) const {
  // Reduce-scatter sends rank, rank - 1, ...; all-gather sends the chunk it
  // owns reduced (rank + 1), then what it was just given.
  return phase < members - 1 ? wrap(rank - phase, members) : wrap(rank + 1 - (phase - (members - 1)), members);
}

int ring_plan::recv_chunk(int phase) const {
  return phase < members - 1 ? wrap(rank - phase - 1, members) : wrap(rank - (phase - (members - 1)), members);
}

} // namespace troupe::sched
