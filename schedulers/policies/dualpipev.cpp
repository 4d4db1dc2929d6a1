// DualPipeV (DeepSeek's DualPipe cut in half onto a V) as a rule over what a
// rank holds: a forward of one chunk fused with a backward of the other into
// one F&B action wherever the rank holds both, otherwise the single passes.
//
// The rule, in order: an F&B of the oldest ready forward and the oldest ready
// backward of the other chunk (the forward of chunk 1 first); a ready chunk-1
// forward while in flight < 2p, a chunk-0 forward while in flight + 1 < 2p; a
// ready backward (chunk 1 first); a deferred W when nothing else is ready.
//
// Why the bounds: the F&B's backward frees what its forward takes, so the rank
// stays at 2p chunk activations through the steady phase and holds 2p + 1
// during an F&B (DeepSeek's PP + 1 with PP = 2p virtual stages). A chunk-0
// forward keeps one slot free for chunk 1, for v_policies.cpp's reason: only a
// chunk-1 forward leads to the loss on rank 0, so a rank filled with chunk-0
// activations would wait forever.
//
// Why a backward is split into I and W, and which: a lone chunk-1 backward
// before the rank's first chunk-0 backward (the warm-up, DeepSeek's B1 W1 F1)
// and the last p backwards of the step (the cool-down) run as I, their W left
// to fill the waits that follow; all others run whole, inside an F&B where one
// is ready. With equal costs this gives DeepSeek's phases on every rank
// (dualpipev.test.cpp checks them at 4 ranks x 16 microbatches).
#include "schedulers/policies/v_policies.hpp"

#include <optional>
#include <set>

#include <fmt/format.h>

namespace troupe::sched {

namespace {

std::optional<int> oldest(const std::set<int>& s) {
  return s.empty() ? std::nullopt : std::optional{*s.begin()};
}

class dualpipev final : public stage_policy {
public:
  explicit dualpipev(int bound) : bound_(bound) {}
  std::string_view name() const override { return "dualpipev"; }
  bool splits_backward() const override { return true; }
  bool fuses_forward_backward() const override { return true; }
  chunk_placement placement() const override { return chunk_placement::v_shape; }
  int in_flight_limit() const override { return bound_ + 1; }

  std::optional<action> next(const stage_queue& q) override {
    const bool warm_up = q.ready_backward(0).empty() && q.in_flight(0) == started(q, 0); // no chunk-0 backward yet
    auto w = oldest(q.deferred_weight(1));
    if (w && warm_up)
      return wgrad(q.stage_of(1), *w);
    for (int c : {1, 0}) { // an F&B: net no memory, so it may run at the bound
      auto f = oldest(q.ready_forward(c)), b = oldest(q.ready_backward(1 - c));
      if (f && b && may_fuse(q, c))
        return overlap(fwd(q.stage_of(c), *f), bwd(q.stage_of(1 - c), *b));
    }
    if (auto f = oldest(q.ready_forward(1)); f && q.in_flight() < bound_)
      return fwd(q.stage_of(1), *f);
    if (auto f = oldest(q.ready_forward(0)); f && q.in_flight() + 1 < bound_)
      return fwd(q.stage_of(0), *f);
    for (int c : {1, 0})
      if (auto b = oldest(q.ready_backward(c)); b && !(may_fuse(q, 1 - c) && coming(q, 1 - c)))
        return action{warm_up || last_backwards(q) ? op_kind::input_grad : op_kind::backward, q.stage_of(c), *b};
    bool chunk1_done =
      q.planned() >= 0 && q.completed(1) + static_cast<int>(q.deferred_weight(1).size()) == q.planned() / q.chunks();
    if (!chunk1_done)
      return std::nullopt;
    for (int c : {1, 0})
      if (auto x = oldest(q.deferred_weight(c)))
        return wgrad(q.stage_of(c), *x);
    return std::nullopt;
  }

private:
  /// Whether a forward of chunk `c` may start fused with a backward of the
  /// other: within the bound, and on chunk 0 while fewer than p - r
  /// microbatches are out on the V beyond this rank (chunk 0 ran, chunk 1 not yet).
  bool may_fuse(const stage_queue& q, int c) const {
    return q.in_flight() <= bound_ && (c == 1 || started(q, 0) - started(q, 1) < q.ranks() - q.rank());
  }
  /// Forwards of chunk `c` still to come here this step (ready or not yet arrived).
  static bool coming(const stage_queue& q, int c) {
    return q.planned() >= 0 && started(q, c) < q.planned() / q.chunks();
  }
  /// The step's last p backwards here (the cool-down): they run as I.
  static bool last_backwards(const stage_queue& q) {
    return q.planned() >= 0 && q.planned() - (started(q, 0) + started(q, 1) - q.in_flight()) <= q.ranks();
  }
  static int started(const stage_queue& q, int c) { return static_cast<int>(q.started_forwards(c).size()); }

  int bound_; // chunk activations a lone forward may bring the rank to
};

} // namespace

expected<policy_ptr> make_dualpipev(const policy_params& p) {
  if (p.ranks < 1 || p.rank < 0 || p.rank >= p.ranks)
    return make_sched_error(fmt::format("dualpipev: rank {} is outside 0..{}", p.rank, p.ranks - 1));
  if (p.chunks != 2)
    return make_sched_error(
      fmt::format("dualpipev: runs two model chunks per rank placed in a V (virtual: 2), not {}", p.chunks));
  if (p.paths || p.routed)
    return make_sched_error("dualpipev: runs on a chain of stages, not on paths or routes across replicas");
  if (p.microbatches > 0 && p.microbatches < 2 * p.ranks)
    return make_sched_error(fmt::format("dualpipev: needs at least 2 x stages = {} microbatches per step, not {} "
                                        "(DeepSeek's DualPipeV: each rank's warm-up holds 2 x stages chunk "
                                        "activations before its first backward)",
                                        2 * p.ranks, p.microbatches));
  auto bound = int_setting("dualpipev", p, "max_in_flight", 2, 2 * p.ranks);
  if (!bound)
    return bound.error();
  return policy_ptr{new dualpipev(*bound)};
}

} // namespace troupe::sched
