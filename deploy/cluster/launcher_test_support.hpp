// For the launcher tests only: a minimal coordinator that accepts the hellos of
// deploy/cluster/launcher_probe (the stand-in node) over real TCP and tells each probe
// how to exit, plus /proc helpers to see what runs.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

namespace troupe::testing {

/// What one probe reported when it connected.
struct hello {
  int index = -1;
  std::string token;
  pid_t pid = 0;
  std::string nodename;
  int fd = -1; ///< the probe's connection, owned by the coordinator
};

/// Listens on 127.0.0.1 on a free port.
class test_coordinator {
public:
  test_coordinator() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd_, 64) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~test_coordinator() {
    for (int fd : accepted_)
      ::close(fd);
    ::close(fd_);
  }
  test_coordinator(const test_coordinator&) = delete;
  test_coordinator& operator=(const test_coordinator&) = delete;

  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  /// The next `n` hellos, sorted by index; fails the test after `timeout`.
  std::vector<hello> accept(int n, std::chrono::seconds timeout = std::chrono::seconds(20)) {
    std::vector<hello> out;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (static_cast<int>(out.size()) < n) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLIN, 0};
      REQUIRE_MESSAGE(::poll(&p, 1, static_cast<int>(std::max<long>(left.count(), 0))) == 1,
                      "only " << out.size() << " of " << n << " nodes connected");
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      REQUIRE(c >= 0);
      accepted_.push_back(c);
      std::string line;
      char ch;
      while (::read(c, &ch, 1) == 1 && ch != '\n')
        line += ch;
      std::istringstream words{line};
      std::string tag;
      hello h;
      words >> tag >> h.index >> h.token >> h.pid >> h.nodename;
      REQUIRE_MESSAGE(tag == "hello", "unexpected greeting '" << line << "'");
      h.fd = c;
      out.push_back(h);
    }
    std::sort(out.begin(), out.end(), [](const hello& a, const hello& b) { return a.index < b.index; });
    return out;
  }

  /// Tells the probe behind `h` to exit with `code`.
  static void send_exit(const hello& h, int code) {
    auto line = "exit " + std::to_string(code) + "\n";
    CHECK(::send(h.fd, line.data(), line.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(line.size()));
  }

private:
  int fd_ = -1;
  int port_ = 0;
  std::vector<int> accepted_;
};

/// Polls `nodes.exit_status(node)` until it has one or `timeout` passes.
template <class Nodes>
std::optional<int> wait_exit(Nodes& nodes, int node, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto s = nodes.exit_status(node))
      return s;
    if (std::chrono::steady_clock::now() >= deadline)
      return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

/// Runs `cmd` through the shell: its exit status and what it printed (both streams).
inline std::pair<int, std::string> run_shell(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!p)
    return {127, "popen failed"};
  char buf[4096];
  while (auto n = std::fread(buf, 1, sizeof buf, p))
    out.append(buf, n);
  int rc = ::pclose(p);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : 128, out};
}

/// The probe program built next to the tests.
inline std::string probe_program() {
  const char* build = std::getenv("TROUPE_BUILD_DIR");
  return std::filesystem::absolute(std::filesystem::path{build ? build : "build"} / "deploy/troupe_launcher_probe");
}

/// /proc/PID/WHAT (cmdline, environ: NUL-separated), empty when unreadable.
inline std::string read_proc(pid_t pid, const char* what) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/" + what, std::ios::binary};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// True once `pid` is gone or a zombie nobody reaped yet (so it runs no more).
inline bool process_gone(pid_t pid) {
  auto stat = read_proc(pid, "stat");
  auto close = stat.rfind(')');
  return stat.empty() || (close != std::string::npos && stat.substr(close + 2, 1) == "Z");
}

/// Waits up to `timeout` for every pid in `pids` to be gone.
inline bool all_gone(const std::vector<pid_t>& pids, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (std::all_of(pids.begin(), pids.end(), process_gone))
      return true;
    if (std::chrono::steady_clock::now() >= deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

} // namespace troupe::testing
