// Side by side with PyTorch: same weights and batch → logits, loss, every gradient
// and the parameters after 3 AdamW steps agree. Skips when torch is not installed.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "ops/adamw.hpp"
#include "ops/gpt.hpp"
#include "ops/testing_grad.hpp"

using namespace troupe;
using namespace troupe::ops;
using namespace troupe::ops::testing;
namespace fs = std::filesystem;

namespace {

constexpr const char* python = "/usr/bin/python3";

bool torch_available() {
  return std::system(fmt::format("{} -c 'import torch' >/dev/null 2>&1", python).c_str()) == 0;
}

fs::path reference_script() {
  fs::path rel = "tests/torch/gpt_reference.py";
  if (const char* src = std::getenv("TROUPE_SOURCE_DIR"))
    return fs::path(src) / rel;
  return fs::absolute(rel);
}

void write_floats(const fs::path& p, const tensor_handle& t) {
  std::ofstream f(p, std::ios::binary);
  f.write(static_cast<const char*>(t.raw()), std::streamsize(t.nbytes()));
}

vec read_floats(const fs::path& p, std::size_t n) {
  std::vector<float> buf(n);
  std::ifstream f(p, std::ios::binary);
  f.read(reinterpret_cast<char*>(buf.data()), std::streamsize(n * sizeof(float)));
  REQUIRE_MESSAGE(f.gcount() == std::streamsize(n * sizeof(float)), "short or missing file " << p);
  return vec(buf.begin(), buf.end());
}

} // namespace

TEST_CASE("the GPT matches PyTorch in logits, loss, gradients and 3 AdamW steps") {
  if (!torch_available()) {
    MESSAGE("skipped: `/usr/bin/python3 -c 'import torch'` failed; install Debian's python3-torch "
            "(deploy/setup.sh --bench) to run the PyTorch comparison");
    return;
  }
  auto script = reference_script();
  REQUIRE_MESSAGE(fs::exists(script),
                  "reference script not found at " << script << " (run from the source root or set TROUPE_SOURCE_DIR)");
  gpt_config cfg{.layers = 2, .d_model = 48, .heads = 4, .context = 24, .vocab = 64, .seed = 5};
  const long b = 3, t = 20;
  const float lr = 1e-3f;
  const int steps = 3;
  gpt_range model(cfg, 0, cfg.layers);
  adamw opt(model.params());

  char tmpl[] = "/tmp/troupe_torch_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  fs::path dir = tmpl;
  auto tokens = tensor_handle::empty({b, t}, dtype::i32), targets = tensor_handle::empty({b, t}, dtype::i32);
  std::mt19937 rng(17);
  for (long i = 0; i < b * t; ++i) {
    tokens.data<std::int32_t>()[i] = std::int32_t(rng() % std::uint32_t(cfg.vocab));
    targets.data<std::int32_t>()[i] = i % 13 == 5 ? -1 : std::int32_t(rng() % std::uint32_t(cfg.vocab));
  }
  write_floats(dir / "tokens.bin", tokens);
  write_floats(dir / "targets.bin", targets);
  {
    std::ofstream c(dir / "config.txt");
    const auto& o = opt.options();
    c << fmt::format("layers {}\nd_model {}\nheads {}\ncontext {}\nvocab {}\nbatch {}\nseq {}\nignore_index {}\n",
                     cfg.layers, cfg.d_model, cfg.heads, cfg.context, cfg.vocab, b, t, cfg.ignore_index)
      << fmt::format("lr {:.9e}\nbeta1 {:.9e}\nbeta2 {:.9e}\neps {:.9e}\nweight_decay {:.9e}\nsteps {}\n", lr, o.beta1,
                     o.beta2, o.eps, o.weight_decay, steps);
    std::ofstream m(dir / "params.txt");
    for (auto& p : model.params()) {
      m << p.name;
      for (auto d : p.value.shape())
        m << ' ' << d;
      m << '\n';
      write_floats(dir / (p.name + ".bin"), p.value);
    }
  }
  auto cmd = fmt::format("{} {} {} 2>&1", python, script.string(), dir.string());
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0, "the PyTorch reference failed: " << cmd);

  auto logits = model.evaluate(tokens);
  auto le = compare(to_vec(logits), read_floats(dir / "logits.out", std::size_t(logits.numel())));
  INFO("logits relative error " << le.norm_rel);
  CHECK(le.norm_rel <= 1e-5);
  float loss = *model.forward(0, tokens, targets).data<float>();
  double torch_loss = 0;
  std::ifstream(dir / "loss.out") >> torch_loss;
  CHECK(std::abs(loss - torch_loss) <= 1e-5 * std::abs(torch_loss));
  model.backward(0);
  for (auto& g : model.grads()) {
    auto e = compare(to_vec(g.value), read_floats(dir / (g.name + ".grad.out"), std::size_t(g.value.numel())));
    INFO(g.name << " gradient relative error " << e.norm_rel << " (largest element error " << e.max_rel << ")");
    CHECK(e.norm_rel <= 1e-5);
  }
  for (int s = 0; s < steps; ++s) {
    if (s > 0) {
      model.zero_grads();
      model.forward(0, tokens, targets);
      model.backward(0);
    }
    opt.step(model.params(), model.grads(), lr);
  }
  for (auto& p : model.params()) {
    auto ours = to_vec(p.value);
    auto theirs = read_floats(dir / (p.name + ".after.out"), std::size_t(p.value.numel()));
    if (p.name.ends_with("attn.c_attn.bias")) {
      // The key bias adds the same q·b to every score of a row, which softmax ignores:
      // its true gradient is 0, both sides hold only rounding noise there, and Adam
      // scales noise up to ±lr steps. Compare q and v biases exactly; bound the k bias.
      const auto c = std::size_t(cfg.d_model);
      for (std::size_t i = c; i < 2 * c; ++i) {
        CHECK(std::abs(ours[i]) <= 1.5 * steps * lr);
        CHECK(std::abs(theirs[i]) <= 1.5 * steps * lr);
        ours[i] = theirs[i] = 0;
      }
    }
    auto e = compare(ours, theirs);
    INFO(p.name << " after " << steps << " AdamW steps: relative error " << e.norm_rel);
    CHECK(e.norm_rel <= 1e-5);
  }
  fs::remove_all(dir);
}
