// `troupe run`'s tracing: options, the recorder, the dashboard and the file.
#include "deploy/cli/run_tracing.hpp"

#include <charconv>
#include <cstring>
#include <filesystem>
#include <string>

#include <fmt/format.h>

#include "deploy/cli/commands.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/graph/output_path.hpp"
#include "runtime/graph/limits.hpp"
#include "runtime/trace/trace.hpp"
#include "runtime/trace/trace_writer.hpp"

namespace troupe::cli {

const char* const trace_options_help =
  R"(  --trace FILE.json      record spans into Chrome Trace Event JSON there, written as
                         the run goes so it holds the whole run, and what ran
                         so far if the run fails or is killed; opens in
                         Perfetto and chrome://tracing (default: the graph's
                         trace.file)
  --trace-buffer N       spans a thread's ring holds until they are written
                         (every 0.25 s; default 65536); spans a ring overwrites
                         before then are counted as dropped
  --no-trace             ignore the graph's trace.file
  --dashboard [ADDR]     serve the live dashboard at ADDR (default 127.0.0.1:8080;
                         :0 picks a free port; the URL is printed)
)";

namespace {

/// An address after --dashboard, rather than the graph file or another option.
bool looks_like_address(std::string_view s) {
  if (s.empty() || s.starts_with("-") || s.ends_with(".yaml") || s.ends_with(".yml"))
    return false;
  return s.find(':') != std::string_view::npos || s.find_first_not_of("0123456789") == std::string_view::npos;
}

} // namespace

bool take_trace_options(std::vector<char*>& args, trace_cli_options& out, std::string_view command) {
  std::vector<char*> rest;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    auto value = [&](const char* opt) -> const char* {
      if (i + 1 >= args.size()) {
        fmt::print(stderr, "troupe {}: {} expects a value\n", command, opt);
        return nullptr;
      }
      return args[++i];
    };
    if (a == "--trace") {
      auto v = value("--trace");
      if (!v)
        return false;
      out.file = v;
    } else if (a.starts_with("--trace=")) {
      out.file = std::string{a.substr(8)};
    } else if (a == "--trace-buffer" || a.starts_with("--trace-buffer=")) {
      const char* v = a == "--trace-buffer" ? value("--trace-buffer") : args[i] + 15;
      if (!v)
        return false;
      std::int64_t n = 0;
      std::string cmd{command};
      if (!parse_count(cmd.c_str(), v, "--trace-buffer", 2, limits::max_trace_buffer, n))
        return false;
      out.buffer = static_cast<std::size_t>(n);
    } else if (a == "--no-trace") {
      out.no_trace = true;
    } else if (a == "--dashboard") {
      out.dashboard = true;
      if (i + 1 < args.size() && looks_like_address(args[i + 1]))
        out.dashboard_address = args[++i];
    } else if (a.starts_with("--dashboard=")) {
      out.dashboard = true;
      out.dashboard_address = std::string{a.substr(12)};
    } else {
      rest.push_back(args[i]);
    }
  }
  if (out.dashboard) {
    if (auto addr = parse_listen_address(out.dashboard_address); !addr) {
      fmt::print(stderr, "troupe {}: --dashboard: {}\n", command, error_message(addr.error()));
      return false;
    }
  }
  args = std::move(rest);
  return true;
}

std::string node_trace_file(const std::string& file, int node) {
  std::filesystem::path f{file};
  return (f.parent_path() / fmt::format("{}.node{}{}", f.stem().string(), node, f.extension().string())).string();
}

caf::expected<std::unique_ptr<run_tracing>> run_tracing::start(const graph_spec& g, trace_cli_options o) {
  auto t = std::make_unique<run_tracing>();
  t->file_ = !o.file.empty() ? o.file : o.no_trace ? std::string{} : g.trace.file;
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

std::string run_tracing::finish() {
  if (dashboard_) {
    dashboard_->finish();
    dashboard_->stop();
    dashboard_.reset();
  }
  if (!writer_)
    return {};
  auto err = writer_->finish();
  if (!err.empty())
    return err;
  auto dropped = writer_->dropped();
  fmt::print("trace: {} spans written to {} ({:.3f} s of CPU to write){}\n", writer_->spans_written(), file_,
             static_cast<double>(writer_->cpu_ns()) * 1e-9,
             dropped ? fmt::format(" ({} spans dropped: a ring filled before they were written; raise --trace-buffer)",
                                   dropped)
                     : std::string{});
  writer_.reset();
  return {};
}

} // namespace troupe::cli
