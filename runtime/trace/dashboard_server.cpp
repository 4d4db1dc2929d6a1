// The dashboard's HTTP + WebSocket server on Boost.Beast: one I/O thread owns
// the feed, the listener and every session, so nothing here needs a lock.
#include "runtime/trace/dashboard_server.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <fmt/format.h>

#include "runtime/trace/dashboard_feed.hpp"
#include "runtime/actor/errors.hpp"

namespace troupe {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

struct dashboard_server::impl {
  dashboard_options opts;
  asio::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  asio::steady_timer poll_timer{ioc};
  dashboard_feed feed;
  bool live;
  bool from_recorder; ///< live from this process's recorder, not ingested
  std::thread thread;
  std::set<std::shared_ptr<void>> sessions; // kept alive until stop()

  impl(dashboard_options o, bool is_live, bool recorder)
      : opts(std::move(o)), feed(opts.title, is_live, opts.max_spans, opts.tokens_per_step), live(is_live),
        from_recorder(recorder) {}

  /// Brings the live feed up to date: polls the recorder, or moves the clock on.
  void refresh() {
    if (from_recorder)
      feed.poll_recorder();
    else
      feed.tick();
  }

  void accept();
  void poll();
};

namespace {

std::string_view mime_of(const std::filesystem::path& p) {
  auto e = p.extension().string();
  if (e == ".html")
    return "text/html; charset=utf-8";
  if (e == ".js" || e == ".mjs")
    return "text/javascript; charset=utf-8";
  if (e == ".css")
    return "text/css; charset=utf-8";
  if (e == ".svg")
    return "image/svg+xml";
  if (e == ".png")
    return "image/png";
  if (e == ".json" || e == ".map")
    return "application/json";
  return "application/octet-stream";
}

/// A static file's path under `root`, or empty for anything that could leave it.
std::filesystem::path static_path(const std::filesystem::path& root, std::string_view target) {
  target = target.substr(0, target.find('?'));
  if (target == "/" || target.empty())
    target = "/index.html";
  for (char c : target)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '/' || c == '.' || c == '_' || c == '-'))
      return {};
  if (target.find("..") != std::string_view::npos)
    return {};
  return root / std::filesystem::path(std::string{target.substr(1)});
}

/// One WebSocket viewer: pushes a frame every interval (sooner while a backlog of spans remains).
class ws_session : public std::enable_shared_from_this<ws_session> {
public:
  ws_session(tcp::socket&& s, dashboard_server::impl& srv) : ws_(std::move(s)), timer_(srv.ioc), srv_(srv) {}

  void run(http::request<http::string_body> req) {
    ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
    ws_.async_accept(req, [self = shared_from_this()](beast::error_code ec) {
      if (!ec)
        self->read(), self->push();
    });
  }

private:
  void read() { // viewers send nothing we need; reading handles pings and close
    ws_.async_read(in_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec)
        return self->close();
      self->in_.consume(self->in_.size());
      self->read();
    });
  }

  void push() {
    if (closed_)
      return;
    bool more = false;
    out_ = srv_.feed.next_frame(cursor_, 50'000, more);
    ws_.text(true);
    ws_.async_write(asio::buffer(out_), [self = shared_from_this(), more](beast::error_code ec, std::size_t) {
      if (ec)
        return self->close();
      if (more)
        return self->push();
      if (self->srv_.feed.finished() && self->cursor_.finished_sent)
        return; // a finished trace is all sent: nothing more will come
      self->timer_.expires_after(self->srv_.opts.interval);
      self->timer_.async_wait([self](beast::error_code e) {
        if (!e)
          self->push();
      });
    });
  }

  void close() {
    closed_ = true;
    timer_.cancel();
  }

  websocket::stream<beast::tcp_stream> ws_;
  asio::steady_timer timer_;
  dashboard_server::impl& srv_;
  beast::flat_buffer in_;
  std::string out_;
  feed_cursor cursor_;
  bool closed_ = false;
};

/// One HTTP connection: static files, /metrics, /api/summary, and the upgrade to /ws.
class http_session : public std::enable_shared_from_this<http_session> {
public:
  http_session(tcp::socket&& s, dashboard_server::impl& srv) : stream_(std::move(s)), srv_(srv) {}

  void read() {
    req_ = {};
    stream_.expires_after(std::chrono::seconds(60));
    http::async_read(stream_, buf_, req_, [self = shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec)
        return;
      self->handle();
    });
  }

private:
  void handle() {
    if (websocket::is_upgrade(req_)) {
      if (req_.target() != "/ws")
        return;
      stream_.expires_never();
      auto ws = std::make_shared<ws_session>(stream_.release_socket(), srv_);
      srv_.sessions.insert(ws);
      ws->run(std::move(req_));
      return;
    }
    auto res = std::make_shared<http::response<http::string_body>>();
    res->version(req_.version());
    res->keep_alive(req_.keep_alive());
    res->set(http::field::server, "troupe");
    res->set(http::field::cache_control, "no-store");
    auto target = std::string{req_.target()};
    auto reply = [&](http::status st, std::string_view type, std::string body) {
      res->result(st);
      res->set(http::field::content_type, std::string{type});
      res->body() = std::move(body);
    };
    if (req_.method() != http::verb::get && req_.method() != http::verb::head) {
      reply(http::status::method_not_allowed, "text/plain", "the dashboard is read-only: GET only\n");
    } else if (target == "/metrics") {
      reply(http::status::ok, "text/plain; version=0.0.4", prometheus_metrics(srv_.feed.stats()));
    } else if (target == "/api/summary") {
      reply(http::status::ok, "text/plain; charset=utf-8", to_text(srv_.feed.stats()));
    } else if (auto p = static_path(srv_.opts.static_dir, target); !p.empty() && std::filesystem::is_regular_file(p)) {
      std::ifstream in(p, std::ios::binary);
      std::ostringstream body;
      body << in.rdbuf();
      reply(http::status::ok, mime_of(p), body.str());
    } else if (target == "/" || target == "/index.html") {
      reply(http::status::service_unavailable, "text/plain",
            fmt::format("the dashboard front end is not built: {} has no index.html.\n"
                        "Build it with `npm ci && npm run build` in runtime/trace/dashboard (deploy/setup.sh does),\n"
                        "or point TROUPE_DASHBOARD_DIR at a built copy. /metrics and /ws work meanwhile.\n",
                        srv_.opts.static_dir.string()));
    } else {
      reply(http::status::not_found, "text/plain", fmt::format("{}: not found\n", target));
    }
    res->prepare_payload();
    http::async_write(stream_, *res, [self = shared_from_this(), res](beast::error_code ec, std::size_t) {
      if (!ec && res->keep_alive())
        self->read();
    });
  }

  beast::tcp_stream stream_;
  dashboard_server::impl& srv_;
  beast::flat_buffer buf_;
  http::request<http::string_body> req_;
};

} // namespace

void dashboard_server::impl::accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket s) {
    if (ec)
      return; // closed by stop()
    std::make_shared<http_session>(std::move(s), *this)->read();
    accept();
  });
}

void dashboard_server::impl::poll() {
  if (!feed.finished())
    refresh();
  feed.update_stats(std::chrono::duration_cast<std::chrono::nanoseconds>(opts.stats_window).count());
  if (feed.finished())
    return;
  poll_timer.expires_after(opts.interval);
  poll_timer.async_wait([this](beast::error_code ec) {
    if (!ec)
      poll();
  });
}

caf::expected<std::pair<std::string, std::uint16_t>> parse_listen_address(const std::string& text) {
  std::string host = "127.0.0.1", port_text = "8080";
  auto colon = text.rfind(':');
  bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  if (digits)
    port_text = text;
  else if (colon == std::string::npos)
    host = text.empty() ? host : text;
  else
    host = colon == 0 ? host : text.substr(0, colon), port_text = text.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc{} || end != port_text.data() + port_text.size() || port > 65535)
    return make_error(errc::invalid_argument,
                      fmt::format("dashboard address '{}': expected HOST:PORT, :PORT or PORT with a port "
                                  "from 0 to 65535",
                                  text));
  return std::pair{host, static_cast<std::uint16_t>(port)};
}

std::filesystem::path default_dashboard_dir() {
  if (const char* env = std::getenv("TROUPE_DASHBOARD_DIR"); env && *env)
    return env;
  std::error_code ec;
  auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    auto installed = exe.parent_path().parent_path() / "share/troupe/dashboard";
    if (std::filesystem::exists(installed / "index.html", ec))
      return installed;
  }
  // The front end is built into runtime/trace/dashboard/dist of the source tree. Not
  // __FILE__: ccache with a base_dir compiles with relative paths.
  return std::filesystem::path(TROUPE_SOURCE_DIR) / "runtime/trace/dashboard/dist";
}

namespace {

caf::expected<std::unique_ptr<dashboard_server::impl>> listen(std::unique_ptr<dashboard_server::impl> p) {
  auto addr = parse_listen_address(p->opts.address);
  if (!addr)
    return addr.error();
  beast::error_code ec;
  auto ip = asio::ip::make_address(addr->first, ec);
  if (ec) {
    tcp::resolver res{p->ioc};
    auto r = res.resolve(addr->first, std::to_string(addr->second), ec);
    if (ec || r.empty())
      return make_error(errc::invalid_argument, fmt::format("dashboard address '{}': cannot resolve '{}': {}",
                                                            p->opts.address, addr->first, ec.message()));
    ip = r.begin()->endpoint().address();
  }
  tcp::endpoint ep{ip, addr->second};
  auto fail = [&](const char* what) {
    return make_error(errc::io_failed,
                      fmt::format("dashboard on {}:{}: {}: {}", ip.to_string(), addr->second, what, ec.message()));
  };
  if (p->acceptor.open(ep.protocol(), ec); ec)
    return fail("cannot open a socket");
  if (p->acceptor.set_option(asio::socket_base::reuse_address(true), ec); ec)
    return fail("cannot set SO_REUSEADDR");
  if (p->acceptor.bind(ep, ec); ec)
    return fail("cannot bind");
  if (p->acceptor.listen(asio::socket_base::max_listen_connections, ec); ec)
    return fail("cannot listen");
  return p;
}

} // namespace

dashboard_server::dashboard_server(std::unique_ptr<impl> p) : impl_(std::move(p)) {
  impl_->accept();
  impl_->poll();
  impl_->thread = std::thread([this] { impl_->ioc.run(); });
}

caf::expected<std::unique_ptr<dashboard_server>> dashboard_server::start(std::unique_ptr<impl> fresh,
                                                                         trace_snapshot* finished) {
  auto p = listen(std::move(fresh));
  if (!p)
    return p.error();
  if (finished)
    (*p)->feed.load(std::move(*finished));
  return std::unique_ptr<dashboard_server>(new dashboard_server(std::move(*p)));
}

caf::expected<std::unique_ptr<dashboard_server>> dashboard_server::start_live(dashboard_options opts) {
  return start(std::make_unique<impl>(std::move(opts), true, true), nullptr);
}

caf::expected<std::unique_ptr<dashboard_server>> dashboard_server::start_ingest(dashboard_options opts) {
  return start(std::make_unique<impl>(std::move(opts), true, false), nullptr);
}

caf::expected<std::unique_ptr<dashboard_server>> dashboard_server::start_snapshot(trace_snapshot t,
                                                                                  dashboard_options opts) {
  return start(std::make_unique<impl>(std::move(opts), false, false), &t);
}

dashboard_server::~dashboard_server() {
  stop();
}

std::string dashboard_server::url() const {
  beast::error_code ec;
  auto ep = impl_->acceptor.local_endpoint(ec);
  if (ec)
    return "http://" + impl_->opts.address + "/";
  auto host = ep.address().to_string();
  if (ep.address().is_v6())
    host = "[" + host + "]";
  return fmt::format("http://{}:{}/", host, ep.port());
}

void dashboard_server::ingest(int node, trace_snapshot batch) {
  asio::post(impl_->ioc, [p = impl_.get(), node, b = std::move(batch)]() mutable {
    if (!p->feed.finished())
      p->feed.ingest(node, std::move(b));
  });
}

void dashboard_server::finish(std::chrono::milliseconds grace) {
  asio::post(impl_->ioc, [p = impl_.get()] {
    p->refresh();
    p->feed.set_finished();
    p->feed.update_stats(0);
  });
  std::this_thread::sleep_for(grace);
}

void dashboard_server::stop() {
  if (!impl_)
    return;
  asio::post(impl_->ioc, [p = impl_.get()] {
    beast::error_code ec;
    p->acceptor.close(ec);
    p->poll_timer.cancel();
  });
  impl_->ioc.stop();
  if (impl_->thread.joinable() && impl_->thread.get_id() != std::this_thread::get_id())
    impl_->thread.join();
  impl_->sessions.clear();
}

std::string prometheus_metrics(const trace_summary& s) {
  std::string out;
  auto label = [](const std::string& v) {
    std::string r;
    for (char c : v)
      r += c == '\\' ? "\\\\" : c == '"' ? "\\\"" : c == '\n' ? "\\n" : std::string(1, c);
    return r;
  };
  auto gauge = [&](const char* name, const char* help, const std::optional<double>& v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", name, help, name);
    out += v && std::isfinite(*v) ? fmt::format("{} {}\n", name, *v) : fmt::format("{} NaN\n", name);
  };
  gauge("troupe_step", "Last training step with a loss (1-based; 0 before the first).",
        static_cast<double>(s.last_step + 1));
  gauge("troupe_loss", "Latest training loss.", s.loss);
  gauge("troupe_val_loss", "Latest validation loss.", s.val_loss);
  gauge("troupe_tokens_per_second", "Training throughput over the latest step.", s.tokens_per_s);
  gauge("troupe_bubble_fraction", "Idle share of the pipeline stages over the recent window.", s.bubble_fraction);
  if (!s.replica_loss.empty()) {
    out += "# HELP troupe_replica_loss Latest training loss of each replica's own microbatches.\n"
           "# TYPE troupe_replica_loss gauge\n";
    for (auto [replica, v] : s.replica_loss)
      out += fmt::format("troupe_replica_loss{{replica=\"{}\"}} {}\n", replica, v);
  }
  if (!s.outer.empty()) {
    out += "# HELP troupe_outer_steps Outer steps (exchanges applied) of each local-update sync actor.\n"
           "# TYPE troupe_outer_steps gauge\n";
    for (const auto& [actor, o] : s.outer)
      out += fmt::format("troupe_outer_steps{{actor=\"{}\"}} {}\n", label(actor), o.steps);
    out += "# HELP troupe_outer_bytes_sent Bytes each local-update sync actor has sent in its exchanges.\n"
           "# TYPE troupe_outer_bytes_sent counter\n";
    for (const auto& [actor, o] : s.outer)
      out += fmt::format("troupe_outer_bytes_sent{{actor=\"{}\"}} {}\n", label(actor), o.bytes);
  }
  out += "# HELP troupe_actor_busy_fraction Share of the recent window an actor spent working.\n"
         "# TYPE troupe_actor_busy_fraction gauge\n";
  for (const auto& a : s.actors)
    out += fmt::format("troupe_actor_busy_fraction{{actor=\"{}\",type=\"{}\",node=\"{}\"}} {}\n", label(a.actor.name),
                       label(a.actor.type), a.actor.node, a.busy_fraction);
  out += "# HELP troupe_actor_mailbox_depth Messages waiting for an actor.\n"
         "# TYPE troupe_actor_mailbox_depth gauge\n";
  for (const auto& a : s.actors)
    out += fmt::format("troupe_actor_mailbox_depth{{actor=\"{}\",type=\"{}\",node=\"{}\"}} {}\n", label(a.actor.name),
                       label(a.actor.type), a.actor.node, a.mailbox);
  out += "# HELP troupe_actor_bytes_sent Tensor bytes an actor sent over the summarised window.\n"
         "# TYPE troupe_actor_bytes_sent gauge\n";
  for (const auto& a : s.actors)
    out += fmt::format("troupe_actor_bytes_sent{{actor=\"{}\",type=\"{}\",node=\"{}\"}} {}\n", label(a.actor.name),
                       label(a.actor.type), a.actor.node, a.bytes_sent);
  out += "# HELP troupe_actor_memory_bytes Bytes of parameters, gradients and optimizer state an actor holds.\n"
         "# TYPE troupe_actor_memory_bytes gauge\n";
  for (const auto& a : s.actors)
    if (a.params_bytes >= 0)
      for (auto [kind, v] : {std::pair{"params", a.params_bytes}, std::pair{"grads", a.grads_bytes},
                             std::pair{"optimizer", a.optimizer_bytes}})
        out += fmt::format("troupe_actor_memory_bytes{{actor=\"{}\",type=\"{}\",node=\"{}\",kind=\"{}\"}} {}\n",
                           label(a.actor.name), label(a.actor.type), a.actor.node, kind, v);
  const auto& st = s.stragglers;
  out += "# HELP troupe_actor_step_ms Busy time per step (forward and backward actions) over the steps summarised.\n"
         "# TYPE troupe_actor_step_ms gauge\n";
  for (const auto& a : st.actors)
    for (auto [stat, v] : {std::pair{"min", a.min_ms}, std::pair{"median", a.median_ms}, std::pair{"max", a.max_ms}})
      out += fmt::format("troupe_actor_step_ms{{actor=\"{}\",stat=\"{}\"}} {}\n", label(a.actor), stat, v);
  out += "# HELP troupe_actor_step_ewma EWMA of an actor's step time over its peers' median (1: as fast as they).\n"
         "# TYPE troupe_actor_step_ewma gauge\n";
  for (const auto& a : st.actors)
    out += fmt::format("troupe_actor_step_ewma{{actor=\"{}\"}} {}\n", label(a.actor), a.ewma);
  out +=
    "# HELP troupe_actor_chronic_straggler 1 when the EWMA stayed above its threshold for half the steps or more.\n"
    "# TYPE troupe_actor_chronic_straggler gauge\n";
  for (const auto& a : st.actors)
    out += fmt::format("troupe_actor_chronic_straggler{{actor=\"{}\"}} {}\n", label(a.actor), a.chronic ? 1 : 0);
  out += "# HELP troupe_straggler_rank Place among the slowest actors (1: the slowest; top-k only).\n"
         "# TYPE troupe_straggler_rank gauge\n";
  for (std::size_t i = 0; i < st.top.size(); ++i)
    out += fmt::format("troupe_straggler_rank{{actor=\"{}\"}} {}\n", label(st.actors[st.top[i]].actor), i + 1);
  out += fmt::format("# HELP troupe_trace_spans Spans the dashboard holds.\n# TYPE troupe_trace_spans gauge\n"
                     "troupe_trace_spans {}\n",
                     s.span_count);
  out += fmt::format("# HELP troupe_trace_dropped_spans_total Spans lost to full ring buffers.\n"
                     "# TYPE troupe_trace_dropped_spans_total counter\ntroupe_trace_dropped_spans_total {}\n",
                     s.dropped);
  return out;
}

} // namespace troupe
