// What a trace says about a run: per actor busy and idle time and bubble
// fraction, channels and their in-flight messages, each stage's action order.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "runtime/trace/step_stats.hpp"
#include "runtime/trace/trace_export.hpp"

namespace troupe {

/// One actor's share of a time window.
struct actor_summary {
  actor_info actor;
  std::int64_t busy_ns = 0;  ///< union of compute spans (and timed sends) inside the window
  std::int64_t idle_ns = 0;  ///< the rest of the window
  double busy_fraction = 0;  ///< busy / window
  std::size_t spans = 0;     ///< spans that touch the window
  std::uint32_t mailbox = 0; ///< latest recorded depth, or messages sent to it and not yet received
  std::uint32_t mailbox_max =
    0;                          ///< deepest recorded in the window: data messages waiting as one was taken, it included
  std::uint64_t bytes_sent = 0; ///< bytes of its send spans inside the window
  /// Bytes of model state it holds, from its `held:ACTOR:KIND` counters
  /// (record_held); -1 for an actor that recorded none.
  std::int64_t params_bytes = -1, grads_bytes = -1, optimizer_bytes = -1;
};

/// A channel seen in the trace: flows sent by `from` and received by `to`.
struct channel_summary {
  std::uint16_t from = 0;
  std::uint16_t to = 0;
  std::size_t messages = 0; ///< received messages
  std::uint64_t bytes = 0;
  std::uint32_t in_flight = 0; ///< sent, not received yet
};

/// The actions one stage ran in one step, as text: `0F0 0F1 0B0 …`.
struct stage_order {
  std::uint16_t actor = 0;
  int rank = 0; ///< position among the actors with the stage role
  std::int32_t step = 0;
  std::string actions;
};

/// One distinct action order of a stage and every step that ran it.
struct distinct_order {
  std::uint16_t actor = 0;
  int rank = 0;
  std::vector<std::int32_t> steps; ///< ascending, 0-based
  std::string actions;
};

/// Each stage's orders with the same actions folded into one, stages by rank
/// and a stage's orders by their first step.
std::vector<distinct_order> distinct_orders(const std::vector<stage_order>& orders);

/// 0-based steps as the 1-based ranges the command line prints: `steps 1-49, 51-250`, `step 50`.
std::string step_ranges(const std::vector<std::int32_t>& steps);

/// Everything `troupe trace summarize` prints and the dashboard shows.
struct trace_summary {
  std::int64_t begin_ns = 0; ///< the window: first to last compute span, or as asked
  std::int64_t end_ns = 0;
  std::vector<actor_summary> actors;
  std::vector<channel_summary> channels;
  std::vector<stage_order> orders;
  /// 1 - Σ stage busy / (stages × window), over the actors with stage_role;
  /// none without such actors (another actor's idle time is no bubble).
  std::optional<double> bubble_fraction;
  std::int32_t last_step = -1; ///< highest step with a loss
  std::optional<double> loss, val_loss, tokens_per_s;
  /// With replicas: each one's latest loss over its own microbatches (`loss:rN` counters), by replica.
  std::map<int, double> replica_loss;
  /// Local-update training: each sync actor's outer steps and the bytes it has
  /// sent in its exchanges, the latest `outer:ACTOR:steps|bytes` counters.
  struct outer_progress {
    double steps = 0, bytes = 0;
  };
  std::map<std::string, outer_progress> outer;
  std::int32_t val_step = -1; ///< the step val_loss was measured after
  /// Busy time per step of the actors with a role, and the slowest of them
  /// (steps wholly inside the window only).
  straggler_report stragglers;
  std::size_t span_count = 0;
  std::uint64_t dropped = 0;
  bool cut_short = false; ///< the trace file ended mid-event (the run was killed)
};

/// Summarises `t` over `[from_ns, to_ns)`; a negative bound means "from the
/// first compute span" / "to the last one". Action orders only with `orders`.
trace_summary summarize(const trace_snapshot& t, std::int64_t from_ns = -1, std::int64_t to_ns = -1,
                        bool orders = true);

/// The summary as the text `troupe trace summarize` prints.
std::string to_text(const trace_summary& s);

/// `F`, `I`, `W`, `B` for compute kinds, `&` for an F&B (its forward's microbatch), 0 for the rest.
char action_letter(span_kind k) noexcept;

/// True for spans that count as work (forward, backward parts, optimizer, eval, timed sends).
bool is_busy(const span& s) noexcept;

/// Turns each `loss` sample into a `tokens_per_s` sample: `tokens_per_step`
/// divided by the time since the previous step's loss. Stateful for live use.
struct throughput_meter {
  std::int64_t tokens_per_step = 0;
  std::int64_t last_ns = -1;
  std::int32_t last_step = -1;
  std::optional<counter_sample> on_sample(const counter_sample& c);
};

/// Reads a Chrome Trace Event file written by trace_writer back into a
/// snapshot (thread names become actors, `X` events spans, `s`/`f` flows, `C`
/// counters with their step taken from the optimizer and eval spans before them).
/// An actor whose thread name carries no role (older traces) has stage_role
/// when it ran forward or backward passes.
/// errc::io_failed when unreadable, errc::invalid_argument when not such a trace.
/// A launched run's `X.json` that is not there stands for its node files
/// `X.node0.json`, `X.node1.json`, ...: they are read as one trace, each node's
/// actors apart, its times moved onto the earliest node's clock.
caf::expected<trace_snapshot> read_chrome_trace(const std::filesystem::path& path);

/// The same from JSON text; `origin` names it in errors.
caf::expected<trace_snapshot> parse_chrome_trace(const std::string& json, const std::string& origin);

} // namespace troupe
