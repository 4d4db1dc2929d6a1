// Test support: runs this build's `troupe ARGS` to completion and returns its
// exit code with stdout and stderr together.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <doctest/doctest.h>

namespace troupe::testing {

struct command_result {
  int code = -1;
  std::string out;
  bool has(const std::string& part) const { return out.find(part) != std::string::npos; }
};

/// `$TROUPE_BUILD_DIR/deploy/troupe ARGS 2>&1` (ARGS as one shell-quoted string; `build` without the variable).
inline command_result run_troupe(const std::string& args) {
  const char* dir = std::getenv("TROUPE_BUILD_DIR");
  std::string cmd = std::string{dir ? dir : "build"} + "/deploy/troupe " + args + " 2>&1";
  command_result r;
  std::FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 4096> buf;
  while (auto n = std::fread(buf.data(), 1, buf.size(), pipe))
    r.out.append(buf.data(), n);
  int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

} // namespace troupe::testing
