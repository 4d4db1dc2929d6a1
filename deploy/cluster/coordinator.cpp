// The coordinator (deploy/cluster/coordinator.hpp). Transport callbacks push events
// into one queue; a single loop owns all state and walks the run protocol
// (deploy/cluster/cluster_protocol.hpp): join, plan, ready, start, done, stop.
#include "deploy/cluster/coordinator.hpp"

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "actors/boundary/step_boundary.hpp"
#include "deploy/cluster/cluster_protocol.hpp"
#include "deploy/cluster/launcher.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/trace/trace.hpp"
#include "schedulers/sync/sync_policy.hpp"

namespace troupe::cluster {

namespace {

using clock_type = std::chrono::steady_clock;

/// What a connection callback saw: a frame, or the end of the connection.
struct event {
  net::connection* conn = nullptr;
  bool closed = false;
  net::frame f;
  std::string why;
  std::int64_t at_ns = 0; ///< steady clock when it arrived (clock answers are timed by it, not by the queue)
};

class event_queue {
public:
  void push(event e) {
    {
      std::lock_guard lock{mtx_};
      q_.push_back(std::move(e));
    }
    cv_.notify_one();
  }
  /// The next event, or nothing after `wait`.
  std::optional<event> pop(std::chrono::milliseconds wait) {
    std::unique_lock lock{mtx_};
    if (!cv_.wait_for(lock, wait, [&] { return !q_.empty(); }))
      return std::nullopt;
    auto e = std::move(q_.front());
    q_.pop_front();
    return e;
  }

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  std::deque<event> q_;
};

struct node_state {
  net::connection* conn = nullptr;
  hello_msg hello;
  bool ready = false;
  bool gone = false;
  bool silent = false; ///< lost by heartbeat: alive but unresponsive (stopped, hung)
  clock_type::time_point last_heard;
  std::vector<std::string> actors; ///< what the graph places there
  bool same_clock = false;         ///< shares this process's steady clock (same kernel)
  clock_estimate clock;            ///< else its offset, from clock probes
  bool restarted = false;          ///< lost, and started again: its hello is awaited (#26)
  bool joining = false;            ///< back in the run: its replicas wait for a live replica's state
};

/// A lost node that runs again, on its way back into an elastic run (#26).
struct comeback {
  int node = -1;
  std::set<int> replicas;     ///< what it runs
  std::set<int> reconnecting; ///< nodes still reconnecting their channels to it
  std::set<int> undecided;    ///< replicas the loader has not placed yet
};

/// A lost node to start again once the comeback under way is over.
struct queued_comeback {
  int node = -1;
  std::set<int> replicas;
  std::chrono::steady_clock::time_point due; ///< its loss + cluster.restart_delay
};

enum class phase { joining, planning, running, over };

class coordinator {
public:
  coordinator(const graph_spec& g, const coordinator_options& o)
      : g_(g), o_(o), nodes_(static_cast<std::size_t>(g.cluster.nodes)), checkpoints_(g) {
    for (const auto& a : g.actors)
      nodes_[static_cast<std::size_t>(g.node_of(a))].actors.push_back(a.name);
  }
  caf::expected<run_result> run();

private:
  std::string describe(int i) const {
    const auto& n = nodes_[static_cast<std::size_t>(i)];
    auto who = n.conn ? fmt::format("node {} ({}, pid {})", i, n.hello.host, n.hello.pid) : fmt::format("node {}", i);
    std::vector<std::string> actors; // with their replicas: which leave with the node
    for (const auto& name : n.actors) {
      const auto* a = g_.find_actor(name);
      bool replicated = a && a->role.holds_layers && g_.data_parallel.replicas > 1;
      actors.push_back(replicated ? fmt::format("{} (replica {})", name, a->replica) : name);
    }
    return fmt::format("{} running {}", who, fmt::join(actors, ", "));
  }
  int node_of(net::connection* c) const {
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i].conn == c && !nodes_[i].gone)
        return static_cast<int>(i);
    return -1;
  }
  void broadcast(control_kind k) {
    for (auto& n : nodes_)
      if (n.conn && !n.gone)
        n.conn->send(encode(k));
  }
  void on_frame(event& e);
  void on_hello(event& e);
  /// A node's batch of spans, onto the dashboard (throws malformed_input).
  void on_spans(int i, const net::frame& f);
  void on_clock(int i, const event& e);
  /// Sends a clock probe to a streaming node on another machine.
  void probe_clock(node_state& n) {
    if (o_.dashboard && !n.same_clock)
      n.conn->send(encode(clock_msg{steady_now_ns(), 0}));
  }
  void check_liveness();
  /// Node i is gone (`why`): local-update training goes on without the
  /// replicas it ran, when it ran nothing else and one is left; otherwise the run fails.
  void lose_node(int i, const std::string& why);
  std::set<int> lost_nodes_, lost_replicas_;
  std::map<int, std::vector<std::string>> left_actors_; ///< by lost replica: its actors, counted done meanwhile
  /// Whether a lost elastic node is started again (cluster.restart; a method that takes replicas back).
  bool may_restart() const;
  void restart_node(int i);
  /// The restarted node's frames: its hello, ready, and the others' answers.
  void on_comeback_ready(int i);
  void on_reconnected(int from, int node);
  void on_rejoining(const rejoining_msg& m);
  /// Starts the next queued comeback whose node is still lost and may restart.
  void next_comeback();
  std::optional<comeback> comeback_;                 ///< one at a time
  std::deque<queued_comeback> queued_;               ///< lost meanwhile: in the order lost
  std::optional<clock_type::time_point> restart_at_; ///< when the comeback's node is started (cluster.restart_delay)
  int node_restarts_ = 0;
  plan_msg plan_;
  /// Records the run's first failure and says so at once (the run then stops);
  /// `lost`: a node was lost (a launch may restart the run, cluster.restart).
  void fail(std::string why, bool lost = false) {
    if (!failure_.empty())
      return;
    fmt::print(stderr, "troupe launch: {}; stopping every node\n", why);
    std::fflush(stderr);
    failure_ = std::move(why);
    failure_lost_node_ = lost;
  }
  void shut_down();

  const graph_spec& g_;
  coordinator_options o_;
  std::vector<node_state> nodes_;
  event_queue events_;
  std::unique_ptr<net::server> server_;
  std::unique_ptr<launched_nodes> launched_;
  phase phase_ = phase::joining;
  std::string failure_;
  bool failure_lost_node_ = false;
  std::vector<std::pair<std::string, clock_type::time_point>> deferred_; ///< nodes' reports, held back
  run_result result_;
  run_checkpoints checkpoints_; ///< written by the nodes' actors, completed here (a shared file system)
  std::set<std::string> done_;
  clock_type::time_point started_, last_done_;
  std::string clock_domain_ = clock_domain();
};

void coordinator::on_hello(event& e) {
  auto decoded = decode<hello_msg>(e.f);
  if (!decoded) {
    fmt::print(stderr, "troupe launch: rejected a hello from {}: {}\n", e.conn->peer(), error_message(decoded.error()));
    e.conn->close();
    return;
  }
  auto& h = *decoded;
  const bool known = h.node >= 0 && h.node < static_cast<int>(nodes_.size());
  const bool back = known && phase_ == phase::running && nodes_[static_cast<std::size_t>(h.node)].restarted &&
                    comeback_ && comeback_->node == h.node;
  if (!known || (phase_ == phase::joining ? nodes_[static_cast<std::size_t>(h.node)].conn != nullptr : !back)) {
    fmt::print(stderr, "troupe launch: refused node {} from {}: {}\n", h.node, e.conn->peer(),
               !known                     ? "no such node"
               : phase_ == phase::joining ? "that node already joined"
                                          : "the run is under way and that node is not one started again");
    e.conn->close();
    return;
  }
  auto& n = nodes_[static_cast<std::size_t>(h.node)];
  n.conn = e.conn, n.hello = std::move(h), n.last_heard = clock_type::now();
  n.same_clock = !n.hello.clock_domain.empty() && n.hello.clock_domain == clock_domain_;
  probe_clock(n);
  if (!back)
    return;
  // A lost node started again (#26): its part of the graph, its replicas to wait for a live one's state.
  n.restarted = false, n.gone = false, n.silent = false, n.ready = false, n.joining = true;
  plan_.nodes[static_cast<std::size_t>(n.hello.node)] = {n.hello.data_host, n.hello.data_port};
  auto plan = plan_;
  plan.joining = true;
  for (std::size_t j = 0; j < nodes_.size(); ++j) // down now: no address (node_back gives it one if it comes back)
    if (j != static_cast<std::size_t>(n.hello.node) && (nodes_[j].gone || nodes_[j].restarted || !nodes_[j].conn))
      plan.nodes[j] = node_address{};
  n.conn->send(encode(plan));
  for (int r : lost_replicas_) // the replicas still out, which its sync actors leave out too
    if (!comeback_ || !comeback_->replicas.count(r))
      n.conn->send(encode(replica_lost_msg{r}));
  fmt::print(stderr, "troupe launch: node {} ({}, pid {}) is back; replica{} {} will take a live replica's state\n",
             n.hello.node, n.hello.host, n.hello.pid, comeback_->replicas.size() == 1 ? "" : "s",
             fmt::join(comeback_->replicas, ", "));
  std::fflush(stderr);
}

void coordinator::on_spans(int i, const net::frame& f) {
  auto m = decode_or_throw<spans_msg>(f);
  auto& n = nodes_[static_cast<std::size_t>(i)];
  n.conn->send(encode(spans_ack_msg{m.seq}));
  if (!o_.dashboard)
    return;
  // Node steady clock -> this steady clock -> this trace clock.
  auto shift = (n.same_clock ? 0 : n.clock.offset_ns()) + trace_epoch_ns();
  for (auto& s : m.batch.spans)
    s.begin_ns -= shift, s.end_ns -= shift;
  for (auto& c : m.batch.counters)
    c.t_ns -= shift;
  o_.dashboard->ingest(i, std::move(m.batch));
}

void coordinator::on_clock(int i, const event& e) {
  auto& n = nodes_[static_cast<std::size_t>(i)];
  bool first = !n.clock.known();
  n.clock.add(decode_or_throw<clock_msg>(e.f), e.at_ns);
  if (!first)
    return;
  fmt::print("troupe launch: node {} ({}) has its own clock: {:+.3f} ms from this one, within {:.3f} ms\n", i,
             n.hello.host, static_cast<double>(n.clock.offset_ns()) * 1e-6,
             static_cast<double>(n.clock.error_ns()) * 1e-6);
  std::fflush(stdout);
}

void coordinator::on_frame(event& e) {
  auto kind = static_cast<control_kind>(e.f.kind);
  int i = node_of(e.conn);
  if (i < 0) {
    if (kind == control_kind::hello && (phase_ == phase::joining || phase_ == phase::running))
      on_hello(e);
    else {
      fmt::print(stderr, "troupe launch: rejected a frame from {}: it has not joined as a node\n", e.conn->peer());
      e.conn->close();
    }
    return;
  }
  auto& n = nodes_[static_cast<std::size_t>(i)];
  n.last_heard = clock_type::now();
  try {
    switch (kind) {
    case control_kind::heartbeat:
      probe_clock(n);
      break;
    case control_kind::spans:
      on_spans(i, e.f);
      break;
    case control_kind::clock:
      on_clock(i, e);
      break;
    case control_kind::ready:
      n.ready = true;
      if (n.joining)
        on_comeback_ready(i);
      break;
    case control_kind::reconnected:
      on_reconnected(i, decode_or_throw<reconnected_msg>(e.f).node);
      break;
    case control_kind::rejoining:
      on_rejoining(decode_or_throw<rejoining_msg>(e.f));
      break;
    case control_kind::done: {
      auto s = decode_or_throw<run_summary>(e.f);
      last_done_ = clock_type::now();
      done_.insert(s.actor);
      result_.summaries.push_back(std::move(s));
      break;
    }
    case control_kind::failed: {
      auto f = decode_or_throw<failure_msg>(e.f);
      bool lost_link = false; // a node's channel to a node already lost: that loss, handled
      for (int l : lost_nodes_)
        lost_link |= f.what.find(fmt::format("data connection to node {}:", l)) != std::string::npos;
      if (f.actor.rfind("node ", 0) == 0 && lost_link)
        break;
      auto why = f.actor.rfind("node ", 0) == 0
                   ? fmt::format("{} failed: {}", f.actor, f.what)
                   : fmt::format("{} failed: {}", describe_actor(g_, f.actor, f.step), f.what);
      // A node that lost its channel to another node usually reports it
      // before that node's own loss arrives: wait briefly, so the run's
      // error names the node that died rather than a neighbour.
      if (f.actor.rfind("node ", 0) == 0) // every node that lost its channel to it says so
        deferred_.emplace_back(std::move(why), clock_type::now() + std::chrono::milliseconds(1500));
      else
        fail(std::move(why));
      break;
    }
    case control_kind::checkpoint:
      if (auto err = checkpoints_.on_report(decode_or_throw<checkpoint_msg>(e.f), result_))
        fail(std::move(*err));
      break;
    default:
      throw malformed_input(fmt::format("unexpected control frame {}", e.f.kind));
    }
  } catch (const malformed_input& x) {
    fail(fmt::format("{} sent a malformed frame: {}", describe(i), x.what()));
  }
}

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
  const auto& lu = g_.local_update;
  int replicas = std::max(g_.data_parallel.replicas, 1);
  // Its replicas, if it ran only replica stages and their sync actors. Routes
  // across replicas (NoLoCo's) send every replica's microbatches through the others: not those.
  std::set<int> reps;
  // Replica groups sync every step inside: a group that loses a replica cannot go on.
  bool elastic =
    g_.cluster.elastic && lu.present && replicas > 1 && g_.sync_group_size() == 1 && !lu.routes_across_replicas;
  auto replica_of = [&](const actor_spec& a) { // a sync actor's is its stage's
    const auto* stage = a.role.holds_layers ? &a : g_.served_stage(a);
    return stage ? stage->replica : -1;
  };
  for (const auto& name : n.actors) {
    const auto* a = g_.find_actor(name);
    elastic = elastic && a && (a->role.holds_layers || a->type == "outer_sync") && replica_of(*a) >= 0;
    if (a)
      reps.insert(replica_of(*a));
  }
  std::set<int> gone = lost_replicas_;
  gone.insert(reps.begin(), reps.end());
  if (!elastic || reps.empty() || static_cast<int>(gone.size()) >= replicas) {
    fail(fmt::format("lost {}: {}", describe(i), why), true);
    return;
  }
  // Every actor of those replicas leaves (some may run on other nodes, stranded).
  std::vector<std::string> leaving;
  for (const auto& a : g_.actors)
    if ((a.role.holds_layers || a.type == "outer_sync") && reps.count(replica_of(a))) {
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
             "troupe launch: lost {}: {}; replica {} leaves the run ({}); local-update training goes on with "
             "replica{} {}, {}\n",
             describe(i), why, fmt::join(reps, ", "), fmt::join(leaving, ", "), left.size() == 1 ? "" : "s",
             fmt::join(left, ", "),
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
  if (!launched_ || !method || !method->rejoins || node_restarts_ >= g_.cluster.restart || phase_ != phase::running)
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
               "troupe launch: replica {} rejoins at step {} with replica {}'s parameters, optimizer state and outer "
               "state (no checkpoint read); {}\n",
               m.replica, m.step + 1, m.donor,
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

void coordinator::check_liveness() {
  auto now = clock_type::now();
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    auto& n = nodes_[i];
    if (n.conn && !n.gone && !n.silent && now - n.last_heard > std::chrono::duration<double>(heartbeat_timeout_s)) {
      n.silent = true;
      lose_node(static_cast<int>(i), fmt::format("no heartbeat for {:.0f} s", heartbeat_timeout_s));
    }
    if (launched_ && !n.gone)
      if (auto st = launched_->exit_status(static_cast<int>(i)); st && phase_ != phase::over)
        lose_node(static_cast<int>(i), fmt::format("its process exited with status {}", *st));
  }
}

void coordinator::shut_down() {
  phase_ = phase::over;
  broadcast(control_kind::stop);
  // Nodes exit on stop; give them a moment, then make sure (no orphans).
  // Streaming nodes send their last spans first: wait for their connections to end.
  auto until = clock_type::now() + std::chrono::seconds(10);
  while (launched_ && clock_type::now() < until) {
    bool all = true;
    for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
      const auto& n = nodes_[static_cast<std::size_t>(i)];
      // A silent node will not act on stop: terminate() below ends it, rather
      // than this wait adding its whole length to the time the loss takes.
      all = all && (n.silent || (launched_->exit_status(i).has_value() && (!o_.dashboard || !n.conn || n.gone)));
    }
    if (all)
      break;
    if (auto e = events_.pop(std::chrono::milliseconds(50)); e && o_.dashboard)
      if (int i = node_of(e->conn); i >= 0) {
        if (e->closed)
          nodes_[static_cast<std::size_t>(i)].gone = true;
        else if (e->f.kind == static_cast<std::uint16_t>(control_kind::spans))
          try {
            on_spans(i, e->f);
          } catch (const malformed_input& x) {
            fmt::print(stderr, "troupe launch: {} sent a malformed frame: {}\n", describe(i), x.what());
          }
      }
  }
  if (launched_)
    launched_->terminate();
  server_.reset();
}

caf::expected<run_result> coordinator::run() {
  net::handlers h;
  h.on_frame = [this](net::connection& c, net::frame&& f) {
    events_.push({&c, false, std::move(f), {}, steady_now_ns()});
  };
  h.on_close = [this](net::connection& c, std::string why) { events_.push({&c, true, {}, std::move(why)}); };
  auto server = net::listen({net::transport_kind::tcp,
                             g_.cluster.address,
                             static_cast<std::uint16_t>(g_.cluster.port),
                             o_.token,
                             [](std::string line) { fmt::print(stderr, "troupe launch: {}\n", line); },
                             {}},
                            std::move(h));
  if (!server)
    return make_error(errc::io_failed, fmt::format("cannot listen on {}:{}: {}", g_.cluster.address, g_.cluster.port,
                                                   error_message(server.error())));
  server_ = std::move(*server);
  launch_request req;
  req.troupe_exe = o_.troupe_exe;
  req.coordinator = fmt::format("{}:{}", g_.cluster.address, server_->port());
  req.nodes = g_.cluster.nodes;
  req.hosts = g_.cluster.hosts;
  req.token = o_.token;
  req.workdir = std::filesystem::current_path();
  req.pin = g_.cluster.pin;
  req.extra_args = {"--transport", std::string{net::to_string(o_.transport)}};
  if (o_.threads > 0)
    req.extra_args.insert(req.extra_args.end(), {"--threads", std::to_string(o_.threads)});
  req.term_grace = std::chrono::seconds(2); // nodes told to stop exit at once; only a hung one waits this long
  fmt::print("troupe launch: coordinator on {}, starting {} node(s) with the {} launcher ({} channels{})\n",
             req.coordinator, req.nodes, g_.cluster.launcher, net::to_string(o_.transport),
             req.pin ? ", each node pinned to one CPU" : "");
  std::fflush(stdout);
  auto launched = launch_nodes(g_.cluster.launcher, req);
  if (!launched) {
    server_.reset();
    return launched.error();
  }
  launched_ = std::move(*launched);
  auto began = clock_type::now();
  auto& plan = plan_;
  plan.graph_file = std::filesystem::absolute(o_.graph_file).string();
  plan.graph_hash = file_hash(plan.graph_file);
  plan.overrides = o_.overrides;
  plan.resume = o_.resume;
  plan.transport = std::string{net::to_string(o_.transport)};
  plan.trace_file = o_.trace_file;
  plan.trace_buffer = o_.trace_buffer;
  plan.stream_trace = o_.dashboard != nullptr;
  int signal = 0;
  while (failure_.empty() && phase_ != phase::over) {
    auto e = events_.pop(std::chrono::milliseconds(100));
    if (o_.interrupt && (signal = o_.interrupt->load()) != 0)
      break; // before the event: a Ctrl-C that also reached an ssh client is not a lost node
    if (e) {
      if (e->closed) {
        if (int i = node_of(e->conn); i >= 0) {
          if (phase_ != phase::over)
            lose_node(i, e->why);
          nodes_[static_cast<std::size_t>(i)].gone = true;
        }
      } else {
        on_frame(*e);
      }
    }
    check_liveness();
    if (restart_at_ && clock_type::now() >= *restart_at_ && comeback_) {
      restart_at_.reset();
      restart_node(comeback_->node);
    }
    if (!deferred_.empty() && clock_type::now() > deferred_.front().second)
      fail(deferred_.front().first, true); // a node's channel to another one broke
    auto all = [&](auto pred) { return std::all_of(nodes_.begin(), nodes_.end(), pred); };
    if (phase_ == phase::joining && all([](const node_state& n) { return n.conn != nullptr; })) {
      for (const auto& n : nodes_)
        plan.nodes.push_back({n.hello.data_host, n.hello.data_port});
      for (auto& n : nodes_)
        n.conn->send(encode(plan));
      phase_ = phase::planning;
    } else if (phase_ == phase::planning && all([](const node_state& n) { return n.ready; })) {
      started_ = last_done_ = clock_type::now();
      broadcast(control_kind::start);
      phase_ = phase::running;
    } else if (phase_ == phase::running && done_.size() == g_.actors.size()) {
      phase_ = phase::over;
    }
    if (phase_ != phase::running && phase_ != phase::over && clock_type::now() - began > o_.join_timeout) {
      std::vector<int> missing;
      for (std::size_t i = 0; i < nodes_.size(); ++i)
        if (phase_ == phase::joining ? !nodes_[i].conn : !nodes_[i].ready)
          missing.push_back(static_cast<int>(i));
      fail(fmt::format("node(s) {} did not {} within {} s", fmt::join(missing, ", "),
                       phase_ == phase::joining ? "join" : "get ready", o_.join_timeout.count() / 1000));
    }
    if (phase_ == phase::running && o_.timeout.count() > 0 && clock_type::now() - started_ > o_.timeout) {
      std::vector<std::string> waiting;
      for (const auto& a : g_.actors)
        if (!done_.count(a.name))
          waiting.push_back(a.name);
      fail(fmt::format("the run did not finish within {} s ({} of {} actors reported done; not: {})",
                       o_.timeout.count() / 1000.0, done_.size(), g_.actors.size(), fmt::join(waiting, ", ")));
    }
  }
  shut_down();
  if (signal != 0 && failure_.empty())
    return checkpoints_.interrupted(signal, done_.size(), g_.actors.size());
  if (!failure_.empty())
    return make_error(failure_lost_node_ ? errc::node_lost : errc::actor_failed,
                      checkpoints_.explain_failure(failure_));
  result_.first_step = g_.checkpoint.resume_step;
  result_.seconds = std::chrono::duration<double>(last_done_ - started_).count();
  aggregate(result_);
  return result_;
}

} // namespace

caf::expected<run_result> run_coordinator(const graph_spec& g, const coordinator_options& o) {
  coordinator c{g, o};
  return c.run();
}

} // namespace troupe::cluster
