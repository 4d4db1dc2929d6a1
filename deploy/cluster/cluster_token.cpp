// Reading and making the shared token (deploy/cluster/cluster_token.hpp).
#include "deploy/cluster/cluster_token.hpp"

#include <sys/stat.h>

#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "runtime/actor/errors.hpp"

namespace troupe::cluster {

namespace {

std::string trim(std::string s) {
  auto ws = " \t\r\n";
  auto b = s.find_first_not_of(ws);
  if (b == std::string::npos)
    return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

} // namespace

caf::expected<std::string> read_token_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return make_error(errc::io_failed, fmt::format("cannot read the token file '{}': it does not exist", path));
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    return make_error(
      errc::invalid_argument,
      fmt::format("the token file '{}' may be read by others (mode {:o}): chmod 600 it", path, st.st_mode & 0777));
  std::ifstream in{path};
  std::stringstream ss;
  ss << in.rdbuf();
  auto t = trim(ss.str());
  if (!in || t.empty())
    return make_error(errc::io_failed, fmt::format("the token file '{}' is empty or unreadable", path));
  return t;
}

caf::expected<std::string> read_token_stdin() {
  std::string line;
  if (!std::getline(std::cin, line) || trim(line).empty())
    return make_error(errc::io_failed, "--token-stdin: no token on standard input");
  return trim(line);
}

std::string fresh_token() {
  std::random_device rd; // /dev/urandom on Linux
  std::string t;
  for (int i = 0; i < 8; ++i)
    t += fmt::format("{:08x}", rd());
  return t;
}

} // namespace troupe::cluster
