// `troupe export` and `troupe sample` on a real checkpoint: the exported file,
// read by an independent NumPy GPT-2 (tests/hf/gpt2_numpy.py) under Hugging
// Face's names and layouts, gives troupe's logits; troupe's own names give the
// checkpoint's tensors bit for bit; sampling is the model's argmax at
// temperature 0 and the same text for the same seed.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "deploy/run/checkpoint_model.hpp"
#include "runtime/checkpoint/safetensors.hpp"
#include "tests/numpy_reference.hpp"
#include "tests/troupe_command.hpp"

namespace fs = std::filesystem;
using troupe::testing::run_troupe;

namespace {

/// A checkpoint of the main example's model after 2 steps, 4 stages × 2 replicas
/// (made once per test program), and a folder for what the tests write.
struct trained {
  fs::path dir = fs::temp_directory_path() / fmt::format("troupe-export-{}", ::getpid());
  fs::path ck = dir / "ck";
  trained() {
    fs::remove_all(dir);
    fs::create_directories(dir);
    auto r = run_troupe(fmt::format("run examples/tiny-gpt.yaml --steps 2 --no-trace --set checkpoint.dir={} "
                                    "--set checkpoint.every=2 --set data_parallel.replicas=2 --set data.batch=4",
                                    ck.string()));
    REQUIRE_MESSAGE(r.code == 0, r.out);
  }
  ~trained() { fs::remove_all(dir); }
};

const trained& checkpoint() {
  static trained t;
  return t;
}

} // namespace

TEST_CASE("troupe export --names hf: an independent NumPy GPT-2 reading the file gives troupe's logits to 1e-4") {
  const auto& t = checkpoint();
  auto out = t.dir / "hf";
  auto r = run_troupe(fmt::format("export {} --names hf --out {} --json", t.ck.string(), out.string()));
  REQUIRE_MESSAGE(r.code == 0, r.out);
  auto said = nlohmann::json::parse(r.out);
  CHECK(said["step"] == 2);
  CHECK(said["tensors"] == 2 + 4 * 12 + 3); // embeddings, 4 blocks of 12, final norm and head
  auto config = nlohmann::json::parse(std::ifstream(out / "config.json"));
  CHECK(config["architectures"][0] == "GPT2LMHeadModel");
  CHECK(config["n_layer"] == 4);
  CHECK(config["n_embd"] == 128);

  std::vector<std::int32_t> tokens;
  for (unsigned char c : std::string("In the beginning God created the heaven and the earth."))
    tokens.push_back(c);
  auto theirs = troupe::testing::numpy_logits("tests/hf/gpt2_numpy.py", out, tokens, t.dir / "numpy_logits.bin");
  auto m = troupe::load_checkpoint_model(t.ck);
  REQUIRE(m);
  auto [largest, worst] = troupe::testing::compare_logits(theirs, troupe::testing::logits_of(*m, tokens));
  MESSAGE(fmt::format("largest |logit| {:.3f}, largest difference {:.2e}", largest, worst));
  CHECK(largest > 0.1); // a trained model's logits, not zeros
  CHECK(worst < 1e-4);
}

TEST_CASE("troupe export --names troupe writes replica 0's stage tensors bit for bit") {
  const auto& t = checkpoint();
  auto out = t.dir / "own";
  auto r = run_troupe(fmt::format("export {} --names troupe --out {}", t.ck.string(), out.string()));
  REQUIRE_MESSAGE(r.code == 0, r.out);
  auto file = troupe::read_safetensors(out / "model.safetensors");
  REQUIRE(file);
  int compared = 0;
  for (const auto& part : {"r0s0", "r0s1", "r0s2", "r0s3"}) {
    auto saved = troupe::read_safetensors(t.ck / "step-000002" / (std::string(part) + ".safetensors"));
    REQUIRE(saved);
    for (const auto& s : saved->tensors) {
      if (s.name.starts_with("optimizer."))
        continue;
      auto e = file->find(s.name);
      REQUIRE_MESSAGE(e.defined(), s.name);
      REQUIRE(e.nbytes() == s.value.nbytes());
      CHECK_MESSAGE(std::memcmp(e.raw(), s.value.raw(), e.nbytes()) == 0, s.name);
      ++compared;
    }
  }
  CHECK(compared == static_cast<int>(file->tensors.size()));
}

TEST_CASE("troupe sample: temperature 0 follows the model's argmax; a seed draws the same text; bad input is refused") {
  const auto& t = checkpoint();
  auto greedy =
    run_troupe(fmt::format("sample {} --prompt 'And God said' --tokens 1 --temperature 0 --json", t.ck.string()));
  REQUIRE_MESSAGE(greedy.code == 0, greedy.out);
  auto m = troupe::load_checkpoint_model(t.ck);
  REQUIRE(m);
  std::string prompt = "And God said";
  auto in = troupe::tensor_handle::empty({1, static_cast<std::int64_t>(prompt.size())}, troupe::dtype::i32);
  for (std::size_t i = 0; i < prompt.size(); ++i)
    in.data<std::int32_t>()[i] = static_cast<unsigned char>(prompt[i]);
  auto logits = m->logits(in);
  const float* last = logits.data<float>() + (prompt.size() - 1) * 256;
  CHECK(nlohmann::json::parse(greedy.out)["tokens"][0] == std::max_element(last, last + 256) - last);

  auto draw = [&](int seed) {
    auto r =
      run_troupe(fmt::format("sample {} --prompt 'And God said' --tokens 30 --seed {} --json", t.ck.string(), seed));
    REQUIRE_MESSAGE(r.code == 0, r.out);
    return nlohmann::json::parse(r.out)["tokens"];
  };
  CHECK(draw(5) == draw(5));
  CHECK(draw(5) != draw(6));

  auto empty = run_troupe(fmt::format("sample {} --prompt ''", t.ck.string()));
  CHECK(empty.code == 2);
  CHECK(empty.has("--prompt"));
  auto nothing = run_troupe(fmt::format("export {} --out {}", (t.dir / "nope").string(), (t.dir / "x").string()));
  CHECK(nothing.code == 2);
  CHECK(nothing.has("nope"));
}
