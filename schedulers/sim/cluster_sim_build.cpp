// The cluster driver's set-up: every replica's router, stage cores, links and
// rings from the cluster_config, before the first event runs.
#include "schedulers/sim/cluster_sim_state.hpp"

namespace troupe::sched::detail {

expected<void> cluster::build() {
  const auto& m = c_.model;
  message_bytes_ = c_.activation_bytes * m.microbatch * m.sequence * m.hidden;
  const int n = d_ * (p_ + 1);
  stages_.resize(static_cast<std::size_t>(n));
  dirty_.assign((static_cast<std::size_t>(n) + 63) / 64, 0);
  last_route_.assign(static_cast<std::size_t>(n), -1);
  busy_.assign(static_cast<std::size_t>(n), 0);
  slowdown_.assign(static_cast<std::size_t>(n), 1.0);
  forwards_.assign(static_cast<std::size_t>(n), 0);
  peak_in_flight_.assign(static_cast<std::size_t>(n), 0);
  const auto groups = static_cast<std::size_t>(d_ / group_);
  joined_.assign(groups, 0);
  sync_since_.assign(static_cast<std::size_t>(n), 0.0);
  passes_step_.assign(static_cast<std::size_t>(n), -1);
  weight_passes_.resize(static_cast<std::size_t>(n));
  synced_steps_.assign(groups, 0);
  last_complete_.assign(groups, 0.0);
  updating_.assign(static_cast<std::size_t>(n), 0);
  after_update_.resize(static_cast<std::size_t>(n));
  if (c_.costs.device.cores > 0) {
    host_.assign(static_cast<std::size_t>(n), 0);
    for (int a = 0; a < n; ++a) {
      auto [it, fresh] = host_of_node_.try_emplace(node_of(a), hosts_.size());
      if (fresh)
        hosts_.emplace_back();
      host_[static_cast<std::size_t>(a)] = it->second;
    }
  }
  for (int s = 0; s < p_; ++s) {
    std::vector<chunk_costs> plain, head;
    int layers = 0;
    for (auto [b, e] : c_.stages[static_cast<std::size_t>(s)].chunks) {
      plain.push_back(costs_of(m, c_.costs, e - b, false, b == 0));
      head.push_back(costs_of(m, c_.costs, e - b, true, b == 0));
      layers += e - b;
    }
    costs_.push_back(std::move(plain));
    head_costs_.push_back(std::move(head));
    bool embedding = std::any_of(c_.stages[static_cast<std::size_t>(s)].chunks.begin(),
                                 c_.stages[static_cast<std::size_t>(s)].chunks.end(),
                                 [&](auto ch) { return ch.first == 0 || ch.second == m.layers; });
    params_.push_back(stage_parameters(m, layers, embedding));
    optimizer_.push_back(params_.back() / c_.costs.tensor_parallel * c_.costs.device.optimizer_per_param);
  }
  if (group_ > 1 && !skip_) {
    ring_sim::hooks rh{helpers(true), {}, {}};
    rh.synced = [this](int r, int s, std::int64_t step) { ring_back(actor(r, s), step); };
    rh.updated = [this](int r, int s, std::int64_t) { update_done(actor(r, s)); };
    try {
      ring_ = std::make_unique<ring_sim>(c_, group_, params_, std::move(rh));
    } catch (const std::exception& e) {
      return make_sched_error(fmt::format("data_parallel: {}", e.what()));
    }
    for (int a = 0; a < n; ++a)
      if (position_of(a) >= 0)
        weight_passes_[static_cast<std::size_t>(a)].assign(
          c_.stages[static_cast<std::size_t>(position_of(a))].chunks.size(), 0);
  }
  if (c_.outer.present) {
    outer_sim::hooks oh{helpers(false), {}};
    oh.exchanged = [this](int r, int s) {
      stage(actor(r, s)).on_exchanged();
      touch(actor(r, s));
    };
    try {
      outer_ = std::make_unique<outer_sim>(c_, params_, std::move(oh));
    } catch (const std::exception& e) {
      return make_sched_error(fmt::format("local_update: {}", e.what()));
    }
  }
  if (auto ok = build_routers(); !ok)
    return ok;

  for (int r = 0; r < d_; ++r) {
    const route_t chain = routers_[skip_ ? 0 : static_cast<std::size_t>(r)]->eval_route();
    const int router = skip_ ? 0 : r * (p_ + 1);
    for (int s = 0; s < p_; ++s) {
      const int me = actor(r, s);
      const int v = static_cast<int>(c_.stages[static_cast<std::size_t>(s)].chunks.size());
      policy_params pp;
      pp.rank = s, pp.ranks = p_, pp.chunks = v, pp.options = c_.policy_options, pp.paths = skip_;
      if (auto own = c_.stage_policy_options.find(s); own != c_.stage_policy_options.end())
        for (const auto& [k, val] : own->second) // a position's own options win, as a stage's `policy:` does
          pp.options[k] = val;
      auto policy = make_policy(c_.policy, pp);
      if (!policy)
        return policy.error();
      stage_core_config cc;
      cc.name = fmt::format("r{}s{}", r, s);
      cc.actor = me, cc.rank = s, cc.ranks = p_, cc.chunks = v, cc.router = router, cc.steps = c_.steps;
      cc.reduce_norm = c_.reduce_norm;
      cc.post_validate = c_.post_validate;
      cc.input_credits = chain_input_credits(chain, me, router, p_); // as a graph without `credits:`
      if (skip_) {
        // A path may come from any node: every stage actor may send here, the router to stage 0.
        cc.input_credits.clear();
        for (int q = 0; q < d_ * (p_ + 1); ++q)
          if (position_of(q) >= 0 && q != me)
            cc.input_credits[q] = 0;
        if (s == 0)
          cc.input_credits[router] = 0;
      }
      if (least_loaded_) {
        // Any replica of the previous position may send here, and this one to any of the next.
        for (int q = 0; q < d_; ++q) {
          if (s > 0)
            cc.input_credits[actor(q, s - 1)] = 0;
          if (s + 1 < p_)
            cc.next_replicas.push_back(actor(q, s + 1));
        }
        cc.hop_reporters = s > 0 ? d_ : 0;
        cc.targets_travel = true;
      }
      if (auto f = c_.slowdown.find(cc.name); f != c_.slowdown.end())
        slowdown_[static_cast<std::size_t>(me)] = f->second;
      stage_core_hooks hk;
      hk.clock = [this] { return now_; };
      // Hooks capture at most 16 bytes (std::function keeps that in place) and
      // messages carry an interned route, not a copy: no allocation per message.
      hk.forward = [this, me](int to, const msg_meta& msg) {
        if (to == me)
          return;
        p2p_bytes_ += message_bytes_;
        deliver(me, to, message_bytes_,
                [this, to, step = msg.step, mb = msg.microbatch, hop = msg.hop, id = intern(me, msg.route)] {
                  admitted(to, step,
                           [this, to, id, step, mb, hop] { stage(to).on_activation(meta(id, step, mb, hop)); });
                });
      };
      hk.backward = [this, me](int to, const msg_meta& msg) {
        if (to == me)
          return;
        p2p_bytes_ += message_bytes_;
        deliver(me, to, message_bytes_,
                [this, to, step = msg.step, mb = msg.microbatch, hop = msg.hop, id = intern(me, msg.route)] {
                  admitted(to, step, [this, to, id, step, mb, hop] { stage(to).on_gradient(meta(id, step, mb, hop)); });
                });
      };
      hk.credit = [this, me](int to, int count) {
        deliver(me, to, 0, [this, to, me, count, load = stage(me).load()] {
          if (position_of(to) < 0)
            routers_[static_cast<std::size_t>(replica_of(to))]->grant(me, count);
          else
            stage(to).on_credit(me, count, load);
        });
      };
      hk.hops = [this, me](int to, std::int64_t step, int count) {
        deliver(me, to, 0, [this, to, me, step, count] { stage(to).on_hops(step, me, count); });
      };
      hk.norm = [this, me](int reducer, std::int64_t step, double sq) {
        deliver(me, reducer, 0, [this, reducer, step, sq, me] { stage(reducer).on_norm(step, sq, me); });
      };
      hk.clip = [this, me](int to, std::int64_t step, double total) {
        deliver(me, to, 0, [this, to, step, total] { stage(to).on_clip(step, total); });
      };
      if (ring_) // the step waits for its buckets still out on the ring
        hk.sync = [this, me, r, s](std::int64_t step) {
          sync_since_[static_cast<std::size_t>(me)] = now_;
          if (!ring_->flush(r, s, step))
            return false;
          synced_here(me, step);
          return true;
        };
      else
        hk.gradients_complete = [this, me](std::int64_t) {
          sync_since_[static_cast<std::size_t>(me)] = now_;
          boundary_done(me);
          return 0.0;
        };
      // The optimizer step: the stage takes no other work until it is done.
      // With ZeRO its shard steps its slice and all-gathers the parameters back.
      if (ring_ && c_.ring.zero > 0)
        hk.update = [this, me, r, s](std::int64_t step, double) {
          updating_[static_cast<std::size_t>(me)] = 1;
          ring_->update(r, s, step);
        };
      else if (optimizer_[static_cast<std::size_t>(s)] > 0) {
        auto step = [this, me, s] {
          updating_[static_cast<std::size_t>(me)] = 1;
          busy_[static_cast<std::size_t>(me)] += optimizer_[static_cast<std::size_t>(s)];
          compute(me, optimizer_[static_cast<std::size_t>(s)], [this, me] { end_update(me); });
        };
        if (c_.post_validate) // stepped before the total; its check passes (no gradients here to fail it)
          hk.update_early = [step](std::int64_t) { step(); };
        else
          hk.update = [step](std::int64_t, double) { step(); };
      }
      // Local-update training: the method's events after each update, its exchanges once the update has ended.
      if (outer_)
        hk.exchange = [this, me, r, s](std::int64_t steps_done) {
          bool go_on = outer_->due(r, s, steps_done);
          after_update(me, [this, r, s] { outer_->run(r, s); });
          return go_on;
        };
      stages_[static_cast<std::size_t>(me)] =
        std::make_unique<stage_core>(std::move(cc), std::move(*policy), std::move(hk));
    }
  }
  return {};
}

// Each replica's router on its own chain (by the routing policy); with skip one
// router for every node, its microbatches numbered across replicas.
expected<void> cluster::build_routers() {
  const auto& m = c_.model;
  for (int r = 0; r < (skip_ ? 1 : d_); ++r) {
    routing_params rp;
    rp.layers = m.layers;
    rp.paths = c_.paths;
    router_config rc;
    for (int q = skip_ ? 0 : r; q < (skip_ ? d_ : r + 1); ++q)
      for (int s = 0; s < p_; ++s) {
        auto st = c_.stages[static_cast<std::size_t>(s)];
        st.actor = actor(q, s);
        if (skip_)
          st.name = fmt::format("r{}s{}", q, s), st.replica = q;
        rp.stages.push_back(std::move(st));
        rc.stage_actors.push_back(actor(q, s));
      }
    if (skip_)
      rp.replicas = d_, rp.options["path_length"] = std::to_string(c_.skip.path_length);
    auto routing = skip_ ? make_skippipe_routing(rp) : make_routing(c_.routing, rp);
    if (!routing)
      return routing.error();
    rc.microbatches = c_.microbatches;
    rc.steps = c_.steps;
    rc.tokens_per_microbatch = static_cast<std::int64_t>(m.microbatch) * m.sequence;
    if (least_loaded_) {
      for (int s = 1; s < p_; ++s)
        rc.hops_from_messages.push_back(actor(r, s));
      rc.targets_with_tokens = true;
    }
    if (skip_)
      rc.replicas = d_, rc.across_replicas = true;
    routers_.push_back(std::make_unique<router_core>(rc, std::move(*routing)));
  }
  return {};
}

helper_hooks cluster::helpers(bool busy) {
  helper_hooks h;
  h.now = [this] { return now_; };
  h.post = [this](double at, event_fn f) { events_.post(at, std::move(f)); };
  h.compute = [this, busy](int r, int s, double work, event_fn done) {
    if (busy) // the shard's step is the stage's optimizer step
      busy_[static_cast<std::size_t>(actor(r, s))] += work;
    compute(actor(r, s), work, std::move(done));
  };
  h.network = [this](int s, int from, int to) { return link(actor(from, s), actor(to, s)); };
  return h;
}

void cluster::synced_here(int a, std::int64_t step) {
  if (traced(replica_of(a)))
    c_.on_span({replica_of(a), position_of(a), 'S', step, -1, sync_since_[static_cast<std::size_t>(a)], now_});
  if (c_.ring.zero == 0) // with ZeRO the boundary ends with the gather
    boundary_done(a);
}

void cluster::ring_back(int a, std::int64_t step) {
  synced_here(a, step);
  stage(a).on_synced(step);
  touch(a);
}

void cluster::end_update(int a) {
  updating_[static_cast<std::size_t>(a)] = 0;
  for (auto& f : std::exchange(after_update_[static_cast<std::size_t>(a)], {}))
    f();
  touch(a);
}

void cluster::update_done(int a) {
  end_update(a);
  boundary_done(a);
}

} // namespace troupe::sched::detail
