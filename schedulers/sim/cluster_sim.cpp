// The cluster driver: every replica's router and stage cores as the actors hold
// them, messages delayed by their link, compute by the cost model, and each
// position's data-parallel ring (schedulers/sim/ring_sim.hpp) at the step boundary.
#include "schedulers/sim/cluster_sim.hpp"
#include "schedulers/sim/cluster_sim_state.hpp"

#include <span>

namespace troupe::sched {

double cluster_result::tflops_per_device() const {
  return iteration_s > 0 && devices > 0 ? flops_per_step / iteration_s / static_cast<double>(devices) / 1e12 : 0.0;
}

namespace detail {

void cluster::boundary_done(int a) {
  const auto gi = static_cast<std::size_t>(group_of(a));
  last_complete_[gi] = std::max(last_complete_[gi], sync_since_[static_cast<std::size_t>(a)]);
  if (++joined_[gi] < group_ * p_) // (with skip, every node of every position)
    return;
  joined_[gi] = 0;
  sync_wait_ += now_ - last_complete_[gi];
  last_complete_[gi] = 0;
  last_work_ = std::max(last_work_, now_);
  ++synced_steps_[gi];
  const int g = static_cast<int>(gi);
  for (int r = g * group_; r < (g + 1) * group_ && !skip_; ++r)
    touch(r * (p_ + 1));
  if (skip_)
    touch(0);
}

void cluster::weight_pass(int a, const stage_task& t, double seconds) {
  if (!ring_ || (t.what.kind != op_kind::backward && t.what.kind != op_kind::weight_grad))
    return;
  // As the stage engine tells its buckets: the step's last pass over a chunk
  // is its planned hops / chunks-th (each route visits each chunk once).
  const auto ai = static_cast<std::size_t>(a);
  auto& passes = weight_passes_[ai];
  if (passes_step_[ai] != t.step)
    passes_step_[ai] = t.step, passes.assign(passes.size(), 0);
  const int planned = stage(a).queue().planned();
  const int per_chunk = planned < 0 ? -1 : planned / static_cast<int>(passes.size());
  const bool last = ++passes[static_cast<std::size_t>(t.chunk)] == per_chunk;
  ring_->pass(replica_of(a), position_of(a), t.step, t.chunk, last, seconds);
}

// The replica's router emits what its credits allow, for steps whose predecessor is synced.
void cluster::pump(int r) {
  auto& router = *routers_[static_cast<std::size_t>(r)];
  const int self = r * (p_ + 1);
  const int per_step = c_.microbatches * (skip_ ? d_ : 1);
  const auto synced = synced_steps_[static_cast<std::size_t>(skip_ ? 0 : r / group_)];
  while (!router.done() && router.emitted() / per_step <= synced) {
    auto e = router.next();
    if (!e)
      break;
    for (const auto& [to, plan] : e->plans)
      deliver(self, to, 0, [this, to, plan] { stage(to).on_plan(plan); });
    // Routed across replicas, a microbatch needs a number unique in its step:
    // the step's k-th, k = microbatch × replicas + replica, as one router of all replicas numbers them.
    int id = intern(self, e->route);
    std::int64_t step = e->step;
    int mb = least_loaded_ ? e->microbatch * d_ + r : e->microbatch;
    int head = e->route.front().actor, tail = e->route.back().actor;
    deliver(self, head, 0, [this, head, id, step, mb, both = head == tail] {
      admitted(head, step,
               [this, head, id, step, mb, both] { stage(head).on_batch(meta(id, step, mb, 0), true, both); });
    });
    if (tail != head && !least_loaded_)
      deliver(self, tail, 0, [this, tail, id, step, mb] {
        admitted(tail, step, [this, tail, id, step, mb] { stage(tail).on_batch(meta(id, step, mb, 0), false, true); });
      });
  }
}

void cluster::compute(int a, double work, event_fn done) {
  last_work_ = std::max(last_work_, now_ + work); // exact on devices of their own (the skip case)
  if (hosts_.empty()) {
    events_.post(now_ + work, std::move(done));
    return;
  }
  const std::size_t node = host_[static_cast<std::size_t>(a)];
  auto& h = hosts_[node];
  advance(h);
  h.jobs.push_back({work, work, std::move(done)});
  replan(node);
}

void cluster::advance(host& h) {
  const double rate = host_rate(h);
  for (auto& j : h.jobs)
    j.left -= (now_ - h.since) * rate;
  h.since = now_;
}

void cluster::replan(std::size_t node) {
  auto& h = hosts_[node];
  if (h.jobs.empty())
    return;
  double first = h.jobs.front().left;
  for (const auto& j : h.jobs)
    first = std::min(first, j.left);
  events_.post(now_ + std::max(first, 0.0) / host_rate(h), [this, node, g = ++h.generation] {
    auto& h = hosts_[node];
    if (h.generation != g)
      return; // a job started or ended since: replanned
    advance(h);
    // Every job within rounding of its end finishes now, in the order they started.
    std::vector<event_fn> done;
    std::erase_if(h.jobs, [&](host::job& j) {
      if (j.left > 1e-9 * j.work)
        return false;
      done.push_back(std::move(j.done));
      return true;
    });
    replan(node);
    for (auto& f : done)
      f();
  });
}

expected<void> cluster::start_work(int a) {
  auto& s = stage(a);
  if (updating_[static_cast<std::size_t>(a)])
    return {};
  auto task = s.begin();
  if (!task) {
    if (auto w = s.wake_in(); w && *w > 0)
      events_.post(now_ + *w, [this, a] { touch(a); });
    return {};
  }
  const auto& q = s.queue();
  int limit = s.policy().in_flight_limit();
  if (limit > 0 && q.in_flight() > limit)
    return make_sched_error(fmt::format("t={}: policy {} on {} holds {} activations, over its bound {}", now_,
                                        s.policy().name(), s.config().name, q.in_flight(), limit));
  auto& peak = peak_in_flight_[static_cast<std::size_t>(a)];
  peak = std::max(peak, q.in_flight());
  int pos = position_of(a);
  auto pass_cost = [&](const stage_task& t) {
    const auto& cc = (t.loss ? head_costs_ : costs_)[static_cast<std::size_t>(pos)][static_cast<std::size_t>(t.chunk)];
    switch (t.what.kind) {
    case op_kind::forward:
      return cc.forward;
    case op_kind::backward:
      return cc.backward;
    case op_kind::input_grad:
      return cc.backward - cc.weight;
    case op_kind::weight_grad:
      return cc.weight;
    case op_kind::overlap: // its parts, below
      break;
    }
    return 0.0;
  };
  double cost = 0;
  for (const auto& t : task->parts.empty() ? std::span(&*task, 1) : std::span(task->parts)) // an F&B: both passes
    cost += pass_cost(t);
  if (c_.action_cost)
    cost =
      c_.action_cost(replica_of(a), pos, task->step, task->what.microbatch, static_cast<char>(task->what.kind), cost);
  cost = cost * slowdown_[static_cast<std::size_t>(a)] + c_.costs.device.action_overhead;
  forwards_[static_cast<std::size_t>(a)] += task->what.kind == op_kind::forward || task->what.kind == op_kind::overlap;
  busy_[static_cast<std::size_t>(a)] += cost;
  // The span ends when the compute does: at once known on a device of its own, later on shared cores.
  weight_pass(a, *task, cost);
  compute(a, cost, [this, a, t = *task, begin = now_] {
    if (ring_)
      ring_->pass_done(replica_of(a), position_of(a), t.step, t.chunk);
    if (traced(replica_of(a)))
      c_.on_span(
        {replica_of(a), position_of(a), static_cast<char>(t.what.kind), t.step, t.what.microbatch, begin, now_});
    stage(a).finish(t);
    touch(a);
  });
  return {};
}

expected<cluster_result> cluster::run() {
  auto wall = std::chrono::steady_clock::now();
  if (auto b = build(); !b)
    return b.error();
  try {
    for (auto& s : stages_)
      if (s)
        s->start();
    for (int r = 0; r < static_cast<int>(routers_.size()); ++r)
      touch(r * (p_ + 1));
    while (!events_.empty() || dirty_count_ > 0) {
      if (dirty_count_ == 0) {
        now_ = events_.next_time();
        while (!events_.empty() && events_.next_time() == now_)
          events_.run_next();
      }
      // Routers first (their credits came in), then every stage that heard something.
      take_dirty();
      for (int a : work_)
        if (position_of(a) < 0)
          pump(replica_of(a));
      for (int a : work_)
        if (position_of(a) >= 0)
          if (auto ok = start_work(a); !ok)
            return ok.error();
    }
  } catch (const std::exception& e) {
    return make_sched_error(fmt::format("simulation at t={}: {}", now_, e.what()));
  }
  for (int a = 0; a < static_cast<int>(stages_.size()); ++a)
    if (stages_[static_cast<std::size_t>(a)] && !stage(a).training_done())
      return make_sched_error(fmt::format("the pipeline stalled with work left: {} at step {} ({} steps synced)",
                                          stage(a).config().name, stage(a).step(),
                                          synced_steps_[static_cast<std::size_t>(group_of(a))]));

  cluster_result out;
  const auto& m = c_.model;
  // With skip, credits still crossing slow links after the last step's work are no part of it.
  out.makespan = skip_ ? last_work_ : now_;
  out.iteration_s = now_ / static_cast<double>(c_.steps);
  out.stage_actors = p_ * d_;
  out.devices = static_cast<std::int64_t>(out.stage_actors) * c_.costs.tensor_parallel;
  std::int64_t batch = static_cast<std::int64_t>(m.microbatch) * c_.microbatches * d_;
  out.tokens_per_step = batch * m.sequence;
  out.flops_per_step = iteration_flops(m, batch, c_.costs.recompute);
  out.model_flops_per_step = iteration_flops(m, batch, false);
  out.parameters = parameter_count(m);
  out.peak_flops = c_.costs.device.peak(c_.costs.dtype);
  out.events = events_.ran();
  out.messages = messages_;
  out.p2p_bytes = p2p_bytes_ / static_cast<double>(c_.steps);
  out.sync_wait_s = sync_wait_ / static_cast<double>(c_.steps) / static_cast<double>(synced_steps_.size());
  const double t = c_.costs.tensor_parallel;
  for (int s = 0; s < p_; ++s) {
    position_result pr;
    pr.name = c_.stages[static_cast<std::size_t>(s)].name;
    for (auto [b, e] : c_.stages[static_cast<std::size_t>(s)].chunks)
      pr.layers += e - b;
    pr.parameters = params_[static_cast<std::size_t>(s)];
    for (int r = 0; r < d_; ++r) {
      pr.busy += busy_[static_cast<std::size_t>(actor(r, s))];
      pr.peak_in_flight = std::max(pr.peak_in_flight, peak_in_flight_[static_cast<std::size_t>(actor(r, s))]);
    }
    out.busy += pr.busy;
    // Mixed-precision Adam keeps 2 + 2 + 12 bytes a parameter (ZeRO, Rajbhandari
    // et al. 2020); activations: the peak in-flight microbatches' layers, or with
    // recomputation only each layer's input plus one layer's working set.
    // (SkipPipe's stage 0 holds its blocks in its first chunk, the head apart.)
    double per_chunk_layers =
      skip_ ? pr.layers : static_cast<double>(pr.layers) / static_cast<double>(costs_[0].size());
    double acts = c_.costs.recompute
                    ? pr.peak_in_flight * per_chunk_layers * 2.0 * m.microbatch * m.sequence * m.hidden / t +
                        layer_activation_bytes(m, c_.costs.tensor_parallel)
                    : pr.peak_in_flight * per_chunk_layers * layer_activation_bytes(m, c_.costs.tensor_parallel);
    pr.memory_bytes = 16.0 * pr.parameters / t + acts;
    out.positions.push_back(std::move(pr));
  }
  for (int a = 0; a < static_cast<int>(stages_.size()); ++a)
    if (stages_[static_cast<std::size_t>(a)])
      out.forwards[stage(a).config().name] = forwards_[static_cast<std::size_t>(a)];
  if (outer_)
    outer_->report(out);
  if (ring_)
    ring_->report(out);
  out.bubble_fraction = out.makespan > 0 ? 1.0 - out.busy / (out.stage_actors * out.makespan) : 0.0;
  out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall).count();
  return out;
}

} // namespace detail

using detail::cluster;

double cluster_result::mfu() const {
  double denominator = iteration_s * static_cast<double>(devices) * peak_flops;
  return denominator > 0 ? model_flops_per_step / denominator : 0.0;
}

cluster_config equal_stage_cluster(int stages, int replicas, int microbatches, int steps) {
  cluster_config c;
  c.model = {2 * stages, 256, 4, 128, 256, 1};
  if (auto d = device_preset("a100_80gb"))
    c.costs.device = *d;
  c.costs.network = {8, {}, {}};
  c.costs.count_head = false;
  c.replicas = replicas;
  c.microbatches = microbatches;
  c.steps = steps;
  for (int s = 0; s < stages; ++s)
    c.stages.push_back({0, fmt::format("s{}", s), {{2 * s, 2 * s + 2}}});
  return c;
}

expected<cluster_result> simulate_cluster(const cluster_config& c) {
  if (c.stages.empty() || c.replicas < 1 || c.microbatches < 1 || c.steps < 1)
    return make_sched_error(fmt::format("simulate: stages ({}), replicas ({}), microbatches ({}) and steps ({}) must "
                                        "be at least 1",
                                        c.stages.size(), c.replicas, c.microbatches, c.steps));
  if (c.costs.tensor_parallel < 1 || c.costs.device.peak(c.costs.dtype) <= 0 || c.costs.device.memory_bandwidth <= 0)
    return make_sched_error("simulate: tensor_parallel must be at least 1 and the device's peak and memory "
                            "bandwidth positive");
  const auto slots = static_cast<std::size_t>(c.replicas) * c.stages.size();
  auto square = [&](const auto& row) { return row.size() == slots; };
  if (c.skip.present && (c.route != "own" || c.skip.links.size() != slots ||
                         !std::all_of(c.skip.links.begin(), c.skip.links.end(), square)))
    return make_sched_error(fmt::format("simulate: SkipPipe's nodes need route own and {} x {} links (a slot "
                                        "per stage actor)",
                                        slots, slots));
  if (!c.nodes.empty() && c.nodes.size() != slots)
    return make_sched_error(fmt::format("simulate: {} nodes given for {} stage actors", c.nodes.size(), slots));
  if (c.outer.present && (c.skip.present || c.route != "own" || c.outer.group < 1 || c.replicas % c.outer.group != 0))
    return make_sched_error(fmt::format("simulate: local_update needs route own, no skip, and replica groups of "
                                        "equal size ({} replicas in groups of {})",
                                        c.replicas, c.outer.group));
  if (c.post_validate && c.ring.zero > 0)
    return make_sched_error("simulate: post_validate rolls a stage's optimizer step back, and ZeRO's shards keep "
                            "nothing to roll back to");
  if (c.route != "own" && c.route != "least_loaded")
    return make_sched_error(fmt::format("simulate: unknown route '{}' (known: own, least_loaded)", c.route));
  const auto v = c.stages.front().chunks.size();
  if (c.route == "least_loaded" && v != 1)
    return make_sched_error("simulate: least_loaded routes stages of one chunk each (no interleaving)");
  for (const auto& s : c.stages)
    if (s.chunks.size() != v && !c.skip.present)
      return make_sched_error(fmt::format("simulate: every stage needs the same number of chunks ({} has {}, {} has "
                                          "{})",
                                          c.stages.front().name, v, s.name, s.chunks.size()));
  return cluster{c}.run();
}

} // namespace troupe::sched
