// Launchers: start one `troupe node` process per node of a multi-process run,
// on this machine (local), over ssh, or with srun inside a SLURM allocation.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/expected.hpp>

namespace troupe {

/// Receives each line a node printed, without its newline. `node` is the
/// node's index, or -1 for a line that names no node (srun's own messages);
/// `fd` is 1 for standard output and 2 for standard error. Called from the
/// launcher's reader thread, one line at a time.
using output_sink = std::function<void(int node, int fd, std::string_view line)>;

/// What to start. Every node runs
/// `TROUPE_EXE node --coordinator COORDINATOR --node I EXTRA_ARGS...`
/// (without `--node` under slurm, where the node reads SLURM_PROCID).
struct launch_request {
  std::string troupe_exe;  ///< absolute path of the troupe binary to run on nodes
  std::string coordinator; ///< "HOST:PORT" that nodes connect to
  int nodes = 1;
  std::vector<std::string> hosts;      ///< ssh: one per node, cycled when fewer
  std::string token;                   ///< reaches nodes through the environment or ssh's stdin, never argv
  std::filesystem::path workdir;       ///< nodes run here (a shared file system across machines); empty: ours
  std::vector<std::string> extra_args; ///< appended to `troupe node ...`
  /// Local launcher: node i may run only on the i-th CPU we may use (mod their count).
  bool pin = false;
  /// How long terminate() waits after SIGTERM before it sends SIGKILL.
  std::chrono::milliseconds term_grace{5000};
  /// Where node output goes; empty: to our stdout/stderr, each line prefixed `[node I] `.
  output_sink output;
};

/// The processes a launcher started. Destroying it terminates whatever still
/// runs and reaps it, so no process outlives it. Children also get SIGKILL
/// (srun and ssh clients SIGTERM) when the thread that called launch_nodes
/// exits (PR_SET_PDEATHSIG): call launch_nodes from a thread that lives as long
/// as the run, such as the main thread.
class launched_nodes {
public:
  virtual ~launched_nodes();
  /// Local pids of what was started: node processes (local), ssh clients (ssh)
  /// or the one srun client (slurm).
  virtual std::vector<pid_t> pids() const = 0;
  /// Sends SIGTERM, then SIGKILL to what is left after the grace period; reaps all.
  virtual void terminate() = 0;
  /// Node `node`'s exit status, without blocking: nullopt while it runs; its
  /// exit code, or 128 + the signal that killed it. Under slurm, every node
  /// reports srun's status once srun ends (srun kills all tasks when one fails).
  virtual std::optional<int> exit_status(int node) = 0;
  /// Starts node `node` again, as it was started, after its process ended (an
  /// elastic run takes its replicas back, #26); exit_status then follows the new
  /// one. An error when this launcher cannot (slurm: srun's tasks end together).
  virtual caf::error restart(int node);
};

/// The launcher names launch_nodes accepts.
inline constexpr std::string_view launcher_names[] = {"local", "ssh", "slurm"};

/// Starts `r.nodes` node processes with the launcher named `launcher`
/// ("local", "ssh" or "slurm"). Errors (errc::invalid_argument, spawn_failed)
/// say which launcher and what went wrong: an unknown name lists the known
/// ones, slurm outside an allocation says so, a program that cannot be run is
/// named with the reason.
caf::expected<std::unique_ptr<launched_nodes>> launch_nodes(std::string_view launcher, const launch_request& r);

} // namespace troupe
