// Chrome Trace Event JSON export.
#include "runtime/trace/trace_export.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

namespace troupe {

namespace {

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        else
          out += c;
    }
  }
  return out + "\"";
}

/// Trace Event timestamps are microseconds; keep nanosecond precision as decimals.
std::string micros(std::int64_t ns) {
  return fmt::format("{}.{:03}", ns / 1000, ns % 1000);
}

int node_of(const std::vector<actor_info>& actors, std::uint16_t id) {
  return id < actors.size() ? actors[id].node : 0;
}

} // namespace

trace_snapshot snapshot_trace() {
  auto& r = trace_recorder::global();
  trace_snapshot t;
  t.actors = r.actors();
  trace_recorder::cursor c;
  r.collect(c, t.spans, &t.counters);
  t.dropped = r.dropped();
  return t;
}

std::string to_chrome_json(const trace_snapshot& t) {
  auto spans = t.spans;
  std::sort(spans.begin(), spans.end(), [](const span& a, const span& b) {
    return a.actor != b.actor ? a.actor < b.actor : a.begin_ns < b.begin_ns;
  });
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto emit = [&](const std::string& ev) {
    out += first ? "" : ",\n";
    out += ev;
    first = false;
  };
  std::vector<int> nodes;
  for (const auto& a : t.actors)
    if (std::find(nodes.begin(), nodes.end(), a.node) == nodes.end())
      nodes.push_back(a.node);
  for (int n : nodes)
    emit(fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{{"name":"node {}"}}}})", n, n));
  for (const auto& a : t.actors) {
    emit(fmt::format(
        R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":{},"type":{},"role":{}}}}})",
        a.node, a.id, json_string(a.name), json_string(a.type), json_string(a.role)));
    emit(fmt::format(R"({{"ph":"M","name":"thread_sort_index","pid":{},"tid":{},"args":{{"sort_index":{}}}}})",
                     a.node, a.id, a.id));
  }
  for (const auto& s : spans) {
    auto pid = node_of(t.actors, s.actor);
    auto name = to_string(s.kind);
    // DevTools pairs a flow with the slices it binds to by category: sends,
    // receives and their flow events share one.
    std::string_view cat = s.flow != 0 ? "message" : name;
    std::string label = s.microbatch >= 0 ? fmt::format("{} mb{}", name, s.microbatch) : std::string{name};
    emit(fmt::format(R"({{"ph":"X","name":{},"cat":{},"pid":{},"tid":{},"ts":{},"dur":{},)"
                     R"("args":{{"step":{},"microbatch":{},"bytes":{},"mailbox":{}}}}})",
                     json_string(label), json_string(cat), pid, s.actor, micros(s.begin_ns),
                     micros(std::max<std::int64_t>(0, s.end_ns - s.begin_ns)), s.step, s.microbatch, s.bytes,
                     s.mailbox));
    if (s.flow != 0)
      emit(fmt::format(R"({{"ph":"{}","name":"microbatch","cat":"message","id":{},"pid":{},"tid":{},"ts":{}{}}})",
                       s.flow_end ? "f" : "s", s.flow, pid, s.actor, micros(s.begin_ns),
                       s.flow_end ? R"(,"bp":"e")" : ""));
  }
  for (const auto& c : t.counters) // JSON has no NaN: a diverged loss is written as null
    emit(fmt::format(R"({{"ph":"C","name":{},"pid":0,"tid":0,"ts":{},"args":{{"value":{}}}}})",
                     json_string(c.name), micros(c.t_ns), std::isfinite(c.value) ? fmt::format("{}", c.value) : "null"));
  out += fmt::format("\n],\"otherData\":{{\"dropped_spans\":{}}}}}\n", t.dropped);
  return out;
}

std::string write_chrome_trace(const std::filesystem::path& path, const trace_snapshot& t) {
  std::error_code ec;
  if (path.has_parent_path())
    std::filesystem::create_directories(path.parent_path(), ec);
  auto tmp = path;
  tmp += ".tmp";
  // Whatever fails, no temporary file is left behind (the caller reports the failure).
  auto fail = [&](std::string why) {
    std::filesystem::remove(tmp, ec);
    return why;
  };
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out)
      return fail(fmt::format("{}: cannot write trace: {}", tmp.string(), std::strerror(errno)));
    auto json = to_chrome_json(t);
    out.write(json.data(), static_cast<std::streamsize>(json.size()));
    out.flush();
    if (!out)
      return fail(fmt::format("{}: writing trace failed: {}", tmp.string(), std::strerror(errno)));
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    return fail(fmt::format("{}: cannot move trace into place: {}", path.string(), ec.message()));
  return {};
}

} // namespace troupe
