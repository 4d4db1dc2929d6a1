// A stand-in for `troupe node` in the launcher tests: it takes the node's
// options, finds its index and token the way a node does, reports them to the
// test's coordinator over TCP and exits with the code the coordinator sends.
//
//   troupe_launcher_probe node --coordinator HOST:PORT [--node I]
//       [--token-stdin | --token-file F] [--ignore-term]
//
// Index: --node, else SLURM_PROCID. Token: stdin's first line, the file, else
// TROUPE_TOKEN. It sends "hello INDEX TOKEN PID NODENAME\n" (NODENAME is
// SLURMD_NODENAME or the host name), then waits: "exit N\n" exits with N, the
// coordinator closing exits 3, stdin closing after --token-stdin exits 4.
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>

namespace {

[[noreturn]] void die(int code, const std::string& why) {
  std::fprintf(stderr, "probe: %s\n", why.c_str());
  std::exit(code);
}

/// Connects to HOST:PORT, retrying for 10 s while the coordinator comes up.
int connect_to(const std::string& address) {
  auto colon = address.rfind(':');
  if (colon == std::string::npos)
    die(2, "--coordinator needs HOST:PORT, got " + address);
  auto host = address.substr(0, colon), port = address.substr(colon + 1);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    addrinfo hints{}, *res = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &res) == 0) {
      for (auto* a = res; a; a = a->ai_next) {
        int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd >= 0 && ::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          ::freeaddrinfo(res);
          return fd;
        }
        if (fd >= 0)
          ::close(fd);
      }
      ::freeaddrinfo(res);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  die(5, "cannot reach the coordinator at " + address);
}

/// One line from `fd`, read byte by byte so nothing after it is consumed.
std::string read_line(int fd) {
  std::string line;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n')
    line += c;
  return line;
}

} // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string_view{argv[1]} != "node")
    die(2, "usage: troupe_launcher_probe node --coordinator HOST:PORT [--node I] [--token-stdin|--token-file F]");
  std::string coordinator, index, token;
  bool token_stdin = false, have_token = false;
  for (int i = 2; i < argc; ++i) {
    std::string_view a = argv[i];
    auto value = [&] { return i + 1 < argc ? std::string{argv[++i]} : (die(2, "missing value"), std::string{}); };
    if (a == "--coordinator")
      coordinator = value();
    else if (a == "--node")
      index = value();
    else if (a == "--token-stdin")
      token_stdin = have_token = true;
    else if (a == "--token-file") {
      std::ifstream in{value()};
      have_token = static_cast<bool>(std::getline(in, token));
    } else if (a == "--ignore-term")
      std::signal(SIGTERM, SIG_IGN);
    else
      die(2, "unknown option " + std::string{a});
  }
  if (index.empty() && std::getenv("SLURM_PROCID"))
    index = std::getenv("SLURM_PROCID");
  if (index.empty())
    die(2, "no --node and no SLURM_PROCID");
  if (token_stdin)
    token = read_line(0);
  else if (!have_token && std::getenv("TROUPE_TOKEN"))
    token = std::getenv("TROUPE_TOKEN"), have_token = true;
  if (!have_token)
    die(2, "no token (--token-stdin, --token-file or TROUPE_TOKEN)");

  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  const char* nodename = std::getenv("SLURMD_NODENAME") ? std::getenv("SLURMD_NODENAME") : host;
  std::printf("probe %s started\n", index.c_str()); // the launcher prefixes and forwards these
  std::fflush(stdout);
  std::fprintf(stderr, "probe %s on stderr\n", index.c_str());

  int fd = connect_to(coordinator);
  auto hello = "hello " + index + " " + token + " " + std::to_string(::getpid()) + " " + nodename + "\n";
  if (::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(hello.size()))
    die(5, "cannot write to the coordinator");
  pollfd fds[2] = {{fd, POLLIN, 0}, {0, POLLIN, 0}};
  for (;;) {
    if (::poll(fds, token_stdin ? 2 : 1, -1) < 0)
      continue;
    if (fds[0].revents) {
      auto line = read_line(fd);
      if (line.starts_with("exit "))
        return std::atoi(line.c_str() + 5);
      die(3, "the coordinator closed the connection");
    }
    if (fds[1].revents) {
      char c;
      if (::read(0, &c, 1) <= 0)
        die(4, "stdin closed: the launcher is gone");
    }
  }
}
