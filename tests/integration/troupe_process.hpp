// Integration-test support: the troupe binary of this build, run in the
// background with its output in files, and a look at the processes left behind.
#pragma once

#include <grp.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "tests/sanitizer_time.hpp"

namespace troupe::testing {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

/// `$TROUPE_BUILD_DIR/deploy/troupe`.
inline std::string troupe_exe() {
  const char* build = std::getenv("TROUPE_BUILD_DIR");
  REQUIRE(build);
  return std::string{build} + "/deploy/troupe";
}

inline std::string slurp(const fs::path& p) {
  std::ifstream in{p};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// `troupe ARGS...` in the background, stdout and stderr in DIR/out.txt and
/// DIR/err.txt. With `own_group` it leads a process group of its own (what a
/// terminal gives a foreground job, so a Ctrl-C can be sent to all of it). With
/// `as_nobody`, a root caller runs it as the unprivileged user nobody (65534),
/// for whom file permissions apply (root reads every file).
struct troupe_process {
  pid_t pid = -1;
  fs::path out, err;

  troupe_process(const fs::path& dir, std::vector<std::string> args, bool own_group = false, bool as_nobody = false)
      : out(dir / "out.txt"), err(dir / "err.txt") {
    args.insert(args.begin(), troupe_exe());
    std::ofstream{out}, std::ofstream{err};   // emptied here: wait_for never reads an earlier process's output
    std::fflush(stdout), std::fflush(stderr); // or the child's freopen writes our buffered output again
    pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      if (own_group)
        ::setpgid(0, 0);
      std::freopen(out.c_str(), "w", stdout);
      std::freopen(err.c_str(), "w", stderr);
      if (as_nobody && ::geteuid() == 0 &&
          (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0))
        std::_Exit(125);
      std::vector<char*> argv;
      for (auto& a : args)
        argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      std::_Exit(127);
    }
    if (own_group)
      ::setpgid(pid, pid); // in both, so a signal sent right away finds the group
  }
  /// Waits for `pattern` in stdout (or stderr); the first match's first group.
  std::string wait_for(const std::string& pattern, std::chrono::seconds limit = 60s) {
    std::regex re{pattern};
    auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      for (const auto& f : {out, err}) {
        std::smatch m;
        auto text = slurp(f);
        if (std::regex_search(text, m, re))
          return m.size() > 1 ? m[1].str() : m[0].str();
      }
      std::this_thread::sleep_for(50ms);
    }
    FAIL("no '" << pattern << "' in the output within the limit:\n" << slurp(out) << slurp(err));
    return {};
  }
  /// Exit code once it ends (128 + signal when killed), waiting at most `limit` (then -1).
  int wait(std::chrono::milliseconds limit) {
    auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }
  ~troupe_process() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

/// `troupe ARGS...` to the end (at most `limit`), its output in DIR/out.txt and DIR/err.txt: its exit code.
/// The limit is stretched by sanitizer_time_factor in a sanitized build (the
/// troupe program it starts is built the same way).
inline int run_to_end(const fs::path& dir, std::vector<std::string> args, std::chrono::seconds limit = 120s) {
  troupe_process p{dir, std::move(args)};
  return p.wait(limit * static_cast<long>(sanitizer_time_factor));
}

/// A tmpfs of `size` (such as "64k") mounted on `dir` for the guard's scope: a
/// disk that fills up. `mounted` is false where that cannot be done (not root).
struct small_tmpfs {
  fs::path dir;
  bool mounted = false;
  small_tmpfs(fs::path d, const char* size) : dir(std::move(d)) {
    fs::create_directories(dir);
    mounted = ::geteuid() == 0 && ::mount("tmpfs", dir.c_str(), "tmpfs", 0, (std::string{"size="} + size).c_str()) == 0;
  }
  ~small_tmpfs() {
    if (mounted)
      ::umount(dir.c_str());
  }
  small_tmpfs(const small_tmpfs&) = delete;
  small_tmpfs& operator=(const small_tmpfs&) = delete;
};

/// Sets (or with nullptr unsets) the environment variable `name` for the guard's
/// scope: every troupe process started meanwhile inherits it.
struct scoped_env {
  std::string name;
  std::optional<std::string> before;
  scoped_env(std::string n, const char* value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str()))
      before = v;
    value ? ::setenv(name.c_str(), value, 1) : ::unsetenv(name.c_str());
  }
  ~scoped_env() { before ? ::setenv(name.c_str(), before->c_str(), 1) : ::unsetenv(name.c_str()); }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;
};

/// Runs a shell command line; its exit code (128 + the signal when one ended it).
inline int sh(const std::string& cmd) {
  int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// The validation losses a run printed (replica 0's last stage), as "STEP:LOSS"
/// with the loss as written ("0:4.9461").
inline std::vector<std::string> validations(const fs::path& out) {
  std::vector<std::string> v;
  std::regex re{R"(validation after step (\d+): loss ([0-9.]+))"};
  auto text = slurp(out);
  for (std::sregex_iterator it{text.begin(), text.end(), re}, end; it != end; ++it)
    v.push_back((*it)[1].str() + ":" + (*it)[2].str());
  return v;
}

/// The per-step train losses of a `--summary-json` file.
inline std::vector<double> summary_losses(const fs::path& summary) {
  auto j = nlohmann::json::parse(slurp(summary));
  REQUIRE(j.contains("losses"));
  return j.at("losses").get<std::vector<double>>();
}

/// A fresh folder `troupe_NAME_PID` under the temporary directory holding
/// graph.yaml: a small 4-stage 1F1B pipeline training `steps` steps, then `extra`.
inline fs::path small_pipeline_graph(const std::string& name, long steps, const std::string& extra = "") {
  auto dir = fs::temp_directory_path() / ("troupe_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream{dir / "graph.yaml"} << "model: {layers: 4, d_model: 32, heads: 2, context: 16, vocab: 256}\n"
                                    << "data: {corpus: kjv, batch: 4, seed: 7}\n"
                                    << "train: {steps: " << steps << ", lr: 3.0e-3, warmup: 2, eval_batches: 2}\n"
                                    << "pipeline: {stages: 4, microbatches: 4, schedule: 1f1b}\n"
                                    << extra;
  return dir;
}

/// Pids of processes whose command line contains `needle`.
inline std::vector<pid_t> processes_with(const std::string& needle) {
  std::vector<pid_t> found;
  for (const auto& e : fs::directory_iterator("/proc")) {
    auto name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    auto cmd = slurp(e.path() / "cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    if (cmd.find(needle) != std::string::npos && std::stoi(name) != ::getpid())
      found.push_back(std::stoi(name));
  }
  return found;
}

/// How a launch ended after one of its node processes was killed.
struct lost_node_outcome {
  int code = -1;      ///< the launch's exit code (-1: still running after 10 s)
  double seconds = 0; ///< from the kill to the launch's end
  std::string err;    ///< its stderr
};

/// SIGKILLs node `node` of the running `launch` (whose coordinator listens on
/// `coordinator`) and waits up to 10 s for the launch to end.
inline lost_node_outcome kill_node(troupe_process& launch, const std::string& coordinator, int node) {
  auto pids = processes_with("--coordinator " + coordinator + " --node " + std::to_string(node));
  if (pids.size() != 1)
    return {-1, 0, "no single process for node " + std::to_string(node)};
  auto killed = std::chrono::steady_clock::now();
  ::kill(pids[0], SIGKILL);
  lost_node_outcome out;
  out.code = launch.wait(10s);
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  out.err = slurp(launch.err);
  return out;
}

/// `troupe run` of `graph` (YAML text) in one process and `troupe launch` of
/// the same graph over `nodes` node processes, from a fresh folder `troupe_NAME_PID`:
/// both outputs and per-step losses, for a test to compare.
struct one_and_launched {
  std::string one_out, launched_out;
  std::vector<double> one, launched;
};
inline one_and_launched run_one_and_launched(const std::string& name, const std::string& graph, int nodes = 2) {
  auto dir = fs::temp_directory_path() / ("troupe_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::create_directories(dir / "one"), fs::create_directories(dir / "launched");
  std::ofstream(dir / "one.yaml") << graph;
  std::ofstream(dir / "launched.yaml") << "cluster: {launcher: local, nodes: " << nodes << "}\n" << graph;
  one_and_launched r;
  REQUIRE(run_to_end(dir / "one", {"run", (dir / "one.yaml").string(), "--no-trace", "--summary-json",
                                   (dir / "one.json").string()}) == 0);
  REQUIRE(run_to_end(dir / "launched", {"launch", (dir / "launched.yaml").string(), "--no-trace", "--summary-json",
                                        (dir / "launched.json").string()}) == 0);
  r.one_out = slurp(dir / "one" / "out.txt"), r.launched_out = slurp(dir / "launched" / "out.txt");
  r.one = summary_losses(dir / "one.json"), r.launched = summary_losses(dir / "launched.json");
  fs::remove_all(dir);
  return r;
}

} // namespace troupe::testing
