// A run that starts from a Hugging Face GPT-2 file (`train.init:
// FILE.safetensors`): troupe's own export comes back exactly (the first
// validation is the checkpoint's, and a step later every tensor equals a warm
// start from the checkpoint itself), a file troupe did not write (NumPy-drawn
// BF16 weights, no prefix, tied head) gives the NumPy model's logits, and a
// file that does not fit is refused at train.init's position.
#include <cstring>

#include "deploy/run/checkpoint_model.hpp"
#include "ops/hf_import.hpp"
#include "runtime/checkpoint/safetensors.hpp"
#include "tests/integration/troupe_process.hpp"
#include "tests/numpy_reference.hpp"

using namespace troupe::testing;

namespace {

const char* model = "model: {layers: 2, d_model: 32, heads: 2, context: 16, vocab: 256}\n"
                    "data: {corpus: kjv, batch: 4, seed: 3}\n";

/// A graph in DIR/NAME/graph.yaml: `model`, then `train`, then a pipeline of `stages` × `replicas`.
fs::path graph(const fs::path& dir, const std::string& name, const std::string& train, int stages, int replicas,
               const std::string& extra = "") {
  fs::create_directories(dir / name);
  std::ofstream{dir / name / "graph.yaml"} << model << "train: {" << train << "}\n"
                                           << "pipeline: {stages: " << stages << ", microbatches: 2}\n"
                                           << "data_parallel: {replicas: " << replicas << "}\n"
                                           << extra;
  return dir / name / "graph.yaml";
}

} // namespace

TEST_CASE("train.init takes a Hugging Face GPT-2 file: troupe's export exactly, and a file troupe did not write") {
  auto dir = fs::temp_directory_path() / ("troupe_hf_init_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto pre = graph(dir, "pre", "steps: 2, lr: 3.0e-3, eval_every: 2, eval_batches: 2", 2, 2,
                   "checkpoint: {dir: ckpt, every: 2}\n");
  REQUIRE(run_to_end(dir / "pre", {"run", pre.string(), "--no-trace"}) == 0);
  auto before = validations(dir / "pre" / "out.txt");
  REQUIRE(before.size() == 2); // after steps 0 and 2
  REQUIRE(
    run_to_end(dir, {"export", (dir / "pre" / "ckpt").string(), "--names", "hf", "--out", (dir / "hf").string()}) == 0);

  SUBCASE("the export comes back exactly: the checkpoint's validation, then a native warm start's tensors") {
    const std::string one_step = "steps: 1, lr: 3.0e-3, eval_every: 1, eval_batches: 2, init: ";
    auto hf = graph(dir, "from_hf", one_step + "../hf/model.safetensors", 2, 2, "checkpoint: {dir: ckpt, every: 1}\n");
    auto native = graph(dir, "from_ck", one_step + "../pre/ckpt", 2, 2, "checkpoint: {dir: ckpt, every: 1}\n");
    REQUIRE(run_to_end(dir / "from_hf", {"run", hf.string(), "--no-trace"}) == 0);
    REQUIRE(run_to_end(dir / "from_ck", {"run", native.string(), "--no-trace"}) == 0);
    CHECK(slurp(dir / "from_hf" / "out.txt").find("starting from the weights in ") != std::string::npos);
    auto v = validations(dir / "from_hf" / "out.txt");
    REQUIRE(!v.empty());
    CHECK(v[0] == "0:" + before[1].substr(before[1].find(':') + 1)); // the checkpoint's own evaluation
    int compared = compare_parts(dir / "from_hf" / "ckpt" / "step-000001", dir / "from_ck" / "ckpt" / "step-000001",
                                 {"r0s0", "r0s1", "r1s0", "r1s1"});
    CHECK(compared > 4 * 10);
  }
  SUBCASE("another cut of the same model takes it too: one stage (each of two replicas)") {
    auto one =
      graph(dir, "one", "steps: 1, lr: 3.0e-3, eval_every: 1, eval_batches: 2, init: ../hf/model.safetensors", 1, 2);
    REQUIRE(run_to_end(dir / "one", {"run", one.string(), "--no-trace"}) == 0);
    auto v = validations(dir / "one" / "out.txt");
    REQUIRE(!v.empty());
    auto loss = [](const std::string& s) { return std::stod(s.substr(s.find(':') + 1)); };
    CHECK(std::fabs(loss(v[0]) - loss(before[1])) <= 2e-4); // printed to 4 decimals
  }
  SUBCASE("a file troupe did not write: troupe's logits are the NumPy model's to 1e-4") {
    fs::create_directories(dir / "numpy");
    REQUIRE(sh(fmt::format("{} tests/hf/gpt2_write_numpy.py {} 2 32 2 16 256 11", numpy_python(),
                           (dir / "numpy").string())) == 0);
    auto file = dir / "numpy" / "model.safetensors";
    auto run = graph(dir, "from_numpy", "steps: 1, lr: 3.0e-3, init: ../numpy/model.safetensors", 2, 2);
    REQUIRE(run_to_end(dir / "from_numpy", {"check", run.string()}) == 0);
    REQUIRE(run_to_end(dir / "from_numpy", {"run", run.string(), "--no-trace"}) == 0);

    troupe::ops::gpt_config c;
    c.layers = 2, c.d_model = 32, c.heads = 2, c.context = 16, c.vocab = 256;
    troupe::ops::gpt_range m(c, 0, 2);
    auto specs = troupe::ops::gpt_param_specs(c, 0, 2);
    auto weights = troupe::ops::read_hf_weights(*troupe::ops::find_hf_family("gpt2"), c, specs, file);
    REQUIRE(weights);
    for (std::size_t i = 0; i < specs.size(); ++i)
      std::memcpy(m.params()[i].value.raw(), (*weights)[i].value.raw(), (*weights)[i].value.nbytes());
    std::vector<std::int32_t> tokens{73, 110, 32, 116, 104, 101, 32, 98, 101, 103, 105, 110, 110, 105, 110, 103};
    auto theirs = numpy_logits("tests/hf/gpt2_numpy.py", dir / "numpy", tokens, dir / "numpy" / "logits.bin");
    auto [largest, worst] = compare_logits(theirs, logits_of(m, tokens));
    MESSAGE(fmt::format("largest |logit| {:.3f}, largest difference {:.2e}", largest, worst));
    CHECK(largest > 0.1);
    CHECK(worst < 1e-4);
  }
  SUBCASE("a file that does not fit is exit 2 at train.init's position, naming the tensor") {
    fs::create_directories(dir / "bad");
    auto f = troupe::read_safetensors(dir / "hf" / "model.safetensors");
    REQUIRE(f);
    std::erase_if(f->tensors, [](const auto& t) { return t.name == "transformer.h.1.attn.c_proj.weight"; });
    REQUIRE(!troupe::write_safetensors(dir / "bad" / "model.safetensors", f->tensors));
    auto bad = graph(dir, "from_bad", "steps: 1, lr: 3.0e-3, init: ../bad/model.safetensors", 2, 1);
    for (const std::string cmd : {"check", "run"}) {
      std::vector<std::string> args{cmd, bad.string()};
      if (cmd == "run")
        args.push_back("--no-trace");
      CHECK(run_to_end(dir / "from_bad", args) == 2);
      auto err = slurp(dir / "from_bad" / "err.txt");
      INFO(cmd, " stderr: ", err);
      CHECK(err.find("graph.yaml:3:") != std::string::npos);
      CHECK(err.find("train.init: ") != std::string::npos);
      CHECK(err.find("the file has no tensor 'transformer.h.1.attn.c_proj.weight' nor 'h.1.attn.c_proj.weight'") !=
            std::string::npos);
    }
    std::ofstream{dir / "bad" / "config.json"} << R"({"n_layer": 2, "n_embd": 32, "n_head": 4})";
    auto f2 = troupe::read_safetensors(dir / "hf" / "model.safetensors");
    REQUIRE(!troupe::write_safetensors(dir / "bad" / "model.safetensors", f2->tensors));
    CHECK(run_to_end(dir / "from_bad", {"check", bad.string()}) == 2);
    CHECK(slurp(dir / "from_bad" / "err.txt").find("config.json: n_head is 4, but the graph's model.heads is 2") !=
          std::string::npos);
  }
  fs::remove_all(dir);
}
