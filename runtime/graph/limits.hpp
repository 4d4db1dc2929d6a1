// Upper bounds past which a size is a mistake rather than a big run: the graph
// loader checks a file's values against them and every `troupe` command its
// numeric flags, so one size means one limit everywhere.
#pragma once

#include <cstddef>
#include <cstdint>

namespace troupe::limits {

inline constexpr int max_layers = 4096;
inline constexpr int max_width = 1 << 17;
inline constexpr int max_heads = 4096;
inline constexpr int max_context = 1 << 20;
inline constexpr int max_vocab = 1 << 22;
inline constexpr int max_batch = 1 << 16;
inline constexpr int max_stages = 4096;
inline constexpr int max_microbatches = 1 << 16;
inline constexpr int max_virtual = 64;
/// Processes of one launch (`cluster.nodes`).
inline constexpr int max_nodes = 4096;
inline constexpr std::int64_t max_steps = 1'000'000'000'000;

/// Stage actors of one graph, pipeline.stages × data_parallel.replicas: each
/// is within its own limit, their product is not. `troupe check` took 2 s and
/// 120 MB for 181 × 181 (32,761), 16 s for 256 × 256, 133 s and 3.4 GB for
/// 1024 × 1024, and died of std::bad_alloc for 4096 × 4096.
inline constexpr std::int64_t max_stage_actors = 1 << 15;

/// Actor-system worker threads: far past any core count; 100000 made the
/// thread library abort with std::system_error.
inline constexpr std::int64_t max_threads = 1024;
/// A run's wall-clock limit, in seconds (30 days); larger overflows milliseconds soon.
inline constexpr std::int64_t max_timeout_s = 30LL * 24 * 3600;
/// Spans one thread's trace ring keeps (64 Mi spans is several GB per thread).
inline constexpr std::int64_t max_trace_buffer = 1 << 26;

/// `troupe schedule`: the harness's size for one step, stages² × virtual ×
/// microbatches (its state grows with stages × actions): 256 × 256 (2^24) takes
/// 0.5 s and 150 MB; 2048 × 2048 passed 24 GB in two minutes; 2^25 stays under 1 s.
inline constexpr std::int64_t max_schedule_size = 1 << 25;
/// `troupe schedule --compare`: seeds per scenario.
inline constexpr std::int64_t max_compare_seeds = 100'000;
/// `troupe schedule --compare`: seeds × size, the work of one comparison (8
/// simulations per seed): 100000 seeds of 4 stages × 8 microbatches (12.8 M)
/// took 59 s, so 2^22 is about 20 s.
inline constexpr std::int64_t max_compare_work = 1LL << 22;

/// `troupe plan attention --docs`: documents of one step. The planner scans every
/// shard for each move: 8192 documents planned in under 2 s on one core (8191 of
/// length 1 and one of 10^6 over 4096 servers: 1.8 s), 60000 took 81 s.
inline constexpr int max_attention_documents = 8192;
/// `troupe plan attention --docs`: tokens of all documents together; at 2^31 their
/// causal pairs, at most (2^31)²/2, still fit 64 bits.
inline constexpr std::int64_t max_attention_tokens = std::int64_t{1} << 31;

} // namespace troupe::limits
