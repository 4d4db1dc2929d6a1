// `troupe plan attention --docs LENGTHS`: DistCA's core-attention plan
// (schedulers/planners/attention_planner.hpp) for each replica's document lengths: every
// server's causal pairs before and after, max/avg, and the shards moved.
#include <algorithm>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "deploy/cli/commands.hpp"
#include "deploy/cli/flags.hpp"
#include "runtime/graph/limits.hpp"
#include "schedulers/planners/attention_planner.hpp"

namespace troupe::cli {

namespace {

using namespace troupe::sched;

/// What is wrong with `--docs TEXT`, or nothing.
std::string checked_docs(const std::string& text) {
  std::vector<attention_document> docs;
  try {
    docs = parse_replica_documents(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  if (docs.size() > limits::max_attention_documents)
    return fmt::format("{} documents; at most {}", docs.size(), limits::max_attention_documents);
  std::int64_t total = 0;
  for (const auto& d : docs)
    if ((total += d.length) > limits::max_attention_tokens)
      return fmt::format("the documents total more than {} tokens (their causal pairs must fit 64 bits)",
                         limits::max_attention_tokens);
  return {};
}

/// Where a document sits in `--docs`: its replica and its index within that replica.
struct doc_place {
  int replica = 0, index = 0;
};

/// Each document's place, from documents whose homes are still their replicas.
std::vector<doc_place> places(const std::vector<attention_document>& docs) {
  std::vector<doc_place> out;
  for (std::size_t i = 0; i < docs.size(); ++i) {
    bool same = i > 0 && docs[i].home == docs[i - 1].home;
    out.push_back({docs[i].home, same ? out.back().index + 1 : 0});
  }
  return out;
}

/// The text report; `docs` with their homes as replicas.
void print_text(const std::vector<attention_document>& docs, int replicas, const attention_plan_options& opts,
                const attention_plan& plan) {
  auto sum = [](const std::vector<std::int64_t>& v) { return std::accumulate(v.begin(), v.end(), std::int64_t{0}); };
  fmt::print("troupe plan attention: {} documents from {} replicas on {} servers (replica r starts on server r mod "
             "{}), tolerance {}\n",
             docs.size(), replicas, opts.servers, opts.servers, opts.tolerance);
  fmt::print("{:>7} {:>16} {:>16}\n", "server", "pairs before", "pairs after");
  for (std::size_t s = 0; s < plan.before.size(); ++s)
    fmt::print("{:>7} {:>16} {:>16}\n", s, plan.before[s], plan.after[s]);
  fmt::print("{:>7} {:>16} {:>16}\n", "total", sum(plan.before), sum(plan.after));
  fmt::print("{:>7} {:>16.3f} {:>16.3f}\n", "max/avg", plan.imbalance_before(), plan.imbalance_after());
  if (plan.moves.empty()) {
    fmt::print("no moves: every server is within (1 ± {}) × the average\n", opts.tolerance);
    return;
  }
  const auto at = places(docs);
  fmt::print("moves, in the order made (doc: its index in --docs from 0; replica:i: its replica and index "
             "there; the move's queries [kv − q, kv) attend keys [0, kv)):\n");
  fmt::print("{:>6} {:>9} {:>10} {:>10} {:>22} {:>5} {:>5} {:>12}\n", "doc", "replica:i", "q", "kv", "queries", "from",
             "to", "bytes");
  std::int64_t queries = 0, pairs = 0;
  for (const auto& m : plan.moves) {
    const auto& p = at[static_cast<std::size_t>(m.doc)];
    fmt::print("{:>6} {:>9} {:>10} {:>10} {:>22} {:>5} {:>5} {:>12.0f}\n", m.doc,
               fmt::format("{}:{}", p.replica, p.index), m.q, m.kv, fmt::format("[{}, {})", m.kv - m.q, m.kv), m.from,
               m.to, m.bytes);
    queries += m.q, pairs += causal_pairs(m.q, m.kv);
  }
  fmt::print("total: {} moves, {} queries, {} pairs, {:.0f} bytes\n", plan.moves.size(), queries, pairs, plan.bytes);
  fmt::print("(bytes in token rows: {:g} per query moved, q out and o back, and {:g} per key the destination lacks, "
             "k and v; times hidden size times bytes per element gives bytes)\n",
             opts.query_bytes, opts.kv_bytes);
  fmt::print("shards of the documents that left home (the others stay whole on their home server):\n");
  for (std::size_t doc = 0; doc < docs.size(); ++doc) {
    std::vector<attention_shard> mine;
    for (const auto& s : plan.shards)
      if (s.doc == static_cast<int>(doc))
        mine.push_back(s);
    if (mine.size() == 1 && mine.front().server == docs[doc].home % opts.servers)
      continue;
    std::sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) { return a.kv < b.kv; });
    std::vector<std::string> parts;
    for (const auto& s : mine)
      parts.push_back(fmt::format("[{}, {}) on {}", s.kv - s.q, s.kv, s.server));
    fmt::print("  doc {} ({}:{}, length {}): {}\n", doc, at[doc].replica, at[doc].index, docs[doc].length,
               fmt::join(parts, ", "));
  }
}

nlohmann::json to_json(const attention_plan_options& opts, const attention_plan& plan) {
  nlohmann::json moved = nlohmann::json::array(), shards = nlohmann::json::array();
  for (const auto& m : plan.moves)
    moved.push_back({{"doc", m.doc}, {"q", m.q}, {"kv", m.kv}, {"from", m.from}, {"to", m.to}, {"bytes", m.bytes}});
  for (const auto& s : plan.shards)
    shards.push_back({{"doc", s.doc}, {"q", s.q}, {"kv", s.kv}, {"server", s.server}});
  return {{"servers", opts.servers},
          {"tolerance", opts.tolerance},
          {"before", plan.before},
          {"after", plan.after},
          {"imbalance_before", plan.imbalance_before()},
          {"imbalance_after", plan.imbalance_after()},
          {"moved", moved},
          {"bytes", plan.bytes},
          {"shards", shards}};
}

struct attention_args {
  std::string docs;
  int servers = 0; ///< 0: one per replica
  double tolerance = 0.1;
  bool json = false;
};

int run_plan(const attention_args& a) {
  auto docs = parse_replica_documents(a.docs); // checked while parsing the command line
  const int replicas = docs.back().home + 1;
  attention_plan_options opts;
  opts.servers = a.servers > 0 ? a.servers : replicas;
  opts.tolerance = a.tolerance;
  auto origin = docs; // homes as replicas, for the text's replica:index
  for (auto& d : docs)
    d.home %= opts.servers;
  auto result = plan_attention(docs, opts);
  if (a.json)
    fmt::print("{}\n", to_json(opts, result).dump(2));
  else
    print_text(origin, replicas, opts, result);
  return ok;
}

} // namespace

command_action define_plan_attention(CLI::App& app) {
  auto a = std::make_shared<attention_args>();
  describe(app,
           "Plans DistCA's core-attention disaggregation for one step: every document's causal attention starts "
           "whole on its replica's server, and the planner moves shards of documents (a document's queries, over "
           "the keys before them) from the most to the least loaded server until max and min are within (1 ± "
           "tolerance) × the average, cheapest bytes per pair moved first. Prints each server's pairs before and "
           "after, max/avg, and the moves.",
           "Replica r's documents start on server r mod --servers, so fewer servers than replicas share them.\n"
           "Exit codes: 0 success, 2 bad input.\n");
  app
    .add_option("--docs", a->docs,
                "each replica's document lengths in tokens: replicas separated by '/',\n"
                "documents by ',' (e.g. 16384/8192,8192/4096,4096,4096,4096)")
    ->option_text("LENGTHS")
    ->required()
    ->check(CLI::Validator([](const std::string& text) { return checked_docs(text); }, ""));
  add_count(app, "--servers", a->servers, 1, limits::max_nodes, "attention servers (default: one per replica)")
    ->option_text("N");
  add_fraction(app, "--tolerance", a->tolerance, "stop once every server is within (1 ± T) × the average; default 0.1")
    ->option_text("T");
  app.add_flag("--json", a->json,
               "print one JSON object: before and after (pairs per server), moved ({doc, q, kv,\n"
               "from, to, bytes}, doc its index in --docs), imbalance_before and _after\n"
               "(max/avg), bytes, shards ({doc, q, kv, server})");
  return [a] { return run_plan(*a); };
}

} // namespace troupe::cli
