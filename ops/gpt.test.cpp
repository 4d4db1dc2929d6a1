// The GPT as a whole: gradients against finite differences, layer ranges chained by
// hand against the whole model, split backward against fused, and pool reuse.
#include <thread>

#include <doctest/doctest.h>

#include "ops/adamw.hpp"
#include "ops/gpt.hpp"
#include "ops/testing_grad.hpp"

using namespace troupe;
using namespace troupe::ops;
using namespace troupe::ops::testing;
namespace ref = troupe::ops::reference;

namespace {

struct batch {
  tensor_handle tokens, targets;
  std::vector<std::int32_t> tok, tgt;
};

batch make_batch(long b, long t, int vocab, std::uint32_t seed, bool ignore_one = true) {
  std::mt19937 rng(seed);
  batch x{tensor_handle::empty({b, t}, dtype::i32), tensor_handle::empty({b, t}, dtype::i32), {}, {}};
  for (long i = 0; i < b * t; ++i) {
    x.tok.push_back(x.tokens.data<std::int32_t>()[i] = std::int32_t(rng() % std::uint32_t(vocab)));
    x.tgt.push_back(x.targets.data<std::int32_t>()[i] =
                      ignore_one && i == 2 ? -1 : std::int32_t(rng() % std::uint32_t(vocab)));
  }
  return x;
}

/// Adds noise to every parameter so that no path through the model is negligible.
void perturb(gpt_range& r, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.1f);
  for (auto& p : r.params())
    for (long i = 0; i < p.value.numel(); ++i)
      p.value.data<float>()[i] += d(rng);
}

float loss_of(const tensor_handle& t) {
  return *t.data<float>();
}

/// Runs forward and backward through `ranges` in order, chaining by hand; returns the loss.
float chain(std::vector<gpt_range>& ranges, int mb, const batch& x, float dloss = 1.0f) {
  tensor_handle a = x.tokens;
  for (std::size_t i = 0; i < ranges.size(); ++i)
    a = ranges[i].forward(mb, a, i + 1 == ranges.size() ? x.targets : tensor_handle{});
  float loss = loss_of(a);
  auto g = tensor_handle::empty({1});
  *g.data<float>() = dloss;
  for (std::size_t i = ranges.size(); i-- > 0;)
    g = ranges[i].backward(mb, g);
  CHECK(!g.defined());
  return loss;
}

std::map<std::string, vec> grads_by_name(const std::vector<gpt_range>& ranges) {
  std::map<std::string, vec> out;
  for (auto& r : ranges)
    for (auto& g : r.grads())
      out[g.name] = to_vec(g.value);
  return out;
}

} // namespace

TEST_CASE("a 2-layer GPT's gradient of every parameter matches finite differences") {
  gpt_config cfg{.layers = 2, .d_model = 12, .heads = 3, .context = 9, .vocab = 19};
  gpt_range model(cfg, 0, 2);
  perturb(model, 11);
  auto x = make_batch(2, 7, cfg.vocab, 5);
  auto loss = loss_of(model.forward(0, x.tokens, x.targets));
  model.backward(0);
  ref::param_map p;
  for (auto& t : model.params())
    p[t.name] = to_vec(t.value);
  auto f = [&] { return ref::gpt_loss(cfg, p, x.tok, x.tgt, 2, 7); };
  CHECK(std::abs(loss - f()) < 1e-5 * std::abs(f()));
  CHECK(model.params().size() == 2 + 2 * 12 + 3);
  for (std::size_t i = 0; i < model.params().size(); ++i) {
    auto& name = model.params()[i].name;
    check_grad(name, to_vec(model.grads()[i].value), p[name], f, 24, 1e-3);
  }
}

TEST_CASE("ranges hold exactly the whole model's weights for their layers") {
  gpt_config cfg{.layers = 4, .d_model = 16, .heads = 2, .context = 8, .vocab = 23, .seed = 99};
  gpt_range whole(cfg, 0, 4), middle(cfg, 1, 3),
    other_seed(gpt_config{cfg.layers, cfg.d_model, cfg.heads, cfg.context, cfg.vocab, precision::f32, 100}, 1, 3);
  std::map<std::string, vec> w;
  for (auto& p : whole.params())
    w[p.name] = to_vec(p.value);
  CHECK(middle.params().size() == 24);
  for (auto& p : middle.params())
    CHECK(to_vec(p.value) == w.at(p.name));
  CHECK(to_vec(other_seed.params()[2].value) != w.at(other_seed.params()[2].name));
  // GPT-2 init: the residual projections have std 0.02 / sqrt(2 * layers).
  auto v = w.at("h.0.mlp.c_proj.weight");
  double s2 = 0;
  for (double e : v)
    s2 += e * e;
  CHECK(std::sqrt(s2 / double(v.size())) == doctest::Approx(0.02 / std::sqrt(8.0)).epsilon(0.05));
}

TEST_CASE("the parameter count from the config equals the sizes of the real ranges' parameters") {
  gpt_config cfg{.layers = 5, .d_model = 24, .heads = 3, .context = 16, .vocab = 37};
  auto real = [&](int begin, int end) {
    std::int64_t n = 0;
    gpt_range range(cfg, begin, end); // a named range: a temporary would die before the loop reads it
    for (const auto& p : range.params())
      n += p.value.numel();
    return n;
  };
  for (auto [b, e] : {std::pair{0, 5}, {0, 2}, {2, 4}, {4, 5}, {1, 2}})
    CHECK(gpt_parameter_count(cfg, b, e) == real(b, e));
  CHECK(gpt_parameter_count(cfg, 0, 2) + gpt_parameter_count(cfg, 2, 5) == gpt_parameter_count(cfg, 0, 5));
  // Megatron's formula: 12·l·h²·(1 + 13/(12h) + (V + s)/(12·l·h)), plus the untied head and final norm.
  const std::int64_t l = 5, h = 24, V = 37, s = 16;
  CHECK(gpt_parameter_count(cfg, 0, 5) == 12 * l * h * h + 13 * l * h + (V + s) * h + V * h + 2 * h);
  // GPT-2 small (124M with a tied head; untied adds the 50257 x 768 head).
  gpt_config small{.layers = 12, .d_model = 768, .heads = 12, .context = 1024, .vocab = 50257};
  CHECK(gpt_parameter_count(small, 0, 12) == 124'439'808 + 50257LL * 768);
}

TEST_CASE("splitting the model into 1, 2 and 4 ranges gives the same loss and gradients") {
  gpt_config cfg{.layers = 4, .d_model = 20, .heads = 4, .context = 11, .vocab = 31};
  auto x = make_batch(3, 11, cfg.vocab, 3);
  std::vector<std::vector<std::pair<int, int>>> splits = {{{0, 4}}, {{0, 2}, {2, 4}}, {{0, 1}, {1, 2}, {2, 3}, {3, 4}}};
  std::map<std::string, vec> base;
  float base_loss = 0;
  for (auto& split : splits) {
    CAPTURE(split.size());
    std::vector<gpt_range> ranges;
    for (auto [b, e] : split)
      ranges.emplace_back(cfg, b, e);
    float loss = chain(ranges, 0, x);
    loss += chain(ranges, 1, make_batch(3, 11, cfg.vocab, 4)); // gradients accumulate over microbatches
    auto g = grads_by_name(ranges);
    if (base.empty()) {
      base = g;
      base_loss = loss;
      continue;
    }
    CHECK(loss == doctest::Approx(base_loss).epsilon(1e-6));
    REQUIRE(g.size() == base.size());
    for (auto& [name, v] : g) {
      INFO(name);
      CHECK(compare(v, base.at(name)).max_rel <= 1e-6);
    }
  }
}

TEST_CASE("with the head apart, blocks ranges and the head range [layers, layers) are the whole model") {
  gpt_config whole{.layers = 4, .d_model = 20, .heads = 4, .context = 11, .vocab = 31};
  gpt_config apart = whole;
  apart.head_apart = true; // SkipPipe: stage 0 holds the head beside the embedding
  auto x = make_batch(3, 11, whole.vocab, 3);
  std::vector<gpt_range> one;
  one.emplace_back(whole, 0, 4);
  std::vector<gpt_range> split;
  for (auto [b, e] : std::vector<std::pair<int, int>>{{0, 2}, {2, 4}, {4, 4}})
    split.emplace_back(apart, b, e);
  CHECK_FALSE(split[1].is_last()); // the blocks ending at `layers` hold no head
  CHECK(split[2].is_last());
  CHECK(split[2].params().size() == 3); // ln_f weight and bias, lm_head
  CHECK(gpt_parameter_count(apart, 2, 4) + gpt_parameter_count(apart, 4, 4) == gpt_parameter_count(whole, 2, 4));
  float loss = chain(split, 0, x), base = chain(one, 0, x);
  CHECK(loss == doctest::Approx(base).epsilon(1e-6));
  auto g = grads_by_name(split), want = grads_by_name(one);
  REQUIRE(g.size() == want.size());
  for (auto& [name, v] : g) {
    INFO(name);
    CHECK(compare(v, want.at(name)).max_rel <= 1e-6);
  }
  CHECK_THROWS_AS(gpt_range(whole, 4, 4), std::invalid_argument); // only with the head apart
}

TEST_CASE("backward_input then backward_weight equals the fused backward with microbatches in flight") {
  gpt_config cfg{.layers = 3, .d_model = 16, .heads = 2, .context = 8, .vocab = 17};
  auto x0 = make_batch(2, 8, cfg.vocab, 1), x1 = make_batch(2, 8, cfg.vocab, 2);
  auto half = tensor_handle::empty({1});
  *half.data<float>() = 0.5f;
  std::vector<gpt_range> fused, split;
  fused.emplace_back(cfg, 0, 1);
  fused.emplace_back(cfg, 1, 3);
  split.emplace_back(cfg, 0, 1);
  split.emplace_back(cfg, 1, 3);
  for (auto* rs : {&fused, &split}) {
    auto& r = *rs;
    auto a0 = r[0].forward(0, x0.tokens), a1 = r[0].forward(1, x1.tokens);
    r[1].forward(0, a0, x0.targets);
    r[1].forward(1, a1, x1.targets);
    CHECK(r[0].in_flight() == 2);
    if (rs == &fused) {
      r[0].backward(1, r[1].backward(1, half));
      r[0].backward(0, r[1].backward(0, half));
    } else { // zero-bubble order: I of both, then W later
      auto g1 = r[1].backward_input(1, half);
      auto g0 = r[1].backward_input(0, half);
      CHECK(!r[0].backward_input(1, g1).defined());
      r[1].backward_weight(1);
      r[0].backward_input(0, g0);
      r[0].backward_weight(1);
      r[1].backward_weight(0);
      r[0].backward_weight(0);
    }
    CHECK(r[0].in_flight() == 0);
    CHECK(r[1].in_flight() == 0);
  }
  auto a = grads_by_name(fused), b = grads_by_name(split);
  for (auto& [name, v] : a) {
    INFO(name);
    CHECK(v == b.at(name));
  }
}

TEST_CASE("a steady state of training steps allocates no new storage") {
  gpt_config cfg{.layers = 2, .d_model = 32, .heads = 2, .context = 16, .vocab = 29};
  std::vector<gpt_range> r;
  r.emplace_back(cfg, 0, 1);
  r.emplace_back(cfg, 1, 2);
  std::vector<adamw> opt;
  for (auto& s : r)
    opt.emplace_back(s.params());
  auto x = make_batch(2, 16, cfg.vocab, 9);
  auto step = [&] {
    for (auto& s : r)
      s.zero_grads();
    auto a0 = r[0].forward(0, x.tokens), a1 = r[0].forward(1, x.tokens);
    r[1].forward(0, a0, x.targets);
    r[1].forward(1, a1, x.targets);
    r[0].backward(0, r[1].backward(0));
    auto g = r[1].backward_input(1);
    r[0].backward_input(1, g);
    r[1].backward_weight(1);
    r[0].backward_weight(1);
    for (std::size_t i = 0; i < r.size(); ++i)
      opt[i].step(r[i].params(), r[i].grads(), 1e-3f);
  };
  step();
  step();
  auto before = storage_pool::for_device(device::cpu()).stats();
  for (int i = 0; i < 3; ++i)
    step();
  auto after = storage_pool::for_device(device::cpu()).stats();
  CHECK(after.fresh_allocations == before.fresh_allocations);
  CHECK(after.reuses > before.reuses);
  CHECK(after.bytes_live == before.bytes_live);
}

TEST_CASE("evaluation gives the training forward's loss and caches nothing") {
  gpt_config cfg{.layers = 2, .d_model = 16, .heads = 4, .context = 8, .vocab = 13};
  gpt_range m(cfg, 0, 2);
  auto x = make_batch(2, 5, cfg.vocab, 3);
  auto e = loss_of(m.evaluate(x.tokens, x.targets));
  CHECK(m.in_flight() == 0);
  auto logits = m.evaluate(x.tokens);
  CHECK(logits.shape() == shape_t{2, 5, 13});
  CHECK(loss_of(m.forward(4, x.tokens, x.targets)) == doctest::Approx(e).epsilon(1e-6));
  CHECK(m.in_flight() == 1);
}

TEST_CASE("gpt_range rejects bad ranges, reused microbatch ids and unknown ones") {
  gpt_config cfg{.layers = 2, .d_model = 16, .heads = 4, .context = 8, .vocab = 13};
  CHECK_THROWS_AS(gpt_range(cfg, 1, 3), std::invalid_argument);
  CHECK_THROWS_AS(gpt_range(cfg, 1, 1), std::invalid_argument);
  CHECK_THROWS_AS(gpt_range(gpt_config{2, 15, 4, 8, 13}, 0, 2), std::invalid_argument);
  gpt_range first(cfg, 0, 1);
  auto x = make_batch(1, 4, cfg.vocab, 3);
  first.forward(0, x.tokens);
  CHECK_THROWS_AS(first.forward(0, x.tokens), std::invalid_argument);
  CHECK_THROWS_AS(first.backward(1, {}), std::invalid_argument);
  CHECK_THROWS_AS(first.backward_weight(0), std::invalid_argument);
  auto long_tokens = make_batch(1, 9, cfg.vocab, 3);
  CHECK_THROWS_AS(first.forward(1, long_tokens.tokens), std::invalid_argument);
  CHECK(first.in_flight() == 1);
  // A gradient that does not match the forward's shape is refused; the microbatch stays.
  gpt_range last(cfg, 1, 2);
  auto act = first.forward(2, x.tokens);
  last.forward(0, act, x.targets);
  CHECK_THROWS_AS(first.backward(2, tensor_handle::zeros({2, 4, 16})), std::invalid_argument);
  CHECK(first.in_flight() == 2);
  CHECK(!first.backward(2, last.backward(0)).defined());
  CHECK(first.in_flight() == 1);
}

TEST_CASE("ranges trained on two threads at once match the same work done one after the other") {
  gpt_config cfg{.layers = 2, .d_model = 64, .heads = 4, .context = 32, .vocab = 50};
  auto x = make_batch(4, 32, cfg.vocab, 21), y = make_batch(4, 32, cfg.vocab, 22);
  auto train = [&](gpt_range& r, const batch& b) {
    adamw opt(r.params());
    for (int s = 0; s < 3; ++s) {
      r.zero_grads();
      r.forward(0, b.tokens, b.targets);
      r.backward(0);
      opt.step(r.params(), r.grads(), 1e-3f);
    }
  };
  gpt_range a1(cfg, 0, 2), b1(cfg, 0, 2), a2(cfg, 0, 2), b2(cfg, 0, 2);
  train(a1, x);
  train(b1, y);
  std::thread t1([&] { train(a2, x); }), t2([&] { train(b2, y); });
  t1.join();
  t2.join();
  for (std::size_t i = 0; i < a1.params().size(); ++i) {
    CHECK(to_vec(a1.params()[i].value) == to_vec(a2.params()[i].value));
    CHECK(to_vec(b1.params()[i].value) == to_vec(b2.params()[i].value));
  }
}

TEST_CASE("a bf16 GPT stays close to the f32 one and splits into ranges exactly") {
  gpt_config cfg{.layers = 2, .d_model = 32, .heads = 2, .context = 16, .vocab = 40};
  gpt_config half = cfg;
  half.precision = precision::bf16;
  auto x = make_batch(3, 16, cfg.vocab, 31);
  std::vector<gpt_range> f32, b16, b16_split;
  f32.emplace_back(cfg, 0, 2);
  b16.emplace_back(half, 0, 2);
  b16_split.emplace_back(half, 0, 1);
  b16_split.emplace_back(half, 1, 2);
  float lf = chain(f32, 0, x), lb = chain(b16, 0, x), ls = chain(b16_split, 0, x);
  CHECK(lb == doctest::Approx(lf).epsilon(1e-2));
  CHECK(ls == lb);
  auto gf = grads_by_name(f32), gb = grads_by_name(b16), gs = grads_by_name(b16_split);
  for (auto& [name, v] : gb) {
    INFO(name);
    CHECK(compare(v, gf.at(name)).norm_rel < 5e-2);
    CHECK(v == gs.at(name));
  }
}
