// The Llama family's ops and model: each op against its double reference and finite
// differences, and a tiny Llama (grouped-query, documents, tied and untied) whole.
#include <cmath>
#include <cstring>

#include <doctest/doctest.h>

#include "ops/gpt.hpp"
#include "ops/rms_norm.hpp"
#include "ops/rope.hpp"
#include "ops/swiglu.hpp"
#include "ops/testing_grad.hpp"
#include "ops/testing_reference_llama.hpp"

using namespace troupe;
using namespace troupe::ops;
using namespace troupe::ops::testing;
namespace ref = troupe::ops::reference;

namespace {

/// Two documents per row of T: [0, 4) and [4, T).
tensor_handle two_documents(long b, long t) {
  auto d = tensor_handle::empty({b, t}, dtype::i32);
  for (long i = 0; i < b * t; ++i)
    d.data<std::int32_t>()[i] = i % t < 4 ? 0 : 4;
  return d;
}

void perturb(const gpt_range& r, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.1f);
  for (auto& p : r.params())
    for (long i = 0; i < p.value.numel(); ++i)
      p.value.data<float>()[i] += d(rng);
}

} // namespace

TEST_CASE("rms norm's forward matches its reference and both backward halves match finite differences") {
  std::mt19937 rng(1);
  const long rows = 3, cols = 10;
  auto x = randn({rows, cols}, rng, 2.0f), w = randn({cols}, rng), r = randn({rows, cols}, rng);
  rms_norm_saved s;
  auto y = rms_norm_forward(x, w, s);
  vec xv = to_vec(x), wv = to_vec(w), rv = to_vec(r);
  CHECK(compare(to_vec(y), ref::rms_norm(xv, wv, rows, cols)).max_rel < 1e-6);
  auto f = [&] { return dot(rv, ref::rms_norm(xv, wv, rows, cols)); };
  auto add = randn({rows, cols}, rng);
  auto dx = rms_norm_backward_input(r, x, s, w, add);
  auto dw = tensor_handle::zeros({cols});
  rms_norm_backward_weight(r, x, s, dw);
  vec dxv = to_vec(dx), av = to_vec(add);
  for (std::size_t i = 0; i < dxv.size(); ++i)
    dxv[i] -= av[i]; // the fused residual gradient joins as it is
  check_grad("rms_norm dx", dxv, xv, f);
  check_grad("rms_norm dw", to_vec(dw), wv, f);
}

TEST_CASE("swiglu's forward matches silu(gate) * up and its backward matches finite differences") {
  std::mt19937 rng(2);
  const long rows = 4, h = 9;
  auto gu = randn({rows, 2 * h}, rng, 2.0f), r = randn({rows, h}, rng);
  vec guv = to_vec(gu), rv = to_vec(r);
  auto ref_y = [&] { return ref::swiglu(ref::columns(guv, 2 * h, 0, h), ref::columns(guv, 2 * h, h, h)); };
  CHECK(compare(to_vec(swiglu_forward(gu)), ref_y()).max_rel < 1e-6);
  check_grad("swiglu d gate|up", to_vec(swiglu_backward(r, gu)), guv, [&] { return dot(rv, ref_y()); });
}

TEST_CASE("rotary positions restart per document and the grouped pack's backward matches finite differences") {
  std::mt19937 rng(3);
  const long B = 2, T = 7, heads = 4, kv_heads = 2, hd = 6, c = heads * hd;
  const double theta = 500.0;
  auto table = make_rope_table(theta, hd, 16);
  auto docs = two_documents(B, T);
  auto pos = rope_positions(B, T, docs);
  CHECK(pos.data<std::int32_t>()[4] == 0); // the second document's first token
  CHECK(pos.data<std::int32_t>()[6] == 2);
  CHECK(rope_positions(B, T).data<std::int32_t>()[6] == 6);
  std::vector<std::int32_t> pv(pos.data<std::int32_t>(), pos.data<std::int32_t>() + B * T);
  for (long kvh : {kv_heads, heads}) { // grouped and plain multi-head
    CAPTURE(kvh);
    const long kvw = kvh * hd;
    auto proj = randn({B, T, c + 2 * kvw}, rng), r = randn({B, T, 3 * c}, rng);
    vec p = to_vec(proj), rv = to_vec(r);
    auto f_ref = [&] {
      return ref::rope_pack(ref::columns(p, c + 2 * kvw, 0, c), ref::columns(p, c + 2 * kvw, c, kvw),
                            ref::columns(p, c + 2 * kvw, c + kvw, kvw), pv, B * T, c, heads, kvh, theta);
    };
    auto qkv = rope_pack_forward(proj, int(heads), int(kvh), pos, table);
    CHECK(compare(to_vec(qkv), f_ref()).max_rel < 1e-5);
    // Token 4 starts a document: its q is not turned at all.
    CHECK(qkv.data<float>()[4 * 3 * c + 1] == proj.data<float>()[4 * (c + 2 * kvw) + 1]);
    check_grad(
      "rope_pack d proj", to_vec(rope_pack_backward(r, int(heads), int(kvh), pos, table)), p,
      [&] { return dot(rv, f_ref()); }, 96);
  }
}

TEST_CASE("a tiny grouped-query Llama's loss matches the reference and every gradient finite differences") {
  for (bool tied : {false, true}) {
    CAPTURE(tied);
    gpt_config cfg{.layers = 2, .d_model = 16, .heads = 4, .context = 9, .vocab = 19};
    cfg.family = model_family::llama, cfg.kv_heads = 2, cfg.ffn_hidden = 20, cfg.rope_theta = 100.0;
    cfg.tie_embeddings = tied;
    gpt_range model(cfg, 0, 2);
    perturb(model, 11);
    const long B = 2, T = 7;
    auto tokens = random_tokens(B, T, cfg.vocab, 5), targets = random_tokens(B, T, cfg.vocab, 6);
    auto docs = two_documents(B, T);
    auto loss = *model.forward(0, tokens, targets, docs).data<float>();
    model.backward(0);
    ref::param_map p;
    for (auto& t : model.params())
      p[t.name] = to_vec(t.value);
    std::vector<std::int32_t> tok(tokens.data<std::int32_t>(), tokens.data<std::int32_t>() + B * T),
      tgt(targets.data<std::int32_t>(), targets.data<std::int32_t>() + B * T);
    auto f = [&] { return ref::llama_loss(cfg, p, tok, tgt, B, T, docs.data<std::int32_t>()); };
    CHECK(std::abs(loss - f()) < 1e-5 * std::abs(f()));
    CHECK(model.params().size() == 1 + 2 * 9 + (tied ? 1 : 2));
    CHECK(gpt_parameter_count(cfg, 0, 2) ==
          19 * 16 + 2 * (16 + 16 * 16 + 2 * 8 * 16 + 16 * 16 + 16 + 3 * 20 * 16) + 16 + (tied ? 0 : 19 * 16));
    for (std::size_t i = 0; i < model.params().size(); ++i) {
      auto& name = model.params()[i].name;
      check_grad(name, to_vec(model.grads()[i].value), p[name], f, 24, 1e-3);
    }
  }
}

TEST_CASE("llama ranges chained by hand give the whole model's loss and gradients") {
  gpt_config cfg{.layers = 4, .d_model = 16, .heads = 4, .context = 8, .vocab = 23};
  cfg.family = model_family::llama, cfg.kv_heads = 1;
  auto tokens = random_tokens(2, 8, cfg.vocab, 1), targets = random_tokens(2, 8, cfg.vocab, 2);
  gpt_range whole(cfg, 0, 4);
  auto whole_loss = *whole.forward(0, tokens, targets).data<float>();
  whole.backward(0);
  std::vector<gpt_range> parts;
  for (auto [b, e] : {std::pair{0, 1}, {1, 3}, {3, 4}})
    parts.emplace_back(cfg, b, e);
  tensor_handle a = tokens;
  for (std::size_t i = 0; i < parts.size(); ++i)
    a = parts[i].forward(0, a, i + 1 == parts.size() ? targets : tensor_handle{});
  CHECK(*a.data<float>() == whole_loss);
  tensor_handle g;
  for (std::size_t i = parts.size(); i-- > 0;)
    g = parts[i].backward(0, g);
  std::map<std::string, vec> grads;
  for (auto& r : parts)
    for (auto& gr : r.grads())
      grads[gr.name] = to_vec(gr.value);
  CHECK(grads.size() == whole.grads().size());
  for (auto& gr : whole.grads()) {
    CAPTURE(gr.name);
    CHECK(compare(grads.at(gr.name), to_vec(gr.value)).max_rel < 1e-5);
  }
}

TEST_CASE("a llama range refuses kv_heads that do not divide heads and odd head widths") {
  gpt_config cfg{.layers = 2, .d_model = 12, .heads = 4, .context = 8, .vocab = 20};
  cfg.family = model_family::llama;
  cfg.kv_heads = 3;
  CHECK_THROWS_WITH_AS(gpt_range(cfg, 0, 2), doctest::Contains("kv_heads 3 does not divide heads 4"),
                       std::invalid_argument);
  cfg.kv_heads = 2, cfg.heads = 12; // head width 1
  CHECK_THROWS_WITH_AS(gpt_range(cfg, 0, 2), doctest::Contains("must be even"), std::invalid_argument);
  cfg.heads = 2, cfg.tie_embeddings = true;
  CHECK(gpt_range(cfg, 0, 2).params().size() == 1 + 2 * 9 + 1);
}

// What the stages' exchange (actors/boundary/tied_embeddings.cpp) relies on: the
// copy starts equal, and the two copies' gradients add up to the one matrix's.
TEST_CASE("a tied head apart from the embedding keeps a copy drawn equal, whose gradient and the embedding's sum to "
          "the whole model's") {
  gpt_config cfg{.layers = 2, .d_model = 16, .heads = 2, .context = 8, .vocab = 20};
  cfg.family = model_family::llama, cfg.tie_embeddings = true;
  gpt_range whole(cfg, 0, 2), first(cfg, 0, 1), last(cfg, 1, 2);
  REQUIRE(first.params().size() == 1 + 9);
  REQUIRE(last.params().size() == 9 + 2);
  const auto& embedding = first.params().front().value;
  const auto& copy = last.params().back();
  CHECK(copy.name == "lm_head.weight");
  REQUIRE(copy.value.shape() == embedding.shape());
  CHECK(std::memcmp(copy.value.raw(), embedding.raw(), embedding.nbytes()) == 0);
  auto tokens = tensor_handle::empty({2, 8}, dtype::i32), targets = tensor_handle::empty({2, 8}, dtype::i32);
  for (long i = 0; i < 16; ++i)
    tokens.data<std::int32_t>()[i] = std::int32_t(i * 7 % 20),
    targets.data<std::int32_t>()[i] = std::int32_t(i * 3 % 20);
  auto loss = whole.forward(0, tokens, targets);
  whole.backward(0);
  auto split_loss = last.forward(0, first.forward(0, tokens), targets);
  first.backward(0, last.backward(0));
  CHECK(*split_loss.data<float>() == doctest::Approx(*loss.data<float>()).epsilon(1e-6));
  const auto& want = whole.grads().front().value;
  const auto& e = first.grads().front().value;
  const auto& h = last.grads().back().value;
  double worst = 0, largest = 0;
  for (long i = 0; i < want.numel(); ++i) {
    largest = std::max(largest, double(std::fabs(want.data<float>()[i])));
    worst = std::max(worst, double(std::fabs(e.data<float>()[i] + h.data<float>()[i] - want.data<float>()[i])));
  }
  CHECK(largest > 1e-4);
  CHECK(worst <= 1e-5 * largest);
}
