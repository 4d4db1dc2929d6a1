// The coordinator (deploy/cluster/coordinator.hpp). Transport callbacks push events
// into one queue; a single loop owns all state and walks the run protocol
// (deploy/cluster/cluster_protocol.hpp): join, plan, ready, start, done, stop.
#include "deploy/cluster/coordinator.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "deploy/cluster/coordinator_state.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/trace/trace.hpp"

namespace troupe::cluster {

namespace detail {

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

} // namespace detail

caf::expected<run_result> run_coordinator(const graph_spec& g, const coordinator_options& o) {
  detail::coordinator c{g, o};
  return c.run();
}

} // namespace troupe::cluster
