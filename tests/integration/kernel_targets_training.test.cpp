// A default build runs on a CPU with fewer features than the one it was built on
// (issue 24, Done-when 3): the main example's model, unchanged, trains a few steps
// with the kernels forced to AVX2 and to the portable baseline (Highway's targets,
// through TROUPE_CPU_TARGET), and its losses match the uncapped run's to 1e-4.
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "kernels/cpu/target.hpp"
#include "tests/integration/troupe_process.hpp"

using namespace troupe::testing;

namespace {

std::string fmt_list(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names)
    out += (out.empty() ? "" : ", ") + n;
  return out;
}

struct trained {
  std::string kernel_target;
  std::vector<double> losses;
};

/// `troupe run examples/tiny-gpt.yaml --steps 3` with TROUPE_CPU_TARGET = `target` (unset: nullptr).
trained train_tiny_gpt(const fs::path& dir, const char* target) {
  scoped_env env{"TROUPE_CPU_TARGET", target};
  auto summary = dir / "summary.json";
  fs::remove(summary);
  int code =
    run_to_end(dir,
               {"run", "examples/tiny-gpt.yaml", "--steps", "3", "--no-trace", "--timeout",
                std::to_string(120 * static_cast<long>(sanitizer_time_factor)), "--summary-json", summary.string()},
               180s);
  INFO(slurp(dir / "out.txt") << slurp(dir / "err.txt"));
  REQUIRE(code == 0);
  auto s = nlohmann::json::parse(slurp(summary));
  return {s.at("kernel_target").get<std::string>(), summary_losses(summary)};
}

} // namespace

TEST_CASE("the main example trains to the same losses with the kernels forced to avx2 and to the portable baseline") {
  auto dir = fs::temp_directory_path() / ("troupe_kernel_targets_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto supported = troupe::kernels::cpu::supported_kernel_targets();
  auto best = train_tiny_gpt(dir, nullptr);
  CHECK(best.kernel_target == supported.front());
  REQUIRE(best.losses.size() == 3);
  for (const char* target : {"avx2", "baseline"}) {
    CAPTURE(target);
    if (std::find(supported.begin(), supported.end(), target) == supported.end()) {
      MESSAGE("this CPU does not run ", target, " (it runs: ", fmt_list(supported), "): not compared");
      continue;
    }
    auto forced = train_tiny_gpt(dir, target);
    CHECK(forced.kernel_target == target);
    REQUIRE(forced.losses.size() == best.losses.size());
    for (std::size_t i = 0; i < best.losses.size(); ++i) {
      CAPTURE(i);
      CHECK(std::isfinite(forced.losses[i]));
      CHECK(std::abs(forced.losses[i] - best.losses[i]) <= 1e-4 * std::abs(best.losses[i]));
    }
    MESSAGE(std::string{target}, " losses ", forced.losses[0], " ", forced.losses[1], " ", forced.losses[2], "; ",
            best.kernel_target, " ", best.losses[0], " ", best.losses[1], " ", best.losses[2]);
  }
  fs::remove_all(dir);
}
