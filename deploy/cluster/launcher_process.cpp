// Child processes for the launchers: fork + exec with PR_SET_PDEATHSIG (which
// posix_spawn cannot set), one reader thread for every child's output, and
// SIGTERM-then-SIGKILL termination that reaps everything it started.
#include "deploy/cluster/launcher_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "runtime/actor/errors.hpp"

extern char** environ;

namespace troupe::detail {

namespace {

/// `name` itself when it has a '/', else the first executable PATH entry.
std::optional<std::string> find_program(const std::string& name) {
  if (name.find('/') != std::string::npos)
    return name;
  const char* path = std::getenv("PATH");
  std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!dirs.empty()) {
    auto colon = dirs.find(':');
    auto dir = dirs.substr(0, colon);
    auto candidate = fmt::format("{}/{}", dir.empty() ? "." : dir, name);
    if (::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    dirs = colon == std::string_view::npos ? std::string_view{} : dirs.substr(colon + 1);
  }
  return std::nullopt;
}

/// Our environment with `extra` ("NAME=value") added or replacing.
std::vector<std::string> child_environment(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string_view entry = *e;
    auto name = entry.substr(0, entry.find('=') + 1);
    bool replaced = false;
    for (const auto& x : extra)
      replaced = replaced || x.starts_with(name);
    if (!replaced)
      env.emplace_back(entry);
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v)
    out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

/// What the child reports through its close-on-exec pipe when it fails before exec.
struct exec_failure {
  int step; ///< 0: chdir, 1: exec, 2: CPU affinity
  int err;
};

/// The child's side between fork and exec: only async-signal-safe calls.
[[noreturn]] void exec_child(pid_t parent, int death_signal, int in, int out, int err, int report, const char* dir,
                             const char* exe, char** argv, char** envp, int cpu) {
  ::prctl(PR_SET_PDEATHSIG, death_signal);
  if (::getppid() != parent) // the parent died before the death signal was armed
    ::_exit(127);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig)
    ::sigaction(sig, &dfl, nullptr); // fails harmlessly for SIGKILL, SIGSTOP and the RT signals glibc keeps
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::dup2(in, 0);
  ::dup2(out, 1);
  ::dup2(err, 2);
  exec_failure f{0, 0};
  cpu_set_t only;
  CPU_ZERO(&only);
  if (cpu >= 0)
    CPU_SET(static_cast<std::size_t>(cpu), &only);
  if (dir && ::chdir(dir) != 0) {
    f.err = errno;
  } else if (cpu >= 0 && ::sched_setaffinity(0, sizeof only, &only) != 0) {
    f = {2, errno};
  } else {
    ::execve(exe, argv, envp);
    f = {1, errno};
  }
  [[maybe_unused]] auto n = ::write(report, &f, sizeof f);
  ::_exit(127);
}

int decode_status(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

} // namespace

std::vector<std::string> node_command(const launch_request& r, std::optional<int> index,
                                      std::initializer_list<std::string_view> flags) {
  std::vector<std::string> argv{r.troupe_exe, "node", "--coordinator", r.coordinator};
  if (index) {
    argv.emplace_back("--node");
    argv.push_back(std::to_string(*index));
  }
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), r.extra_args.begin(), r.extra_args.end());
  return argv;
}

process_set::process_set(std::string launcher, const launch_request& r)
    : launcher_(std::move(launcher)), nodes_(r.nodes), grace_(r.term_grace), sink_(r.output),
      child_of_(static_cast<std::size_t>(std::max(r.nodes, 0)), -1),
      specs_(static_cast<std::size_t>(std::max(r.nodes, 0))) {
  if (::pipe2(wake_, O_CLOEXEC) != 0)
    wake_[0] = wake_[1] = -1;
}

process_set::~process_set() {
  terminate();
  if (reader_.joinable()) { // the reader drains what the children left in their pipes, then ends
    stop_ = true;
    char c = 'x';
    [[maybe_unused]] auto n = ::write(wake_[1], &c, 1);
    reader_.join();
  }
  for (auto& s : streams_)
    if (s.fd >= 0)
      ::close(s.fd);
  for (int fd : wake_)
    if (fd >= 0)
      ::close(fd);
}

caf::error process_set::start(const child_spec& spec) {
  auto exe = find_program(spec.argv.at(0));
  if (!exe)
    return make_error(errc::spawn_failed, fmt::format("{} launcher: '{}' is not on PATH", launcher_, spec.argv[0]));
  auto args = spec.argv;
  auto env = child_environment(spec.env);
  auto argv = c_strings(args);
  auto envp = c_strings(env);
  auto dir = spec.workdir.string();

  // Every descriptor is close-on-exec, so no child inherits another's pipes.
  int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1}, report[2] = {-1, -1};
  auto close_all = [&] {
    for (int* p : {in, out, err, report})
      for (int i : {0, 1})
        if (p[i] >= 0)
          ::close(p[i]);
  };
  bool have_in = spec.stdin_data.has_value();
  bool piped = have_in ? ::pipe2(in, O_CLOEXEC) == 0 : (in[0] = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;
  piped = piped && ::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0 && ::pipe2(report, O_CLOEXEC) == 0;
  if (!piped) {
    auto e = errno;
    close_all();
    return make_error(errc::spawn_failed, fmt::format("{} launcher: pipe: {}", launcher_, std::strerror(e)));
  }
  if (have_in) { // written before the child exists: no SIGPIPE if it dies at once
    auto& data = *spec.stdin_data;
    if (data.size() > 4096 || ::write(in[1], data.data(), data.size()) != static_cast<ssize_t>(data.size())) {
      close_all();
      return make_error(errc::spawn_failed, fmt::format("{} launcher: cannot stage stdin", launcher_));
    }
  }

  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0)
    exec_child(parent, spec.death_signal, in[0], out[1], err[1], report[1], dir.empty() ? nullptr : dir.c_str(),
               exe->c_str(), argv.data(), envp.data(), spec.cpu);
  int fork_errno = errno;
  for (int* fd : {&in[0], &out[1], &err[1], &report[1]}) {
    ::close(*fd);
    *fd = -1;
  }
  exec_failure f{};
  ssize_t got = 0;
  if (pid > 0)
    do // EOF (0) once exec succeeded
      got = ::read(report[0], &f, sizeof f);
    while (got < 0 && errno == EINTR);
  if (pid < 0 || got > 0) {
    close_all();
    if (pid < 0)
      return make_error(errc::spawn_failed, fmt::format("{} launcher: fork: {}", launcher_, std::strerror(fork_errno)));
    ::waitpid(pid, nullptr, 0);
    return make_error(
      errc::spawn_failed,
      f.step == 0   ? fmt::format("{} launcher: cannot enter '{}': {}", launcher_, dir, std::strerror(f.err))
      : f.step == 2 ? fmt::format("{} launcher: cannot pin node {} to CPU {}: {}", launcher_, spec.node, spec.cpu,
                                  std::strerror(f.err))
                    : fmt::format("{} launcher: cannot run '{}': {}", launcher_, *exe, std::strerror(f.err)));
  }
  ::close(report[0]);
  {
    std::lock_guard guard{mutex_};
    children_.push_back({pid, in[1], std::nullopt});
    auto index = static_cast<int>(children_.size()) - 1;
    for (int n = 0; n < nodes_; ++n) // under srun one child serves every node
      if (spec.srun_labels || n == spec.node) {
        child_of_[static_cast<std::size_t>(n)] = index;
        specs_[static_cast<std::size_t>(n)] = spec;
      }
  }
  {
    std::lock_guard guard{streams_mutex_};
    streams_.push_back({out[0], spec.node, 1, spec.srun_labels, {}});
    streams_.push_back({err[0], spec.node, 2, spec.srun_labels, {}});
  }
  if (reader_.joinable()) { // the reader takes up the new streams
    char c = '+';
    [[maybe_unused]] auto n = ::write(wake_[1], &c, 1);
  }
  return {};
}

caf::error process_set::restart(int node) {
  child_spec spec;
  {
    std::lock_guard guard{mutex_};
    if (node < 0 || node >= nodes_ || child_of_[static_cast<std::size_t>(node)] < 0)
      return make_error(errc::invalid_argument, fmt::format("{} launcher: no node {} to start again", launcher_, node));
    auto& c = children_[static_cast<std::size_t>(child_of_[static_cast<std::size_t>(node)])];
    reap(c, false);
    if (!c.status && !specs_[static_cast<std::size_t>(node)].srun_labels) {
      ::kill(c.pid, SIGKILL); // lost while it still runs (it stopped answering, or is just dying): ended first
      reap(c, true);
    }
    spec = specs_[static_cast<std::size_t>(node)];
  }
  if (spec.srun_labels)
    return make_error(errc::spawn_failed, fmt::format("{} launcher: srun's tasks end together; node {} cannot start "
                                                      "again on its own",
                                                      launcher_, node));
  return start(spec);
}

void process_set::start_reader() {
  reader_ = std::thread([this] { read_output(); });
}

std::vector<pid_t> process_set::pids() const {
  std::lock_guard guard{mutex_};
  std::vector<pid_t> out;
  for (const auto& c : children_)
    out.push_back(c.pid);
  return out;
}

void process_set::reap(child& c, bool block) {
  if (c.status)
    return;
  int status = 0;
  pid_t r;
  do
    r = ::waitpid(c.pid, &status, block ? 0 : WNOHANG);
  while (r < 0 && errno == EINTR);
  if (r == c.pid)
    c.status = decode_status(status);
  else if (r < 0) // reaped elsewhere (a waitpid(-1) in this process): its status is lost
    c.status = 128 + SIGKILL;
  if (c.status && c.stdin_fd >= 0) {
    ::close(c.stdin_fd);
    c.stdin_fd = -1;
  }
}

void process_set::terminate() {
  std::lock_guard guard{mutex_};
  for (auto& c : children_) {
    reap(c, false);
    if (!c.status) {
      ::kill(c.pid, SIGTERM);
      ::kill(c.pid, SIGCONT); // a stopped process acts on SIGTERM only once continued (as systemd does)
    }
    if (c.stdin_fd >= 0) { // EOF tells an ssh session's remote side we are going
      ::close(c.stdin_fd);
      c.stdin_fd = -1;
    }
  }
  auto deadline = std::chrono::steady_clock::now() + grace_;
  for (;;) {
    bool running = false;
    for (auto& c : children_) {
      reap(c, false);
      running = running || !c.status;
    }
    if (!running || std::chrono::steady_clock::now() >= deadline)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  for (auto& c : children_) {
    if (!c.status)
      ::kill(c.pid, SIGKILL);
    reap(c, true);
  }
}

std::optional<int> process_set::exit_status(int node) {
  std::lock_guard guard{mutex_};
  if (node < 0 || node >= nodes_ || children_.empty())
    return std::nullopt;
  auto index = child_of_[static_cast<std::size_t>(node)];
  if (index < 0)
    return std::nullopt;
  auto& c = children_[static_cast<std::size_t>(index)];
  reap(c, false);
  return c.status;
}

void process_set::emit(const stream& s, std::string_view line) const {
  int node = s.node;
  if (s.srun_labels) { // srun --label: "  1: text"
    node = -1;
    auto p = line.find_first_not_of(' ');
    auto colon = line.find(": ");
    if (p != std::string_view::npos && colon != std::string_view::npos && colon > p && colon - p < 7 &&
        line.substr(p, colon - p).find_first_not_of("0123456789") == std::string_view::npos) {
      node = std::stoi(std::string{line.substr(p, colon - p)});
      line.remove_prefix(colon + 2);
    }
  }
  if (sink_) {
    sink_(node, s.out_fd, line);
    return;
  }
  auto text = node >= 0 ? fmt::format("[node {}] {}\n", node, line) : fmt::format("[{}] {}\n", launcher_, line);
  [[maybe_unused]] auto n = ::write(s.out_fd, text.data(), text.size()); // one write: lines never interleave
}

void process_set::read_output() {
  bool stopping = false;
  auto stop_by = std::chrono::steady_clock::time_point::max();
  char buf[65536];
  while (std::chrono::steady_clock::now() < stop_by) { // a grandchild that keeps writing cannot hold us
    std::vector<pollfd> fds;
    std::vector<stream*> owners;
    {
      std::lock_guard guard{streams_mutex_};
      for (auto& s : streams_)
        if (s.fd >= 0) {
          fds.push_back({s.fd, POLLIN, 0});
          owners.push_back(&s);
        }
    }
    if (fds.empty() && (stopping || stop_))
      return;
    if (!stopping)
      fds.push_back({wake_[0], POLLIN, 0});
    // Once asked to stop, drain what is already there and leave.
    int ready = ::poll(fds.data(), fds.size(), stopping ? 0 : -1);
    if (ready < 0 && errno == EINTR)
      continue;
    if (ready <= 0)
      break;
    if (!stopping && fds.back().revents) {
      char wake[64];
      [[maybe_unused]] auto n = ::read(wake_[0], wake, sizeof wake);
      if (stop_) { // else a restart added streams: poll them too
        stopping = true;
        stop_by = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      }
      continue;
    }
    for (std::size_t i = 0; i < owners.size(); ++i) {
      if (!fds[i].revents)
        continue;
      auto& s = *owners[i];
      ssize_t n = ::read(s.fd, buf, sizeof buf);
      if (n <= 0) {
        if (!s.partial.empty())
          emit(s, s.partial);
        ::close(s.fd);
        s.fd = -1;
        continue;
      }
      s.partial.append(buf, static_cast<std::size_t>(n));
      std::size_t start = 0;
      for (auto nl = s.partial.find('\n'); nl != std::string::npos; nl = s.partial.find('\n', start)) {
        emit(s, std::string_view{s.partial}.substr(start, nl - start));
        start = nl + 1;
      }
      s.partial.erase(0, start);
    }
  }
  std::lock_guard guard{streams_mutex_};
  for (auto& s : streams_) // stopped with a grandchild still holding the pipe
    if (s.fd >= 0 && !s.partial.empty()) {
      emit(s, s.partial);
      s.partial.clear();
    }
}

} // namespace troupe::detail
