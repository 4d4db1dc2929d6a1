// The step boundary as registered components: a new rule is a registration,
// not an edit of the stage engine; bad stacks are refused by name.
#include "actors/boundary/step_boundary.hpp"
#include "actors/stage/stage_engine.hpp"

#include <cstring>
#include <random>

#include <doctest/doctest.h>

using namespace troupe;

namespace {

/// Plain SGD, p ← p − lr·clip·g: a step-boundary component a user could add in a plugin.
class sgd final : public step_boundary {
public:
  explicit sgd(stage_host& host) : host_(host) {}
  std::string_view type() const override { return "test_sgd"; }
  bool applies_update() const override { return true; }
  bool apply(step_t, float lr, float clip) override {
    for (const auto& m : host_.models()) {
      const auto& ps = m->params();
      const auto& gs = m->grads();
      for (std::size_t i = 0; i < ps.size(); ++i) {
        auto* p = ps[i].value.data<float>();
        const auto* g = gs[i].value.data<float>();
        for (std::int64_t j = 0; j < ps[i].value.numel(); ++j)
          p[j] -= lr * clip * g[j];
      }
      m->params_updated();
      m->zero_grads();
    }
    ++applied;
    return true;
  }
  static inline int applied = 0;

private:
  stage_host& host_;
};

stage_config one_stage(std::vector<boundary_choice> stack) {
  stage_config c;
  c.name = "s0", c.actor = 1, c.router = 0, c.loss = true, c.steps = 1, c.grad_clip = 0;
  c.model.layers = 2, c.model.d_model = 16, c.model.heads = 2, c.model.context = 8, c.model.vocab = 64;
  c.model.seed = 3;
  c.policy = "gpipe", c.layers = {{0, 2}};
  c.lr.max_lr = 0.5f, c.lr.min_lr = 0.5f, c.lr.warmup = 0, c.lr.total = 1;
  c.boundaries = std::move(stack);
  return c;
}

std::vector<std::vector<float>> copy_of(const std::vector<ops::named_tensor>& ts) {
  std::vector<std::vector<float>> out;
  for (const auto& t : ts)
    out.emplace_back(t.value.data<float>(), t.value.data<float>() + t.value.numel());
  return out;
}

} // namespace

TEST_CASE("a component registered outside the engine applies the update in place of the local optimizer") {
  register_step_boundary({"test_sgd", nullptr, [](stage_host& host, const boundary_choice&) {
                            return std::unique_ptr<step_boundary>(std::make_unique<sgd>(host));
                          }});
  stage_outbox out;
  out.send = [](int, caf::message) {};
  stage_engine e(one_stage({{"test_sgd", -1, {}}}), out);
  REQUIRE(e.step_boundaries().size() == 1); // no local optimizer beside it: it applies the update
  CHECK(e.step_boundaries()[0]->type() == "test_sgd");
  auto before = copy_of(e.chunks()[0].params());
  std::vector<std::vector<float>> grads;
  // The gradients as the update finds them, seen by a component stacked on top.
  struct look final : step_boundary {
    std::function<void()> f;
    std::string_view type() const override { return "look"; }
    std::optional<double> norm_share(step_t) override { return f(), std::nullopt; }
  };
  auto l = std::make_unique<look>();
  l->f = [&] { grads = copy_of(e.chunks()[0].grads()); };
  e.add_step_boundary(std::move(l));
  e.start();
  e.on_plan(step_plan_msg{0, 1, 2 * 8, 1, 1});
  std::mt19937 rng(7);
  auto tok = tensor_handle::empty({2, 8}, dtype::i32), tgt = tensor_handle::empty({2, 8}, dtype::i32);
  for (int i = 0; i < 16; ++i)
    tok.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng() % 64), tgt.data<std::int32_t>()[i] = i % 64;
  e.on_batch(batch_msg{0, 0, tok, tgt, route_t{{1, 0}}}, false);
  int before_applied = sgd::applied;
  while (e.run_one()) {
  }
  REQUIRE(e.training_done());
  CHECK(sgd::applied == before_applied + 1);
  auto after = copy_of(e.chunks()[0].params());
  REQUIRE(grads.size() == before.size());
  double moved = 0;
  for (std::size_t i = 0; i < before.size(); ++i)
    for (std::size_t j = 0; j < before[i].size(); ++j) {
      CHECK(after[i][j] == doctest::Approx(before[i][j] - 0.5f * grads[i][j]).epsilon(1e-6));
      moved += std::abs(after[i][j] - before[i][j]);
    }
  CHECK(moved > 0);                                            // the step did something, and it was SGD's
  CHECK(e.checkpoint_metadata().at("optimizer.steps") == "0"); // SGD keeps no optimizer state
}

TEST_CASE("an unknown component is refused naming the registered ones, built-ins first") {
  stage_outbox out;
  CHECK_THROWS_WITH_AS(
    stage_engine(one_stage({{"adafactor", -1, {}}}), out),
    doctest::Contains("no step-boundary component 'adafactor' (registered: ddp_ring, tied_embeddings, "
                      "zero_shards, local_optimizer, outer_exchange, test_sgd)"),
    std::invalid_argument);
}

TEST_CASE("a stack with two components that apply the update is refused") {
  stage_outbox out;
  CHECK_THROWS_WITH_AS(stage_engine(one_stage({{"local_optimizer", -1, {}}, {"local_optimizer", -1, {}}}), out),
                       doctest::Contains("exactly one component that applies the update, not 2"),
                       std::invalid_argument);
}

TEST_CASE("a message that no component of the stack takes is an error naming it") {
  stage_outbox out;
  stage_engine e(one_stage({}), out);
  CHECK_THROWS_WITH_AS(e.on_boundary_message(caf::make_message(updated_atom::value, step_t{3})),
                       doctest::Contains("s0: no step-boundary component takes the message"), std::runtime_error);
}
