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

/// The limits of the built-in methods' counts and periods; numbers whose finer
/// rules a method checks itself (problems) take ±unbounded.
constexpr int max_period = 1'000'000'000;
constexpr int max_count = 1 << 20;
constexpr double unbounded = 1e9;

/// `sync_every`: H inner steps between exchanges, `fallback` when absent.
option_spec sync_every_option(int fallback);
/// `outer.lr`, `outer.momentum`, `outer.nesterov`, with the method's defaults.
std::vector<option_spec> outer_options(const outer_optimizer_spec& fallback);
/// `quantize`: how the outer exchange travels (none, bf16, int8, fp8).
option_spec quantize_option();

/// The options of the DiLoCo family: sync_every, the outer optimizer and quantize.
std::vector<option_spec> local_sgd_options(int sync_every, const outer_optimizer_spec& outer);

/// The outer optimizer's rules: lr above 0, momentum from 0 to below 1, and sync_every of at least 1.
std::vector<local_update_problem> outer_problems(const local_update_spec& spec);

/// Option `key` of `spec` as an integer, a number or text (the value configure reads).
int option_int(const local_update_spec& spec, const std::string& key);
double option_number(const local_update_spec& spec, const std::string& key);
const std::string& option_text(const local_update_spec& spec, const std::string& key);

/// Settles `spec` as the graph loader does for its registered method: each of
/// the method's keys missing from `spec.options` takes its default, the shared
/// values (sync_every, outer, quantize) are read from the options and the
/// method's configure runs. False when no method is registered under the name.
bool settle_method_options(local_update_spec& spec);

/// The rules of `spec`'s registered method (none for an unknown one), as the
/// graph loader and `troupe sync` apply them.
std::vector<local_update_problem> local_update_problems(const local_update_spec& spec,
                                                        const local_update_context& context);

} // namespace troupe::sched
