// `troupe run`'s tracing: options, the recorder, the dashboard and the file.
#include "deploy/cli/run_tracing.hpp"

#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "runtime/actor/errors.hpp"
#include "runtime/graph/output_path.hpp"
#include "runtime/trace/trace.hpp"
#include "runtime/trace/trace_export.hpp"

namespace troupe::cli {

std::string trace_file(const graph_spec& g, const trace_cli_options& o) {
  return !o.file.empty() ? o.file : o.no_trace ? std::string{} : g.trace.file_path.string();
}

std::string node_trace_file(const std::string& file, int node) {
  std::filesystem::path f{file};
  return (f.parent_path() / fmt::format("{}.node{}{}", f.stem().string(), node, f.extension().string())).string();
}

caf::expected<std::unique_ptr<run_tracing>> run_tracing::start(const graph_spec& g, trace_cli_options o) {
  auto t = std::make_unique<run_tracing>();
  t->file_ = trace_file(g, o);
  t->tokens_per_step_ = g.tokens_per_step();
  if (t->file_.empty() && !o.dashboard)
    return t;
  if (!t->file_.empty())
    if (auto err = check_output_path(t->file_))
      return err;
  trace_recorder::global().enable(o.buffer);
  if (auto err = t->start_dashboard(g, o, true))
    return err;
  return t;
}

caf::expected<std::unique_ptr<run_tracing>> run_tracing::start_coordinator(const graph_spec& g, trace_cli_options o) {
  auto t = std::make_unique<run_tracing>();
  t->tokens_per_step_ = g.tokens_per_step();
  if (auto err = t->start_dashboard(g, o, false))
    return err;
  return t;
}

caf::error run_tracing::start_dashboard(const graph_spec& g, const trace_cli_options& o, bool from_recorder) {
  if (!o.dashboard)
    return {};
  dashboard_options d;
  d.address = o.dashboard_address;
  d.static_dir = default_dashboard_dir();
  d.title = g.file.string();
  d.tokens_per_step = tokens_per_step_;
  auto srv = from_recorder ? dashboard_server::start_live(std::move(d)) : dashboard_server::start_ingest(std::move(d));
  if (!srv)
    return srv.error();
  dashboard_ = std::move(*srv);
  fmt::print("dashboard: {}\n", dashboard_->url());
  std::fflush(stdout);
  return {};
}

std::string run_tracing::finish() {
  if (dashboard_) {
    dashboard_->finish();
    dashboard_->stop();
    dashboard_.reset();
  }
  if (file_.empty())
    return {};
  auto snap = snapshot_trace();
  add_throughput_counters(snap, tokens_per_step_);
  if (auto err = write_chrome_trace(file_, snap); !err.empty())
    return err;
  fmt::print("trace: {} spans written to {}{}\n", snap.spans.size(), file_,
             snap.dropped ? fmt::format(" ({} older spans dropped: raise --trace-buffer to keep them)", snap.dropped)
                          : std::string{});
  return {};
}

} // namespace troupe::cli
