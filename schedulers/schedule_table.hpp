// Explicit schedules as data: per-rank action lists read from text or CSV,
// checked up front so that a list that cannot run is rejected with its culprit.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "schedulers/action.hpp"
#include "schedulers/expected.hpp"

namespace troupe::sched {

/// Row r is rank r's action order for one step.
using schedule_table = std::vector<std::vector<action>>;

/// Parses one rank per line (`0F0 0F1 0B0 ...`, spaces or commas); blank lines
/// and lines starting with '#' are skipped. Errors name the line and action.
expected<schedule_table> parse_table(std::string_view text, std::string_view origin = "table");

/// Reads and parses a table file.
expected<schedule_table> load_table(const std::string& path);

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
