// The ssh launcher: one ssh client per node runs `troupe node ... --token-stdin`
// on its host; the token goes through ssh's stdin, which stays open so that the
// node sees end-of-file when the launcher is gone.
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "deploy/cluster/launcher_process.hpp"
#include "runtime/actor/errors.hpp"

namespace troupe::detail {

namespace {

/// `s` quoted for a POSIX shell: 'it'\''s'.
std::string shell_quote(std::string_view s) {
  std::string out = "'";
  for (char c : s)
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  out += '\'';
  return out;
}

/// The ssh command: $TROUPE_SSH split on blanks (a wrapper script, or `ssh -p 2222`), else `ssh`.
std::vector<std::string> ssh_command() {
  const char* env = std::getenv("TROUPE_SSH");
  std::istringstream words{env && *env ? env : "ssh"};
  std::vector<std::string> argv;
  for (std::string w; words >> w;)
    argv.push_back(w);
  return argv;
}

} // namespace

caf::expected<std::unique_ptr<launched_nodes>> launch_ssh(const launch_request& r) {
  if (r.hosts.empty())
    return make_error(errc::invalid_argument, "ssh launcher: no hosts given (cluster.hosts lists one per node)");
  auto workdir = r.workdir.empty() ? std::filesystem::current_path() : r.workdir;
  auto set = std::make_unique<process_set>("ssh", r);
  for (int i = 0; i < r.nodes; ++i) {
    // Appended piece by piece: GCC 12 warns falsely (-Wrestrict) about `" " + string`.
    std::string remote = "cd ";
    remote += shell_quote(workdir.string());
    remote += " && exec";
    for (const auto& arg : node_command(r, i, {"--token-stdin"})) {
      remote += ' ';
      remote += shell_quote(arg);
    }
    child_spec spec;
    spec.argv = ssh_command();
    spec.argv.insert(spec.argv.end(), {"-o", "BatchMode=yes", r.hosts[i % r.hosts.size()], remote});
    spec.stdin_data = r.token + "\n";
    spec.death_signal = SIGTERM; // ssh closes its session cleanly
    spec.node = i;
    if (auto err = set->start(spec))
      return err;
  }
  set->start_reader();
  return std::unique_ptr<launched_nodes>{std::move(set)};
}

} // namespace troupe::detail
