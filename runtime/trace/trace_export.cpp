// Chrome Trace Event JSON export.
#include "runtime/trace/trace_export.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

#include <fmt/format.h>

namespace troupe {

namespace {

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    default:
      if (static_cast<unsigned char>(c) < 0x20)
        out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
      else
        out += c;
    }
  }
  return out + "\"";
}

/// Trace Event timestamps are microseconds; keep nanosecond precision as
/// decimals: the whole microseconds and the nanoseconds after them, for "{}.{:03}".
std::pair<std::int64_t, std::int64_t> micros(std::int64_t ns) {
  auto us = ns >= 0 ? ns / 1000 : -((-ns + 999) / 1000); // floor, so the decimals are never negative
  return {us, ns - us * 1000};
}

int node_of(const std::vector<actor_info>& actors, std::uint16_t id) {
  return id < actors.size() ? actors[id].node : 0;
}

} // namespace

trace_snapshot snapshot_trace() {
  auto& r = trace_recorder::global();
  trace_snapshot t;
  trace_recorder::cursor c;
  r.collect(c, t.spans, &t.counters);
  t.actors = r.actors(); // after the spans: every span's actor is named
  t.dropped = c.missed;
  return t;
}

void chrome_json_events::separate() {
  if (!first_)
    out_ += ",\n";
  first_ = false;
}

void chrome_json_events::emit(std::string_view event) {
  separate();
  out_ += event;
}

std::string chrome_json_events::take() {
  return std::exchange(out_, {});
}

void chrome_json_events::add_node(int n) {
  emit(fmt::format(R"({{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{{"name":"node {}"}}}})", n, n));
}

void chrome_json_events::add_actor(const actor_info& a) {
  emit(fmt::format(
    R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":{},"type":{},"role":{},"position":{}}}}})",
    a.node, a.id, json_string(a.name), json_string(a.type), json_string(a.role), a.position));
  emit(fmt::format(R"({{"ph":"M","name":"thread_sort_index","pid":{},"tid":{},"args":{{"sort_index":{}}}}})", a.node,
                   a.id, a.id));
}

void chrome_json_events::add_span(const span& s, int pid) {
  // Written straight into the buffer, no temporaries: a run writes hundreds of
  // thousands of these (a kind's name needs no escaping).
  auto name = to_string(s.kind);
  // DevTools pairs a flow with the slices it binds to by category: sends,
  // receives and their flow events share one.
  std::string_view cat = s.flow != 0 ? "message" : name;
  auto ts = micros(s.begin_ns);
  auto dur = micros(std::max<std::int64_t>(0, s.end_ns - s.begin_ns));
  separate();
  auto out = std::back_inserter(out_);
  fmt::format_to(out, R"({{"ph":"X","name":"{})", name);
  if (s.microbatch >= 0)
    fmt::format_to(out, " mb{}", s.microbatch);
  fmt::format_to(out,
                 R"(","cat":"{}","pid":{},"tid":{},"ts":{}.{:03},"dur":{}.{:03},)"
                 R"("args":{{"step":{},"microbatch":{},"bytes":{},"mailbox":{}}}}})",
                 cat, pid, s.actor, ts.first, ts.second, dur.first, dur.second, s.step, s.microbatch, s.bytes,
                 s.mailbox);
  if (s.flow != 0) {
    separate();
    fmt::format_to(out,
                   R"({{"ph":"{}","name":"microbatch","cat":"message","id":{},"pid":{},"tid":{},"ts":{}.{:03}{}}})",
                   s.flow_end ? "f" : "s", s.flow, pid, s.actor, ts.first, ts.second, s.flow_end ? R"(,"bp":"e")" : "");
  }
}

void chrome_json_events::add_counter(const counter_sample& c) {
  auto ts = micros(c.t_ns);
  // The step travels too: replicas of local-update training are at different steps at one time.
  emit(fmt::format(R"({{"ph":"C","name":{},"pid":0,"tid":0,"ts":{}.{:03},"args":{{"value":{},"step":{}}}}})",
                   json_string(c.name), ts.first, ts.second,
                   std::isfinite(c.value) ? fmt::format("{}", c.value) : "null", c.step));
}

std::string chrome_json_head() {
  return "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
}

std::string chrome_json_tail(std::uint64_t dropped, std::int64_t epoch_ns) {
  if (epoch_ns >= 0)
    return fmt::format("\n],\"otherData\":{{\"dropped_spans\":{},\"epoch_ns\":{}}}}}\n", dropped, epoch_ns);
  return fmt::format("\n],\"otherData\":{{\"dropped_spans\":{}}}}}\n", dropped);
}

std::string to_chrome_json(const trace_snapshot& t) {
  auto spans = t.spans;
  std::sort(spans.begin(), spans.end(), [](const span& a, const span& b) {
    return a.actor != b.actor ? a.actor < b.actor : a.begin_ns < b.begin_ns;
  });
  chrome_json_events ev;
  std::vector<int> nodes;
  for (const auto& a : t.actors)
    if (std::find(nodes.begin(), nodes.end(), a.node) == nodes.end())
      nodes.push_back(a.node);
  for (int n : nodes)
    ev.add_node(n);
  for (const auto& a : t.actors)
    ev.add_actor(a);
  for (const auto& s : spans)
    ev.add_span(s, node_of(t.actors, s.actor));
  for (const auto& c : t.counters)
    ev.add_counter(c);
  return chrome_json_head() + ev.take() + chrome_json_tail(t.dropped, t.epoch_ns);
}

} // namespace troupe
