// A warm start (`train.init`): a run starts from the stage weights of another
// run's checkpoint, with fresh optimizer state at step 0 — the DiLoCo paper's
// protocol (pretrain with data parallelism, then train locally). Its first
// validation must be the checkpoint's own, which random weights cannot give.

#include <regex>

#include "tests/integration/troupe_process.hpp"

using namespace troupe::testing;

namespace {

const char* model = "model: {layers: 2, d_model: 32, heads: 2, context: 16, vocab: 256}\n"
                    "data: {corpus: kjv, batch: 4, seed: 3}\n";

} // namespace

TEST_CASE("a warm start takes a data-parallel checkpoint's weights into every replica of a local-update run") {
  auto dir = fs::temp_directory_path() / ("troupe_warm_start_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "pre");
  fs::create_directories(dir / "local");
  std::ofstream{dir / "pre" / "graph.yaml"} << model
                                            << "train: {steps: 20, lr: 3.0e-3, eval_every: 20, eval_batches: 2}\n"
                                               "pipeline: {stages: 2, microbatches: 2}\n"
                                               "data_parallel: {replicas: 2}\n"
                                               "checkpoint: {dir: ckpt, every: 20}\n";
  REQUIRE(run_to_end(dir / "pre", {"run", (dir / "pre" / "graph.yaml").string(), "--no-trace"}) == 0);
  auto pre = validations(dir / "pre" / "out.txt");
  REQUIRE(pre.size() == 2); // after steps 0 and 20
  const std::string local = std::string{model} +
                            "train: {steps: 10, lr: 3.0e-3, eval_every: 5, eval_batches: 2, init: ../pre/ckpt}\n"
                            "pipeline: {stages: 2, microbatches: 2}\n"
                            "data_parallel: {replicas: 2}\n"
                            "local_update: {algorithm: diloco, sync_every: 5}\n";
  std::ofstream{dir / "local" / "graph.yaml"} << local;

  SUBCASE("every replica starts from the checkpoint: the first validation is the checkpoint's last") {
    REQUIRE(run_to_end(dir / "local", {"run", (dir / "local" / "graph.yaml").string(), "--no-trace"}) == 0);
    auto out = slurp(dir / "local" / "out.txt");
    CHECK(out.find("pre/ckpt/step-000020 (after its step 20; fresh optimizer state, step 0)") != std::string::npos);
    auto v = validations(dir / "local" / "out.txt");
    REQUIRE(v.size() == 3);
    CHECK(v[0] == "0:" + pre[1].substr(pre[1].find(':') + 1)); // the same weights, the same batches
    CHECK(v[0] != "0:" + pre[0].substr(pre[0].find(':') + 1)); // not a fresh model
  }
  SUBCASE("without the key the same run starts from random weights") {
    std::ofstream{dir / "local" / "graph.yaml"} << std::regex_replace(local, std::regex{", init: ../pre/ckpt"}, "");
    REQUIRE(run_to_end(dir / "local", {"run", (dir / "local" / "graph.yaml").string(), "--no-trace"}) == 0);
    auto v = validations(dir / "local" / "out.txt");
    REQUIRE(!v.empty());
    CHECK(v[0] == pre[0]);
  }
  SUBCASE("a checkpoint of another model cut is exit 2 at train.init's position, listing what it holds") {
    std::ofstream{dir / "local" / "graph.yaml"} << std::regex_replace(local, std::regex{"d_model: 32"}, "d_model: 16");
    CHECK(run_to_end(dir / "local", {"run", (dir / "local" / "graph.yaml").string(), "--no-trace"}) == 2);
    auto err = slurp(dir / "local" / "err.txt");
    INFO("stderr: ", err);
    CHECK(err.find("graph.yaml:3:") != std::string::npos);
    CHECK(err.find("pre/ckpt/step-000020 holds no stage with layers [0, 1) of this model (d_model "
                   "16, 2 layers in all); its stages: r0s0 layers [0, 1) (d_model 32, 2 layers in all)") !=
          std::string::npos);
    CHECK(slurp(dir / "local" / "out.txt").find("validation") == std::string::npos); // nothing ran
  }
  SUBCASE("a folder that holds no checkpoint is exit 2 at train.init's position") {
    CHECK(run_to_end(dir / "local", {"run", (dir / "local" / "graph.yaml").string(), "--no-trace", "--set",
                                     "train.init=../nowhere"}) == 2);
    auto err = slurp(dir / "local" / "err.txt");
    INFO("stderr: ", err);
    CHECK(err.find("train.init: ") != std::string::npos);
    CHECK(err.find("nowhere: no such checkpoint folder") != std::string::npos);
  }
  SUBCASE("with ZeRO 1 and 2 the warm start follows data parallelism's curve (the shards start fresh, as AdamW does)") {
    auto curve = [&](const std::string& zero) {
      auto summary = dir / "pre" / ("zero" + zero + ".json");
      REQUIRE(run_to_end(dir / "pre", {"run", (dir / "pre" / "graph.yaml").string(), "--no-trace", "--set",
                                       "train.init=ckpt", "--set", "checkpoint.every=0", "--set", "train.steps=10",
                                       "--set", "data_parallel.zero=" + zero, "--summary-json", summary.string()}) ==
              0);
      auto v = validations(dir / "pre" / "out.txt");
      REQUIRE(!v.empty());
      CHECK(v[0] == "0:" + pre[1].substr(pre[1].find(':') + 1)); // it starts from the checkpoint's weights
      return summary_losses(summary);
    };
    auto ddp = curve("0");
    for (const auto* zero : {"1", "2"}) {
      CAPTURE(zero);
      auto z = curve(zero);
      REQUIRE(z.size() == ddp.size());
      for (std::size_t i = 0; i < z.size(); ++i)
        CHECK(std::fabs(z[i] - ddp[i]) <= 1e-5 * std::fabs(ddp[i]));
    }
  }
  fs::remove_all(dir);
}
