// The coordinator's state (deploy/cluster/coordinator.cpp): the events its
// connection callbacks queue, what it knows of each node, and the one loop's
// class; coordinator_comeback.cpp holds its elastic side (lost nodes, #26).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "deploy/cluster/cluster_protocol.hpp"
#include "deploy/cluster/coordinator.hpp"
#include "deploy/cluster/launcher.hpp"
#include "runtime/trace/trace.hpp"

namespace troupe::cluster::detail {

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

} // namespace troupe::cluster::detail
