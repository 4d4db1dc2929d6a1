// An optimizer's state as a checkpoint carries it: written to a file, read into
// a fresh optimizer, and the updates that follow are bit for bit the same. And
// an optimizer made over a subset of a model's parameters touches only those.
#include <cstring>
#include <filesystem>

#include <unistd.h>

#include <doctest/doctest.h>

#include "ops/adamw.hpp"
#include "ops/gpt.hpp"
#include "ops/sgd_nesterov.hpp"
#include "ops/testing_grad.hpp"
#include "runtime/checkpoint/safetensors.hpp"

using namespace troupe;
using namespace troupe::ops;
using namespace troupe::ops::testing;

namespace {

tensor_handle copy_of(const tensor_handle& t) {
  auto c = tensor_handle::empty(t.shape(), t.type());
  std::memcpy(c.raw(), t.raw(), t.nbytes());
  return c;
}

std::vector<named_tensor> copies(const std::vector<named_tensor>& xs) {
  std::vector<named_tensor> out;
  for (const auto& x : xs)
    out.push_back({x.name, copy_of(x.value)});
  return out;
}

bool same_bytes(const std::vector<named_tensor>& a, const std::vector<named_tensor>& b) {
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(a[i].value.raw(), b[i].value.raw(), a[i].value.nbytes()) != 0)
      return false;
  return true;
}

/// `s` written to a safetensors file (its step count in the metadata) and read back.
optimizer_state through_file(const optimizer_state& s, const std::string& tag) {
  auto path = std::filesystem::temp_directory_path() /
              ("troupe_optimizer_" + tag + "_" + std::to_string(::getpid()) + ".safetensors");
  std::vector<named_handle> out;
  for (const auto& t : s.tensors)
    out.push_back({t.name, t.value});
  REQUIRE(!write_safetensors(path, out, {{"steps", std::to_string(s.steps)}}));
  auto f = read_safetensors(path);
  std::filesystem::remove(path);
  REQUIRE(f);
  optimizer_state back{std::stol(f->metadata.at("steps")), {}};
  for (auto& t : f->tensors)
    back.tensors.push_back({t.name, t.value});
  return back;
}

/// Three steps on `params` and three more, once continued and once from a fresh
/// optimizer that loads the first's state after a round trip through a file.
template <class Make>
void check_resumes_exactly(Make make, const std::string& tag) {
  std::mt19937 rng(7);
  std::vector<named_tensor> params{{"w", randn({4, 5}, rng)}, {"b", randn({5}, rng)}};
  std::vector<std::vector<named_tensor>> grads;
  for (int s = 0; s < 6; ++s)
    grads.push_back({{"w", randn({4, 5}, rng)}, {"b", randn({5}, rng)}});
  auto a = make(params);
  for (int s = 0; s < 3; ++s)
    a.step(params, grads[std::size_t(s)], 1e-2f);
  auto saved = copies(params), restart = copies(params);
  auto st = through_file(a.state(), tag);
  auto b = make(saved);
  b.load_state(st);
  CHECK(b.steps() == 3);
  for (int s = 3; s < 6; ++s) {
    a.step(params, grads[std::size_t(s)], 1e-2f);
    b.step(saved, grads[std::size_t(s)], 1e-2f);
  }
  CHECK(same_bytes(params, saved));
  auto fresh = make(restart); // without the state the same steps land elsewhere
  for (int s = 3; s < 6; ++s)
    fresh.step(restart, grads[std::size_t(s)], 1e-2f);
  CHECK(!same_bytes(params, restart));
}

} // namespace

TEST_CASE("AdamW state written to a checkpoint and loaded into a fresh optimizer continues identically") {
  check_resumes_exactly([](const auto& ps) { return adamw(ps, {.weight_decay = 0.1f}); }, "adamw");
}

TEST_CASE("Nesterov SGD state written to a checkpoint and loaded into a fresh optimizer continues identically") {
  check_resumes_exactly([](const auto& ps) { return sgd_nesterov(ps, 0.9f, 0.01f); }, "sgd");
}

TEST_CASE("an optimizer over a subset of a model's parameters updates only those") {
  gpt_config cfg{.layers = 2, .d_model = 16, .heads = 2, .context = 8, .vocab = 13};
  gpt_range model(cfg, 0, 2);
  auto tokens = random_tokens(2, 8, cfg.vocab, 5), targets = random_tokens(2, 8, cfg.vocab, 6);
  model.forward(0, tokens, targets);
  model.backward(0);
  // Every third parameter: a slice an optimizer shard might own.
  std::vector<named_tensor> ps, gs;
  for (std::size_t i = 0; i < model.params().size(); i += 3)
    ps.push_back(model.params()[i]), gs.push_back(model.grads()[i]);
  auto before = copies(model.params());
  adamw opt(ps);
  opt.step(ps, gs, 1e-2f);
  for (std::size_t i = 0; i < model.params().size(); ++i) {
    INFO(model.params()[i].name);
    bool same = std::memcmp(before[i].value.raw(), model.params()[i].value.raw(), before[i].value.nbytes()) == 0;
    CHECK(same == (i % 3 != 0));
  }
  // Its state names only its own parameters, and the full list is refused.
  auto st = opt.state();
  CHECK(st.tensors.size() == 2 * ps.size());
  CHECK(st.tensors[2].name == "exp_avg." + ps[1].name);
  CHECK_THROWS_AS(opt.step(model.params(), model.grads(), 1e-2f), std::invalid_argument);
}

TEST_CASE("optimizer state that does not line up is refused and changes nothing") {
  std::mt19937 rng(3);
  std::vector<named_tensor> params{{"w", randn({2, 3}, rng)}};
  std::vector<named_tensor> grads{{"w", randn({2, 3}, rng)}};
  adamw opt(params);
  opt.step(params, grads, 1e-2f);
  auto good = opt.state();
  auto m = copy_of(good.tensors[0].value), v = copy_of(good.tensors[1].value);
  auto other = tensor_handle::zeros({3, 2});
  CHECK_THROWS_AS(opt.load_state({1, {{"exp_avg.w", m}}}), std::invalid_argument);
  CHECK_THROWS_AS(opt.load_state({1, {{"exp_avg.w", m}, {"exp_avg_sq.w", other}}}), std::invalid_argument);
  CHECK_THROWS_AS(opt.load_state({1, {{"exp_avg_sq.w", v}, {"exp_avg.w", m}}}), std::invalid_argument);
  CHECK_THROWS_AS(opt.load_state({-1, {}}), std::invalid_argument);
  CHECK_THROWS_AS(opt.load_state({1, {{"exp_avg.w", tensor_handle::zeros({2, 3}, dtype::i32)}, {"exp_avg_sq.w", v}}}),
                  std::invalid_argument);
  CHECK(opt.steps() == 1);
  opt.load_state({4, {{"exp_avg.w", m}, {"exp_avg_sq.w", v}}});
  CHECK(opt.steps() == 4);
  opt.load_state({0, {}}); // back to the start: zero moments
  CHECK(opt.steps() == 0);
  CHECK(opt.state().tensors.empty());
  opt.step(params, grads, 1e-2f);
  CHECK(to_vec(opt.state().tensors[0].value) == to_vec(m)); // as after a first step
}
