// The ssh launcher through a real sshd on 127.0.0.1 (tests/cluster/sshd_up.sh):
// probe nodes log in with a key, get the token on stdin and report over TCP.
#include "deploy/cluster/launcher.hpp"

#include <unistd.h>

#include <optional>

#include <fmt/format.h>

#include "deploy/cluster/launcher_test_support.hpp"
#include "runtime/actor/errors.hpp"

using namespace troupe;
using namespace troupe::testing;
using namespace std::chrono_literals;

namespace {

/// A private sshd for the test, stopped at the end.
struct test_sshd {
  std::string scripts = std::filesystem::absolute("tests/cluster").string();
  std::string state = fmt::format("/tmp/troupe-sshd-test-{}", ::getpid());
  int rc = 0;
  std::string output;
  test_sshd() {
    ::setenv("TROUPE_SSHD_DIR", state.c_str(), 1);
    ::setenv("TROUPE_SSHD_PORT", "2232", 1); // clear of one started by hand on 2222
    std::tie(rc, output) = run_shell(scripts + "/sshd_up.sh 2>/dev/null");
    while (!output.empty() && output.back() == '\n')
      output.pop_back();
  }
  ~test_sshd() { run_shell(scripts + "/sshd_down.sh"); }
};

/// Starts the test's sshd and points TROUPE_SSH at its wrapper (port, key and
/// host-key options). False, with a message, where it cannot run (not root).
bool start_sshd(std::optional<test_sshd>& sshd) {
  if (::geteuid() != 0) {
    MESSAGE("skipped: starting sshd needs root");
    return false;
  }
  sshd.emplace();
  if (sshd->rc == 77) {
    MESSAGE("skipped: sshd_up.sh cannot run here");
    return false;
  }
  REQUIRE_MESSAGE(sshd->rc == 0, sshd->output);
  ::setenv("TROUPE_SSH", sshd->output.c_str(), 1);
  return true;
}

} // namespace

TEST_CASE("the ssh launcher starts nodes through a real sshd with the token on stdin") {
  std::optional<test_sshd> sshd;
  if (!start_sshd(sshd))
    return;

  test_coordinator c;
  launch_request r;
  r.troupe_exe = probe_program();
  r.coordinator = c.address();
  r.nodes = 2;
  r.hosts = {"127.0.0.1"}; // cycled: both nodes on it
  r.token = "ssh-token-9";
  r.workdir = std::filesystem::current_path();
  r.output = [](int, int, std::string_view) {};
  {
    auto nodes = launch_nodes("ssh", r);
    if (!nodes)
      FAIL(error_message(nodes.error()));
    auto hellos = c.accept(2, 30s);
    for (int i = 0; i < 2; ++i) {
      CHECK(hellos[i].index == i);
      CHECK(hellos[i].token == r.token);
      CHECK(std::filesystem::read_symlink("/proc/" + std::to_string(hellos[i].pid) + "/cwd") == r.workdir);
    }
    test_coordinator::send_exit(hellos[0], 0);
    test_coordinator::send_exit(hellos[1], 5);
    CHECK(wait_exit(**nodes, 0) == 0); // the remote exit status comes back through ssh
    CHECK(wait_exit(**nodes, 1) == 5);
  }
  {
    auto nodes = launch_nodes("ssh", r);
    REQUIRE(nodes);
    auto hellos = c.accept(2, 30s);
    (*nodes)->terminate(); // the ssh clients go; the remote nodes see their stdin close
    CHECK(all_gone({hellos[0].pid, hellos[1].pid}, 10s));
  }
  ::unsetenv("TROUPE_SSH");
}

TEST_CASE("troupe launch trains a graph on two nodes started through a real sshd") {
  std::optional<test_sshd> sshd;
  if (!start_sshd(sshd))
    return;
  const char* build = std::getenv("TROUPE_BUILD_DIR");
  auto troupe = std::filesystem::absolute(std::filesystem::path{build ? build : "build"} / "deploy/troupe").string();
  auto summary = sshd->state + "/summary.json";
  auto [rc, out] = run_shell(fmt::format("'{}' launch examples/tiny-gpt.yaml --steps 2 --set cluster.launcher=ssh "
                                         "--set cluster.nodes=2 --set 'cluster.hosts=[127.0.0.1]' "
                                         "--summary-json '{}' 2>&1",
                                         troupe, summary));
  INFO(out);
  CHECK(rc == 0);
  CHECK(out.find("[node 1]") != std::string::npos);
  CHECK(std::filesystem::exists(summary));
  ::unsetenv("TROUPE_SSH");
}
