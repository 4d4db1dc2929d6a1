// The slurm launcher on a real two-node SLURM cluster on this machine
// (tests/cluster/slurm_up.sh): a batch job calls launch_nodes("slurm") and its
// srun starts one probe node on each SLURM node.
//
// This program runs twice: the test case brings the cluster up and submits
// itself with `sbatch -N2 --wait`; inside the job (TROUPE_SLURM_INNER=1) the
// same test case runs the launcher.
//
// A second test case runs `troupe launch` of a 2-node graph in such a job and
// compares its losses with one process's.
#include "deploy/cluster/launcher.hpp"

#include <unistd.h>

#include <fstream>
#include <mutex>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "deploy/cluster/launcher_test_support.hpp"
#include "runtime/actor/errors.hpp"

using namespace troupe;
using namespace troupe::testing;
using namespace std::chrono_literals;

namespace {

/// Inside the job: the launcher's checks, against the two allocated nodes.
void run_inside_allocation() {
  test_coordinator c;
  launch_request r;
  r.troupe_exe = probe_program();
  r.coordinator = c.address(); // both SLURM nodes are this machine
  r.nodes = 2;
  r.token = "slurm-token-7";
  r.workdir = std::filesystem::temp_directory_path(); // not the job's directory: srun must carry it
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
      CHECK(std::filesystem::read_symlink("/proc/" + std::to_string(h.pid) + "/cwd") == r.workdir);
      CHECK(read_proc(h.pid, "cmdline").find(r.token) == std::string::npos);
      test_coordinator::send_exit(h, 0);
    }
    CHECK(wait_exit(**nodes, 0, 30s) == 0);
    CHECK(wait_exit(**nodes, 1, 30s) == 0);
  }
  {
    std::lock_guard g{m};
    CHECK(lines.count({0, "probe 0 started"}) == 1); // srun --label lines, attributed to their node
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
    ::setenv("TROUPE_SLURM_PORT", "16837", 1); // clear of a cluster started by hand on the default 16817
    ::setenv("SLURM_CONF", (state + "/slurm.conf").c_str(), 1);
    std::tie(up_rc, up_output) = run_shell(scripts + "/slurm_up.sh");
  }
  ~slurm_cluster() { run_shell(scripts + "/slurm_down.sh"); }
};

/// A batch job's outcome: sbatch's status and output, and what the job printed.
struct job_result {
  int rc = 0;
  std::string sbatch;
  std::string output;
};

/// Submits `command` as a 2-node batch job in the current directory and waits
/// for it. Polls scontrol rather than using `sbatch --wait`, which checks only
/// every few seconds (about 17 s lost per job here).
job_result run_job(const slurm_cluster& cluster, const std::string& command, const std::string& env = "") {
  auto log = cluster.state + "/job.out";
  std::filesystem::remove(log);
  job_result j;
  std::tie(j.rc, j.sbatch) = run_shell(fmt::format("{} sbatch --parsable -N2 --chdir='{}' --output='{}' --wrap \"{}\"",
                                                   env, std::filesystem::current_path().string(), log, command));
  if (j.rc != 0)
    return j;
  auto id = std::to_string(std::atoi(j.sbatch.c_str()));
  auto deadline = std::chrono::steady_clock::now() + 300s;
  for (std::string state;; std::this_thread::sleep_for(200ms)) {
    auto [rc, show] = run_shell("scontrol -o show job " + id);
    auto at = show.find("JobState=");
    state = at == std::string::npos ? "" : show.substr(at + 9, show.find(' ', at) - at - 9);
    if (state != "PENDING" && state != "RUNNING" && state != "CONFIGURING" && state != "COMPLETING") {
      auto code = show.find(" ExitCode="); // "ExitCode=3:0": the job's status and signal
      j.rc = state == "COMPLETED"        ? 0
             : code == std::string::npos ? 1
                                         : std::max(1, std::atoi(show.c_str() + code + 10));
      j.sbatch += show;
      break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      run_shell("scancel " + id);
      j.rc = 124;
      j.sbatch += "timed out after 300 s: " + show;
      break;
    }
  }
  std::ifstream in{log};
  j.output.assign(std::istreambuf_iterator<char>{in}, {});
  return j;
}

/// The cluster for one test case; null, with the reason logged, where it cannot run here.
std::unique_ptr<slurm_cluster> start_cluster() {
  if (::geteuid() != 0) {
    MESSAGE("skipped: starting slurmctld and slurmd needs root");
    return nullptr;
  }
  auto cluster = std::make_unique<slurm_cluster>();
  if (cluster->up_rc == 77) {
    MESSAGE("skipped: " << cluster->up_output);
    return nullptr;
  }
  REQUIRE_MESSAGE(cluster->up_rc == 0, cluster->up_output);
  return cluster;
}

// No commas: the job selects this test case by name with doctest's -tc.
constexpr const char* test_name =
  "the slurm launcher starts one node per allocated node with srun in a real 2-node job";

} // namespace

TEST_CASE(test_name) {
  if (std::getenv("TROUPE_SLURM_INNER")) {
    run_inside_allocation();
    return;
  }
  auto cluster = start_cluster();
  if (!cluster)
    return;

  auto self = std::filesystem::read_symlink("/proc/self/exe").string();
  auto job = run_job(*cluster, fmt::format("'{}' -tc='{}'", self, test_name), "TROUPE_SLURM_INNER=1");
  INFO("sbatch: " << job.sbatch << "\njob output:\n" << job.output);
  CHECK(job.rc == 0);
  CHECK(job.output.find("Status: SUCCESS!") != std::string::npos);
  auto counts = job.output.find("[doctest] assertions:"); // the job really ran the checks
  REQUIRE(counts != std::string::npos);
  MESSAGE("inside the job: " << job.output.substr(counts, job.output.find('\n', counts) - counts));
  CHECK(std::atoi(job.output.c_str() + counts + 21) >= 15);
}

TEST_CASE("troupe launch trains a graph across the 2 nodes of a SLURM job") {
  if (std::getenv("TROUPE_SLURM_INNER"))
    return;
  auto cluster = start_cluster();
  if (!cluster)
    return;
  const char* build = std::getenv("TROUPE_BUILD_DIR");
  auto troupe = std::filesystem::absolute(std::filesystem::path{build ? build : "build"} / "deploy/troupe");
  auto summary = cluster->state + "/summary.json";
  // The coordinator listens on 127.0.0.1: both SLURM nodes are this machine.
  auto job = run_job(*cluster, fmt::format("'{}' launch examples/tiny-gpt.yaml --steps 3 --set cluster.launcher=slurm "
                                           "--set cluster.nodes=2 --set cluster.address=127.0.0.1 --summary-json '{}'",
                                           troupe.string(), summary));
  INFO("sbatch: " << job.sbatch << "\njob output:\n" << job.output);
  CHECK(job.rc == 0);
  CHECK(job.output.find("[node 1]") != std::string::npos); // output came back from both nodes
  // The same losses as one process with the same seed.
  auto one = cluster->state + "/one.json";
  REQUIRE(
    std::system(fmt::format("'{}' run examples/tiny-gpt.yaml --steps 3 --no-trace --summary-json '{}' > /dev/null",
                            troupe.string(), one)
                  .c_str()) == 0);
  auto losses = [](const std::string& file) {
    std::ifstream in{file};
    auto j = nlohmann::json::parse(in, nullptr, false);
    REQUIRE(j.contains("losses"));
    return j.at("losses").dump();
  };
  CHECK(losses(summary) == losses(one));
  MESSAGE("2-node SLURM job and one process: " << losses(summary));
}
