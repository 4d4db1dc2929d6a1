// `troupe check` and `troupe run` say which SIMD target the CPU kernels use and
// which core OpenBLAS picked, so a slow run explains itself; a TROUPE_CPU_TARGET
// this CPU does not run stops every command that computes, naming the valid ones.
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "kernels/cpu/target.hpp"
#include "tests/integration/troupe_process.hpp"

using namespace troupe::testing;
namespace cpu = troupe::kernels::cpu;

namespace {

/// The targets this processor runs, as the refusal lists them.
std::string valid_targets() {
  std::string out;
  for (const auto& t : cpu::supported_kernel_targets())
    out += t + ", ";
  return out + "best";
}

std::string line(const std::string& text, int n) {
  std::istringstream in{text};
  std::string l;
  for (int i = 0; i <= n; ++i)
    std::getline(in, l);
  return l;
}

} // namespace

TEST_CASE("troupe check and troupe run name the kernel target and OpenBLAS core; the summary JSON records both") {
  scoped_env best{"TROUPE_CPU_TARGET", nullptr};
  auto dir = small_pipeline_graph("kernel_target_cli", 2);
  const auto best_target = cpu::supported_kernel_targets().front();

  REQUIRE(run_to_end(dir, {"check", (dir / "graph.yaml").string()}, 30s) == 0);
  auto checked = slurp(dir / "out.txt");
  CHECK(line(checked, 0).starts_with("# parameters: "));
  CHECK(line(checked, 1) == "# " + cpu::kernel_summary());
  CHECK(line(checked, 1).starts_with("# kernels " + best_target + " (Highway "));

  REQUIRE(run_to_end(dir, {"run", (dir / "graph.yaml").string(), "--no-trace", "--summary-json",
                           (dir / "summary.json").string()}) == 0);
  auto ran = slurp(dir / "out.txt");
  CHECK(line(ran, 0).starts_with("parameters: "));
  CHECK(line(ran, 1) == cpu::kernel_summary());
  CHECK(line(ran, 1).find(", OpenBLAS " + cpu::blas_core()) != std::string::npos);
  auto s = nlohmann::json::parse(slurp(dir / "summary.json"));
  CHECK(s.at("kernel_target") == best_target);
  CHECK(s.at("blas_core") == cpu::blas_core());
  CHECK(s.at("blas_core") != "unknown");

  SUBCASE("TROUPE_CPU_TARGET caps the target, whatever its case") {
    scoped_env capped{"TROUPE_CPU_TARGET", "Baseline"};
    REQUIRE(run_to_end(dir, {"run", (dir / "graph.yaml").string(), "--no-trace", "--summary-json",
                             (dir / "summary.json").string()}) == 0);
    CHECK(line(slurp(dir / "out.txt"), 1).starts_with("kernels baseline (Highway "));
    CHECK(nlohmann::json::parse(slurp(dir / "summary.json")).at("kernel_target") == "baseline");
  }
  fs::remove_all(dir);
}

TEST_CASE(
  "a TROUPE_CPU_TARGET this CPU does not run stops check, run, launch and node with exit 2, listing the valid ones") {
  auto dir = small_pipeline_graph("kernel_target_bad", 2);
  auto graph = (dir / "graph.yaml").string();
  for (const char* bad : {"avx9000", "AVX-512"}) {
    scoped_env env{"TROUPE_CPU_TARGET", bad};
    const std::vector<std::vector<std::string>> commands{{"check", graph},
                                                         {"run", graph, "--no-trace"},
                                                         {"launch", graph, "--no-trace"},
                                                         {"node", "--coordinator", "127.0.0.1:9", "--node", "0"}};
    for (const auto& args : commands) {
      CAPTURE(bad);
      CAPTURE(args.front());
      CHECK(run_to_end(dir, args, 30s) == 2);
      CHECK(slurp(dir / "out.txt").empty());
      CHECK(slurp(dir / "err.txt") == "troupe " + args.front() + ": TROUPE_CPU_TARGET: CPU kernel target '" + bad +
                                        "' is not one this processor and build run (valid: " + valid_targets() + ")\n");
    }
  }
  fs::remove_all(dir);
}
