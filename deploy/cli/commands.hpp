// The troupe subcommands: each lives in its own deploy/cli/cmd_*.cpp and is
// listed once in the table in deploy/cli/commands.cpp.
#pragma once

#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string_view>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/graph/graph_spec.hpp"

namespace CLI {
class App;
} // namespace CLI

namespace troupe::cli {

/// Exit codes shared by every subcommand.
enum exit_code : int { ok = 0, runtime_failure = 1, bad_input = 2 };

/// What a subcommand does once its command line parsed: returns the exit code.
using command_action = std::function<int()>;

/// A subcommand: `define` adds its arguments, flags, description and footer
/// to `app` (its CLI11 subcommand, help in the house layout: deploy/cli/flags.hpp)
/// and returns its action, which reads what the parse stored.
struct command {
  std::string_view name;
  std::string_view summary;
  command_action (*define)(CLI::App& app);
};

/// Every subcommand, in the order `troupe --help` lists them.
std::span<const command> commands();

/// `troupe check`, `run`, `launch`, `node`, `schedule`, `sim`, `plan`, `trace` and `dash`
/// (deploy/cli/cmd_*.cpp).
command_action define_check(CLI::App& app);
command_action define_run(CLI::App& app);
command_action define_launch(CLI::App& app);
command_action define_node(CLI::App& app);
command_action define_schedule(CLI::App& app);
command_action define_sync(CLI::App& app);
command_action define_sim(CLI::App& app);
command_action define_plan(CLI::App& app);
/// `troupe plan attention`, a subcommand `define_plan` adds (deploy/cli/cmd_plan_attention.cpp).
command_action define_plan_attention(CLI::App& app);
command_action define_trace(CLI::App& app);
command_action define_dash(CLI::App& app);
/// `troupe export` and `troupe sample` (deploy/cli/cmd_export.cpp, cmd_sample.cpp).
command_action define_export(CLI::App& app);
command_action define_sample(CLI::App& app);

/// Whether every non-empty path in `paths` can be written as an output file
/// (runtime/graph/output_path.hpp), asked before a command starts its work. False
/// after "troupe CMD: PATH: cannot write: REASON" on stderr for each that cannot:
/// the command exits with bad_input.
bool outputs_writable(std::string_view cmd, std::initializer_list<std::string_view> paths);

/// Whether TROUPE_CPU_TARGET, if set, names a kernel target this processor runs
/// (kernels/cpu/target.hpp), asked first by `check`, `run`, `launch` and `node`. False
/// after "troupe CMD: TROUPE_CPU_TARGET: ... (valid: ...)" on stderr: the command exits
/// with bad_input rather than run on a target the user did not ask for.
bool kernel_target_ok(std::string_view cmd);

/// The checks `run` and `launch` make before anything starts: every output
/// path can be written, and the checkpoint folder is this run's (locked, and
/// not another run's unless `restart`). On success prints the parameter count
/// and returns the lock, held for the run; otherwise std::nullopt after the
/// reasons on stderr (the command exits with bad_input).
std::optional<checkpoint_dir_lock> prepare_run(std::string_view cmd, const graph_spec& g,
                                               const std::vector<std::string>& outputs, bool restart);

/// Runs `troupe ARGS...`: parses the whole command line with CLI11 and runs
/// the subcommand's action; help (`--help`, `help CMD`) and `--version` exit 0,
/// a command line it refuses exits with bad_input.
int dispatch(int argc, char** argv);

} // namespace troupe::cli
