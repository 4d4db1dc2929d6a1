// Reading a Chrome Trace Event file written by trace_export back into spans,
// for `troupe trace summarize` and `troupe dash`.
#include <algorithm>
#include <climits>
#include <limits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/actor/errors.hpp"
#include "runtime/trace/trace_summary.hpp"

namespace troupe {

namespace {

std::int64_t ns_of(const nlohmann::json& micros) {
  return static_cast<std::int64_t>(std::llround(micros.get<double>() * 1000.0));
}

/// The kind named by the category, else by the event name's first word (`forward mb3`).
span_kind kind_of(const std::string& cat, const std::string& name) {
  auto word = name.substr(0, name.find(' '));
  for (const auto& text : {cat, word})
    for (int k = 0; k <= static_cast<int>(span_kind::other); ++k)
      if (to_string(static_cast<span_kind>(k)) == text)
        return static_cast<span_kind>(k);
  return span_kind::other;
}

template <class T>
T arg(const nlohmann::json& ev, const char* key, T fallback) {
  auto a = ev.find("args");
  if (a == ev.end() || !a->is_object())
    return fallback;
  auto v = a->find(key);
  return v != a->end() && v->is_number() ? v->get<T>() : fallback;
}

/// Steps of counters written without one: the step of the latest optimizer or
/// eval span begun by then; -1 before any (the validation before training
/// evaluates "step -1").
void infer_counter_steps(trace_snapshot& t) {
  std::vector<std::pair<std::int64_t, std::int32_t>> marks;
  for (const auto& s : t.spans)
    if ((s.kind == span_kind::optimizer || s.kind == span_kind::eval) && s.step >= -1)
      marks.push_back({s.begin_ns, s.step});
  std::sort(marks.begin(), marks.end());
  std::int32_t best = -1;
  for (auto& m : marks)
    m.second = best = std::max(best, m.second);
  for (auto& c : t.counters) {
    if (c.step != INT32_MIN)
      continue; // written with its step
    auto it = std::upper_bound(marks.begin(), marks.end(), std::pair{c.t_ns, INT32_MAX});
    c.step = it == marks.begin() ? -1 : std::prev(it)->second;
  }
}

/// A trace whose writer stopped mid-flush (trace_writer in a process that
/// crashed or was killed) ends inside an event or its closing lines. Events are
/// one to a line: cutting at one of the last few line breaks and closing the
/// list gives back every whole event before it.
std::optional<nlohmann::json> parse_cut_short(const std::string& text) {
  if (!text.starts_with(chrome_json_head()))
    return std::nullopt;
  auto tail = chrome_json_tail(0);
  auto cut = text.size();
  for (int tries = 0; tries < 8 && cut > 0; ++tries) {
    cut = text.rfind('\n', cut - 1);
    if (cut == std::string::npos || cut < chrome_json_head().size() - 1)
      return std::nullopt;
    auto end = text.find_last_not_of(" \n,", cut);
    if (end == std::string::npos || (text[end] != '}' && text[end] != '['))
      continue;
    try {
      return nlohmann::json::parse(text.substr(0, end + 1) + tail);
    } catch (const nlohmann::json::exception&) {
    }
  }
  return std::nullopt;
}

} // namespace

caf::expected<trace_snapshot> parse_chrome_trace(const std::string& text, const std::string& origin) {
  nlohmann::json doc;
  bool cut_short = false;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    auto repaired = parse_cut_short(text);
    if (!repaired)
      return make_error(errc::invalid_argument, fmt::format("{}: not JSON: {}", origin, plain_json_error(e.what())));
    doc = std::move(*repaired);
    cut_short = true;
  }
  const nlohmann::json* events = &doc;
  if (doc.is_object()) {
    auto it = doc.find("traceEvents");
    if (it == doc.end())
      return make_error(errc::invalid_argument, fmt::format("{}: no \"traceEvents\" array", origin));
    events = &*it;
  }
  if (!events->is_array())
    return make_error(errc::invalid_argument, fmt::format("{}: \"traceEvents\" is not an array", origin));
  trace_snapshot t;
  t.cut_short = cut_short;
  std::map<std::uint16_t, actor_info> actors;
  std::set<std::uint16_t> has_role;                  // actors whose thread_name says their role
  std::map<std::pair<int, int>, std::size_t> last_x; // (pid, tid) -> index of its latest X span
  std::size_t index = 0;
  try {
    for (const auto& ev : *events) {
      auto where = [&] { return fmt::format("{}: traceEvents[{}]", origin, index); };
      ++index;
      if (!ev.is_object() || !ev.contains("ph"))
        return make_error(errc::invalid_argument, fmt::format("{}: an event without \"ph\"", where()));
      auto ph = ev.at("ph").get<std::string>();
      int pid = ev.value("pid", 0), tid = ev.value("tid", 0);
      if (ph == "M" && ev.value("name", "") == "thread_name") {
        auto& a = actors[static_cast<std::uint16_t>(tid)];
        a.id = static_cast<std::uint16_t>(tid), a.node = pid;
        a.name = ev.at("args").at("name").get<std::string>();
        if (auto ty = ev.at("args").find("type"); ty != ev.at("args").end())
          a.type = ty->get<std::string>();
        if (auto ro = ev.at("args").find("role"); ro != ev.at("args").end())
          a.role = ro->get<std::string>(), has_role.insert(a.id);
        a.position = ev.at("args").value("position", -1);
      } else if (ph == "X") {
        span s;
        s.actor = static_cast<std::uint16_t>(tid);
        s.kind = kind_of(ev.value("cat", ""), ev.value("name", ""));
        s.begin_ns = ns_of(ev.at("ts"));
        s.end_ns = s.begin_ns + ns_of(ev.at("dur"));
        s.step = arg<std::int32_t>(ev, "step", -1);
        s.microbatch = arg<std::int32_t>(ev, "microbatch", -1);
        s.bytes = arg<std::uint64_t>(ev, "bytes", 0);
        s.mailbox = arg<std::uint32_t>(ev, "mailbox", 0);
        last_x[{pid, tid}] = t.spans.size();
        t.spans.push_back(s);
      } else if (ph == "s" || ph == "f") {
        auto it = last_x.find({pid, tid});
        if (it == last_x.end())
          return make_error(errc::invalid_argument, fmt::format("{}: a flow event before any span", where()));
        auto& s = t.spans[it->second];
        s.flow =
          ev.at("id").is_string() ? std::stoull(ev.at("id").get<std::string>()) : ev.at("id").get<std::uint64_t>();
        s.flow_end = ph == "f";
      } else if (ph == "C") {
        // Traces older than the `step` argument get their steps inferred below.
        t.counters.push_back({ns_of(ev.at("ts")), ev.at("name").get<std::string>(), arg<double>(ev, "value", 0.0),
                              arg<std::int32_t>(ev, "step", INT32_MIN)});
      }
    }
    if (doc.is_object() && doc.contains("otherData")) {
      t.dropped = doc["otherData"].value("dropped_spans", std::uint64_t{0});
      t.epoch_ns = doc["otherData"].value("epoch_ns", std::int64_t{-1});
    }
  } catch (const std::exception& e) {
    return make_error(errc::invalid_argument, fmt::format("{}: traceEvents[{}]: malformed event: {}", origin, index - 1,
                                                          plain_json_error(e.what())));
  }
  for (auto& [id, a] : actors) {
    if (has_role.count(id) && !a.type.empty())
      continue;
    // Older traces name no role (and older still no type): an actor that runs
    // forward and backward passes is a stage.
    bool computes = std::any_of(t.spans.begin(), t.spans.end(),
                                [&](const span& s) { return s.actor == id && action_letter(s.kind); });
    if (!has_role.count(id))
      a.role = computes ? std::string{stage_role} : "";
    if (a.type.empty())
      a.type = "actor";
  }
  for (std::uint16_t i = 0; !actors.empty() && i <= actors.rbegin()->first; ++i) {
    auto it = actors.find(i);
    t.actors.push_back(it != actors.end() ? it->second : actor_info{i, fmt::format("actor{}", i), "actor", 0});
  }
  for (const auto& s : t.spans)
    if (s.actor >= t.actors.size())
      return make_error(errc::invalid_argument,
                        fmt::format("{}: spans on thread {} that has no thread_name", origin, s.actor));
  infer_counter_steps(t);
  return t;
}

namespace {

/// `X.node0.json`, `X.node1.json`, ... beside `X.json`, in node order, up to the first gap.
std::vector<std::filesystem::path> node_files(const std::filesystem::path& path) {
  std::vector<std::filesystem::path> out;
  std::error_code ec;
  for (int node = 0;; ++node) {
    auto f = path.parent_path() / fmt::format("{}.node{}{}", path.stem().string(), node, path.extension().string());
    if (!std::filesystem::exists(f, ec))
      return out;
    out.push_back(f);
  }
}

/// One snapshot of a launch's node traces: each file's actors get ids of their
/// own (every node numbers its actors from 0), and each file's times move by
/// its steady-clock epoch against the earliest, when every file records one
/// (the nodes of one host share that clock; other hosts' clocks are not aligned).
trace_snapshot merge_nodes(std::vector<trace_snapshot> parts) {
  bool aligned = std::all_of(parts.begin(), parts.end(), [](const auto& p) { return p.epoch_ns >= 0; });
  auto first = std::numeric_limits<std::int64_t>::max();
  for (const auto& p : parts)
    first = std::min(first, p.epoch_ns);
  trace_snapshot out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    auto& p = parts[i];
    auto shift = aligned ? p.epoch_ns - first : 0;
    auto base = static_cast<std::uint16_t>(out.actors.size());
    for (auto a : p.actors) {
      a.id = static_cast<std::uint16_t>(base + a.id);
      a.node = static_cast<int>(i);
      out.actors.push_back(std::move(a));
    }
    for (auto sp : p.spans) {
      sp.actor = static_cast<std::uint16_t>(base + sp.actor);
      sp.begin_ns += shift, sp.end_ns += shift;
      out.spans.push_back(sp);
    }
    for (auto c : p.counters) {
      c.t_ns += shift;
      out.counters.push_back(std::move(c));
    }
    out.dropped += p.dropped;
    out.cut_short |= p.cut_short;
  }
  std::stable_sort(out.counters.begin(), out.counters.end(),
                   [](const counter_sample& a, const counter_sample& b) { return a.t_ns < b.t_ns; });
  out.epoch_ns = aligned ? first : -1;
  return out;
}

} // namespace

caf::expected<trace_snapshot> read_chrome_trace(const std::filesystem::path& path) {
  // A launched run writes one file per node (X.node0.json, ...): X.json names them all.
  if (std::error_code ec; !std::filesystem::exists(path, ec))
    if (auto nodes = node_files(path); !nodes.empty()) {
      std::vector<trace_snapshot> parts;
      for (const auto& f : nodes) {
        auto t = read_chrome_trace(f);
        if (!t)
          return t.error();
        parts.push_back(std::move(*t));
      }
      return merge_nodes(std::move(parts));
    }
  // /dev/zero never ends: read only a regular file, and only up to a bound
  // (a day's trace at the default buffer is far below it).
  constexpr std::uintmax_t max_trace_bytes = std::uintmax_t{4} << 30;
  std::error_code ec;
  auto st = std::filesystem::status(path, ec);
  if (std::filesystem::is_directory(st))
    return make_error(errc::invalid_argument, fmt::format("{}: is a directory, not a trace file", path.string()));
  if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    return make_error(errc::invalid_argument,
                      fmt::format("{}: is a device or other special file, not a trace file", path.string()));
  if (auto size = std::filesystem::file_size(path, ec); !ec && size > max_trace_bytes)
    return make_error(errc::invalid_argument,
                      fmt::format("{}: {} bytes is more than a trace file holds (the limit is {} "
                                  "GiB)",
                                  path.string(), size, max_trace_bytes >> 30));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return make_error(errc::io_failed, fmt::format("{}: cannot open the trace file", path.string()));
  std::ostringstream buf;
  buf << in.rdbuf();
  return parse_chrome_trace(buf.str(), path.string());
}

} // namespace troupe
