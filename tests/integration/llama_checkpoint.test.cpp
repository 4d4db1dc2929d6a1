// A Llama-family run's checkpoint says which model it holds (family, kv_heads,
// ffn_hidden, ...), loads back as that model, refuses a GPT-2 graph's resume,
// and a resumed run follows the uninterrupted loss curve.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "deploy/run/checkpoint_model.hpp"
#include "tests/troupe_command.hpp"

namespace fs = std::filesystem;
using troupe::testing::run_troupe;

namespace {

std::vector<double> losses(const fs::path& summary) {
  std::ifstream in(summary);
  return nlohmann::json::parse(in).at("losses").get<std::vector<double>>();
}

} // namespace

TEST_CASE("a llama checkpoint loads back as its model, refuses a gpt2 resume, and resumes onto the same curve") {
  const fs::path dir = fs::temp_directory_path() / fmt::format("troupe-llama-ck-{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  const auto graph = dir / "llama.yaml";
  std::ofstream(graph) << "model: {family: llama, layers: 2, d_model: 32, heads: 4, kv_heads: 2, ffn_hidden: 40, "
                          "context: 16, rope_theta: 500}\n"
                          "data: {corpus: kjv, batch: 2, seed: 5}\n"
                          "train: {steps: 4, lr: 3.0e-3, warmup: 1, eval_batches: 1}\n"
                          "pipeline: {stages: 2, microbatches: 2, schedule: 1f1b}\n";
  auto run = [&](const std::string& extra, const std::string& name) {
    auto r = run_troupe(
      fmt::format("run {} --no-trace --summary-json {} {}", graph.string(), (dir / (name + ".json")).string(), extra));
    REQUIRE_MESSAGE(r.code == 0, r.out);
    return losses(dir / (name + ".json"));
  };
  auto straight = run("", "straight");
  auto ck = dir / "ck";
  run(fmt::format("--steps 2 --set checkpoint.dir={} --set checkpoint.every=2", ck.string()), "first");

  auto m = troupe::load_checkpoint_model(ck);
  REQUIRE_MESSAGE(m, (m ? std::string{} : caf::to_string(m.error())));
  CHECK(m->config.family == troupe::ops::model_family::llama);
  CHECK(m->config.kv_heads == 2);
  CHECK(m->config.ffn_hidden == 40);
  CHECK(m->config.rope_theta == 500.0);
  CHECK(m->model->params()[0].name == "embed_tokens.weight");
  auto tokens = troupe::tensor_handle::zeros({1, 16}, troupe::dtype::i32);
  CHECK(m->logits(tokens).dim(2) == 256);

  const auto gpt2_graph = dir / "gpt2.yaml"; // GPT-2 of the same shape: other parameters
  std::ofstream(gpt2_graph) << "model: {layers: 2, d_model: 32, heads: 4, context: 16}\n"
                               "data: {corpus: kjv, batch: 2, seed: 5}\ntrain: {steps: 4}\n"
                               "pipeline: {stages: 2, microbatches: 2, schedule: 1f1b}\n";
  auto gpt2 = run_troupe(fmt::format("run {} --no-trace --resume {}", gpt2_graph.string(), ck.string()));
  CHECK(gpt2.code == 2);
  CHECK_MESSAGE(gpt2.has("cannot resume"), gpt2.out);
  auto resumed = run(fmt::format("--resume {}", ck.string()), "resumed");
  REQUIRE(resumed.size() == 2); // steps 3 and 4
  for (std::size_t i = 0; i < 2; ++i)
    CHECK(std::fabs(resumed[i] - straight[i + 2]) <= 1e-6 * std::fabs(straight[i + 2]));
  fs::remove_all(dir);
}
