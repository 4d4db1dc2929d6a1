// The coordinator's elastic side (#26): a lost node whose replicas leave a
// local-update run, and its comeback when launch starts it again (plan,
// reconnected channels, the loader's rejoin decision), one node at a time.
#include <algorithm>

#include <fmt/format.h>

#include "actors/bucket_direct.hpp"
#include "actors/builtin.hpp"
#include "actors/boundary/step_boundary.hpp"
#include "deploy/cluster/coordinator_state.hpp"
#include "runtime/actor/errors.hpp"
#include "schedulers/sync/sync_policy.hpp"

namespace troupe::cluster::detail {

void coordinator::lose_node(int i, const std::string& why) {
  auto& n = nodes_[static_cast<std::size_t>(i)];
  if (comeback_ && comeback_->node == i && !n.restarted) { // the process started again is lost too
    fmt::print(stderr, "troupe launch: lost {} again on its way back: {}\n", describe(i), why);
    std::fflush(stderr);
    n.gone = true, n.joining = false;
    auto reps = comeback_->replicas;
    comeback_.reset(), restart_at_.reset();
    for (int r : reps) // the loader may have dealt to it again, the sync actors taken it back: out again
      for (auto& other : nodes_)
        if (other.conn && !other.gone)
          other.conn->send(encode(replica_lost_msg{r}));
    if (may_restart()) {
      comeback_ = comeback{i, reps, {}, {}};
      restart_at_ = clock_type::now() + std::chrono::duration_cast<clock_type::duration>(
                                          std::chrono::duration<double>(g_.cluster.restart_delay));
    } else {
      next_comeback();
    }
    return;
  }
  if (comeback_ && comeback_->reconnecting.erase(i)) { // its answer will not come: the comeback goes on
    n.gone = true;
    on_reconnected(-1, comeback_->node);
  }
  if (lost_nodes_.count(i))
    return;
  int replicas = std::max(g_.data_parallel.replicas, 1);
  // Its replicas, if it ran only replica stages and the actors beside them.
  std::set<int> reps;
  // Elastic DDP's all-reduce peers (ZeRO's optimizer shards) sum each bucket over the replicas left
  // (graph_spec::elastic_ddp).
  bool ddp = g_.elastic_ddp();
  bool elastic = ddp || g_.elastic_local_update();
  auto replica_of = [&](const actor_spec& a) { // a sync actor's is its stage's
    const auto* stage = a.role.holds_layers ? &a : g_.served_stage(a);
    return stage ? stage->replica : -1;
  };
  auto of_a_replica = [&](const actor_spec& a) { // a replica's stages and the actors beside them
    return a.role.holds_layers || a.type == (ddp ? every_step_sync_type(g_) : "outer_sync");
  };
  for (const auto& name : n.actors) {
    const auto* a = g_.find_actor(name);
    elastic = elastic && a && of_a_replica(*a) && replica_of(*a) >= 0;
    if (a)
      reps.insert(replica_of(*a));
  }
  std::set<int> gone = lost_replicas_;
  gone.insert(reps.begin(), reps.end());
  if (!elastic || reps.empty() || static_cast<int>(gone.size()) >= replicas) {
    fail(fmt::format("lost {}: {}", describe(i), why), true);
    return;
  }
  if (ddp && g_.data_parallel.zero > 0) // ZeRO's shards mirror each slice once: both holders gone loses its moments
    for (int k = 0; k < replicas; ++k)
      if (auto h = slice_holders(k, replicas); gone.count(h[0]) && gone.count(h[1])) {
        fail(fmt::format("lost {}: {}; slice {} of {} of the optimizer state is lost: replicas {} and {}, "
                         "which held it, are both gone",
                         describe(i), why, k, replicas, h[0], h[1]),
             true);
        return;
      }
  // Every actor of those replicas leaves (some may run on other nodes, stranded).
  std::vector<std::string> leaving;
  for (const auto& a : g_.actors)
    if (of_a_replica(a) && reps.count(replica_of(a))) {
      if (done_.insert(a.name).second)
        left_actors_[replica_of(a)].push_back(a.name);
      leaving.push_back(a.name);
    }
  std::vector<int> left;
  for (int r = 0; r < replicas; ++r)
    if (!gone.count(r))
      left.push_back(r);
  // The loader deals the lost replicas' microbatches to the ones left, or stops
  // making them: then each step trains on fewer sequences.
  const auto per_replica = static_cast<long>(g_.data.batch) * g_.pipeline.microbatches;
  fmt::print(stderr,
             "troupe launch: lost {}: {}; replica {} leaves the run ({}); {} training goes on with "
             "replica{} {}, {}\n",
             describe(i), why, fmt::join(reps, ", "), fmt::join(leaving, ", "),
             !ddp                        ? std::string{"local-update"}
             : g_.data_parallel.zero > 0 ? fmt::format("ZeRO-{}", g_.data_parallel.zero)
                                         : std::string{"DDP"},
             left.size() == 1 ? "" : "s", fmt::join(left, ", "),
             g_.keeps_batch_on_loss()
               ? fmt::format("which take{} its microbatches: each step keeps its batch of {} sequences",
                             left.size() == 1 ? "s" : "", per_replica * replicas)
               : fmt::format("each step's batch shrinking from {} to {} sequences",
                             per_replica * (replicas - static_cast<int>(lost_replicas_.size())),
                             per_replica * static_cast<long>(left.size())));
  std::fflush(stderr);
  lost_nodes_.insert(i);
  n.gone = true;
  for (int r : reps)
    if (lost_replicas_.insert(r).second)
      for (auto& other : nodes_)
        if (other.conn && !other.gone)
          other.conn->send(encode(replica_lost_msg{r}));
  // A node that lost its channel to this one said so first: that is this loss.
  std::erase_if(deferred_, [&](const auto& d) {
    return d.first.find(fmt::format("data connection to node {}:", i)) != std::string::npos;
  });
  auto due = clock_type::now() +
             std::chrono::duration_cast<clock_type::duration>(std::chrono::duration<double>(g_.cluster.restart_delay));
  if (comeback_ && may_restart()) { // one comeback at a time: this one waits for it
    fmt::print(stderr, "troupe launch: node {} is started again once node {} is back\n", i, comeback_->node);
    std::fflush(stderr);
    queued_.push_back({i, reps, due});
  } else if (!comeback_ && may_restart()) {
    comeback_ = comeback{i, reps, {}, {}};
    restart_at_ = due;
  }
}

void coordinator::next_comeback() {
  while (!comeback_ && !queued_.empty()) {
    auto q = std::move(queued_.front());
    queued_.pop_front();
    if (!lost_nodes_.count(q.node) || !may_restart())
      continue;
    comeback_ = comeback{q.node, std::move(q.replicas), {}, {}};
    restart_at_ = std::max(q.due, clock_type::now());
  }
}

bool coordinator::may_restart() const {
  const auto* method = sched::find_sync_method(g_.local_update.algorithm);
  bool rejoins = g_.elastic_ddp() || (method && method->rejoins);
  if (!launched_ || !rejoins || node_restarts_ >= g_.cluster.restart || phase_ != phase::running)
    return false;
  // Tied embeddings on two stages (the head's copy follows the embedding's outer
  // steps) have no rejoin test: the replica stays out, as without cluster.restart.
  for (const auto& a : g_.actors)
    if (a.role.holds_layers && tied_twin_of(g_, a) >= 0 && tied_twin_of(g_, a) != g_.index_of(a.name)) {
      fmt::print(stderr, "troupe launch: tied embeddings on two stages do not rejoin yet: the lost node is not "
                         "started again\n");
      std::fflush(stderr);
      return false;
    }
  return true;
}

void coordinator::restart_node(int i) {
  auto& n = nodes_[static_cast<std::size_t>(i)];
  ++node_restarts_;
  if (auto err = launched_->restart(i)) {
    fmt::print(stderr, "troupe launch: cannot start node {} again: {}; the run goes on without it\n", i,
               error_message(err));
    std::fflush(stderr);
    comeback_.reset();
    next_comeback();
    return;
  }
  fmt::print(stderr, "troupe launch: starting node {} again (restart {} of {})\n", i, node_restarts_,
             g_.cluster.restart);
  std::fflush(stderr);
  n.conn = nullptr, n.restarted = true;
}

void coordinator::on_comeback_ready(int i) {
  if (!comeback_ || comeback_->node != i)
    throw malformed_input(fmt::format("node {} got ready while no comeback of it was under way", i));
  auto& n = nodes_[static_cast<std::size_t>(i)];
  n.joining = false;
  n.conn->send(encode(control_kind::start)); // its actors wait for their state
  node_back_msg back{i, plan_.nodes[static_cast<std::size_t>(i)]};
  for (std::size_t j = 0; j < nodes_.size(); ++j)
    if (static_cast<int>(j) != i && nodes_[j].conn && !nodes_[j].gone) {
      comeback_->reconnecting.insert(static_cast<int>(j));
      nodes_[j].conn->send(encode(back));
    }
  on_reconnected(-1, i); // none to wait for: go on
}

void coordinator::on_reconnected(int from, int node) {
  if (!comeback_ || comeback_->node != node)
    return; // it was lost again meanwhile
  comeback_->reconnecting.erase(from);
  if (!comeback_->reconnecting.empty() || !comeback_->undecided.empty())
    return;
  comeback_->undecided = comeback_->replicas; // every channel to it is new: the loader decides
  for (int r : comeback_->replicas)
    for (auto& other : nodes_)
      if (other.conn && !other.gone && &other != &nodes_[static_cast<std::size_t>(node)])
        other.conn->send(encode(replica_back_msg{r}));
}

void coordinator::on_rejoining(const rejoining_msg& m) {
  if (!comeback_ || !comeback_->undecided.erase(m.replica)) { // its node was lost again meanwhile
    fmt::print(stderr,
               "troupe launch: the loader placed replica {} at step {}, but its node was lost again; it "
               "stays out\n",
               m.replica, m.step + 1);
    std::fflush(stderr);
    return;
  }
  const int node = comeback_->node;
  auto& n = nodes_[static_cast<std::size_t>(node)];
  const auto per_replica = static_cast<long>(g_.data.batch) * g_.pipeline.microbatches;
  const int replicas = std::max(g_.data_parallel.replicas, 1);
  if (m.step < 0) {
    fmt::print(stderr, "troupe launch: replica {} cannot rejoin: {}; node {} stops, the run goes on without it\n",
               m.replica, m.why, node);
    std::fflush(stderr);
    n.gone = true; // its exit is no loss
    n.conn->send(encode(control_kind::stop));
  } else {
    auto before = per_replica * (replicas - static_cast<int>(lost_replicas_.size()));
    lost_replicas_.erase(m.replica);
    for (const auto& name : left_actors_[m.replica]) // they report done at the end again
      done_.erase(name);
    left_actors_.erase(m.replica);
    fmt::print(stderr,
               "troupe launch: replica {} rejoins at step {} with replica {}'s parameters{} (no checkpoint read); {}\n",
               m.replica, m.step + 1, m.donor,
               g_.local_update.present     ? ", optimizer state and outer state"
               : g_.data_parallel.zero > 0 ? " and its optimizer shards' slices from the replicas that mirror them"
                                           : ", optimizer state",
               g_.keeps_batch_on_loss()
                 ? fmt::format("it takes its own microbatches of each step's {} sequences back", per_replica * replicas)
                 : fmt::format("each step's batch grows from {} to {} sequences", before,
                               per_replica * (replicas - static_cast<int>(lost_replicas_.size()))));
    std::fflush(stderr);
  }
  if (comeback_->undecided.empty()) {
    if (m.step >= 0)
      lost_nodes_.erase(node);
    comeback_.reset();
    next_comeback();
  }
}

} // namespace troupe::cluster::detail
