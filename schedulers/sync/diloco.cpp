// DiLoCo (Douillard et al. 2023, arXiv 2311.08105) as a registered method
// (#13): H inner steps, the pseudo-gradient averaged over every replica, an
// outer Nesterov step. Streaming DiLoCo with one fragment, no delay, no mixing.
#include "schedulers/sync/streaming_diloco.hpp"

namespace troupe::sched {

void register_diloco(const sync_registrar& add) {
  // The paper's H = 500, outer Nesterov lr 0.7, momentum 0.9.
  method_settings settings{local_sgd_options(500, {}), nullptr,
                           [](const local_update_spec& l, const local_update_context&) { return outer_problems(l); }};
  add("diloco", {"DiLoCo: H inner steps, the averaged pseudo-gradient, an outer Nesterov step",
                 [](const local_update_spec&) { return param_fragments(1); }, make_fragment_sync_schedule,
                 [](const sync_setup& s) {
                   return make_averaging_policy(s, std::make_unique<streaming_diloco>(s.spec, s.start));
                 },
                 std::move(settings), nullptr, run_diloco_toy, /*rejoins=*/true});
}

} // namespace troupe::sched
