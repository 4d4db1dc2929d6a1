// The troupe subcommands: each lives in its own deploy/cmd_*.cpp and is listed
// once in the table in deploy/commands.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <initializer_list>
#include <span>
#include <string_view>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/graph/graph_spec.hpp"

namespace troupe::cli {

/// Exit codes shared by every subcommand.
enum exit_code : int { ok = 0, runtime_failure = 1, bad_input = 2 };

/// A subcommand receives its arguments after the subcommand name.
using command_fn = int (*)(std::span<char*> args);

struct command {
  std::string_view name;
  std::string_view summary;
  command_fn run;
};

/// Every subcommand, in the order `troupe --help` lists them.
std::span<const command> commands();

/// `troupe schedule` (deploy/cli/cmd_schedule.cpp).
int schedule_command(std::span<char*> args);

/// `troupe sim` (deploy/cli/cmd_sim.cpp).
int sim_command(std::span<char*> args);

/// `troupe trace summarize` (deploy/cli/cmd_trace.cpp).
int trace_command(std::span<char*> args);

/// `troupe dash` (deploy/cli/cmd_dash.cpp).
int dash_command(std::span<char*> args);

/// Whether every non-empty path in `paths` can be written as an output file
/// (runtime/graph/output_path.hpp), asked before a command starts its work. False
/// after "troupe CMD: PATH: cannot write: REASON" on stderr for each that cannot:
/// the command exits with bad_input.
bool outputs_writable(std::string_view cmd, std::initializer_list<std::string_view> paths);

/// The checks `run` and `launch` make before anything starts: every output
/// path can be written, and the checkpoint folder is this run's (locked, and
/// not another run's unless `restart`). On success prints the parameter count
/// and returns the lock, held for the run; otherwise std::nullopt after the
/// reasons on stderr (the command exits with bad_input).
std::optional<checkpoint_dir_lock> prepare_run(std::string_view cmd, const graph_spec& g,
                                               const std::vector<std::string>& outputs, bool restart);

/// Removes every `flag` from `args`; whether there was one.
bool take_flag(std::vector<char*>& args, std::string_view flag);

/// `text` as an integer in [low, high] (runtime/graph/limits.hpp has the bounds), or
/// false after "troupe CMD: OPT must be an integer from LOW to HIGH, got 'TEXT'".
bool parse_count(const char* cmd, std::string_view text, const char* opt, std::int64_t low, std::int64_t high,
                 std::int64_t& out);

/// Runs `troupe ARGS...`: finds the subcommand or prints help.
int dispatch(int argc, char** argv);

} // namespace troupe::cli
