// The V-shaped policies: one rule over what a rank holds, with the memory
// bound each published schedule keeps. Rank r holds virtual stages r (chunk 0)
// and 2p - 1 - r (chunk 1), so a microbatch leaves rank 0 on chunk 0, turns on
// rank p - 1 and comes back to rank 0, which computes its loss on chunk 1.
//
// The rule: a ready I (the oldest microbatch, chunk 1 on a tie), or the oldest
// W first when `max_deferred_weight` wait; else a ready chunk-1 forward while
// in flight < bound; a ready chunk-0 forward while in flight + 1 < bound; else
// the oldest W, which fills time that would be idle.
//
// Why I first (unlike zb_h1's forward first): under a memory bound a rank's
// throughput is its slots over a microbatch's lifetime here, and every I that
// waits lengthens the lifetimes of all the ranks before it on the way back.
// Measured at 4x8, 4x16, 6x12, 8x16 and 8x32 with equal costs, I first never
// lost and cut V-Min's bubble rate from 0.354/0.260/0.306/0.313/0.156 to
// 0.313/0.198/0.236/0.281/0.120 (V-Half's at 8x16 from 0.198 to 0.167; ZB-V's
// is 0 either way).
//
// Why the slot kept free: a chunk-0 forward starts a microbatch that comes
// back here on chunk 1, and only that chunk's I frees anything on rank 0 (its
// chunk-0 activation waits for the whole V). Filled with chunk-0 forwards,
// rank 0 could never take the chunk-1 forward that leads to the loss: every
// rank would wait. With one slot kept, a chunk-1 forward always finds room on
// rank 0, where its I follows at once; by induction up the ranks each rank's
// oldest chunk-1 activation is freed in turn, so chunk 1 never stalls. On rank
// 0 under ZB-V's bound 2p this gives the published warm-up: 2p - 1 chunk-0
// forwards, then chunk-1 forward, I and W while the chunk-0 gradients return.
//
// The bounds, in chunk activations (two per microbatch's worth, each chunk
// holding half of a rank's layers): ZB-V 2p, 1F1B's p microbatches (Qi et al.
// 2023, section 6); V-Half 2 * ((p + 2) // 2) and V-Min 2 * ((p + 4) // 3), the
// activation memory of Qi et al. 2024's table. Measured with `troupe schedule
// --costs 1,2,1` (F = I = W) at 4 stages x 8 microbatches, see v_policies.test.cpp.
#include "schedulers/policies/v_policies.hpp"

#include <optional>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

namespace troupe::sched {

namespace {

/// The lowest microbatch in `of(c)` over both chunks, chunk 1 first on a tie.
template <class Of>
std::optional<action> oldest(const stage_queue& q, op_kind kind, Of&& of) {
  std::optional<action> best;
  for (int c = q.chunks() - 1; c >= 0; --c) {
    const std::set<int>& s = of(c);
    if (!s.empty() && (!best || *s.begin() < best->microbatch))
      best = action{kind, q.stage_of(c), *s.begin()};
  }
  return best;
}

class v_rule final : public stage_policy {
public:
  v_rule(std::string name, int bound, int weight_cap) : name_(std::move(name)), bound_(bound), cap_(weight_cap) {}
  std::string_view name() const override { return name_; }
  bool splits_backward() const override { return true; }
  chunk_placement placement() const override { return chunk_placement::v_shape; }
  int in_flight_limit() const override { return bound_; }

  std::optional<action> next(const stage_queue& q) override {
    auto w = oldest(q, op_kind::weight_grad, [&](int c) -> const std::set<int>& { return q.deferred_weight(c); });
    auto i = oldest(q, op_kind::input_grad, [&](int c) -> const std::set<int>& { return q.ready_backward(c); });
    if (i && (!w || q.deferred_weight_count() < cap_))
      return i;
    if (i)
      return w; // `max_deferred_weight` wait: the next I waits for one
    const auto& back = q.ready_forward(1);
    if (!back.empty() && q.in_flight() < bound_)
      return fwd(q.stage_of(1), *back.begin());
    const auto& out = q.ready_forward(0);
    if (!out.empty() && q.in_flight() + 1 < bound_) // one slot kept for chunk 1 (see above)
      return fwd(q.stage_of(0), *out.begin());
    return w;
  }

private:
  std::string name_;
  int bound_; // chunk activations held at once
  int cap_;   // deferred W passes before the next I waits for one
};

/// Two chunks per rank, more than one rank's worth of memory... checked, then the bound from options or `fallback`.
expected<policy_ptr> make_v(const char* name, const policy_params& p, int microbatches_held) {
  if (p.ranks < 1 || p.rank < 0 || p.rank >= p.ranks)
    return make_sched_error(fmt::format("{}: rank {} is outside 0..{}", name, p.rank, p.ranks - 1));
  if (p.chunks != 2)
    return make_sched_error(
      fmt::format("{}: runs two model chunks per rank placed in a V (virtual: 2), not {}", name, p.chunks));
  if (p.paths || p.routed)
    return make_sched_error(fmt::format("{}: runs on a chain of stages, not on paths or routes across replicas", name));
  auto bound = int_setting(name, p, "max_in_flight", 2, 2 * microbatches_held);
  if (!bound)
    return bound.error();
  auto cap = int_setting(name, p, "max_deferred_weight", 1, 2 * p.ranks);
  if (!cap)
    return cap.error();
  return policy_ptr{new v_rule(name, *bound, *cap)};
}

} // namespace

std::vector<policy_option> v_options() {
  return {int_option("max_in_flight", "most chunk activations held at once (two per microbatch's worth)", 2),
          int_option("max_deferred_weight", "most weight-gradient (W) passes deferred at once", 1)};
}

expected<policy_ptr> make_zbv(const policy_params& p) {
  return make_v("zbv", p, p.ranks);
}

expected<policy_ptr> make_v_half(const policy_params& p) {
  return make_v("v_half", p, (p.ranks + 2) / 2);
}

expected<policy_ptr> make_v_min(const policy_params& p) {
  return make_v("v_min", p, (p.ranks + 4) / 3);
}

} // namespace troupe::sched
