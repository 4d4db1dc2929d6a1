// Pipeline stages split the model without changing the math: for every schedule,
// on chains and on routes that skip and reorder stages, and with a varying number
// of microbatches per stage and step, the gradients and updates equal those of
// the model composed in each route's order. Credits are never exceeded, held
// messages stay bounded, and clipping costs 2(n-1) messages a step.
#include "actors/stage/stage_engine.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <random>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "actors/stage/pipeline_messages.hpp"
#include "ops/adamw.hpp"
#include "ops/grad_clip.hpp"
#include "schedulers/policies/orders.hpp"
#include "schedulers/routing/router.hpp"

using namespace troupe;

namespace {

/// A step-boundary component that only looks: `see` gets each step's gradients
/// once they are complete, before clipping and the update (a test's view of the
/// step boundary, stacked on top of the stage's own components).
class observer final : public step_boundary {
public:
  explicit observer(std::function<void(step_t)> see) : see_(std::move(see)) {}
  std::string_view type() const override { return "observer"; }
  std::optional<double> norm_share(step_t step) override {
    see_(step);
    return std::nullopt;
  }

private:
  std::function<void(step_t)> see_;
};

constexpr int layers = 8, batch = 2, context = 16;

ops::gpt_config model() {
  ops::gpt_config c;
  c.layers = layers, c.d_model = 32, c.heads = 2, c.context = context, c.vocab = 256, c.seed = 11;
  return c;
}

/// The tokens and targets of the run's `sequence`-th microbatch.
std::pair<tensor_handle, tensor_handle> tokens_of(std::int64_t sequence) {
  std::mt19937 rng(static_cast<unsigned>(5 + sequence));
  auto tok = tensor_handle::empty({batch, context}, dtype::i32);
  auto tgt = tensor_handle::empty({batch, context}, dtype::i32);
  for (int i = 0; i < batch * context; ++i) {
    tok.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng() % 256);
    tgt.data<std::int32_t>()[i] = static_cast<std::int32_t>(rng() % 256);
  }
  return {tok, tgt};
}

using grad_map = std::map<std::string, std::vector<float>>;

void collect(const std::vector<ops::named_tensor>& tensors, grad_map& out) {
  for (const auto& g : tensors)
    out[g.name] = {g.value.data<float>(), g.value.data<float>() + g.value.numel()};
}

double max_rel_diff(const grad_map& a, const grad_map& b) {
  if (a.size() != b.size())
    return INFINITY;
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

/// A run's shape: stage actors (actor 0 is the router, stage i is actor i + 1).
struct run_spec {
  int ranks = 2;
  int chunks = 1;
  int microbatches = 4;
  int steps = 1;
  std::string policy = "1f1b";
  std::string routing = "chain";
  std::vector<std::vector<std::string>> paths;
  double grad_clip = 0;
  int credits = 0; ///< every channel's credits; 0: the defaults
  std::vector<std::vector<sched::action>> table;
  bool post_validate = false; ///< train.clip: post_validate
  /// Called on each stage at each step boundary, before its norm (a test's hand on the gradients).
  std::function<void(stage_engine&, step_t)> at_boundary{};
};

/// What a run did, as seen from outside the engines.
struct run_record {
  std::vector<grad_map> grads; ///< per step, at the step boundary (before clipping)
  grad_map params;             ///< after the last step
  int norm_messages = 0, clip_messages = 0;
  int credit_violations = 0; ///< sends beyond what the receiver granted
  std::size_t max_held = 0;
  int max_granted = 0;
  std::map<int, std::vector<int>> hops_per_step; ///< stage -> forwards it ran, per step
  bool finished = false;
  std::int64_t rollbacks = 0;      ///< post-validation: steps rolled back (the most of any stage)
  std::vector<std::string> errors; ///< what the engines threw (each went on with its other messages)
};

sched::routing_params routing_params_of(const run_spec& s) {
  sched::routing_params rp;
  rp.layers = layers;
  int per = layers / (s.ranks * s.chunks);
  for (int r = 0; r < s.ranks; ++r) {
    sched::route_stage st{r + 1, fmt::format("s{}", r), {}};
    for (int c = 0; c < s.chunks; ++c) {
      int v = r + c * s.ranks;
      st.chunks.emplace_back(v * per, (v + 1) * per);
    }
    rp.stages.push_back(st);
  }
  rp.paths = s.paths;
  return rp;
}

/// Runs `s` through real stage engines and a router, every message through one
/// FIFO queue as actors would, checking credits on every data message.
run_record run(const run_spec& s) {
  run_record rec;
  std::deque<std::function<void()>> mail;
  std::vector<std::unique_ptr<stage_engine>> engines;
  auto rp = routing_params_of(s);
  auto policy = sched::make_routing(s.routing, rp);
  REQUIRE_MESSAGE(policy, (policy ? "" : policy.error().message));
  sched::router_config rc;
  for (const auto& st : rp.stages)
    rc.stage_actors.push_back(st.actor);
  rc.microbatches = s.microbatches, rc.steps = s.steps, rc.tokens_per_microbatch = batch * context;
  sched::router_core router(rc, std::move(*policy));
  std::map<std::pair<int, int>, int> left; // (sender, receiver) -> credits the test saw granted and not used
  auto sent = [&](int from, int to) {
    if (--left[{from, to}] < 0)
      ++rec.credit_violations;
  };
  auto engine = [&](int actor) -> stage_engine& { return *engines.at(static_cast<std::size_t>(actor - 1)); };
  for (int r = 0; r < s.ranks; ++r) {
    stage_config c;
    c.name = fmt::format("s{}", r);
    c.actor = r + 1, c.rank = r, c.ranks = s.ranks, c.chunks = s.chunks, c.router = 0;
    c.steps = s.steps, c.eval_batches = 1, c.grad_clip = s.grad_clip, c.model = model(), c.policy = s.policy;
    c.post_validate = s.post_validate;
    c.lr.max_lr = 1e-2f, c.lr.min_lr = 1e-3f, c.lr.warmup = 0, c.lr.total = s.steps;
    c.policy_params.table = s.table;
    for (auto [b, e] : rp.stages[static_cast<std::size_t>(r)].chunks) {
      c.layers.emplace_back(b, e);
      c.loss |= e == layers;
    }
    // Inputs come from the router (tokens, targets) and from any stage before this one on some route.
    c.input_credits[0] = s.credits;
    for (int k = 0; k < s.microbatches * 4; ++k) {
      auto route = (*sched::make_routing(s.routing, rp))->route(0, 0, k);
      for (std::size_t h = 1; h < route.size(); ++h)
        if (route[h].actor == r + 1 && route[h - 1].actor != r + 1)
          c.input_credits[route[h - 1].actor] = s.credits;
    }
    stage_outbox out;
    int me = r + 1;
    out.send = [&, me](int to, caf::message m) {
      if (m.match_elements<forward_atom, activation_msg>())
        sent(me, to);
      else if (m.match_elements<eval_atom, activation_msg>())
        return; // evaluation is not followed here
      else if (m.match_element<norm_atom>(0))
        ++rec.norm_messages;
      else if (m.match_element<clip_atom>(0))
        ++rec.clip_messages;
      else if (m.match_elements<credit_atom, credit_msg>()) {
        auto cm = m.get_as<credit_msg>(1);
        left[{to, me}] += cm.count;
        if (to == 0) {
          mail.push_back([&, cm] { router.grant(cm.from, cm.count); });
          return;
        }
      }
      mail.push_back([&, to, m] { engine(to).on_message(m); });
    };
    engines.push_back(std::make_unique<stage_engine>(std::move(c), std::move(out)));
    engines.back()->add_step_boundary(std::make_unique<observer>([&, me](step_t step) {
      if (s.at_boundary)
        s.at_boundary(engine(me), step);
      rec.hops_per_step[me - 1].push_back(engine(me).queue().completed(0)); // what this stage ran this step
      if (rec.grads.size() <= static_cast<std::size_t>(step))
        rec.grads.resize(static_cast<std::size_t>(step) + 1);
      for (const auto& x : engine(me).chunks())
        collect(x.grads(), rec.grads[static_cast<std::size_t>(step)]);
    }));
  }
  for (auto& e : engines)
    e->start();
  auto pump = [&] {
    bool any = false;
    while (auto e = router.next()) {
      any = true;
      for (const auto& [actor, plan] : e->plans)
        mail.push_back([&, actor, plan] { engine(actor).on_plan(plan); });
      auto [tok, tgt] = tokens_of(e->sequence);
      int head = e->route.front().actor, tail = e->route.back().actor;
      sent(0, head);
      if (tail != head)
        sent(0, tail);
      batch_msg tokens{e->step, e->microbatch, tok, tail == head ? tgt : tensor_handle{}, e->route};
      mail.push_back([&, head, tokens] { engine(head).on_batch(tokens, false); });
      if (tail != head) {
        batch_msg targets{e->step, e->microbatch, {}, tgt, e->route};
        mail.push_back([&, tail, targets] { engine(tail).on_batch(targets, false); });
      }
    }
    return any;
  };
  for (int guard = 0; guard < 1000000; ++guard) {
    bool ran = pump();
    auto attempt = [&](auto&& f) {
      try {
        return f();
      } catch (const std::runtime_error& e) {
        rec.errors.push_back(e.what());
        return true;
      }
    };
    for (std::size_t i = 0; i < engines.size(); ++i) {
      auto& e = *engines[i];
      ran |= attempt([&] { return e.run_one(); });
      rec.max_held = std::max(rec.max_held, e.max_held());
      rec.max_granted = std::max(rec.max_granted, e.credits_granted());
    }
    if (!mail.empty()) {
      auto f = std::move(mail.front());
      mail.pop_front();
      attempt([&] {
        f();
        return true;
      });
      ran = true;
    }
    if (!ran)
      break;
  }
  rec.finished = true;
  for (auto& e : engines) {
    if (rec.errors.empty())
      CHECK_MESSAGE(e->training_done(), e->config().name, " did not finish under ", s.policy);
    rec.finished &= e->training_done();
    rec.rollbacks = std::max(rec.rollbacks, e->rollbacks());
    for (const auto& x : e->chunks())
      collect(x.params(), rec.params);
  }
  return rec;
}

/// The same steps on chunks composed in each microbatch's route order, in one
/// place: forward along the route, backward back, loss scaled by tokens over the
/// step's tokens, the same clipping and AdamW.
run_record composed(const run_spec& s) {
  run_record rec;
  auto rp = routing_params_of(s);
  auto policy = sched::make_routing(s.routing, rp);
  REQUIRE(policy);
  std::map<std::pair<int, int>, std::unique_ptr<ops::gpt_range>> ranges; // (actor, chunk)
  for (const auto& st : rp.stages)
    for (std::size_t c = 0; c < st.chunks.size(); ++c)
      ranges[{st.actor, static_cast<int>(c)}] =
        std::make_unique<ops::gpt_range>(model(), st.chunks[c].first, st.chunks[c].second);
  ops::warmup_cosine lr;
  lr.max_lr = 1e-2f, lr.min_lr = 1e-3f, lr.warmup = 0, lr.total = s.steps;
  std::map<std::pair<int, int>, std::unique_ptr<ops::adamw>> adam; // the engines' default weight decay
  for (auto& [key, r] : ranges)
    adam[key] =
      std::make_unique<ops::adamw>(r->params(), ops::adamw_options{.weight_decay = stage_config{}.weight_decay});
  for (int step = 0; step < s.steps; ++step) {
    double step_tokens = static_cast<double>(s.microbatches) * batch * context;
    for (int mb = 0; mb < s.microbatches; ++mb) {
      std::int64_t seq = static_cast<std::int64_t>(step) * s.microbatches + mb;
      auto route = (*policy)->route(step, mb, seq);
      auto [tok, tgt] = tokens_of(seq);
      tensor_handle x = tok;
      for (std::size_t h = 0; h < route.size(); ++h)
        x = ranges.at({route[h].actor, route[h].chunk})->forward(mb, x, h + 1 == route.size() ? tgt : tensor_handle{});
      auto g = tensor_handle::empty({1});
      g.data<float>()[0] = static_cast<float>(static_cast<double>(tgt.numel()) / step_tokens);
      for (std::size_t h = route.size(); h-- > 0;)
        g = ranges.at({route[h].actor, route[h].chunk})->backward(mb, g);
    }
    grad_map grads;
    double sq = 0;
    for (auto& [key, r] : ranges) {
      collect(r->grads(), grads);
      sq += r->grad_sq_norm();
    }
    rec.grads.push_back(grads);
    if (s.grad_clip > 0)
      if (auto f = ops::clip_factor(std::sqrt(sq), s.grad_clip); f < 1.0f)
        for (auto& [key, r] : ranges)
          r->scale_grads(f);
    for (auto& [key, r] : ranges) {
      adam.at(key)->step(r->params(), r->grads(), lr.at(step));
      r->zero_grads();
    }
  }
  for (auto& [key, r] : ranges)
    collect(r->params(), rec.params);
  return rec;
}

/// Gradients to 1e-5; parameters after the steps to 5e-4, since AdamW turns the
/// last-bit differences of a different summation order into sign-like updates
/// wherever a gradient is near zero.
void check_same(const run_spec& s, double tol = 1e-5) {
  auto got = run(s);
  auto want = composed(s);
  REQUIRE(got.finished);
  REQUIRE(got.grads.size() == want.grads.size());
  for (std::size_t i = 0; i < want.grads.size(); ++i)
    CHECK_MESSAGE(max_rel_diff(want.grads[i], got.grads[i]) < tol, "step ", i, " gradients");
  CHECK(max_rel_diff(want.params, got.params) < 50 * tol);
  CHECK(got.credit_violations == 0);
}

} // namespace

TEST_CASE("1, 2 and 4 stages under every schedule give the whole model's gradients") {
  for (int ranks : {1, 2, 4}) {
    for (std::string policy : {"gpipe", "1f1b", "zb_h1", "interleaved_1f1b", "table"}) {
      run_spec s;
      s.ranks = ranks, s.policy = policy, s.chunks = policy == "interleaved_1f1b" ? 2 : 1;
      if (policy == "table")
        for (int r = 0; r < ranks; ++r)
          s.table.push_back(sched::one_f_one_b_order(r, ranks, s.microbatches));
      INFO(policy, " with ", ranks, " ranks");
      check_same(s);
    }
  }
}

TEST_CASE("routes that skip and reorder stages train with the gradients of the model composed in route order") {
  for (std::string policy : {"1f1b", "gpipe", "zb_h1"}) {
    run_spec s;
    s.ranks = 4, s.policy = policy, s.routing = "paths", s.steps = 2, s.microbatches = 4;
    s.paths = {{"s0", "s2", "s1", "s3"}, {"s0", "s2", "s3"}, {"s0", "s1", "s2", "s3"}};
    INFO(policy);
    check_same(s);
  }
}

TEST_CASE("a stage that sees a different number of microbatches in each step trains correctly") {
  run_spec s;
  s.ranks = 4, s.routing = "paths", s.steps = 3, s.microbatches = 3, s.grad_clip = 0.05;
  s.paths = {{"s0", "s1", "s3"}, {"s0", "s2", "s3"}}; // s1 sees 2, 1, 2 microbatches; s2 1, 2, 1
  auto got = run(s);
  CHECK(got.hops_per_step[1] == std::vector<int>{2, 1, 2});
  CHECK(got.hops_per_step[2] == std::vector<int>{1, 2, 1});
  check_same(s);
}

TEST_CASE("a sender never exceeds its receiver's credits, and held messages stay within them") {
  for (int credits : {1, 2, 3}) {
    for (std::string policy : {"gpipe", "1f1b", "zb_h1"}) {
      run_spec s;
      s.ranks = 4, s.policy = policy, s.credits = credits, s.steps = 3, s.microbatches = 8;
      auto got = run(s);
      INFO(policy, " with ", credits, " credits");
      CHECK(got.finished);
      CHECK(got.credit_violations == 0);
      CHECK(got.max_held <= static_cast<std::size_t>(got.max_granted));
    }
  }
}

TEST_CASE("one credit per channel throttles a pipeline without changing its gradients") {
  run_spec s;
  s.ranks = 4, s.policy = "gpipe", s.credits = 1, s.steps = 2, s.microbatches = 6;
  check_same(s);
}

TEST_CASE("global-norm clipping sends 2(n-1) messages a step, not n(n-1)") {
  for (int ranks : {2, 4}) {
    run_spec s;
    s.ranks = ranks, s.steps = 3, s.grad_clip = 0.05;
    auto got = run(s);
    CHECK(got.norm_messages == s.steps * (ranks - 1));
    CHECK(got.clip_messages == s.steps * (ranks - 1));
    check_same(s);
  }
}

/// Steps of `r` whose global norm (of the gradients at the boundary, before clipping) makes `clip` bind.
int binding_steps(const run_record& r, double clip) {
  int n = 0;
  for (const auto& step : r.grads) {
    double sq = 0;
    for (const auto& [name, g] : step)
      for (float x : g)
        sq += static_cast<double>(x) * x;
    n += ops::clip_factor(std::sqrt(sq), clip) < 1.0f;
  }
  return n;
}

TEST_CASE("post-validation's updates equal synchronous clipping's bit for bit, rolling back where the clip binds") {
  for (std::string policy : {"zb_h1", "1f1b"}) {
    CAPTURE(policy);
    run_spec s;
    s.ranks = 2, s.steps = 6, s.policy = policy, s.grad_clip = 1e6; // reduces, never binds: the norms unclipped
    auto free = run(s);
    std::vector<double> norms;
    for (const auto& step : free.grads) {
      double sq = 0;
      for (const auto& [name, g] : step)
        for (float x : g)
          sq += static_cast<double>(x) * x;
      norms.push_back(std::sqrt(sq));
    }
    std::sort(norms.begin(), norms.end());
    s.grad_clip = norms[norms.size() / 2]; // binds on about half the steps
    auto sync = run(s);
    s.post_validate = true;
    auto post = run(s);
    int binding = binding_steps(sync, s.grad_clip);
    REQUIRE(binding > 0);
    REQUIRE(binding < s.steps);
    CHECK(sync.rollbacks == 0);
    CHECK(post.rollbacks == binding);
    CHECK(max_rel_diff(post.params, sync.params) == 0.0);
    CHECK(post.errors.empty());
  }
}

TEST_CASE("a gradient norm that is not finite rolls the early update back on every stage, then stops with the error") {
  run_spec s;
  s.ranks = 2, s.steps = 3, s.grad_clip = 1.0, s.post_validate = true, s.policy = "zb_h1";
  grad_map before; // every stage's parameters as step 1 found them
  s.at_boundary = [&](stage_engine& e, step_t step) {
    if (step != 1)
      return;
    for (const auto& x : e.chunks())
      collect(x.params(), before);
    if (e.config().rank == 1) // a gradient overflows on the stage that does not reduce
      e.chunks()[0].grads()[0].value.data<float>()[0] = NAN;
  };
  auto r = run(s);
  REQUIRE(r.errors.size() == 2); // each stage, when the total reaches it
  for (const auto& e : r.errors)
    CHECK(e.find("the gradient norm is nan at step 1") != std::string::npos);
  CHECK(max_rel_diff(r.params, before) == 0.0); // both early updates undone: nothing is lost
}

TEST_CASE("a NaN loss stops the stage with an error that names the step and what to change") {
  stage_config c;
  c.name = "s0", c.actor = 1, c.router = 0, c.loss = true, c.steps = 2, c.grad_clip = 0, c.model = model();
  c.policy = "gpipe";
  c.layers = {{0, layers}};
  stage_outbox out;
  out.send = [](int, caf::message) {};
  stage_engine e(c, out);
  e.add_step_boundary(std::make_unique<observer>([&](step_t step) {
    if (step == 0) // a diverged update: one weight of the head becomes NaN
      e.chunks()[0].params().back().value.data<float>()[0] = NAN;
  }));
  e.start();
  route_t route{{1, 0}};
  for (step_t step : {0, 1})
    e.on_plan(step_plan_msg{step, 1, batch * context, 1, 1});
  auto [tok, tgt] = tokens_of(0);
  e.on_batch(batch_msg{0, 0, tok, tgt, route}, false);
  CHECK(e.run_one()); // step 0: forward
  CHECK(e.run_one()); // step 0: backward, then the update
  CHECK(e.step() == 1);
  CHECK(std::isnan(e.chunks()[0].params().back().value.data<float>()[0]));
  e.on_batch(batch_msg{1, 0, tok, tgt, route}, false);
  CHECK_THROWS_WITH_AS(e.run_one(), doctest::Contains("the loss is nan at step 1"), std::runtime_error);
}

TEST_CASE("a message for a hop of another actor is refused naming the route") {
  stage_config c;
  c.name = "s0", c.actor = 1, c.router = 0, c.model = model(), c.policy = "gpipe";
  c.layers = {{0, layers / 2}};
  stage_engine e(c, {});
  auto [tok, tgt] = tokens_of(0);
  CHECK_THROWS_WITH_AS(e.on_batch(batch_msg{0, 0, tok, {}, route_t{{2, 0}, {1, 0}}}, false),
                       doctest::Contains("not this stage"), std::runtime_error);
}

TEST_CASE("the stage applies AdamW with the configured weight decay to the step's gradients") {
  for (float wd : {0.0f, 0.5f}) {
    stage_config c;
    c.name = "s0", c.actor = 1, c.router = 0, c.loss = true, c.steps = 1, c.grad_clip = 0, c.model = model();
    c.policy = "gpipe", c.layers = {{0, layers}}, c.weight_decay = wd;
    std::vector<ops::named_tensor> params, grads; // copies, as the step's update found them
    auto copy = [](const ops::named_tensor& t) {
      auto c = tensor_handle::empty(t.value.shape());
      std::copy_n(t.value.data<float>(), t.value.numel(), c.data<float>());
      return ops::named_tensor{t.name, c};
    };
    stage_outbox out;
    out.send = [](int, caf::message) {};
    stage_engine e(c, out);
    e.add_step_boundary(std::make_unique<observer>([&](step_t) {
      const auto& ch = e.chunks();
      for (std::size_t i = 0; i < ch[0].params().size(); ++i)
        params.push_back(copy(ch[0].params()[i])), grads.push_back(copy(ch[0].grads()[i]));
    }));
    e.start();
    e.on_plan(step_plan_msg{0, 1, batch * context, 1, 1});
    auto [tok, tgt] = tokens_of(0);
    e.on_batch(batch_msg{0, 0, tok, tgt, route_t{{1, 0}}}, false);
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
