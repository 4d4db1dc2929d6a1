// `troupe run`'s tracing: options, the recorder, the dashboard and the file.
#include "deploy/run/run_tracing.hpp"

#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "runtime/actor/errors.hpp"
#include "runtime/graph/output_path.hpp"
#include "runtime/trace/trace.hpp"
#include "runtime/trace/trace_writer.hpp"

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
  if (!t->file_.empty()) {
    auto w = trace_writer::open(t->file_, t->tokens_per_step_);
    if (!w)
      return w.error();
    t->writer_ = std::move(*w);
  }
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

caf::error run_tracing::finish() {
  if (dashboard_) {
    dashboard_->finish();
    dashboard_->stop();
    dashboard_.reset();
  }
  if (!writer_)
    return {};
  if (auto err = writer_->finish())
    return err;
  auto dropped = writer_->dropped();
  fmt::print(
    "trace: {} spans written to {} ({:.3f} s of CPU to write){}\n", writer_->spans_written(), file_,
    static_cast<double>(writer_->cpu_ns()) * 1e-9,
    dropped ? fmt::format(" ({} spans dropped: a ring filled before they were written; raise --trace-buffer)", dropped)
            : std::string{});
  writer_.reset();
  return {};
}

} // namespace troupe::cli
