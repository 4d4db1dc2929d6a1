// Explicit schedules as data: per-rank action lists read from text or CSV,
// checked up front so that a list that cannot run is rejected with its culprit.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "schedulers/policies/action.hpp"
#include "schedulers/expected.hpp"

namespace troupe::sched {

/// Row r is rank r's action order for one step.
using schedule_table = std::vector<std::vector<action>>;

/// The largest table file load_table reads (16 MiB: millions of actions).
inline constexpr std::size_t max_table_bytes = std::size_t{16} << 20;

/// Parses one rank per line (`0F0 0F1 0B0 ...`, spaces or commas); blank lines
/// and lines starting with '#' are skipped. Errors start with `origin` and name
/// the line and action; a control byte (a binary file) is refused as not text,
/// and a malformed action is quoted with its non-printable bytes escaped.
expected<schedule_table> parse_table(std::string_view text, std::string_view origin = "table");

/// Reads and parses a table file of at most max_table_bytes; errors start
/// with `origin` (the path when empty).
expected<schedule_table> load_table(const std::string& path, std::string_view origin = {});

/// Writes a table as text, one rank per line.
std::string to_string(const schedule_table& table);

/// Checks that `table` is a complete, runnable schedule for p ranks, m
/// microbatches and v chunks (chunk c of rank r is stage r + c*p): every
/// action on a stage its rank owns, each forward and backward (B, or I and W)
/// exactly once, no backward before its forward, no W before its I, and no
/// deadlock across ranks when each rank runs its list in order. The error
/// names the rank, the action's position (1-based) and the action.
expected<void> validate_table(const schedule_table& table, int ranks, int microbatches, int chunks);

/// True when the table splits backwards into I and W.
bool table_splits_backward(const schedule_table& table);

/// The most activations (forwards started, B/I not finished) rank `rank`'s list holds at once.
int table_in_flight_peak(const std::vector<action>& row);

} // namespace troupe::sched
