// DES-LOC (arXiv 2505.22549) as a registered method (#13): parameters, Adam's
// first and second moments averaged over every replica, each on its own
// period; the mean is the new value. Its settings, policy and registration.
#include <string>

#include "schedulers/sync/exchange_policies.hpp"

namespace troupe::sched {

namespace {

method_settings settings() {
  // K_u = 3·K_x, K_v = 6·K_x when not written.
  std::vector<option_spec> options{
    int_setting_spec("periods.params", "K_x: inner steps between averages of the parameters", 16, 1, max_period),
    int_setting_spec("periods.momentum", "K_u: between averages of Adam's first moment (default 3·K_x)", 0, 1,
                     max_period),
    int_setting_spec("periods.variance", "K_v: between averages of Adam's second moment (default 6·K_x)", 0, 1,
                     max_period),
    quantize_option()};
  options[1].fallback.clear(), options[2].fallback.clear(); // they follow K_x
  auto configure = [](local_update_spec& l) {
    int params = option_int(l, "periods.params");
    l.options.emplace("periods.momentum", std::to_string(3 * params));
    l.options.emplace("periods.variance", std::to_string(6 * params));
    l.sync_every = params; // the parameter period is its H
  };
  auto problems = [](const local_update_spec&, const local_update_context& c) {
    std::vector<local_update_problem> out;
    if (c.zero > 0)
      out.push_back({"replica_groups", "DES-LOC averages Adam's moments, which ZeRO's shards hold in slices: use "
                                       "data_parallel.zero: 0"});
    return out;
  };
  return {std::move(options), configure, problems};
}

} // namespace

void register_desloc(const sync_registrar& add) {
  add("desloc", {"DES-LOC: parameters, first and second moments averaged on their own periods",
                 [](const local_update_spec&) {
                   return std::vector<fragment_plan>{{fragment_content::params, 0, 1},
                                                     {fragment_content::exp_avg, 0, 1},
                                                     {fragment_content::exp_avg_sq, 0, 1}};
                 },
                 [](const local_update_spec& s) {
                   return periodic_schedule({option_int(s, "periods.params"), option_int(s, "periods.momentum"),
                                             option_int(s, "periods.variance")});
                 },
                 [](const sync_setup& s) { return make_averaging_policy(s, nullptr); }, settings(), nullptr, nullptr,
                 /*rejoins=*/true});
}

} // namespace troupe::sched
