// launch_nodes: checks a launch request and hands it to the launcher it names.
#include "deploy/cluster/launcher.hpp"

#include <fmt/format.h>

#include "runtime/actor/errors.hpp"

namespace troupe {

namespace detail {
caf::expected<std::unique_ptr<launched_nodes>> launch_local(const launch_request& r);
caf::expected<std::unique_ptr<launched_nodes>> launch_ssh(const launch_request& r);
caf::expected<std::unique_ptr<launched_nodes>> launch_slurm(const launch_request& r);
} // namespace detail

launched_nodes::~launched_nodes() = default;

caf::error launched_nodes::restart(int node) {
  return make_error(errc::spawn_failed, fmt::format("this launcher cannot start node {} again on its own", node));
}

caf::expected<std::unique_ptr<launched_nodes>> launch_nodes(std::string_view launcher, const launch_request& r) {
  auto bad = [&](std::string what) {
    return make_error(errc::invalid_argument, fmt::format("{} launcher: {}", launcher, what));
  };
  if (r.nodes < 1)
    return bad(fmt::format("needs at least 1 node (got {})", r.nodes));
  if (r.troupe_exe.empty() || r.troupe_exe.front() != '/')
    return bad(fmt::format("the troupe program must be an absolute path (got '{}')", r.troupe_exe));
  if (r.coordinator.find(':') == std::string::npos)
    return bad(fmt::format("the coordinator address must be HOST:PORT (got '{}')", r.coordinator));
  if (launcher == "local")
    return detail::launch_local(r);
  if (launcher == "ssh")
    return detail::launch_ssh(r);
  if (launcher == "slurm")
    return detail::launch_slurm(r);
  return make_error(errc::invalid_argument,
                    fmt::format("unknown launcher '{}' (known: {})", launcher, fmt::join(launcher_names, ", ")));
}

} // namespace troupe
