// A local-update method's settings: the keys it reads under `local_update:`
// (an option schema the graph loader checks at each key's position), how they
// become the spec's typed values, and the rules between them (#25).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/graph/local_update_spec.hpp"

namespace troupe::sched {

/// What a sync method registers about its `local_update:` keys.
struct method_settings {
  /// Every key the method reads, with its type, range, summary and default.
  std::vector<option_spec> options;
  /// Sets the spec's typed values from `spec.options` (each key written or its default).
  std::function<void(local_update_spec&)> configure;
  /// The rules between values; empty when `spec` is sound.
  std::function<std::vector<local_update_problem>(const local_update_spec&, const local_update_context&)> problems;
};

/// `sync_every`: H inner steps between exchanges, `fallback` when absent.
option_spec sync_every_option(int fallback);
/// `outer.lr`, `outer.momentum`, `outer.nesterov`, with the method's defaults.
std::vector<option_spec> outer_options(const outer_optimizer_spec& fallback);
/// `quantize`: how the outer exchange travels (none, bf16, int8, fp8).
option_spec quantize_option();

/// The outer optimizer's rules: lr above 0, momentum from 0 to below 1, and sync_every of at least 1.
std::vector<local_update_problem> outer_problems(const local_update_spec& spec);

/// Option `key` of `spec` as an integer, a number or text (the value configure reads).
int option_int(const local_update_spec& spec, const std::string& key);
double option_number(const local_update_spec& spec, const std::string& key);
const std::string& option_text(const local_update_spec& spec, const std::string& key);

/// The settings of the built-in methods (schedulers/sync/method_settings.cpp).
method_settings diloco_settings();
method_settings streaming_diloco_settings();
method_settings noloco_settings();
method_settings desloc_settings();
method_settings sparseloco_settings();

/// The rules of `spec`'s registered method (none for an unknown one), as the
/// graph loader and `troupe sync` apply them.
std::vector<local_update_problem> local_update_problems(const local_update_spec& spec,
                                                        const local_update_context& context);

} // namespace troupe::sched
