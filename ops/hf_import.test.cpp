// Reading a model from a Hugging Face GPT-2 file: the family's table read
// backwards gives troupe's tensors bit for bit (with or without the base
// prefix, a tied head taken from the embedding), BF16 and F16 widen exactly,
// and each way a file can fail to fit is refused naming the tensor or key.
#include "ops/hf_import.hpp"

#include <cmath>
#include <cstring>
#include <functional>
#include <fstream>
#include <set>
#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>

using namespace troupe;
using namespace troupe::ops;
namespace fs = std::filesystem;

namespace {

gpt_config small() {
  gpt_config c;
  c.layers = 3, c.d_model = 16, c.heads = 2, c.context = 8, c.vocab = 40, c.seed = 5;
  return c;
}

const hf_family& gpt2() {
  return *find_hf_family("gpt2");
}

fs::path folder(const std::string& name) {
  auto d = fs::temp_directory_path() / fmt::format("troupe_hf_{}_{}", name, ::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

/// A whole model of `c` written under GPT-2's Hugging Face names; `edit` may change the list first.
fs::path write_model(const fs::path& dir, const gpt_range& m,
                     const std::function<void(std::vector<named_handle>&)>& edit = {}) {
  std::vector<named_handle> out;
  for (const auto& p : m.params()) {
    auto hf = hf_tensor_of(gpt2(), p.name);
    REQUIRE(hf);
    out.push_back({hf->name, hf->transposed ? transposed(p.value) : p.value});
  }
  if (edit)
    edit(out);
  REQUIRE(!write_safetensors(dir / "model.safetensors", out));
  return dir / "model.safetensors";
}

bool same_bits(const tensor_handle& a, const tensor_handle& b) {
  return a.shape() == b.shape() && a.type() == b.type() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

} // namespace

TEST_CASE("the Llama table names every parameter once, in LlamaForCausalLM's names, with the defaults filled in") {
  auto c = small();
  c.family = model_family::llama, c.kv_heads = 1; // ffn_hidden 0: llama_ffn_hidden(d_model)
  for (bool tied : {false, true}) {
    c.tie_embeddings = tied;
    const auto& llama = *find_hf_family("llama");
    auto specs = gpt_param_specs(c, 0, c.layers);
    std::set<std::string> names;
    for (const auto& p : specs) {
      auto hf = hf_tensor_of(llama, p.name);
      REQUIRE_MESSAGE(hf, p.name);
      CHECK(!hf->transposed); // Linear keeps [out, in] on both sides
      names.insert(hf->name);
    }
    CHECK(names.size() == specs.size());
    CHECK(names.contains("model.layers.1.self_attn.k_proj.weight"));
    CHECK(names.contains("lm_head.weight") == !tied);
    auto config = hf_config(llama, c);
    CHECK(config["architectures"][0] == "LlamaForCausalLM");
    CHECK(config["num_key_value_heads"] == 1);
    CHECK(config["intermediate_size"] == llama_ffn_hidden(c.d_model));
    CHECK(config["tie_word_embeddings"] == tied);
  }
}

TEST_CASE("the GPT-2 table names every parameter once, in GPT2LMHeadModel's names and layouts") {
  auto specs = gpt_param_specs(small(), 0, 3);
  std::set<std::string> names;
  std::vector<std::string> all;
  for (const auto& p : specs) {
    auto hf = hf_tensor_of(gpt2(), p.name);
    REQUIRE_MESSAGE(hf, p.name);
    names.insert(hf->name), all.push_back(hf->name);
  }
  CHECK(names.size() == specs.size());
  CHECK(hf_block_count(gpt2(), all) == 3);
  auto qkv = hf_tensor_of(gpt2(), "h.2.attn.c_attn.weight");
  CHECK(qkv->name == "transformer.h.2.attn.c_attn.weight");
  CHECK(qkv->transposed);
  CHECK(hf_tensor_of(gpt2(), "h.12.ln_1.bias")->name == "transformer.h.12.ln_1.bias");
  CHECK(!hf_tensor_of(gpt2(), "h.2.ln_1.bias")->transposed);
  CHECK(hf_tensor_of(gpt2(), "wte")->name == "transformer.wte.weight");
  CHECK(!hf_tensor_of(gpt2(), "h.x.ln_1.bias"));
  CHECK(find_hf_family("mamba") == nullptr);
  auto config = hf_config(gpt2(), small());
  CHECK(config["architectures"][0] == "GPT2LMHeadModel");
  CHECK(config["n_layer"] == 3);
  CHECK(config["n_head"] == 2);
}

TEST_CASE("a stage's parameters read back from a Hugging Face file bit for bit, with or without the prefix") {
  auto dir = folder("read");
  gpt_range m(small(), 0, 3);
  auto specs = gpt_param_specs(small(), 1, 3); // the second stage: blocks 1 and 2, final norm and head
  SUBCASE("the names export writes") {
    auto got = read_hf_weights(gpt2(), small(), specs, write_model(dir, m));
    REQUIRE(got);
    REQUIRE(got->size() == specs.size());
    for (std::size_t i = 0; i < specs.size(); ++i) {
      CHECK((*got)[i].name == specs[i].name);
      auto mine = std::find_if(m.params().begin(), m.params().end(), [&](auto& p) { return p.name == specs[i].name; });
      CHECK_MESSAGE(same_bits((*got)[i].value, mine->value), specs[i].name);
    }
  }
  SUBCASE("no `transformer.` prefix and no head: the head is the embedding (tied)") {
    auto file = write_model(dir, m, [](std::vector<named_handle>& ts) {
      std::erase_if(ts, [](const named_handle& t) { return t.name == "lm_head.weight"; });
      for (auto& t : ts)
        if (t.name.starts_with("transformer."))
          t.name.erase(0, std::string("transformer.").size());
    });
    auto got = read_hf_weights(gpt2(), small(), specs, file);
    REQUIRE(got);
    CHECK(got->back().name == "lm_head.weight");
    CHECK(same_bits(got->back().value, m.params().front().value)); // wte
  }
  fs::remove_all(dir);
}

TEST_CASE("BF16 and F16 weights widen to f32 exactly") {
  auto dir = folder("widen");
  gpt_range m(small(), 0, 3);
  // wte in F16 and wpe in BF16, with values each format holds exactly (subnormal, largest, infinity).
  const std::vector<std::uint16_t> f16{0x3c00, 0xc100, 0x7bff, 0x0001, 0x7c00, 0x8000};
  const std::vector<float> f16_value{1.0f, -2.5f, 65504.0f, 0x1p-24f, INFINITY, -0.0f};
  auto file = write_model(dir, m, [&](std::vector<named_handle>& ts) {
    for (auto& t : ts) {
      if (t.name != "transformer.wte.weight" && t.name != "transformer.wpe.weight")
        continue;
      bool half = t.name == "transformer.wte.weight";
      auto narrow = tensor_handle::zeros(t.value.shape(), half ? dtype::f16 : dtype::bf16);
      auto* bits = static_cast<std::uint16_t*>(narrow.raw());
      for (std::int64_t i = 0; i < t.value.numel(); ++i) {
        std::uint32_t f;
        std::memcpy(&f, t.value.data<float>() + i, 4);
        bits[i] = half ? f16[static_cast<std::size_t>(i) % f16.size()] : static_cast<std::uint16_t>(f >> 16);
      }
      t.value = narrow;
    }
  });
  auto got = read_hf_weights(gpt2(), small(), gpt_param_specs(small(), 0, 1), file);
  REQUIRE(got);
  const auto& wte = (*got)[0].value;
  const auto& wpe = (*got)[1].value;
  REQUIRE(wte.type() == dtype::f32);
  for (std::int64_t i = 0; i < wte.numel(); ++i)
    REQUIRE(std::memcmp(wte.data<float>() + i, &f16_value[static_cast<std::size_t>(i) % f16.size()], 4) == 0);
  const auto& original = m.params()[1].value;
  for (std::int64_t i = 0; i < wpe.numel(); ++i) {
    std::uint32_t a, b;
    std::memcpy(&a, wpe.data<float>() + i, 4), std::memcpy(&b, original.data<float>() + i, 4);
    REQUIRE(a == (b & 0xffff0000u)); // BF16 is the high half
  }
  fs::remove_all(dir);
}

TEST_CASE("a file that does not fit is refused naming the tensor or the config key") {
  auto dir = folder("refuse");
  gpt_range m(small(), 0, 3);
  auto whole = gpt_param_specs(small(), 0, 3);
  auto why = [&](const std::function<void(std::vector<named_handle>&)>& edit, gpt_config c = small()) {
    fs::remove(dir / "config.json");
    auto r = check_hf_weights(gpt2(), c, gpt_param_specs(c, 0, c.layers), write_model(dir, m, edit));
    REQUIRE(r);
    return *r;
  };
  auto drop = [](const char* name) {
    return [name](std::vector<named_handle>& ts) {
      std::erase_if(ts, [&](const named_handle& t) { return t.name == name; });
    };
  };
  CHECK(why(drop("transformer.h.1.mlp.c_fc.bias"))
          .ends_with("the file has no tensor 'transformer.h.1.mlp.c_fc.bias' nor 'h.1.mlp.c_fc.bias' (troupe's "
                     "'h.1.mlp.c_fc.bias')"));
  CHECK(why(drop("transformer.wpe.weight")).find("'transformer.wpe.weight'") != std::string::npos);
  CHECK(why([](std::vector<named_handle>& ts) {
          for (auto& t : ts)
            if (t.name == "transformer.h.0.attn.c_attn.weight")
              t.value = tensor_handle::zeros({48, 16}); // troupe's [out, in], not Conv1D's [in, out]
        })
          .ends_with("tensor 'transformer.h.0.attn.c_attn.weight' is [48, 16], but the graph's model needs [16, 48], "
                     "stored [in, out] (model.d_model 16, model.vocab 40, model.context 8)"));
  CHECK(why([](std::vector<named_handle>& ts) {
          for (auto& t : ts)
            if (t.name == "transformer.ln_f.bias")
              t.value = tensor_handle::zeros({16}, dtype::i32);
        }).ends_with("tensor 'transformer.ln_f.bias' is i32; weights must be F32, BF16 or F16"));
  auto deeper = small();
  deeper.layers = 4;
  CHECK(why({}, deeper).find("the file holds 3 blocks") != std::string::npos);
  CHECK(why({}, deeper).find("the graph's model.layers is 4") != std::string::npos);
  auto wider = small();
  wider.vocab = 50;
  CHECK(why({}, wider).find("tensor 'transformer.wte.weight' is [40, 16], but the graph's model needs [50, 16]") !=
        std::string::npos);

  write_model(dir, m);
  auto config = hf_config(gpt2(), small());
  config["n_head"] = 4;
  std::ofstream(dir / "config.json") << config.dump();
  auto heads = check_hf_weights(gpt2(), small(), whole, dir / "model.safetensors");
  REQUIRE(heads);
  CHECK(heads->ends_with("config.json: n_head is 4, but the graph's model.heads is 2"));
  config["n_head"] = 2, config["architectures"] = {"LlamaForCausalLM"};
  std::ofstream(dir / "config.json") << config.dump();
  auto arch = check_hf_weights(gpt2(), small(), whole, dir / "model.safetensors");
  REQUIRE(arch);
  CHECK(arch->find("architectures is [\"LlamaForCausalLM\"], not GPT2LMHeadModel") != std::string::npos);
  std::ofstream(dir / "config.json") << hf_config(gpt2(), small()).dump();
  CHECK(!check_hf_weights(gpt2(), small(), whole, dir / "model.safetensors"));
  fs::remove_all(dir);
}
