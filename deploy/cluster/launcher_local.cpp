// The local launcher: one `troupe node` child process per node on this machine,
// with the token in its environment and SIGKILL as its parent-death signal.
#include "deploy/cluster/launcher_process.hpp"

namespace troupe::detail {

caf::expected<std::unique_ptr<launched_nodes>> launch_local(const launch_request& r) {
  auto set = std::make_unique<process_set>("local", r);
  for (int i = 0; i < r.nodes; ++i) {
    child_spec spec;
    spec.argv = node_command(r, i);
    spec.env = {"TROUPE_TOKEN=" + r.token};
    spec.workdir = r.workdir;
    spec.node = i;
    if (auto err = set->start(spec))
      return err;  // the set's destructor stops the nodes already started
  }
  set->start_reader();
  return std::unique_ptr<launched_nodes>{std::move(set)};
}

} // namespace troupe::detail
