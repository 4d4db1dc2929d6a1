// The core-attention task planner of DistCA (Zhuang et al. 2025, arXiv:2510.18121;
// hao-ai-lab/DistCA): balances causal attention pairs across attention servers by
// moving shards of documents, a pure function of the document lengths.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::sched {

/// One core-attention task: the last `q` query tokens of the prefix of length `kv`
/// of document `doc`, i.e. queries [kv − q, kv) over keys [0, kv), on `server`.
struct attention_shard {
  int doc = 0;
  std::int64_t q = 0, kv = 0;
  int server = 0;
};

/// Causal (query, key) pairs of a shard: q·kv − q(q−1)/2 (a whole document of
/// length L: L(L+1)/2).
std::int64_t causal_pairs(std::int64_t q, std::int64_t kv);

/// A document and the server whose data it came from (its home: its keys and
/// values are there, so shards that stay home send nothing).
struct attention_document {
  std::int64_t length = 0;
  int home = 0;
};

struct attention_plan_options {
  int servers = 1;
  double tolerance = 0.1; ///< stop once every server is within (1 ± tolerance) × the average
  /// Relative bytes a moved shard sends per query token (q there, the output
  /// back) and per key token (k and v, once per destination and document).
  double query_bytes = 2, kv_bytes = 2;
};

/// A move the planner made: `q` queries of `doc` over its prefix `kv`, from one server to another.
struct attention_move {
  int doc = 0;
  std::int64_t q = 0, kv = 0;
  int from = 0, to = 0;
  double bytes = 0; ///< what the move sends (attention_plan_options' units)
};

struct attention_plan {
  std::vector<std::int64_t> before, after; ///< pairs per server
  std::vector<attention_shard> shards;     ///< every task, after the moves
  std::vector<attention_move> moves;       ///< in the order made
  double bytes = 0;                        ///< Σ over the moves
  double imbalance_before() const;         ///< max / average pairs
  double imbalance_after() const;
};

/// Balances the documents' causal pairs across `opts.servers` servers (documents
/// start whole on their home server, which must be in range). Greedy, as DistCA:
/// while the most loaded server is above (1 + tolerance) × average or the least
/// loaded below (1 − tolerance) × average, move work from the most to the least
/// loaded, at most what brings either to the average. Candidates are the shards on
/// the most loaded server, whole when they fit, else their head (first queries) or
/// tail (last queries) cut to fit; the one sending the fewest bytes per pair moved
/// goes first (keys and values a destination already holds are not sent again).
/// Conserves the total pairs and each document's queries (its shards' query
/// ranges partition [0, length)). Throws std::invalid_argument on bad input.
attention_plan plan_attention(const std::vector<attention_document>& docs, const attention_plan_options& opts);

/// Parses `--docs`: each replica's document lengths, replicas separated by `/`
/// and lengths by `,` ("16384/8192,8192/4096,4096"); replica r is home r. Throws
/// std::invalid_argument naming the bad part.
std::vector<attention_document> parse_replica_documents(const std::string& text);

} // namespace troupe::sched
