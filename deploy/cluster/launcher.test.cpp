// The local launcher (and the ssh launcher's command through a stand-in ssh)
// starting real probe processes that connect to a real TCP coordinator.
#include "deploy/cluster/launcher.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <mutex>
#include <set>
#include <tuple>

#include "deploy/cluster/launcher_test_support.hpp"
#include "runtime/actor/errors.hpp"

using namespace troupe;
using namespace troupe::testing;
using namespace std::chrono_literals;

namespace {

launch_request probe_request(const test_coordinator& c, int nodes) {
  launch_request r;
  r.troupe_exe = probe_program();
  r.coordinator = c.address();
  r.nodes = nodes;
  r.token = "s3cret-token-42";
  r.output = [](int, int, std::string_view) {}; // keeps the test log quiet
  return r;
}

std::string launch_error(std::string_view launcher, const launch_request& r) {
  auto n = launch_nodes(launcher, r);
  REQUIRE_FALSE(n);
  return error_message(n.error());
}

} // namespace

TEST_CASE("the local launcher starts one process per node, each with its index and the token in its environment "
          "only") {
  test_coordinator c;
  auto r = probe_request(c, 3);
  auto nodes = launch_nodes("local", r);
  REQUIRE(nodes);
  auto hellos = c.accept(3);
  auto pids = (*nodes)->pids();
  for (int i = 0; i < 3; ++i) {
    CHECK(hellos[i].index == i);
    CHECK(hellos[i].token == r.token);
    CHECK(std::count(pids.begin(), pids.end(), hellos[i].pid) == 1);
    auto argv = read_proc(hellos[i].pid, "cmdline");
    CHECK(argv.find(std::string{"--node"} + '\0' + std::to_string(i) + '\0') != std::string::npos);
    CHECK(argv.find(r.token) == std::string::npos);
    CHECK(read_proc(hellos[i].pid, "environ").find("TROUPE_TOKEN=" + r.token) != std::string::npos);
  }
  for (const auto& h : hellos)
    test_coordinator::send_exit(h, 0);
}

TEST_CASE("each local node's exit status is collected without blocking, including death by a signal") {
  test_coordinator c;
  auto nodes = launch_nodes("local", probe_request(c, 3));
  REQUIRE(nodes);
  auto hellos = c.accept(3);
  for (int i = 0; i < 3; ++i)
    CHECK_FALSE((*nodes)->exit_status(i).has_value());
  test_coordinator::send_exit(hellos[0], 0);
  test_coordinator::send_exit(hellos[1], 7);
  ::kill(hellos[2].pid, SIGKILL);
  CHECK(wait_exit(**nodes, 0) == 0);
  CHECK(wait_exit(**nodes, 1) == 7);
  CHECK(wait_exit(**nodes, 2) == 128 + SIGKILL);
  CHECK_FALSE((*nodes)->exit_status(3).has_value()); // no such node
}

TEST_CASE("terminate stops every node, with SIGKILL after the grace period for one that ignores SIGTERM") {
  test_coordinator c;
  auto r = probe_request(c, 2);
  r.extra_args = {"--ignore-term"};
  r.term_grace = 300ms;
  auto nodes = launch_nodes("local", r);
  REQUIRE(nodes);
  auto hellos = c.accept(2);
  auto start = std::chrono::steady_clock::now();
  (*nodes)->terminate();
  CHECK(std::chrono::steady_clock::now() - start >= 300ms);
  for (int i = 0; i < 2; ++i) {
    CHECK(process_gone(hellos[i].pid));
    CHECK((*nodes)->exit_status(i) == 128 + SIGKILL);
  }
}

TEST_CASE("destroying the launch result terminates its nodes and leaves no process behind") {
  test_coordinator c;
  std::vector<pid_t> pids;
  {
    auto nodes = launch_nodes("local", probe_request(c, 2));
    REQUIRE(nodes);
    c.accept(2);
    pids = (*nodes)->pids();
  }
  CHECK(std::all_of(pids.begin(), pids.end(), process_gone));
}

TEST_CASE("node output reaches the sink line by line, tagged with its node and stream") {
  test_coordinator c;
  std::mutex m;
  std::set<std::tuple<int, int, std::string>> lines;
  auto r = probe_request(c, 2);
  r.output = [&](int node, int fd, std::string_view line) {
    std::lock_guard g{m};
    lines.emplace(node, fd, line);
  };
  {
    auto nodes = launch_nodes("local", r);
    REQUIRE(nodes);
    for (const auto& h : c.accept(2))
      test_coordinator::send_exit(h, 0);
    REQUIRE(wait_exit(**nodes, 0) == 0);
    REQUIRE(wait_exit(**nodes, 1) == 0);
  } // the reader has drained the pipes once the result is gone
  std::lock_guard g{m};
  for (int i = 0; i < 2; ++i) {
    CHECK(lines.count({i, 1, "probe " + std::to_string(i) + " started"}) == 1);
    CHECK(lines.count({i, 2, "probe " + std::to_string(i) + " on stderr"}) == 1);
  }
}

TEST_CASE("without a sink, node output goes to our own stdout and stderr with a [node I] prefix") {
  auto dir = std::filesystem::temp_directory_path();
  auto out_file = dir / ("troupe_launcher_out_" + std::to_string(::getpid()));
  auto err_file = dir / ("troupe_launcher_err_" + std::to_string(::getpid()));
  std::fflush(stdout);
  std::fflush(stderr);
  int saved_out = ::dup(1), saved_err = ::dup(2);
  int out = ::open(out_file.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  int err = ::open(err_file.c_str(), O_CREAT | O_TRUNC | O_WRONLY, 0600);
  ::dup2(out, 1);
  ::dup2(err, 2);
  std::optional<int> status;
  {
    test_coordinator c;
    auto r = probe_request(c, 2);
    r.output = nullptr;
    auto nodes = launch_nodes("local", r);
    if (nodes) {
      for (const auto& h : c.accept(2))
        test_coordinator::send_exit(h, 0);
      status = wait_exit(**nodes, 1);
    }
  }
  ::dup2(saved_out, 1);
  ::dup2(saved_err, 2);
  for (int fd : {saved_out, saved_err, out, err})
    ::close(fd);
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream in{p};
    return std::string{std::istreambuf_iterator<char>{in}, {}};
  };
  auto printed = slurp(out_file), warned = slurp(err_file);
  std::filesystem::remove(out_file);
  std::filesystem::remove(err_file);
  CHECK(status == 0);
  CHECK(printed.find("[node 0] probe 0 started\n") != std::string::npos);
  CHECK(printed.find("[node 1] probe 1 started\n") != std::string::npos);
  CHECK(warned.find("[node 1] probe 1 on stderr\n") != std::string::npos);
  CHECK(printed.find("on stderr") == std::string::npos);
}

TEST_CASE("nodes die with the launcher's process when it is killed") {
  test_coordinator c;
  int report[2];
  REQUIRE(::pipe(report) == 0);
  pid_t launcher = ::fork();
  REQUIRE(launcher >= 0);
  if (launcher == 0) { // the launcher: starts two nodes, then waits to be killed
    auto nodes = launch_nodes("local", probe_request(c, 2));
    char ok = nodes ? 'y' : 'n';
    [[maybe_unused]] auto n = ::write(report[1], &ok, 1);
    ::pause();
    ::_exit(0);
  }
  ::close(report[1]);
  char ok = 0;
  REQUIRE(::read(report[0], &ok, 1) == 1);
  ::close(report[0]);
  REQUIRE(ok == 'y');
  auto hellos = c.accept(2);
  ::kill(launcher, SIGKILL);
  ::waitpid(launcher, nullptr, 0);
  CHECK(all_gone({hellos[0].pid, hellos[1].pid}, 5s));
}

TEST_CASE("launch errors name the launcher and the problem") {
  test_coordinator c;
  auto r = probe_request(c, 1);
  CHECK(launch_error("pbs", r) == "unknown launcher 'pbs' (known: local, ssh, slurm)");
  auto missing = r;
  missing.troupe_exe = "/nonexistent/troupe";
  CHECK(launch_error("local", missing) ==
        "local launcher: cannot run '/nonexistent/troupe': No such file or directory");
  auto relative = r;
  relative.troupe_exe = "troupe";
  CHECK(launch_error("local", relative) ==
        "local launcher: the troupe program must be an absolute path (got 'troupe')");
  auto nowhere = r;
  nowhere.workdir = "/nonexistent/dir";
  CHECK(launch_error("local", nowhere) == "local launcher: cannot enter '/nonexistent/dir': No such file or directory");
  auto no_hosts = r;
  CHECK(launch_error("ssh", no_hosts) == "ssh launcher: no hosts given (cluster.hosts lists one per node)");
}

TEST_CASE("the slurm launcher outside an allocation says that it needs one") {
  test_coordinator c;
  std::optional<std::string> saved;
  if (const char* j = std::getenv("SLURM_JOB_ID"))
    saved = j;
  ::unsetenv("SLURM_JOB_ID");
  CHECK(launch_error("slurm", probe_request(c, 2)) ==
        "the slurm launcher runs inside a SLURM allocation (salloc/sbatch): SLURM_JOB_ID is not set");
  if (saved)
    ::setenv("SLURM_JOB_ID", saved->c_str(), 1);
}

TEST_CASE("the ssh launcher runs the quoted node command through $TROUPE_SSH with the token on stdin") {
  // A stand-in ssh that runs the remote command here (the slow test uses a real sshd).
  auto dir = std::filesystem::temp_directory_path() / ("troupe_fake_ssh_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "work dir");
  auto fake = dir / "ssh";
  std::ofstream{fake} << "#!/bin/sh\n[ \"$1 $2\" = '-o BatchMode=yes' ] || exit 99\necho \"$3\" >> \"$0.hosts\"\n"
                         "exec /bin/sh -c \"$4\"\n";
  std::filesystem::permissions(fake, std::filesystem::perms::owner_all);
  ::setenv("TROUPE_SSH", fake.c_str(), 1);
  test_coordinator c;
  auto r = probe_request(c, 3);
  r.hosts = {"alpha", "beta"};
  r.workdir = dir / "work dir";
  {
    auto nodes = launch_nodes("ssh", r);
    REQUIRE(nodes);
    auto hellos = c.accept(3);
    for (int i = 0; i < 3; ++i) {
      CHECK(hellos[i].index == i);
      CHECK(hellos[i].token == r.token);
      CHECK(read_proc(hellos[i].pid, "environ").find(r.token) == std::string::npos);
      CHECK(std::filesystem::read_symlink("/proc/" + std::to_string(hellos[i].pid) + "/cwd") == r.workdir);
    }
    for (pid_t p : (*nodes)->pids())
      CHECK(read_proc(p, "cmdline").find(r.token) == std::string::npos);
    test_coordinator::send_exit(hellos[0], 0);
    test_coordinator::send_exit(hellos[1], 5);
    CHECK(wait_exit(**nodes, 0) == 0);
    CHECK(wait_exit(**nodes, 1) == 5);
    (*nodes)->terminate(); // node 2 sees its stdin close
    CHECK(all_gone({hellos[2].pid}, 5s));
  }
  std::ifstream hosts{fake.string() + ".hosts"};
  std::multiset<std::string> seen;
  for (std::string h; hosts >> h;)
    seen.insert(h);
  CHECK(seen == std::multiset<std::string>{"alpha", "alpha", "beta"});
  ::unsetenv("TROUPE_SSH");
  std::filesystem::remove_all(dir);
}

TEST_CASE("with pin, the local launcher puts node i on the i-th CPU we may use, and only there") {
  cpu_set_t ours;
  CPU_ZERO(&ours);
  REQUIRE(::sched_getaffinity(0, sizeof ours, &ours) == 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &ours))
      cpus.push_back(c);
  test_coordinator c;
  auto r = probe_request(c, 3);
  r.pin = true;
  auto nodes = launch_nodes("local", r);
  REQUIRE(nodes);
  auto hellos = c.accept(3);
  for (int i = 0; i < 3; ++i) {
    cpu_set_t theirs;
    CPU_ZERO(&theirs);
    REQUIRE(::sched_getaffinity(hellos[i].pid, sizeof theirs, &theirs) == 0);
    CHECK(CPU_COUNT(&theirs) == 1);
    CHECK(CPU_ISSET(cpus[static_cast<std::size_t>(hellos[i].index) % cpus.size()], &theirs));
  }
  for (const auto& h : hellos)
    test_coordinator::send_exit(h, 0);
}

TEST_CASE("without pin, a local node may run wherever we may") {
  test_coordinator c;
  auto nodes = launch_nodes("local", probe_request(c, 1));
  REQUIRE(nodes);
  auto hellos = c.accept(1);
  cpu_set_t ours, theirs;
  CPU_ZERO(&ours);
  CPU_ZERO(&theirs);
  REQUIRE(::sched_getaffinity(0, sizeof ours, &ours) == 0);
  REQUIRE(::sched_getaffinity(hellos[0].pid, sizeof theirs, &theirs) == 0);
  CHECK(CPU_EQUAL(&ours, &theirs));
  test_coordinator::send_exit(hellos[0], 0);
}
