// The settings most local-update methods share (sync_every, the outer
// optimizer, quantize), beside their rules; each method's own are in its file.
#include "schedulers/sync/method_settings.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "schedulers/sync/sync_policy.hpp"

namespace troupe::sched {

std::vector<option_spec> local_sgd_options(int sync_every, const outer_optimizer_spec& outer) {
  std::vector<option_spec> out{sync_every_option(sync_every)};
  auto o = outer_options(outer);
  out.insert(out.end(), o.begin(), o.end());
  out.push_back(quantize_option());
  return out;
}

option_spec sync_every_option(int fallback) {
  return int_setting_spec("sync_every", "H: inner steps each replica takes between exchanges", fallback, 1, max_period);
}

std::vector<option_spec> outer_options(const outer_optimizer_spec& fallback) {
  return {
    number_setting_spec("outer.lr", "the outer step's learning rate (above 0)", fallback.lr, -unbounded, unbounded),
    number_setting_spec("outer.momentum", "the outer step's momentum (from 0 to below 1)", fallback.momentum,
                        -unbounded, unbounded),
    bool_setting_spec("outer.nesterov", "Nesterov momentum in the outer step", fallback.nesterov)};
}

option_spec quantize_option() {
  return choice_setting_spec("quantize", "how the outer exchange travels (per-row scales, reduced in f32)",
                             {"none", "bf16", "int8", "fp8"});
}

std::vector<local_update_problem> outer_problems(const local_update_spec& l) {
  std::vector<local_update_problem> out;
  if (!(l.outer.lr > 0))
    out.push_back({"outer.lr", fmt::format("must be above 0, got {}", l.outer.lr)});
  if (!(l.outer.momentum >= 0 && l.outer.momentum < 1))
    out.push_back({"outer.momentum", fmt::format("must be from 0 to below 1, got {}", l.outer.momentum)});
  if (l.sync_every < 1)
    out.push_back({"sync_every", fmt::format("must be at least 1, got {}", l.sync_every)});
  return out;
}

const std::string& option_text(const local_update_spec& spec, const std::string& key) {
  auto it = spec.options.find(key);
  if (it == spec.options.end())
    throw std::invalid_argument(fmt::format("local_update.{}: no value for algorithm '{}'", key, spec.algorithm));
  return it->second;
}

int option_int(const local_update_spec& spec, const std::string& key) {
  return std::stoi(option_text(spec, key));
}

double option_number(const local_update_spec& spec, const std::string& key) {
  return std::stod(option_text(spec, key));
}

std::vector<local_update_problem> local_update_problems(const local_update_spec& spec,
                                                        const local_update_context& context) {
  const auto* m = find_sync_method(spec.algorithm);
  return m && m->settings.problems ? m->settings.problems(spec, context) : std::vector<local_update_problem>{};
}

bool settle_method_options(local_update_spec& spec) {
  const auto* m = find_sync_method(spec.algorithm);
  if (!m)
    return false;
  settle_local_update(spec, m->settings.options, m->settings.configure);
  return true;
}

} // namespace troupe::sched
