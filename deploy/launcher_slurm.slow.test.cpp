// The slurm launcher on a real two-node SLURM cluster on this machine
// (tests/cluster/slurm_up.sh): a batch job calls launch_nodes("slurm") and its
// srun starts one probe node on each SLURM node.
//
// This program runs twice: the test case brings the cluster up and submits
// itself with `sbatch -N2 --wait`; inside the job (TROUPE_SLURM_INNER=1) the
// same test case runs the launcher.
//
// TODO(lead): once `troupe launch` and `troupe node` exist, add a second job
// that runs `troupe launch GRAPH` on a graph with `cluster: {launcher: slurm,
// nodes: 2}` inside `sbatch -N2 --wait` (see run_job below) and checks its
// summary; the probe job stays as the launcher's own test.
#include "deploy/launcher.hpp"

#include <unistd.h>

#include <fstream>
#include <mutex>
#include <set>

#include <fmt/format.h>

#include "deploy/launcher_test_support.hpp"
#include "runtime/errors.hpp"

using namespace troupe;
using namespace troupe::testing;
using namespace std::chrono_literals;

namespace {

/// Inside the job: the launcher's checks, against the two allocated nodes.
void run_inside_allocation() {
  test_coordinator c;
  launch_request r;
  r.troupe_exe = probe_program();
  r.coordinator = c.address();  // both SLURM nodes are this machine
  r.nodes = 2;
  r.token = "slurm-token-7";
  r.workdir = std::filesystem::current_path();
  std::mutex m;
  std::set<std::pair<int, std::string>> lines;
  r.output = [&](int node, int, std::string_view line) {
    std::lock_guard g{m};
    lines.emplace(node, line);
  };

  INFO("one task per node, index from SLURM_PROCID, token from the environment");
  {
    auto nodes = launch_nodes("slurm", r);
    if (!nodes)
      FAIL(error_message(nodes.error()));
    auto hellos = c.accept(2, 60s);
    CHECK(hellos[0].index == 0);
    CHECK(hellos[1].index == 1);
    CHECK(std::set<std::string>{hellos[0].nodename, hellos[1].nodename} == std::set<std::string>{"troupe1", "troupe2"});
    for (const auto& h : hellos) {
      CHECK(h.token == r.token);
      CHECK(read_proc(h.pid, "cmdline").find(r.token) == std::string::npos);
      test_coordinator::send_exit(h, 0);
    }
    CHECK(wait_exit(**nodes, 0, 30s) == 0);
    CHECK(wait_exit(**nodes, 1, 30s) == 0);
  }
  {
    std::lock_guard g{m};
    CHECK(lines.count({0, "probe 0 started"}) == 1);  // srun --label lines, attributed to their node
    CHECK(lines.count({1, "probe 1 on stderr"}) == 1);
  }

  INFO("a node that fails takes the step down (--kill-on-bad-exit)");
  {
    auto nodes = launch_nodes("slurm", r);
    REQUIRE(nodes);
    auto hellos = c.accept(2, 60s);
    test_coordinator::send_exit(hellos[1], 3);
    auto status = wait_exit(**nodes, 0, 60s);
    CHECK((status && *status != 0));
    CHECK(all_gone({hellos[0].pid, hellos[1].pid}, 10s));
  }

  INFO("terminate() ends the step and its tasks");
  {
    auto nodes = launch_nodes("slurm", r);
    REQUIRE(nodes);
    auto hellos = c.accept(2, 60s);
    (*nodes)->terminate();
    CHECK((*nodes)->exit_status(0).has_value());
    CHECK(all_gone({hellos[0].pid, hellos[1].pid}, 30s));
  }
}

/// Brings the cluster up for the test and down again at the end.
struct slurm_cluster {
  std::string scripts = std::filesystem::absolute("tests/cluster").string();
  std::string state = fmt::format("/tmp/troupe-slurm-test-{}", ::getpid());
  int up_rc = 0;
  std::string up_output;
  slurm_cluster() {
    ::setenv("TROUPE_SLURM_DIR", state.c_str(), 1);
    ::setenv("TROUPE_SLURM_PORT", "16837", 1);  // clear of a cluster started by hand on the default 16817
    ::setenv("SLURM_CONF", (state + "/slurm.conf").c_str(), 1);
    std::tie(up_rc, up_output) = run_shell(scripts + "/slurm_up.sh");
  }
  ~slurm_cluster() { run_shell(scripts + "/slurm_down.sh"); }
};

// No commas: the job selects this test case by name with doctest's -tc.
constexpr const char* test_name = "the slurm launcher starts one node per allocated node with srun in a real 2-node job";

} // namespace

TEST_CASE(test_name) {
  if (std::getenv("TROUPE_SLURM_INNER")) {
    run_inside_allocation();
    return;
  }
  if (::geteuid() != 0) {
    MESSAGE("skipped: starting slurmctld and slurmd needs root");
    return;
  }
  slurm_cluster cluster;
  if (cluster.up_rc == 77) {
    MESSAGE("skipped: " << cluster.up_output);
    return;
  }
  REQUIRE_MESSAGE(cluster.up_rc == 0, cluster.up_output);

  auto self = std::filesystem::read_symlink("/proc/self/exe").string();
  auto log = cluster.state + "/job.out";
  auto [rc, out] = run_shell(fmt::format("TROUPE_SLURM_INNER=1 timeout 300 sbatch -N2 --wait --chdir='{}' --output='{}' "
                                  "--wrap \"'{}' -tc='{}'\"",
                                  std::filesystem::current_path().string(), log, self,
                                  test_name));
  std::ifstream in{log};
  std::string job{std::istreambuf_iterator<char>{in}, {}};
  INFO("sbatch: " << out << "\njob output:\n" << job);
  CHECK(rc == 0);
  CHECK(job.find("Status: SUCCESS!") != std::string::npos);
  auto counts = job.find("[doctest] assertions:");  // the job really ran the checks
  REQUIRE(counts != std::string::npos);
  MESSAGE("inside the job: " << job.substr(counts, job.find('\n', counts) - counts));
  CHECK(std::atoi(job.c_str() + counts + 21) >= 15);
}
