// One ring member's per-bucket bookkeeping, free of CAF, tensors and clocks:
// which chunk goes out at which phase, which received chunk is applied next
// (ring messages may come before their turn), and when a bucket is reduced,
// reduce-scattered (ZeRO) or gathered. The actors (actors/allreduce_peer.cpp,
// actors/optimizer_shard.cpp) and the simulated clock (schedulers/sim/ring_sim.cpp)
// both run it, the actors with tensor chunks, the simulator with none (#25).
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "schedulers/sync/ring_allreduce.hpp"

namespace troupe::sched {

/// A bucket of a step.
struct ring_key {
  std::int64_t step = 0;
  int bucket = 0;
  friend auto operator<=>(const ring_key&, const ring_key&) = default;
};

/// What the member does next, in order. `send`: the chunk of `phase` goes to the
/// next member (ring_plan::send_chunk). `apply`: the received chunk of `phase`
/// (in `chunk`) is added in or copied (ring_plan::adds). `reduced`: the
/// all-reduce is done. `scattered`: ZeRO's reduce-scatter is done (the member
/// holds ring_plan::owned_chunk summed) and the gather waits for gather().
/// `gathered`: ZeRO's all-gather is done.
template <class Chunk>
struct ring_event {
  enum class kind { send, apply, reduced, scattered, gathered };
  kind what = kind::send;
  ring_key key;
  int phase = 0;
  Chunk chunk{};
};

template <class Chunk>
class ring_peer {
public:
  using event = ring_event<Chunk>;
  using kind = typename event::kind;

  /// Member `rank` of `members`; with `zero` each bucket stops after its
  /// reduce-scatter until gather(). `name` prefixes its errors.
  ring_peer(std::string name, int members, int rank, bool zero)
      : name_(std::move(name)), members_(members), rank_(rank), zero_(zero) {}

  /// The stage handed over bucket `k` of `elements` values: phase 0's send, and
  /// whatever the chunks that came before now allow.
  std::vector<event> take(ring_key k, std::int64_t elements) {
    auto& f = flights_[k];
    if (f.taken)
      throw std::runtime_error(name_ + ": bucket " + std::to_string(k.bucket) + " of step " + std::to_string(k.step) +
                               " handed over twice");
    f.taken = true;
    f.plan = {members_, rank_, elements};
    std::vector<event> out;
    if (f.plan.phases() > 0)
      out.push_back({kind::send, k, 0, {}});
    advance(k, out);
    return out;
  }
  /// The previous member's chunk of `phase` of bucket `k`.
  std::vector<event> receive(ring_key k, int phase, Chunk c) {
    flights_[k].early.emplace(phase, std::move(c));
    std::vector<event> out;
    advance(k, out);
    return out;
  }
  /// ZeRO: the shard updated its slice; bucket `k`'s all-gather starts. Throws
  /// when its reduce-scatter is not done.
  std::vector<event> gather(ring_key k) {
    auto it = flights_.find(k);
    if (!zero_ || it == flights_.end() || !it->second.scattered || it->second.gathering)
      throw std::runtime_error(name_ + ": asked to gather bucket " + std::to_string(k.bucket) + " of step " +
                               std::to_string(k.step) + " before it was reduce-scattered");
    it->second.gathering = true;
    std::vector<event> out;
    if (it->second.plan.phases() > 0)
      out.push_back({kind::send, k, members_ - 1, {}});
    advance(k, out);
    return out;
  }
  /// The plan of bucket `k` (handed over).
  const ring_plan& plan(ring_key k) const { return flights_.at(k).plan; }
  /// Buckets under way (handed over or with chunks waiting).
  std::size_t in_flight() const noexcept { return flights_.size(); }
  int members() const noexcept { return members_; }

private:
  struct flight {
    ring_plan plan;
    int phase = 0; ///< the next phase to apply
    bool taken = false, scattered = false, gathering = false;
    std::map<int, Chunk> early; ///< phase -> chunk that came before its turn
  };

  /// Applies every received chunk whose turn has come; ends the bucket when its phases are done.
  void advance(ring_key k, std::vector<event>& out) {
    auto it = flights_.find(k);
    auto& f = it->second;
    if (!f.taken)
      return;
    const int scatter = members_ - 1; // phases of the reduce-scatter
    while (!zero_ || f.phase < scatter || f.gathering) {
      if (f.phase == f.plan.phases()) {
        out.push_back({zero_ ? kind::gathered : kind::reduced, k, f.phase, {}});
        flights_.erase(it);
        return;
      }
      auto e = f.early.find(f.phase);
      if (e == f.early.end())
        return;
      out.push_back({kind::apply, k, f.phase, std::move(e->second)});
      f.early.erase(e);
      // Every later send is the chunk this phase received; the gather's first waits for gather().
      if (++f.phase < f.plan.phases() && (!zero_ || f.phase != scatter))
        out.push_back({kind::send, k, f.phase, {}});
    }
    if (!f.scattered && f.phase == scatter) {
      f.scattered = true;
      out.push_back({kind::scattered, k, f.phase, {}});
    }
  }

  std::string name_;
  int members_, rank_;
  bool zero_;
  std::map<ring_key, flight> flights_;
};

} // namespace troupe::sched
