// What the three launchers share: starting child processes with fork and exec
// (the death signal set in between), reading their output line by line, and
// terminating and reaping them. Internal to deploy/launcher_*.cpp.
#pragma once

#include <atomic>
#include <csignal>
#include <deque>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <caf/error.hpp>

#include "deploy/cluster/launcher.hpp"

namespace troupe::detail {

/// One process to start.
struct child_spec {
  std::vector<std::string> argv;         ///< argv[0] is looked up on PATH when it has no '/'
  std::vector<std::string> env;          ///< "NAME=value" added to, or replacing in, our environment
  std::filesystem::path workdir;         ///< empty: ours
  std::optional<std::string> stdin_data; ///< written to its stdin, kept open until terminate(); else /dev/null
  int death_signal = SIGKILL;            ///< what it gets when the thread that started it exits
  int node = 0;                          ///< the node its output belongs to
  bool srun_labels = false;              ///< output lines `I: text` (srun --label) belong to node I
  int cpu = -1;                          ///< >= 0: the only CPU it may run on (set before exec)
};

/// `TROUPE_EXE node --coordinator C [--node I] FLAGS... EXTRA...`, the node command every launcher runs.
std::vector<std::string> node_command(const launch_request& r, std::optional<int> index,
                                      std::initializer_list<std::string_view> flags = {});

/// Children started for one launch; what launch_nodes returns.
class process_set final : public launched_nodes {
public:
  /// `launcher` names it in errors; `nodes` is how many nodes the children serve.
  process_set(std::string launcher, const launch_request& r);
  ~process_set() override;

  /// Forks and execs `spec`; an error says what could not be run, and why.
  caf::error start(const child_spec& spec);
  /// Starts reading the children's output (after the last start()).
  void start_reader();

  std::vector<pid_t> pids() const override;
  void terminate() override;
  std::optional<int> exit_status(int node) override;
  /// Starts node `node`'s child again with the spec it was first started with,
  /// killing the old one first if it still runs (not under srun: one child
  /// serves every node there).
  caf::error restart(int node) override;

private:
  struct child {
    pid_t pid = -1;
    int stdin_fd = -1;         ///< kept open so the child sees EOF only when we are gone
    std::optional<int> status; ///< once reaped
  };
  struct stream {
    int fd = -1;
    int node = 0;
    int out_fd = 1; ///< 1 or 2: which of our streams it came from
    bool srun_labels = false;
    std::string partial; ///< the unfinished last line
  };

  void reap(child& c, bool block);
  void read_output();
  void emit(const stream& s, std::string_view line) const;

  std::string launcher_;
  int nodes_;
  std::chrono::milliseconds grace_;
  output_sink sink_;
  mutable std::mutex mutex_; ///< guards children_, child_of_ and specs_
  std::vector<child> children_;
  std::vector<int> child_of_;     ///< by node: its child (the latest started), -1 before
  std::vector<child_spec> specs_; ///< by node: what started it
  std::mutex streams_mutex_;      ///< guards streams_ (a restart adds two while the reader runs)
  std::deque<stream> streams_;    ///< read by the reader thread; a deque keeps their addresses
  int wake_[2] = {-1, -1};        ///< written when a stream is added, or to stop the reader
  std::atomic<bool> stop_{false}; ///< the reader drains and ends
  std::thread reader_;
};

} // namespace troupe::detail
