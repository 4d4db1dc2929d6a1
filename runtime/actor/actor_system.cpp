// The actor-system config: message types, error category, scheduler, logging.
#include "runtime/actor/actor_system.hpp"

#include <cstdlib>
#include <string>
#include <thread>

#include <caf/atom.hpp>

#include "runtime/actor/errors.hpp"
#include "runtime/actor/messages.hpp"
#include "runtime/actor/outer_messages.hpp"

namespace troupe {

namespace {

std::size_t env_size(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0')
    return fallback;
  char* end = nullptr;
  auto n = std::strtoull(v, &end, 10);
  return (end != nullptr && *end == '\0' && n > 0) ? static_cast<std::size_t>(n) : fallback;
}

} // namespace

runtime_options runtime_options_from_env() {
  runtime_options o;
  o.threads = env_size("TROUPE_THREADS", o.threads);
  o.max_throughput = env_size("TROUPE_MAX_THROUGHPUT", o.max_throughput);
  if (const char* p = std::getenv("TROUPE_SCHEDULER");
      p != nullptr && (std::string{p} == "sharing" || std::string{p} == "stealing"))
    o.policy = p;
  return o;
}

void register_message_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<batch_msg>("troupe.batch_msg");
  cfg.add_message_type<activation_msg>("troupe.activation_msg");
  cfg.add_message_type<gradient_msg>("troupe.gradient_msg");
  cfg.add_message_type<credit_msg>("troupe.credit_msg");
  cfg.add_message_type<attention_task_msg>("troupe.attention_task_msg");
  cfg.add_message_type<attention_result_msg>("troupe.attention_result_msg");
  cfg.add_message_type<bucket_msg>("troupe.bucket_msg");
  cfg.add_message_type<ring_msg>("troupe.ring_msg");
  cfg.add_message_type<step_plan_msg>("troupe.step_plan_msg");
  cfg.add_message_type<peer>("troupe.peer");
  cfg.add_message_type<connect_msg>("troupe.connect_msg");
  cfg.add_message_type<run_summary>("troupe.run_summary");
  cfg.add_message_type<failure_msg>("troupe.failure_msg");
  cfg.add_message_type<checkpoint_msg>("troupe.checkpoint_msg");
  cfg.add_message_type<outer_local_msg>("troupe.outer_local_msg");
  cfg.add_message_type<outer_part_msg>("troupe.outer_part_msg");
  cfg.add_message_type<outer_result_msg>("troupe.outer_result_msg");
  cfg.add_message_type<rejoin_msg>("troupe.rejoin_msg");
  cfg.add_message_type<state_msg>("troupe.state_msg");
}

troupe_config::troupe_config(const runtime_options& opts) : opts_(opts) {
  register_message_types(*this);
  add_error_category(troupe_error_category, render_error);
  auto threads = opts_.threads != 0 ? opts_.threads : std::max<std::size_t>(1, std::thread::hardware_concurrency());
  opts_.threads = threads;
  set("scheduler.policy", opts_.policy == "stealing" ? caf::atom("stealing") : caf::atom("sharing"));
  set("scheduler.max-threads", threads);
  set("scheduler.max-throughput", opts_.max_throughput);
  set("logger.verbosity", caf::atom("quiet"));
  set("logger.console-verbosity", caf::atom("quiet"));
  set("logger.file-verbosity", caf::atom("quiet"));
}

} // namespace troupe
