// One engine, two clocks: the stage engines the actors run, driven under a
// simulated clock with the harness's cost model, start every action exactly
// when schedulers::simulate() does, because both are the same stage_core.
#include "actors/stage/stage_engine.hpp"
#include "actors/stage/pipeline_messages.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <queue>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "runtime/trace/trace.hpp"
#include "schedulers/sim/harness.hpp"
#include "schedulers/policies/orders.hpp"
#include "schedulers/routing/router.hpp"

using namespace troupe;

namespace {

constexpr int batch = 1, context = 8;

/// What each rank started, and when.
using started = std::vector<std::vector<std::pair<sched::action, double>>>;

sched::op_kind kind_of(span_kind k) {
  switch (k) {
  case span_kind::backward:
    return sched::op_kind::backward;
  case span_kind::backward_input:
    return sched::op_kind::input_grad;
  case span_kind::backward_weight:
    return sched::op_kind::weight_grad;
  case span_kind::forward_backward:
    return sched::op_kind::overlap;
  default:
    return sched::op_kind::forward;
  }
}

/// Runs one step of `c` (c.chunks per rank, placed as the policy says) on real
/// stage engines: actor 0 is a router (routing policy chain), rank r is actor
/// r + 1, credits are the graph defaults. The engines read the simulated clock;
/// every message arrives after c.latency, an action's outputs after its cost
/// (sched::operation_cost); the trace spans say that each rank ran an action,
/// the rank's queue which one it started.
started run_engines(const sched::sim_config& c, const std::string& policy) {
  const int p = c.ranks;
  auto& tracer = trace_recorder::global();
  tracer.reset();
  tracer.enable();
  struct event {
    double time;
    std::uint64_t seq;
    std::function<void()> run;
    bool operator>(const event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
  };
  std::priority_queue<event, std::vector<event>, std::greater<>> events;
  std::uint64_t seq = 0;
  double now = 0;
  // Messages an action sends (all but the credits its start returns) leave when
  // its cost says it ends: they wait here until run_one() returned and the cost is known.
  bool in_action = false;
  std::vector<std::function<void()>> at_end;
  auto post = [&](double t, std::function<void()> f) { events.push({t, seq++, std::move(f)}); };

  const int v = c.chunks;
  sched::policy_params shape;
  shape.ranks = p, shape.chunks = v;
  const auto placement = sched::policy_placement(policy, shape);
  auto layers_of = [&](int r) { // layer s is virtual stage s
    std::vector<std::pair<int, int>> out;
    for (int k = 0; k < v; ++k)
      out.emplace_back(sched::virtual_stage(r, p, k, placement), sched::virtual_stage(r, p, k, placement) + 1);
    return out;
  };
  sched::routing_params rp;
  rp.layers = p * v;
  for (int r = 0; r < p; ++r)
    rp.stages.push_back({r + 1, fmt::format("s{}", r), layers_of(r)});
  sched::router_config rc;
  for (int r = 0; r < p; ++r)
    rc.stage_actors.push_back(r + 1);
  rc.microbatches = c.microbatches, rc.tokens_per_microbatch = batch * context;
  auto chain = sched::make_routing("chain", rp);
  REQUIRE(chain);
  const route_t route = (*chain)->route(0, 0, 0); // every microbatch's
  sched::router_core router(rc, std::move(*chain));

  std::vector<std::unique_ptr<stage_engine>> engines;
  std::vector<std::uint16_t> ids;
  auto engine = [&](int actor) -> stage_engine& { return *engines.at(static_cast<std::size_t>(actor - 1)); };
  std::vector<std::optional<sched::action>> started_now(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) {
    stage_config s;
    s.name = fmt::format("s{}", r);
    s.actor = r + 1, s.rank = r, s.ranks = p, s.chunks = v, s.router = 0, s.steps = 1, s.grad_clip = 1.0;
    s.policy = policy;
    s.model.layers = p * v, s.model.d_model = 16, s.model.heads = 2, s.model.context = context, s.model.vocab = 256;
    s.layers = layers_of(r);
    s.loss = route.back().actor == r + 1;
    // What pipeline_stage's make_stage_config gives channels without `credits:`.
    s.input_credits = sched::chain_input_credits(route, r + 1, 0, p);
    // The engine reads the clock before it starts an action and after its compute:
    // in simulated time the compute took the cost model's duration, so policies
    // that time their patience from measured costs see what the harness sees.
    s.clock = [&, r] {
      const auto& q = engines.at(static_cast<std::size_t>(r))->core().queue();
      if (in_action && q.running())
        started_now[static_cast<std::size_t>(r)] = *q.running();
      return in_action && q.running() ? now + sched::operation_cost(c, r, *q.running()) : now;
    };
    stage_outbox out; // credits leave when a forward starts, outputs when the action ends
    auto send = [&](std::function<void()> f) {
      if (in_action)
        at_end.push_back(std::move(f));
      else
        post(now + c.latency, std::move(f));
    };
    out.send = [&, send](int to, caf::message m) {
      if (m.match_elements<credit_atom, credit_msg>()) { // credits leave at once
        auto cm = m.get_as<credit_msg>(1);
        post(now + c.latency, [&, to, cm] { to == 0 ? router.grant(cm.from, cm.count) : engine(to).on_credit(cm); });
        return;
      }
      send([&, to, m] { engine(to).on_message(m); });
    };
    engines.push_back(std::make_unique<stage_engine>(std::move(s), std::move(out)));
    ids.push_back(tracer.register_actor(fmt::format("s{}", r), "pipeline_stage"));
    engines.back()->trace_id = ids.back();
  }

  started out(static_cast<std::size_t>(p));
  std::vector<double> busy_until(static_cast<std::size_t>(p), 0);
  trace_recorder::cursor cursor;
  std::vector<span> spans;
  for (auto& e : engines)
    e->start();
  while (!events.empty()) {
    now = events.top().time;
    while (!events.empty() && events.top().time == now) {
      auto f = std::move(const_cast<event&>(events.top()).run);
      events.pop();
      f();
    }
    while (auto e = router.next()) {
      for (const auto& [actor, plan] : e->plans)
        post(now + c.latency, [&, actor, plan] { engine(actor).on_plan(plan); });
      auto tok = tensor_handle::empty({batch, context}, dtype::i32),
           tgt = tensor_handle::empty({batch, context}, dtype::i32);
      for (int i = 0; i < batch * context; ++i)
        tok.data<std::int32_t>()[i] = (i * 7 + e->microbatch) % 256, tgt.data<std::int32_t>()[i] = (i * 5 + 1) % 256;
      int head = e->route.front().actor, tail = e->route.back().actor;
      batch_msg tokens{e->step, e->microbatch, tok, tail == head ? tgt : tensor_handle{}, e->route};
      post(now + c.latency, [&, head, tokens] { engine(head).on_batch(tokens, false); });
      if (tail != head)
        post(now + c.latency,
             [&, tail, m = batch_msg{e->step, e->microbatch, {}, tgt, e->route}] { engine(tail).on_batch(m, false); });
    }
    for (int r = 0; r < p; ++r) {
      auto& e = *engines[static_cast<std::size_t>(r)];
      if (busy_until[static_cast<std::size_t>(r)] > now)
        continue;
      // The engine runs the action at once; the cost model says when it ends, and
      // its outputs leave then. The engine's span says which action it was.
      in_action = true;
      bool ran = e.run_one();
      in_action = false;
      if (!ran) {
        if (auto w = e.wake_in(); w && *w > 0) // the policy's patience: ask again then
          post(now + *w, [] {});
        continue;
      }
      spans.clear();
      tracer.collect(cursor, spans);
      sched::action a;
      for (const auto& s : spans)
        if (s.actor == ids[static_cast<std::size_t>(r)] && s.kind != span_kind::idle && s.kind != span_kind::optimizer)
          a = {kind_of(s.kind), r, s.microbatch};
      if (auto& q = started_now[static_cast<std::size_t>(r)]; q) { // the stage: which chunk ran
        CHECK(q->kind == a.kind);
        CHECK(q->microbatch == a.microbatch);
        a = *std::exchange(q, std::nullopt);
      }
      double end = now + sched::operation_cost(c, r, a);
      for (auto& f : at_end)
        post(end + c.latency, std::move(f));
      at_end.clear();
      busy_until[static_cast<std::size_t>(r)] = end;
      post(end, [] {}); // the rank is free again: ask its policy then
      out[static_cast<std::size_t>(r)].push_back({a, now});
    }
  }
  tracer.disable();
  tracer.reset();
  for (auto& e : engines)
    REQUIRE_MESSAGE(e->training_done(), e->config().name, " did not finish under ", policy);
  return out;
}

started from_harness(const sched::sim_result& r) {
  started out(r.timeline.size());
  for (std::size_t k = 0; k < r.timeline.size(); ++k)
    for (const auto& t : r.timeline[k])
      out[k].push_back({t.what, t.start});
  // The timeline is in finish order; a rank runs one action at a time, so that is start order too.
  return out;
}

void check_same(const sched::sim_config& c, const std::string& policy) {
  auto want = sched::simulate(c, policy);
  REQUIRE_MESSAGE(want, (want ? "" : want.error().message));
  auto got = run_engines(c, policy);
  auto harness = from_harness(*want);
  for (int r = 0; r < c.ranks; ++r) {
    CAPTURE(r);
    REQUIRE(got[static_cast<std::size_t>(r)].size() == harness[static_cast<std::size_t>(r)].size());
    for (std::size_t i = 0; i < got[static_cast<std::size_t>(r)].size(); ++i) {
      const auto& [ga, gt] = got[static_cast<std::size_t>(r)][i];
      const auto& [ha, ht] = harness[static_cast<std::size_t>(r)][i];
      CAPTURE(i);
      CHECK(sched::to_string(ga) == sched::to_string(ha));
      CHECK(gt == doctest::Approx(ht));
    }
  }
}

sched::sim_config shape(int p, int m, int chunks = 1) {
  sched::sim_config c;
  c.ranks = p, c.microbatches = m, c.chunks = chunks;
  return c;
}

} // namespace

TEST_CASE("the stage engines and the harness run the same actions at the same times under equal costs") {
  for (std::string policy : {"gpipe", "1f1b", "zb_h1"}) {
    INFO(policy);
    check_same(shape(4, 8), policy);
  }
  auto got = run_engines(shape(4, 8), "1f1b");
  for (int r = 0; r < 4; ++r) {
    std::vector<sched::action> order;
    for (const auto& [a, t] : got[static_cast<std::size_t>(r)])
      order.push_back(a);
    CHECK(order == sched::one_f_one_b_order(r, 4, 8));
  }
}

TEST_CASE("the V-shaped and interleaved schedules run the same actions at the same times on engines and harness") {
  // dualpipev needs 2 x ranks microbatches: 4 x 8 and 2 x 6 have them.
  for (std::string policy : {"zbv", "v_half", "v_min", "dualpipev", "interleaved_1f1b"}) {
    INFO(policy);
    check_same(shape(4, 8, 2), policy);
    auto c = shape(2, 6, 2);
    c.jitter = 0.3, c.seed = 7, c.latency = 0.1;
    check_same(c, policy);
  }
}

TEST_CASE("credits throttle a sender identically in the stage engines and in the harness") {
  // GPipe has no in-flight bound, so each stage grants its sender the default 8
  // buffers; rank 1 three times slower than rank 0 fills them and rank 0 waits
  // for a credit, which a harness without credits would never make it do.
  auto c = shape(4, 16);
  c.rank_slowdown = {1, 3, 1, 1};
  c.latency = 0.25;
  auto h = sched::simulate(c, "gpipe");
  REQUIRE(h);
  double late = 0;
  for (const auto& t : h->timeline[0])
    if (t.what.kind == sched::op_kind::forward)
      late = std::max(late, t.start - (c.latency + t.what.microbatch * c.forward_cost));
  CHECK(late > 1.0); // rank 0 started some forward well after its input was there
  check_same(c, "gpipe");
}

TEST_CASE("under jitter and latency the stage engines and the harness still agree") {
  for (std::string policy : {"1f1b", "zb_h1"}) {
    auto c = shape(4, 8);
    c.jitter = 0.3, c.seed = 5, c.latency = 0.1;
    INFO(policy);
    check_same(c, policy);
  }
}
