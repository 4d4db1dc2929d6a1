// The graph file's `attention:` section: core attention on attention servers
// (DistCA, Zhuang et al. 2025, arXiv:2510.18121; #15), and what it cannot run with.
#include <charconv>

#include <fmt/format.h>

#include "runtime/graph/graph_parse.hpp"

namespace troupe::detail {

namespace {
const std::vector<std::string> attention_keys{"servers", "nano_batches", "tolerance"};
constexpr int max_servers = 4096;
} // namespace

void parse_attention(parsed_graph& pg, const YAML::Node& n, graph_reader& r) {
  auto& g = pg.graph;
  auto& a = g.attention;
  a.present = true;
  a.pos = r.pos(n, "attention");
  if (!r.check_map(n, "attention", attention_keys))
    return;
  if (auto s = child(n, "servers")) {
    int v = 0;
    auto text = s.IsScalar() ? s.Scalar() : std::string{};
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text == "in_place")
      a.servers = 0;
    else if (ec == std::errc{} && end == text.data() + text.size() && v >= 1 && v <= max_servers)
      a.servers = v;
    else
      r.error(s, "attention.servers",
              fmt::format("expected in_place or a number of attention servers from 1 to {}, got '{}'", max_servers,
                          s.IsScalar() ? text : std::string{"a collection"}));
  }
  r.get_int(n, "attention", "nano_batches", a.nano_batches, 1, 64);
  r.get_double(n, "attention", "tolerance", a.tolerance, 0.0, 1.0);
  if (auto t = child(n, "tolerance"); t && (a.tolerance <= 0.0 || a.tolerance >= 1.0))
    r.error(t, "attention.tolerance", fmt::format("expected a fraction in (0, 1), got {}", a.tolerance));
  if (auto nb = child(n, "nano_batches"); nb && g.data.batch > 0 && a.nano_batches > g.data.batch)
    r.error(nb, "attention.nano_batches",
            fmt::format("{} nano-batches split a microbatch's sequences, but data.batch is {}", a.nano_batches,
                        g.data.batch));
  // What the pieces of a layer cannot run with: paths and routes that mix
  // replicas, device stages. (A split backward, zero-bubble's I and W, runs its
  // I in pieces and each nano-batch's W after it: stage_attention::backward_weight.)
  auto refuse = [&](const std::string& why) { r.error(n, "attention", why); };
  if (g.skip.present)
    refuse("attention servers with SkipPipe paths (skip:) are not supported");
  // (A local-update method's routes across replicas are refused in check_local_update, once they are known.)
  if (g.data_parallel.route != "own")
    refuse(fmt::format("attention servers plan each round over the replicas' own chains; data_parallel.route '{}' "
                       "routes microbatches elsewhere",
                       g.data_parallel.route));
  if (g.pipeline.device != "cpu")
    refuse(fmt::format("attention servers run on the CPU for now; pipeline.device is '{}'", g.pipeline.device));
}

} // namespace troupe::detail
