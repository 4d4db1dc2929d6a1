// The flags several troupe commands share, each defined once with CLI11 so a
// flag has one name, meaning, bound (runtime/graph/limits.hpp) and help line in
// every command; the house help layout; and how a usage error is worded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "deploy/run/run_tracing.hpp"

namespace CLI {
class App;
class Option;
class ParseError;
} // namespace CLI

namespace troupe::cli {

/// Help in the house layout for `app` and the subcommands added after: usage
/// line, description, arguments, options, commands, footer; `-h, --help`.
void use_house_help(CLI::App& app);

/// A subcommand `name` of `parent`, listed in its help with `summary`, its own
/// help in the house layout.
CLI::App& add_command(CLI::App& parent, const std::string& name, const std::string& summary);

/// What `troupe CMD --help` says besides the flags: `prose` after the usage
/// line (the summary stays what the command list shows), `footer` at the end.
void describe(CLI::App& app, const std::string& prose, const std::string& footer);

/// `troupe CMD: MESSAGE` and `(see \`troupe CMD --help\`)` on stderr for a
/// command line `app` (the top-level app, after a failed parse) refused.
void print_usage_error(const CLI::App& app, const CLI::ParseError& e);

/// An integer flag bounded to [low, high]. Read in base 10 (CLI11 alone would
/// read 010 as octal); anything else is "NAME: expected an integer from LOW to
/// HIGH, got 'TEXT'". The help line ends with the bounds.
CLI::Option* add_count(CLI::App& app, const std::string& name, std::int64_t& out, std::int64_t low, std::int64_t high,
                       const std::string& help);
CLI::Option* add_count(CLI::App& app, const std::string& name, int& out, int low, int high, const std::string& help);
CLI::Option* add_count(CLI::App& app, const std::string& name, std::uint64_t& out, std::int64_t low, std::int64_t high,
                       const std::string& help);

/// A finite number flag in [low, high] (or [low, high) when `high_open`).
CLI::Option* add_number(CLI::App& app, const std::string& name, double& out, double low, double high, bool high_open,
                        const std::string& help);

/// A number flag strictly between 0 and 1: anything else is "NAME: expected a
/// number in (0, 1), got 'TEXT'".
CLI::Option* add_fraction(CLI::App& app, const std::string& name, double& out, const std::string& help);

/// The check of `add_count` for an option bound to a string (such as one
/// whose value may be left out): empty values pass.
void check_count(CLI::Option& opt, std::int64_t low, std::int64_t high);

/// The graph a command reads: `FILE`, `--set KEY.PATH=VALUE`... and `--steps N`.
struct graph_args {
  std::string file;
  std::vector<std::string> sets;
  std::int64_t steps = 0; ///< 0: the file's train.steps
  /// The overrides to load the graph with: the `--set` values, then `train.steps=N`.
  std::vector<std::string> overrides() const;
};

/// FILE (required), --set (repeatable) and --steps, as check, run and launch take them.
void add_graph_args(CLI::App& app, graph_args& out);

/// `--threads N`: actor-system worker threads (of this process, or of `where`).
void add_threads(CLI::App& app, std::int64_t& out, const std::string& where = "");

/// `--timeout SECONDS`: the run fails if it takes longer; 0 = no limit.
void add_timeout(CLI::App& app, std::int64_t& out);

/// `--summary-json FILE`.
void add_summary_json(CLI::App& app, std::string& out);

/// `--resume DIR` and `--restart`, which exclude each other.
void add_resume(CLI::App& app, std::string& resume, bool& restart);

/// `--dashboard [ADDR]`: `on` once given; the address HOST:PORT, :PORT or PORT
/// (checked here; default 127.0.0.1:8080). run, launch and dash all take it;
/// `alias` is a second name for it.
void add_dashboard(CLI::App& app, bool& on, std::string& address, const std::string& alias = "");

/// --trace FILE, --no-trace (they exclude each other), --trace-buffer N and --dashboard [ADDR].
void add_trace_options(CLI::App& app, trace_cli_options& out);

/// The flags `troupe run` and `troupe launch` take, with one meaning in both.
struct run_args {
  graph_args graph;           ///< FILE, --set, --steps
  std::string summary;        ///< --summary-json FILE
  std::string resume;         ///< --resume DIR
  bool restart = false;       ///< --restart
  std::int64_t threads = 0;   ///< --threads; 0 = one per core or $TROUPE_THREADS
  std::int64_t timeout_s = 0; ///< --timeout; 0 = no limit
  trace_cli_options trace;    ///< --trace, --no-trace, --trace-buffer, --dashboard
};

/// Every flag of run_args; `threads_where` says whose worker threads --threads sets.
void add_run_args(CLI::App& app, run_args& out, const std::string& threads_where = "");

/// What every command's help says about relative paths.
extern const char* const paths_help;

} // namespace troupe::cli
