// The graph file's `data_parallel:` section: how many replicas of the pipeline
// a run trains, the gradient bucket size their all-reduce uses and what it sends
// its chunks as, and the ZeRO stage.
#include <cctype>
#include <charconv>
#include <optional>

#include <fmt/format.h>

#include "runtime/graph/graph_parse.hpp"

namespace troupe::detail {

namespace {

const std::vector<std::string> data_parallel_keys{"replicas", "bucket", "zero", "overlap", "route", "wire"};
constexpr int max_replicas = 4096;
constexpr std::int64_t max_bucket = std::int64_t{1} << 34;

/// `4MB`, `512KB`, `1MiB`, `65536` or `65536B` as bytes (decimal units are
/// 1000s, binary ones 1024s, as the bandwidth units are); nullopt otherwise.
std::optional<std::int64_t> parse_bytes(std::string_view s) {
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || v < 0)
    return std::nullopt;
  std::string unit{end, s.data() + s.size()};
  while (!unit.empty() && unit.front() == ' ')
    unit.erase(unit.begin());
  static const std::vector<std::pair<std::string, double>> units{
    {"", 1},     {"B", 1},        {"KB", 1e3},        {"MB", 1e6},
    {"GB", 1e9}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
  for (const auto& [name, scale] : units)
    if (unit == name)
      return static_cast<std::int64_t>(v * scale + 0.5);
  return std::nullopt;
}

} // namespace

void parse_data_parallel(parsed_graph& pg, const YAML::Node& n, graph_reader& r) {
  auto& d = pg.graph.data_parallel;
  d.present = true;
  if (!r.check_map(n, "data_parallel", data_parallel_keys))
    return;
  r.get_int(n, "data_parallel", "replicas", d.replicas, 1, max_replicas);
  if (auto b = child(n, "bucket")) {
    auto text = r.as_string(b, "data_parallel.bucket");
    auto bytes = text ? parse_bytes(*text) : std::nullopt;
    if (text && (!bytes || *bytes < 4 || *bytes > max_bucket))
      r.error(b, "data_parallel.bucket",
              fmt::format("expected a size from 4 bytes to 16GiB (`4MB`, `512KB`, `1MiB` or a number of bytes), "
                          "got '{}'",
                          *text));
    else if (bytes)
      d.bucket = *bytes;
  }
  if (auto rep = child(n, "replicas"); rep && d.replicas > 1) {
    const auto& p = pg.graph.pipeline;
    if (p.routing != "chain")
      r.error(
        rep, "data_parallel.replicas",
        fmt::format("replicas take the 'chain' routing of their own pipeline (pipeline.routing is '{}')", p.routing));
  }
  r.get_bool(n, "data_parallel", "overlap", d.overlap);
  if (auto rt = child(n, "route")) { // routing around stragglers: schedulers/routing/least_loaded.hpp
    auto text = r.as_string(rt, "data_parallel.route");
    if (text && *text != "own" && *text != "least_loaded")
      r.error(rt, "data_parallel.route", fmt::format("unknown route '{}' (known: own, least_loaded)", *text));
    else if (text)
      d.route = *text;
  }
  if (auto w = child(n, "wire");
      w && r.get_string(n, "data_parallel", "wire", d.wire) && d.wire != "f32" && d.wire != "bf16")
    r.error(w, "data_parallel.wire", fmt::format("expected f32 or bf16, got '{}'", d.wire));
  if (auto z = child(n, "zero")) {
    auto v = r.as_int(z, "data_parallel.zero", 0, 2);
    if (v && *v > 0 && d.replicas < 2)
      r.error(z, "data_parallel.zero",
              fmt::format("ZeRO stage {} shards the optimizer state over the replicas: it needs "
                          "data_parallel.replicas of 2 or more",
                          *v));
    else if (v && *v > 0 && d.wire != "f32")
      r.error(z, "data_parallel.zero", "ZeRO's rings send f32; data_parallel.wire: bf16 is for the plain all-reduce");
    else if (v)
      d.zero = static_cast<int>(*v);
  }
}

} // namespace troupe::detail
