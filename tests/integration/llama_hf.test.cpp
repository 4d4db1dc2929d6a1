// Llama weights leave and arrive under Hugging Face's LlamaForCausalLM names
// (#27 item 3): an independent NumPy Llama (tests/hf/llama_numpy.py) reading
// `troupe export --names hf` gives troupe's logits to 1e-4, with grouped-query
// attention and with a tied head on 2 stages (written as embed_tokens alone);
// and `train.init` on an export comes back exactly (a step later every tensor
// equals a warm start from the checkpoint), a tied one into both copies.
#include <cmath>
#include <cstring>

#include "runtime/checkpoint/safetensors.hpp"
#include "tests/integration/troupe_process.hpp"
#include "tests/numpy_reference.hpp"

using namespace troupe::testing;

namespace {

/// DIR/NAME/graph.yaml: a small Llama (`model_extra` added to its keys), `train`, `stages` stages.
fs::path graph(const fs::path& dir, const std::string& name, const std::string& model_extra, const std::string& train,
               int stages, const std::string& extra = "") {
  fs::create_directories(dir / name);
  std::ofstream{dir / name / "graph.yaml"}
    << "model: {family: llama, layers: 2, d_model: 32, heads: 4, kv_heads: 2, context: 16, vocab: 256" << model_extra
    << "}\n"
    << "data: {corpus: kjv, batch: 4, seed: 3}\n"
    << "train: {" << train << "}\n"
    << "pipeline: {stages: " << stages << ", microbatches: 2}\n"
    << extra;
  return dir / name / "graph.yaml";
}

} // namespace

TEST_CASE("troupe export --names hf of a Llama: an independent NumPy Llama gives troupe's logits to 1e-4") {
  auto dir = fs::temp_directory_path() / ("troupe_llama_hf_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  for (auto [name, model_extra, stages] :
       {std::tuple<std::string, std::string, int>{"untied", "", 2},
        {"tied", ", tie_embeddings: true", 2}}) { // tied: the head's stage keeps a copy
    INFO(name);
    auto pre = graph(dir, name, model_extra, "steps: 2, lr: 3.0e-3", stages, "checkpoint: {dir: ckpt, every: 2}\n");
    REQUIRE(run_to_end(dir / name, {"run", pre.string(), "--no-trace"}) == 0);
    auto out = dir / name / "hf";
    REQUIRE(
      run_to_end(dir / name, {"export", (dir / name / "ckpt").string(), "--names", "hf", "--out", out.string()}) == 0);
    auto config = nlohmann::json::parse(std::ifstream(out / "config.json"));
    CHECK(config["architectures"][0] == "LlamaForCausalLM");
    CHECK(config["num_key_value_heads"] == 2);
    CHECK(config["tie_word_embeddings"] == (name == "tied"));
    auto file = troupe::read_safetensors(out / "model.safetensors");
    REQUIRE(file);
    CHECK(file->find("model.layers.1.self_attn.k_proj.weight").shape() == troupe::shape_t{16, 32}); // 2 kv heads of 8
    CHECK(file->find("lm_head.weight").defined() == (name == "untied"));

    std::vector<std::int32_t> tokens;
    for (unsigned char c : std::string("And God said, Le"))
      tokens.push_back(c);
    auto theirs = numpy_logits("tests/hf/llama_numpy.py", out, tokens, dir / name / "numpy.bin");
    auto m = troupe::load_checkpoint_model(dir / name / "ckpt");
    REQUIRE(m);
    auto [largest, worst] = compare_logits(theirs, logits_of(*m, tokens));
    MESSAGE(fmt::format("{}: largest |logit| {:.3f}, largest difference {:.2e}", name, largest, worst));
    CHECK(largest > 0.1);
    CHECK(worst < 1e-4);
  }

  { // train.init on the export comes back exactly: a step later, a native warm start's tensors
    const std::string one_step = "steps: 1, lr: 3.0e-3, init: ";
    const std::string ck = "checkpoint: {dir: ckpt, every: 1}\n";
    auto hf = graph(dir, "from_hf", "", one_step + "../untied/hf/model.safetensors", 2, ck);
    auto native = graph(dir, "from_ck", "", one_step + "../untied/ckpt", 2, ck);
    REQUIRE(run_to_end(dir / "from_hf", {"check", hf.string()}) == 0);
    REQUIRE(run_to_end(dir / "from_hf", {"run", hf.string(), "--no-trace"}) == 0);
    REQUIRE(run_to_end(dir / "from_ck", {"run", native.string(), "--no-trace"}) == 0);
    int compared =
      compare_parts(dir / "from_hf" / "ckpt" / "step-000001", dir / "from_ck" / "ckpt" / "step-000001", {"s0", "s1"});
    CHECK(compared > 2 * 9);
  }
  { // a tied export (embed_tokens alone) fills both copies of a tied 2-stage graph: a step later, as natively
    const std::string one_step = "steps: 1, lr: 3.0e-3, init: ";
    const std::string ck = "checkpoint: {dir: ckpt, every: 1}\n";
    const std::string tied = ", tie_embeddings: true";
    auto hf = graph(dir, "tied_from_hf", tied, one_step + "../tied/hf/model.safetensors", 2, ck);
    auto native = graph(dir, "tied_from_ck", tied, one_step + "../tied/ckpt", 2, ck);
    REQUIRE(run_to_end(dir / "tied_from_hf", {"run", hf.string(), "--no-trace"}) == 0);
    REQUIRE(run_to_end(dir / "tied_from_ck", {"run", native.string(), "--no-trace"}) == 0);
    auto step1 = [&](const char* name) { return dir / name / "ckpt" / "step-000001"; };
    CHECK(compare_parts(step1("tied_from_hf"), step1("tied_from_ck"), {"s0", "s1"}) > 2 * 9);
    auto s0 = troupe::read_safetensors(step1("tied_from_hf") / "s0.safetensors");
    auto s1 = troupe::read_safetensors(step1("tied_from_hf") / "s1.safetensors");
    REQUIRE(s0);
    REQUIRE(s1);
    auto embedding = s0->find("embed_tokens.weight"), copy = s1->find("lm_head.weight");
    REQUIRE(copy.defined());
    CHECK(std::memcmp(embedding.raw(), copy.raw(), copy.nbytes()) == 0);
  }
  { // a GPT-2 graph refuses the Llama file at train.init
    fs::create_directories(dir / "gpt2");
    std::ofstream{dir / "gpt2" / "graph.yaml"} << "model: {layers: 2, d_model: 32, heads: 4, context: 16, vocab: 256}\n"
                                               << "data: {corpus: kjv, batch: 4}\n"
                                               << "train: {steps: 1, init: ../untied/hf/model.safetensors}\n";
    CHECK(run_to_end(dir / "gpt2", {"check", (dir / "gpt2" / "graph.yaml").string()}) == 2);
    CHECK(slurp(dir / "gpt2" / "err.txt").find("train.init") != std::string::npos);
  }
  fs::remove_all(dir);
}
