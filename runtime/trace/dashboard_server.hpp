// The dashboard's server: a read-only Boost.Beast HTTP + WebSocket endpoint
// that streams spans, counters and per-actor statistics to the browser page,
// from the live recorder during a run or from a finished trace.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include <caf/expected.hpp>

#include "runtime/trace/trace_summary.hpp"

namespace troupe {

/// How and what the dashboard serves.
struct dashboard_options {
  /// `HOST:PORT`, `HOST`, `:PORT` or `PORT`; the host defaults to 127.0.0.1 and
  /// the port to 8080 (0 picks a free one). All interfaces only when asked (`0.0.0.0`).
  std::string address = "127.0.0.1:8080";
  std::filesystem::path static_dir;               ///< the built front end (index.html, app.js, app.css)
  std::string title;                              ///< shown on the page (the graph file)
  std::int64_t tokens_per_step = 0;               ///< for tokens/s from the loss samples (live)
  std::size_t max_spans = 1 << 20;                ///< spans kept for new viewers; older ones are dropped
  std::chrono::milliseconds interval{250};        ///< how often live data is polled and pushed
  std::chrono::milliseconds stats_window{10'000}; ///< busy fractions over this much recent time (live)
};

/// The resolved `{host, port}` of an address text, or errc::invalid_argument.
caf::expected<std::pair<std::string, std::uint16_t>> parse_listen_address(const std::string& text);

/// Prometheus text exposition of a summary: step, loss, tokens/s, bubble
/// fraction, per actor busy fraction and mailbox depth.
std::string prometheus_metrics(const trace_summary& s);

/// The front end's folder: $TROUPE_DASHBOARD_DIR, else `share/troupe/dashboard`
/// beside the installed program, else the source tree's `runtime/trace/dashboard/dist`.
std::filesystem::path default_dashboard_dir();

/// A running dashboard. Routes: `/` and the front end's files, `/ws` (the live
/// feed), `/metrics` (Prometheus), `/api/summary` (the text summary).
class dashboard_server {
public:
  /// Serves the global trace recorder, polling it every `interval`.
  static caf::expected<std::unique_ptr<dashboard_server>> start_live(dashboard_options opts);
  /// Serves what ingest() is handed, live: a multi-process run's coordinator,
  /// whose nodes stream their spans to it (`troupe launch --dashboard`).
  static caf::expected<std::unique_ptr<dashboard_server>> start_ingest(dashboard_options opts);
  /// Serves a finished trace (`troupe dash OUT.json`).
  static caf::expected<std::unique_ptr<dashboard_server>> start_snapshot(trace_snapshot t, dashboard_options opts);

  ~dashboard_server();
  dashboard_server(const dashboard_server&) = delete;
  dashboard_server& operator=(const dashboard_server&) = delete;

  /// `http://HOST:PORT/`.
  std::string url() const;
  /// Hands one node's batch to the feed (see dashboard_feed::ingest); returns at
  /// once, from any thread. Only for a server from start_ingest.
  void ingest(int node, trace_snapshot batch);
  /// Polls once more, tells viewers the run is over, and gives them `grace` to receive it.
  void finish(std::chrono::milliseconds grace = std::chrono::milliseconds{600});
  /// Closes every connection and joins the server thread.
  void stop();

  struct impl;

private:
  explicit dashboard_server(std::unique_ptr<impl> p);
  /// Listens, loads `finished` when given, and starts serving.
  static caf::expected<std::unique_ptr<dashboard_server>> start(std::unique_ptr<impl> fresh, trace_snapshot* finished);
  std::unique_ptr<impl> impl_;
};

} // namespace troupe
