// An example plugin: a stage policy of its own, registered when a graph names
// this library under `plugins:` and selected with `schedule: greedy_backward_first`.
//
// The rule is the naive one: run a ready backward if there is one, else the
// oldest ready forward, within 1F1B's memory bound. It is a useful baseline:
// compare it with `troupe schedule` against 1f1b under a slow stage.
#include <algorithm>

#include "schedulers/policies/stage_policy.hpp"

namespace {

using namespace troupe::sched;

class greedy_backward_first final : public stage_policy {
public:
  explicit greedy_backward_first(const policy_params& p) : limit_(p.chunks * (p.ranks - p.rank)) {}

  std::string_view name() const override { return "greedy_backward_first"; }
  int in_flight_limit() const override { return limit_; }

  std::optional<action> next(const stage_queue& q) override {
    // Deeper chunks first: their gradients unblock the ranks upstream soonest.
    for (int c = q.chunks() - 1; c >= 0; --c)
      if (!q.ready_backward(c).empty())
        return bwd(q.stage_of(c), *q.ready_backward(c).begin());
    if (q.in_flight() >= limit_)
      return std::nullopt;
    for (int c = 0; c < q.chunks(); ++c)
      if (!q.ready_forward(c).empty())
        return fwd(q.stage_of(c), *q.ready_forward(c).begin());
    return std::nullopt;
  }

private:
  int limit_;
};

} // namespace

/// The entry point troupe calls once after loading this library.
extern "C" void troupe_register_plugin() {
  register_policy("greedy_backward_first", "backward if one is ready, else the oldest forward (1F1B memory bound)",
                  [](const policy_params& p) -> expected<policy_ptr> {
                    if (p.rank < 0 || p.rank >= p.ranks)
                      return make_sched_error("greedy_backward_first: rank out of range");
                    return policy_ptr{std::make_unique<greedy_backward_first>(p)};
                  });
}
