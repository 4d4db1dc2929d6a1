// The node agent (deploy/cluster/node_agent.hpp): a scoped actor that plays the
// runner for this node's actors and relays the run protocol to the coordinator.
#include "deploy/cluster/node_agent.hpp"

#include <netdb.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/builtin.hpp"
#include "actors/channel.hpp"
#include "actors/remote_codec.hpp"
#include "deploy/cluster/cluster_protocol.hpp"
#include "runtime/actor/outer_messages.hpp"
#include "deploy/run/run_graph.hpp"
#include "deploy/run/run_tracing.hpp"
#include "deploy/cluster/spawn_and_connect.hpp"
#include "deploy/run/span_stream.hpp"
#include "runtime/actor/actor_system.hpp"
#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/trace/hang_watch.hpp"

using control_frame = std::shared_ptr<troupe::net::frame>;
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(control_frame)

namespace troupe::cluster {

namespace {

using ctl_atom = caf::atom_constant<caf::atom("ctl")>;
using lost_atom = caf::atom_constant<caf::atom("lost")>;

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

/// The first IPv4 address `name` resolves to, or `name` itself.
std::string resolve(const std::string& name) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  if (::getaddrinfo(name.c_str(), nullptr, &hints, &res) != 0 || !res)
    return name;
  char buf[64] = {};
  ::getnameinfo(res->ai_addr, res->ai_addrlen, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST);
  ::freeaddrinfo(res);
  return buf;
}

/// Incoming data frames go to this node's actors by graph index.
struct local_actors {
  std::mutex mtx;
  std::vector<caf::actor> by_index;
  caf::actor find(std::uint16_t i) {
    std::lock_guard lock{mtx};
    return i < by_index.size() ? by_index[i] : caf::actor{};
  }
};

class node_agent {
public:
  node_agent(const node_options& o, caf::actor_system& sys) : o_(o), sys_(sys), self_(sys) {}

  int run();

private:
  void log(const std::string& line) { fmt::print(stderr, "troupe node {}: {}\n", o_.node, line); }
  void report_failure(const std::string& actor, const std::string& what) {
    if (ctl_)
      ctl_->send(encode(failure_msg{actor, what}));
  }
  caf::error setup(const plan_msg& p);
  caf::error start_tracing(const plan_msg& p);
  /// The emulated link between this node's actors and `remote` (the channel's, else none).
  net::link_model link_to(const std::string& remote) const;
  /// A new data connection to node `n` over `link`.
  caf::expected<std::shared_ptr<net::connection>> open_channel(int n, net::link_model link);
  /// Node `n` runs again at `at` (#26): the channels to its actors move to new connections.
  caf::error reconnect(int n, const node_address& at);
  void stop_actors();

  node_options o_;
  caf::actor_system& sys_;
  caf::scoped_actor self_;
  std::atomic<bool> stopping_{false};
  local_actors local_;
  graph_spec graph_;
  std::vector<node_address> nodes_; ///< every node's data server, from the plan (and node_back)
  graph_actors actors_;             ///< this node's actors, channel actors for the others, links
  std::set<std::string> done_;
  std::vector<std::shared_ptr<net::connection>> conns_;
  std::unique_ptr<net::server> data_;
  std::unique_ptr<cli::run_tracing> tracing_;
  std::shared_ptr<net::connection> ctl_;
  std::atomic<std::uint64_t> spans_acked_{0}; ///< written on the control connection's thread
  std::unique_ptr<span_streamer> streamer_;
  std::unique_ptr<hang_watch> hangs_; ///< names this node's actors stuck in one handler, from the start
};

caf::error node_agent::setup(const plan_msg& p) {
  auto loaded = load_graph_for_cli(p.graph_file, p.overrides);
  if (!loaded.ok())
    return make_error(errc::invalid_graph, fmt::format("cannot load {}:\n{}", p.graph_file, to_string(loaded.errors)));
  if (auto h = file_hash(p.graph_file); h != p.graph_hash)
    return make_error(
      errc::invalid_graph,
      fmt::format("{} differs from the coordinator's copy (every node must read the same graph file)", p.graph_file));
  graph_ = std::move(*loaded.graph);
  if (!p.resume.empty()) {
    auto from = open_resume(p.resume, graph_);
    if (!from)
      return make_error(errc::io_failed, fmt::format("cannot resume: {}", error_message(from.error())));
    graph_.checkpoint.resume_folder = from->folder;
    graph_.checkpoint.resume_step = from->step;
  }
  if (static_cast<int>(p.nodes.size()) != graph_.cluster.nodes)
    return make_error(errc::invalid_graph,
                      fmt::format("the plan lists {} nodes, the graph {}", p.nodes.size(), graph_.cluster.nodes));
  if (auto err = start_tracing(p))
    return err;
  nodes_ = p.nodes;
  graph_.cluster.joining = p.joining;
  // A channel actor stands in for every remote actor, over one connection per (node, link).
  std::map<std::tuple<int, double, double>, std::shared_ptr<net::connection>> conns;
  auto channel_to = [&](std::size_t i) -> caf::expected<caf::actor> {
    const auto& a = graph_.actors[i];
    int n = graph_.node_of(a);
    auto link = link_to(a.name);
    auto& conn = conns[{n, link.bytes_per_s, link.latency_s}];
    if (!conn && nodes_.at(static_cast<std::size_t>(n)).port == 0) // down (#26): connected once back
      return spawn_channel(sys_, a.name, static_cast<std::uint16_t>(i), nullptr, caf::actor_cast<caf::actor>(self_));
    if (!conn) {
      auto c = open_channel(n, link);
      if (!c)
        return c.error();
      conn = std::move(*c);
    }
    return spawn_channel(sys_, a.name, static_cast<std::uint16_t>(i), conn, caf::actor_cast<caf::actor>(self_));
  };
  auto here = [this](const actor_spec& a) { return graph_.node_of(a) == o_.node; };
  auto err = spawn_and_connect(self_, graph_, here, channel_to, std::chrono::seconds(30), actors_);
  {
    std::lock_guard lock{local_.mtx};
    local_.by_index = actors_.by_index;
  }
  return err;
}

net::link_model node_agent::link_to(const std::string& remote) const {
  for (const auto& c : graph_.channels) {
    const auto* other = c.from == remote ? graph_.find_actor(c.to)
                        : c.to == remote ? graph_.find_actor(c.from)
                                         : nullptr;
    if (other && graph_.node_of(*other) == o_.node)
      return net::link_model{c.bandwidth, c.latency};
  }
  return net::link_model{};
}

caf::expected<std::shared_ptr<net::connection>> node_agent::open_channel(int n, net::link_model link) {
  const auto& addr = nodes_.at(static_cast<std::size_t>(n));
  net::handlers h;
  h.on_frame = [this](net::connection& c, net::frame&&) { log("unexpected frame from " + c.peer()); };
  h.on_close = [this, n](net::connection&, std::string why) {
    if (!stopping_)
      caf::anon_send(caf::actor_cast<caf::actor>(self_), lost_atom::value,
                     fmt::format("lost the data connection to node {}: {}", n, why), false);
  };
  auto c = net::connect({o_.transport, addr.host, addr.port, o_.token, link, std::chrono::seconds(10)}, std::move(h));
  if (!c)
    return make_error(errc::io_failed, fmt::format("cannot open a channel to node {} at {}:{}: {}", n, addr.host,
                                                   addr.port, error_message(c.error())));
  auto conn = std::shared_ptr<net::connection>(std::move(*c));
  conns_.push_back(conn);
  return conn;
}

caf::error node_agent::reconnect(int n, const node_address& at) {
  if (n < 0 || n >= static_cast<int>(nodes_.size()) || n == o_.node)
    return make_error(errc::invalid_argument, fmt::format("node {} cannot come back to node {}", n, o_.node));
  nodes_[static_cast<std::size_t>(n)] = at;
  std::map<std::pair<double, double>, std::shared_ptr<net::connection>> fresh; // one per link, as at the start
  for (const auto& a : graph_.actors) {
    auto stand_in = actors_.handles.find(a.name); // the channel actor for it
    if (graph_.node_of(a) != n || stand_in == actors_.handles.end())
      continue;
    auto link = link_to(a.name);
    auto& conn = fresh[{link.bytes_per_s, link.latency_s}];
    if (!conn) {
      auto c = open_channel(n, link);
      if (!c)
        return c.error();
      conn = std::move(*c);
    }
    reconnect_channel(stand_in->second, conn);
  }
  return {};
}

/// This node's trace file: `runs/x.json` becomes `runs/x.node1.json`; and its
/// stream to the coordinator's dashboard.
caf::error node_agent::start_tracing(const plan_msg& p) {
  if (!p.trace_file.empty()) {
    cli::trace_cli_options t;
    t.file = cli::node_trace_file(p.trace_file, o_.node);
    t.buffer = static_cast<std::size_t>(p.trace_buffer);
    auto r = cli::run_tracing::start(graph_, t);
    if (!r)
      return make_error(errc::io_failed, fmt::format("cannot start tracing: {}", error_message(r.error())));
    tracing_ = std::move(*r);
  }
  if (p.stream_trace) {
    if (!trace_recorder::global().enabled())
      trace_recorder::global().enable(static_cast<std::size_t>(p.trace_buffer));
    streamer_ = std::make_unique<span_streamer>(ctl_, spans_acked_);
  }
  return caf::error{};
}

void node_agent::stop_actors() {
  stopping_ = true;
  actors_.stop(self_, std::chrono::seconds(10));
  actors_ = {};
}

int node_agent::run() {
  auto me = caf::actor_cast<caf::actor>(self_);
  if (o_.listen_address.empty()) {
    bool loopback = o_.coordinator_host == "localhost" || o_.coordinator_host.rfind("127.", 0) == 0;
    o_.listen_address = loopback ? "127.0.0.1" : resolve(host_name());
  }
  net::handlers data_h;
  data_h.on_frame = [this](net::connection& c, net::frame&& f) {
    std::optional<std::string> why; // the frame could not be delivered
    try {
      if (auto err = remote::deliver(std::move(f), [this](std::uint16_t i) { return local_.find(i); }))
        why = error_message(err);
    } catch (const std::exception& e) { // a device copy or an allocation that failed
      why = e.what();
    }
    if (why && !stopping_)
      caf::anon_send(caf::actor_cast<caf::actor>(self_), lost_atom::value,
                     fmt::format("a malformed data frame from {}: {}", c.peer(), *why), false);
  };
  data_h.on_close = [](net::connection&, std::string) {}; // senders see their peer go; the coordinator decides
  auto data = net::listen({o_.transport, o_.listen_address, 0, o_.token, [this](std::string line) { log(line); }, {}},
                          std::move(data_h));
  if (!data) {
    log(fmt::format("cannot listen for channels on {}: {}", o_.listen_address, error_message(data.error())));
    return 1;
  }
  data_ = std::move(*data);
  fmt::print("node {}: channels listen on {}:{} ({})\n", o_.node, o_.listen_address, data_->port(),
             net::to_string(o_.transport));
  std::fflush(stdout);
  net::handlers ctl_h;
  ctl_h.on_frame = [this, me](net::connection& c, net::frame&& f) {
    // Clock probes are answered here, at once, and acks only move the
    // streamer's window: neither waits behind the agent's mailbox.
    try {
      switch (static_cast<control_kind>(f.kind)) {
      case control_kind::clock:
        c.send(encode(clock_msg{decode_or_throw<clock_msg>(f).coordinator_ns, steady_now_ns()}));
        return;
      case control_kind::spans_ack:
        spans_acked_.store(std::max(spans_acked_.load(), decode_or_throw<spans_ack_msg>(f).seq),
                           std::memory_order_release);
        return;
      default:
        caf::anon_send(me, ctl_atom::value, std::make_shared<net::frame>(std::move(f)));
      }
    } catch (const malformed_input& e) {
      caf::anon_send(me, lost_atom::value, fmt::format("rejected a control frame: {}", e.what()), true);
    }
  };
  ctl_h.on_close = [this, me](net::connection&, std::string why) {
    if (!stopping_)
      caf::anon_send(me, lost_atom::value, "lost the coordinator: " + why, true);
  };
  auto ctl = net::connect(
    {net::transport_kind::tcp, o_.coordinator_host, o_.coordinator_port, o_.token, {}, std::chrono::seconds(10)},
    std::move(ctl_h));
  if (!ctl) {
    log(fmt::format("cannot join the coordinator at {}:{}: {}", o_.coordinator_host, o_.coordinator_port,
                    error_message(ctl.error())));
    return 1;
  }
  ctl_ = std::shared_ptr<net::connection>(std::move(*ctl));
  ctl_->send(encode(hello_msg{o_.node, host_name(), static_cast<std::int64_t>(::getpid()), o_.listen_address,
                              data_->port(), clock_domain()}));
  std::jthread heartbeat{[this](std::stop_token st) {
    while (!st.stop_requested()) {
      ctl_->send(encode(control_kind::heartbeat));
      for (int i = 0; i < 10 && !st.stop_requested(); ++i)
        std::this_thread::sleep_for(std::chrono::duration<double>(heartbeat_interval_s / 10));
    }
  }};
  // Under ssh, the launcher's ssh client going away only shows as stdin ending.
  std::jthread stdin_watch;
  if (o_.stop_on_stdin_eof)
    stdin_watch = std::jthread{[this, me](std::stop_token st) {
      pollfd p{0, POLLIN, 0};
      char buf[256];
      while (!st.stop_requested())
        if (::poll(&p, 1, 200) > 0 && ::read(0, buf, sizeof buf) <= 0) {
          if (!stopping_)
            caf::anon_send(me, lost_atom::value, std::string{"the launcher's session ended (stdin closed)"}, true);
          return;
        }
    }};
  int exit_code = -1;
  while (exit_code < 0) {
    self_->receive(
      [&](ctl_atom, const control_frame& f) {
        try {
          switch (static_cast<control_kind>(f->kind)) {
          case control_kind::plan:
            if (auto err = setup(decode_or_throw<plan_msg>(*f)))
              report_failure(fmt::format("node {}", o_.node), error_message(err));
            else
              ctl_->send(encode(control_kind::ready));
            break;
          case control_kind::start:
            hangs_ = std::make_unique<hang_watch>(graph_.trace.hang_after_s, o_.node);
            actors_.start(self_);
            break;
          case control_kind::stop:
            exit_code = 0;
            break;
          case control_kind::node_back: { // a lost node runs again (#26)
            auto m = decode_or_throw<node_back_msg>(*f);
            if (auto err = reconnect(m.node, m.at))
              report_failure(fmt::format("node {}", o_.node), error_message(err));
            else
              ctl_->send(encode(reconnected_msg{m.node}));
            break;
          }
          case control_kind::replica_back: { // its channels are reconnected everywhere: the loader decides
            auto replica = decode_or_throw<replica_back_msg>(*f).replica;
            for (std::size_t i = 0; i < graph_.actors.size() && i < actors_.by_index.size(); ++i)
              if (actors_.by_index[i] && graph_.actors[i].type == "data_loader")
                caf::anon_send(actors_.by_index[i], replica_back_atom::value, replica);
            break;
          }
          case control_kind::replica_lost: { // elastic training: tell who exchanges and routes
            auto replica = decode_or_throw<replica_lost_msg>(*f).replica;
            for (std::size_t i = 0; i < graph_.actors.size() && i < actors_.by_index.size(); ++i)
              if (const auto& a = graph_.actors[i];
                  actors_.by_index[i] && (a.type == "outer_sync" || a.type == "data_loader" ||
                                          (a.type == every_step_sync_type(graph_) && graph_.elastic_ddp()) ||
                                          (a.role.holds_layers && graph_.elastic_least_loaded())))
                caf::anon_send(actors_.by_index[i], replica_lost_atom::value, replica);
            break;
          }
          default:
            throw malformed_input(fmt::format("unexpected control frame {}", f->kind));
          }
        } catch (const malformed_input& e) {
          log(fmt::format("rejected a control frame: {}", e.what()));
          exit_code = 1;
        }
      },
      [&](done_atom, run_summary& s) {
        done_.insert(s.actor);
        ctl_->send(encode(s));
      },
      [&](failed_atom, failure_msg& m) { ctl_->send(encode(m)); },
      [&](rejoin_atom, const rejoin_msg& m, const std::string& why) { // the loader's decision (#26)
        ctl_->send(encode(rejoining_msg{m.replica, m.steps, m.donor, why}));
      },
      [&](checkpoint_atom, checkpoint_msg& m) { ctl_->send(encode(m)); },
      [&](caf::down_msg& d) {
        actors_.alive.erase(d.source);
        auto name = actors_.names.count(d.source) ? actors_.names[d.source] : std::string{"?"};
        if (d.reason || !done_.count(name))
          report_failure(name, fmt::format("exited before reporting done: {}",
                                           d.reason ? error_message(d.reason) : std::string{"normal exit"}));
      },
      [&](lost_atom, const std::string& why, bool coordinator) {
        if (coordinator) {
          log(why + "; stopping");
          exit_code = 1;
        } else {
          report_failure(fmt::format("node {}", o_.node), why);
        }
      });
  }
  heartbeat.request_stop();
  heartbeat.join();
  stop_actors();
  if (streamer_)
    streamer_->finish(); // the last spans, before the connection closes
  if (tracing_)
    if (auto err = tracing_->finish())
      log(error_message(err));
  for (auto& c : conns_)
    c->close();
  ctl_->close();
  data_.reset();
  conns_.clear();
  return exit_code;
}

} // namespace

int run_node(const node_options& o) {
  auto opts = runtime_options_from_env();
  if (o.threads > 0)
    opts.threads = static_cast<std::size_t>(o.threads);
  troupe_config cfg{opts};
  caf::actor_system sys{cfg};
  int code = 0;
  {
    node_agent agent{o, sys};
    code = agent.run();
  }
  return code;
}

} // namespace troupe::cluster
