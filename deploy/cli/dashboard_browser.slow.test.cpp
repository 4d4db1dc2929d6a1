// Browser tests of the dashboard (tests/browser/dashboard.mjs: Playwright with
// Debian's headless chromium): a live 4-stage training run, the same across two
// launched node processes, a 64-actor, 100,000-span trace, and the validation
// loss of a finished run, and replicated runs' loss lines, memory and actor grid.
// Screenshots go to the build folder.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <doctest/doctest.h>
#include <fmt/format.h>

namespace {

std::string build_dir() {
  const char* b = std::getenv("TROUPE_BUILD_DIR");
  return b ? b : "build";
}

/// Runs the browser script in `mode`; its output goes to the test log.
int run_browser(const std::string& mode) {
  auto cmd = fmt::format("node tests/browser/dashboard.mjs {} --troupe '{}/deploy/troupe' --out '{}' 2>&1", mode,
                         build_dir(), build_dir());
  std::fflush(stdout);
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

} // namespace

TEST_CASE("the dashboard shows every actor's lane and a growing loss chart during a 4-stage run") {
  CHECK(run_browser("live") == 0);
}

TEST_CASE("one dashboard shows the lanes of both nodes of a 2-process launch, labelled by node") {
  CHECK(run_browser("launch") == 0);
}

TEST_CASE("the dashboard loads a 64-actor trace of 100,000 spans and redraws it quickly") {
  CHECK(run_browser("synthetic") == 0);
}

TEST_CASE("the dashboard says which step its validation loss is from and draws validation as markers, not a line") {
  CHECK(run_browser("validation") == 0);
}

TEST_CASE(
  "the dashboard draws each replica's loss, what every stage and optimizer shard holds, and the replicas' grid") {
  CHECK(run_browser("replicas") == 0);
}

TEST_CASE("the dashboard ranks a 3x slow stage first as a chronic straggler and calls a one-step stall a one-off") {
  CHECK(run_browser("stragglers") == 0);
}
