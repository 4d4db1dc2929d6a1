// Pipeline stages split the model without changing the math: for every schedule
// and 1, 2 or 4 ranks, the gradients equal those of the whole model.
#include "actors/stage_engine.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <random>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "ops/adamw.hpp"

using namespace troupe;

namespace {

constexpr int layers = 8, batch = 2, context = 16, microbatches = 4;

ops::gpt_config model() {
  ops::gpt_config c;
  c.layers = layers, c.d_model = 32, c.heads = 2, c.context = context, c.vocab = 256, c.seed = 11;
  return c;
}

std::vector<batch_msg> make_batches() {
  std::mt19937 rng(5);
  std::vector<batch_msg> out;
  for (int mb = 0; mb < microbatches; ++mb) {
    auto tok = tensor_handle::empty({batch, context}, dtype::i32);
    auto tgt = tensor_handle::empty({batch, context}, dtype::i32);
    for (int i = 0; i < batch * context; ++i) {
      tok.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng() % 256);
      tgt.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng() % 256);
    }
    out.push_back({0, mb, tok, tgt, {}});
  }
  return out;
}

using grad_map = std::map<std::string, std::vector<float>>;

void collect(const std::vector<ops::gpt_range>& chunks, grad_map& out) {
  for (const auto& c : chunks)
    for (const auto& g : c.grads())
      out[g.name] = {g.value.data<float>(), g.value.data<float>() + g.value.numel()};
}

/// Gradients of the whole model over the microbatches, each loss scaled by 1/m.
grad_map reference(const std::vector<batch_msg>& batches) {
  std::vector<ops::gpt_range> whole;
  whole.emplace_back(model(), 0, layers);
  auto scale = tensor_handle::empty({1});
  scale.data<float>()[0] = 1.0f / microbatches;
  for (const auto& b : batches) {
    whole[0].forward(b.microbatch, b.tokens, b.targets);
    whole[0].backward(b.microbatch, scale);
  }
  grad_map g;
  collect(whole, g);
  return g;
}

/// Runs one training step through `ranks` engines under `policy`, delivering every
/// message through one FIFO queue as actors would, and returns the gradients.
grad_map pipelined(const std::vector<batch_msg>& batches, int ranks, int chunks, const std::string& policy,
                   std::vector<std::vector<sched::action>> table = {}) {
  std::deque<std::function<void()>> mail;
  std::vector<std::unique_ptr<stage_engine>> engines;
  grad_map grads;
  int credit = 0;
  auto ranges = std::vector<std::pair<int, int>>{};
  int per = layers / (ranks * chunks);
  for (int r = 0; r < ranks; ++r) {
    stage_config c;
    c.name = fmt::format("s{}", r);
    c.rank = r, c.ranks = ranks, c.chunks = chunks, c.microbatches = microbatches;
    c.steps = 1, c.eval_batches = 1, c.grad_clip = 0, c.model = model(), c.policy = policy;
    c.policy_params.table = table;
    for (int ch = 0; ch < chunks; ++ch) {
      int v = r + ch * ranks;
      c.layers.emplace_back(v * per, (v + 1) * per);
    }
    stage_outbox out;
    out.forward = [&](int to, const activation_msg& m) { mail.push_back([&, to, m] { engines[to]->on_activation(m, false); }); };
    out.backward = [&](int to, const gradient_msg& m) { mail.push_back([&, to, m] { engines[to]->on_gradient(m); }); };
    out.eval = [](int, const activation_msg&) {};
    out.norm = [](step_t, double) {};
    out.credit = [&](int n) { credit += n; };
    out.before_update = [&](step_t, std::vector<ops::gpt_range>& ch) { collect(ch, grads); };
    engines.push_back(std::make_unique<stage_engine>(std::move(c), std::move(out)));
  }
  engines[0]->start();
  REQUIRE(credit == microbatches);
  for (const auto& b : batches) {
    engines.back()->on_batch(b, false);
    if (ranks > 1)
      engines[0]->on_batch(b, false);
  }
  for (int guard = 0; guard < 100000; ++guard) {
    bool ran = false;
    for (auto& e : engines)
      ran |= e->run_one();
    if (!mail.empty()) {
      auto f = std::move(mail.front());
      mail.pop_front();
      f();
      ran = true;
    }
    if (!ran)
      break;
  }
  for (auto& e : engines)
    CHECK_MESSAGE(e->training_done(), e->config().name, " did not finish its step under ", policy);
  return grads;
}

double max_rel_diff(const grad_map& a, const grad_map& b) {
  double worst = 0;
  for (const auto& [name, ga] : a) {
    auto i = b.find(name);
    if (i == b.end() || i->second.size() != ga.size())
      return INFINITY;
    double num = 0, den = 1e-30;
    for (std::size_t k = 0; k < ga.size(); ++k) {
      num = std::max(num, static_cast<double>(std::fabs(ga[k] - i->second[k])));
      den = std::max(den, static_cast<double>(std::fabs(ga[k])));
    }
    if (std::isnan(num))
      return INFINITY;
    worst = std::max(worst, num / den);
  }
  return worst;
}

} // namespace

TEST_CASE("1, 2 and 4 stages under every schedule give the whole model's gradients") {
  auto batches = make_batches();
  auto ref = reference(batches);
  for (int ranks : {1, 2, 4}) {
    for (std::string policy : {"gpipe", "1f1b", "zb_h1", "interleaved_1f1b", "table"}) {
      int chunks = policy == "interleaved_1f1b" ? 2 : 1;
      std::vector<std::vector<sched::action>> table;
      if (policy == "table") {
        for (int r = 0; r < ranks; ++r) {
          sched::policy_params p;
          p.rank = r, p.ranks = ranks, p.microbatches = microbatches;
          table.push_back((*sched::make_policy("1f1b", p))->canonical_order());
        }
      }
      auto got = pipelined(batches, ranks, chunks, policy, table);
      INFO(policy, " with ", ranks, " ranks");
      CHECK(got.size() == ref.size());
      CHECK(max_rel_diff(ref, got) < 1e-5);
    }
  }
}

TEST_CASE("a NaN loss stops the stage with an error that names the step and what to change") {
  stage_config c;
  c.name = "s0", c.steps = 2, c.microbatches = 1, c.grad_clip = 0, c.model = model(), c.policy = "gpipe";
  c.layers = {{0, layers}};
  int credit = 0;
  stage_outbox out;
  out.credit = [&](int n) { credit += n; };
  out.before_update = [](step_t step, std::vector<ops::gpt_range>& chunks) {
    if (step == 0) // a diverged update: one weight of the head becomes NaN
      chunks[0].params().back().value.data<float>()[0] = NAN;
  };
  stage_engine e(c, out);
  e.start();
  auto batches = make_batches();
  batches[0].microbatch = 0;
  e.on_batch(batches[0], false);
  CHECK(e.run_one()); // step 0: forward
  CHECK(e.run_one()); // step 0: backward, then the update
  CHECK(e.step() == 1);
  CHECK(std::isnan(e.chunks()[0].params().back().value.data<float>()[0]));
  auto next = batches[1];
  next.step = 1, next.microbatch = 0;
  e.on_batch(next, false);
  CHECK_THROWS_WITH_AS(e.run_one(), doctest::Contains("the loss is nan at step 1"), std::runtime_error);
}

TEST_CASE("the stage applies AdamW with the configured weight decay to the step's gradients") {
  for (float wd : {0.0f, 0.5f}) {
    stage_config c;
    c.name = "s0", c.steps = 1, c.microbatches = 1, c.grad_clip = 0, c.model = model(), c.policy = "gpipe";
    c.layers = {{0, layers}};
    c.weight_decay = wd;
    std::vector<ops::named_tensor> params, grads; // copies, as the step's update found them
    auto copy = [](const ops::named_tensor& t) {
      auto c = tensor_handle::empty(t.value.shape());
      std::copy_n(t.value.data<float>(), t.value.numel(), c.data<float>());
      return ops::named_tensor{t.name, c};
    };
    stage_outbox out;
    out.credit = [](int) {};
    out.before_update = [&](step_t, std::vector<ops::gpt_range>& ch) {
      for (std::size_t i = 0; i < ch[0].params().size(); ++i)
        params.push_back(copy(ch[0].params()[i])), grads.push_back(copy(ch[0].grads()[i]));
    };
    stage_engine e(c, out);
    e.start();
    e.on_batch(make_batches()[0], false);
    while (e.run_one()) {
    }
    CHECK(e.training_done());
    REQUIRE(!params.empty());
    ops::adamw ref(params, {.weight_decay = wd});
    ref.step(params, grads, c.lr.at(0));
    const auto& got = e.chunks()[0].params();
    for (std::size_t i = 0; i < params.size(); ++i) {
      CAPTURE(params[i].name);
      CHECK(std::equal(params[i].value.data<float>(), params[i].value.data<float>() + params[i].value.numel(),
                       got[i].value.data<float>()));
    }
    CHECK(e.checkpoint_metadata().at("optimizer.steps") == "1");
  }
}
