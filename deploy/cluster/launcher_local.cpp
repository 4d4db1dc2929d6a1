// The local launcher: one `troupe node` child process per node on this machine,
// with the token in its environment and SIGKILL as its parent-death signal;
// with `pin`, each on one CPU of ours.
#include <sched.h>

#include "deploy/cluster/launcher_process.hpp"

namespace troupe::detail {

namespace {

/// The CPUs this process may run on, in order.
std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set))
        cpus.push_back(c);
  return cpus;
}

} // namespace

caf::expected<std::unique_ptr<launched_nodes>> launch_local(const launch_request& r) {
  auto set = std::make_unique<process_set>("local", r);
  auto cpus = r.pin ? allowed_cpus() : std::vector<int>{};
  for (int i = 0; i < r.nodes; ++i) {
    child_spec spec;
    spec.argv = node_command(r, i);
    spec.env = {"TROUPE_TOKEN=" + r.token};
    spec.workdir = r.workdir;
    spec.node = i;
    if (!cpus.empty())
      spec.cpu = cpus[static_cast<std::size_t>(i) % cpus.size()];
    if (auto err = set->start(spec))
      return err; // the set's destructor stops the nodes already started
  }
  set->start_reader();
  return std::unique_ptr<launched_nodes>{std::move(set)};
}

} // namespace troupe::detail
