// Greedy core-attention balancing: whole shards when they fit, head or tail cuts
// when not, cheapest bytes per moved pair first (facts: /work/shared/REFERENCES.md,
// "DistCA core-attention disaggregation").
#include "schedulers/planners/attention_planner.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <numeric>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>

namespace troupe::sched {

std::int64_t causal_pairs(std::int64_t q, std::int64_t kv) {
  return q * kv - q * (q - 1) / 2;
}

namespace {

double ratio(const std::vector<std::int64_t>& load) {
  if (load.empty())
    return 1;
  auto total = std::accumulate(load.begin(), load.end(), std::int64_t{0});
  if (total == 0)
    return 1;
  return static_cast<double>(*std::max_element(load.begin(), load.end())) * static_cast<double>(load.size()) /
         static_cast<double>(total);
}

/// The largest n in [0, hi] with f(n) ≤ limit, for f increasing.
template <class F>
std::int64_t largest_fitting(std::int64_t hi, std::int64_t limit, F f) {
  std::int64_t lo = 0;
  while (lo < hi) {
    auto mid = lo + (hi - lo + 1) / 2;
    if (f(mid) <= limit)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/// A way to move part of shard `index`: `q` queries over the prefix `kv`;
/// `tail` says which end of the shard's queries (whole shards: q equals the shard's).
struct candidate {
  std::size_t index = 0;
  std::int64_t q = 0, kv = 0, pairs = 0;
  bool tail = true;
  double bytes = 0;
};

} // namespace

double attention_plan::imbalance_before() const {
  return ratio(before);
}
double attention_plan::imbalance_after() const {
  return ratio(after);
}

attention_plan plan_attention(const std::vector<attention_document>& docs, const attention_plan_options& opts) {
  if (opts.servers < 1)
    throw std::invalid_argument(fmt::format("attention plan: servers must be at least 1, got {}", opts.servers));
  if (!(opts.tolerance >= 0))
    throw std::invalid_argument(fmt::format("attention plan: tolerance must be at least 0, got {}", opts.tolerance));
  const auto n = static_cast<std::size_t>(opts.servers);
  attention_plan plan;
  std::vector<std::int64_t> load(n, 0);
  std::vector<std::map<int, std::int64_t>> held(n); // server -> document -> key prefix it has
  for (std::size_t i = 0; i < docs.size(); ++i) {
    const auto& d = docs[i];
    if (d.length < 1)
      throw std::invalid_argument(fmt::format("attention plan: document {} has length {}", i, d.length));
    if (d.home < 0 || d.home >= opts.servers)
      throw std::invalid_argument(fmt::format("attention plan: document {} comes from replica {}, but there are {} "
                                              "servers (need at least one per replica)",
                                              i, d.home, opts.servers));
    plan.shards.push_back({static_cast<int>(i), d.length, d.length, d.home});
    load[static_cast<std::size_t>(d.home)] += causal_pairs(d.length, d.length);
    held[static_cast<std::size_t>(d.home)][static_cast<int>(i)] = d.length;
  }
  plan.before = load;
  const double avg = static_cast<double>(std::accumulate(load.begin(), load.end(), std::int64_t{0})) / double(n);
  // Each move brings Σ (load − avg)² down by at least 2, so this bounds nothing real.
  for (int guard = 0; guard < 1'000'000; ++guard) {
    auto s = static_cast<std::size_t>(std::max_element(load.begin(), load.end()) - load.begin());
    auto d = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    bool high = double(load[s]) > (1 + opts.tolerance) * avg, low = double(load[d]) < (1 - opts.tolerance) * avg;
    if (!high && !low)
      break;
    auto want = static_cast<std::int64_t>(std::min(double(load[s]) - avg, avg - double(load[d])));
    if (want < 1)
      break;
    std::optional<candidate> best;
    auto consider = [&](candidate c) {
      if (c.q < 1)
        return;
      c.pairs = causal_pairs(c.q, c.kv);
      auto doc = plan.shards[c.index].doc;
      auto it = held[d].find(doc);
      std::int64_t have = it == held[d].end() ? 0 : it->second;
      c.bytes = double(c.q) * opts.query_bytes + double(std::max<std::int64_t>(0, c.kv - have)) * opts.kv_bytes;
      auto cost = [](const candidate& x) { return x.bytes / double(x.pairs); };
      if (!best || cost(c) < cost(*best) || (cost(c) == cost(*best) && c.pairs > best->pairs))
        best = c;
    };
    for (std::size_t i = 0; i < plan.shards.size(); ++i) {
      const auto& sh = plan.shards[i];
      if (static_cast<std::size_t>(sh.server) != s)
        continue;
      if (causal_pairs(sh.q, sh.kv) <= want) {
        consider({i, sh.q, sh.kv, 0, true, 0});
        continue;
      }
      const auto first = sh.kv - sh.q; // the shard's first query
      // Tail: its last t queries over the whole prefix.
      auto t = largest_fitting(sh.q - 1, want, [&](std::int64_t x) { return causal_pairs(x, sh.kv); });
      consider({i, t, sh.kv, 0, true, 0});
      // Head: its first h queries, over the prefix that ends with them.
      auto h = largest_fitting(sh.q - 1, want, [&](std::int64_t x) { return causal_pairs(x, first + x); });
      consider({i, h, first + h, 0, false, 0});
    }
    if (!best)
      break;
    auto& sh = plan.shards[best->index];
    const int doc = sh.doc;
    if (best->q == sh.q) {
      sh.server = static_cast<int>(d);
    } else if (best->tail) { // the shard keeps its head: queries [first, kv − t) over that prefix
      sh.q -= best->q, sh.kv -= best->q;
      plan.shards.push_back({doc, best->q, best->kv, static_cast<int>(d)});
    } else { // the shard keeps its tail: the same prefix, fewer queries
      sh.q -= best->q;
      plan.shards.push_back({doc, best->q, best->kv, static_cast<int>(d)});
    }
    load[s] -= best->pairs, load[d] += best->pairs;
    auto& have = held[d][doc];
    have = std::max(have, best->kv);
    plan.moves.push_back({doc, best->q, best->kv, static_cast<int>(s), static_cast<int>(d), best->bytes});
    plan.bytes += best->bytes;
  }
  plan.after = load;
  return plan;
}

std::vector<attention_document> parse_replica_documents(const std::string& text) {
  std::vector<attention_document> docs;
  int replica = 0;
  std::size_t at = 0;
  while (true) {
    auto end = std::min(text.find_first_of(",/", at), text.size());
    std::int64_t v = 0;
    auto [p, ec] = std::from_chars(text.data() + at, text.data() + end, v);
    if (ec != std::errc{} || p != text.data() + end || v < 1)
      throw std::invalid_argument(fmt::format("'{}' at character {} of '{}' is not a document length (a positive "
                                              "integer; replicas are separated by '/', documents by ',')",
                                              text.substr(at, end - at), at + 1, text));
    docs.push_back({v, replica});
    if (end == text.size())
      break;
    replica += text[end] == '/';
    at = end + 1;
  }
  return docs;
}

} // namespace troupe::sched
