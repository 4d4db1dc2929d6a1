// The shared troupe flags, the house help layout and usage-error wording.
#include "deploy/cli/flags.hpp"

#include <charconv>
#include <cmath>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "runtime/graph/limits.hpp"
#include "runtime/trace/dashboard_server.hpp"

namespace troupe::cli {

const char* const paths_help = "Paths in the graph file (data.corpus, pipeline.table, checkpoint.dir, trace.file,\n"
                               "cluster.token_file, plugins) and in --set values are relative to the graph file's\n"
                               "folder; paths given as flags (--trace, --summary-json, --resume) are relative to\n"
                               "the current folder.\n";

namespace {

/// The house layout: `usage: troupe CMD ARGS [options]`, the description,
/// then arguments, options and commands in aligned columns, then the footer.
class house_formatter : public CLI::Formatter {
public:
  explicit house_formatter(std::string prose = "") : prose_(std::move(prose)) {
    column_width(25);
    label("Positionals", "arguments");
  }

  std::string make_usage(const CLI::App* app, std::string name) const override {
    std::string out = "usage: " + name;
    for (const auto* p : app->get_options([](const CLI::Option* o) { return o->get_positional(); }))
      out += " " + make_option_usage(p);
    if (!app->get_subcommands([](const CLI::App*) { return true; }).empty())
      out += " COMMAND";
    if (!app->get_options([](const CLI::Option* o) { return o->nonpositional(); }).empty())
      out += " [options]";
    return out + "\n";
  }

  std::string make_option_name(const CLI::Option* opt, bool positional) const override {
    if (positional)
      return opt->get_name(true, false);
    std::string names = opt->get_name(false, true);
    std::string out;
    for (char c : names)
      out += c == ',' ? std::string{", "} : std::string(1, c);
    return out;
  }

  std::string make_option_opts(const CLI::Option* opt) const override {
    if (opt->get_type_size() == 0 || opt->get_option_text().empty())
      return {};
    return opt->get_expected_min() == 0 ? " [" + opt->get_option_text() + "]" : " " + opt->get_option_text();
  }

  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override {
    std::string out = make_usage(app, name);
    if (auto text = prose_.empty() ? app->get_description() : prose_; !text.empty())
      out += "\n" + text + "\n";
    out += make_positionals(app);
    out += make_groups(app, mode);
    out += make_subcommands(app, mode);
    if (!app->get_footer().empty())
      out += "\n" + app->get_footer();
    return out;
  }

private:
  std::string prose_; ///< what the command does, at length
};

/// `text` as a base-10 integer in [low, high], rewritten canonical for CLI11's
/// own conversion; the message otherwise.
std::string checked_integer(std::string& text, std::int64_t low, std::int64_t high) {
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size() || v < low || v > high)
    return fmt::format("expected an integer from {} to {}, got '{}'", low, high, text);
  text = std::to_string(v);
  return {};
}

CLI::Validator integer_in(std::int64_t low, std::int64_t high) {
  return CLI::Validator([low, high](std::string& text) { return checked_integer(text, low, high); }, "");
}

/// A finite number between `low` and `high`, each end open or closed (with an
/// infinite `high`, `low` closed), rewritten canonical for CLI11's own
/// conversion; "expected EXPECTED, got 'TEXT'" otherwise.
CLI::Validator number_in(double low, bool low_open, double high, bool high_open) {
  auto expected = std::isinf(high)
                    ? fmt::format("a finite number, {:g} or more", low)
                    : fmt::format("a number in {}{:g}, {:g}{}", low_open ? "(" : "[", low, high, high_open ? ")" : "]");
  auto check = [=](std::string& text) -> std::string {
    double v = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(v) || v < low || v > high ||
        (low_open && v == low) || (high_open && v == high))
      return fmt::format("expected {}, got '{}'", expected, text);
    text = fmt::format("{}", v); // shortest text that reads back as v
    return {};
  };
  return CLI::Validator(check, "");
}

/// `--dashboard`'s address: HOST:PORT, :PORT or PORT. A bare word is refused
/// rather than read as a host, so `--dashboard foo` says what it expected.
std::string checked_address(const std::string& text) {
  bool digits = text.find_first_not_of("0123456789") == std::string::npos;
  if (text.find(':') != std::string::npos || (digits && !text.empty()))
    if (parse_listen_address(text))
      return {};
  return fmt::format("expected an address HOST:PORT, :PORT or PORT with a port from 0 to 65535 "
                     "(:0 picks a free one), got '{}'",
                     text);
}

/// The command `e` was about: the deepest subcommand the parse reached.
const CLI::App& failed_command(const CLI::App& top, std::string& name) {
  const CLI::App* at = &top;
  name = top.get_name();
  for (auto subs = at->get_subcommands(); !subs.empty(); subs = at->get_subcommands()) {
    at = subs.front();
    name += " " + at->get_name();
  }
  return *at;
}

std::string explain(const CLI::App& top, const CLI::App& at, const CLI::ParseError& e) {
  std::string what = e.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    auto rest = at.remaining();
    if (rest.empty())
      rest = top.remaining();
    if (rest.empty())
      return what;
    const auto& arg = rest.front();
    auto commands = at.get_subcommands([](const CLI::App*) { return true; });
    if (arg.starts_with("-"))
      return fmt::format("unknown option '{}'", arg);
    if (!commands.empty()) {
      std::string known;
      for (const auto* c : commands)
        known += (known.empty() ? "" : ", ") + c->get_name();
      return fmt::format("unknown command '{}' (known: {})", arg, known);
    }
    if (const auto* file = at.get_option_no_throw("FILE"); file && file->count() > 0)
      return fmt::format("unexpected argument '{}': the graph FILE is '{}' (one graph file only)", arg,
                         file->results().front());
    return fmt::format("unexpected argument '{}'", arg);
  }
  if (dynamic_cast<const CLI::ExcludesError*>(&e)) {
    auto at_word = what.find(" excludes ");
    if (at_word != std::string::npos)
      return fmt::format("{} and {} cannot be given together: give one of them", what.substr(0, at_word),
                         what.substr(at_word + 10));
  }
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) && what.find("missing") != std::string::npos)
    return fmt::format("{} needs a value", what.substr(0, what.find(':')));
  if (auto most = what.find(": At Most 1 required but received ");
      dynamic_cast<const CLI::ArgumentMismatch*>(&e) && most != std::string::npos)
    return fmt::format("{} is given {} times: give it once", what.substr(0, most),
                       what.substr(most + std::string_view{": At Most 1 required but received "}.size()));
  return what;
}

} // namespace

void use_house_help(CLI::App& app) {
  app.formatter(std::make_shared<house_formatter>());
  // `--steps 3 --steps 4` is a mistake to point out, not a choice to guess (the last one won silently).
  app.option_defaults()->group("options")->multi_option_policy(CLI::MultiOptionPolicy::Throw);
  app.set_help_flag("-h,--help", "show this help");
}

CLI::App& add_command(CLI::App& parent, const std::string& name, const std::string& summary) {
  auto* sub = parent.add_subcommand(name, summary);
  sub->group("commands");
  sub->set_help_flag("-h,--help", "show this help"); // again: CLI11 copies it before the option defaults
  return *sub;
}

void describe(CLI::App& app, const std::string& prose, const std::string& footer) {
  app.formatter(std::make_shared<house_formatter>(prose));
  app.footer(footer);
}

void print_usage_error(const CLI::App& app, const CLI::ParseError& e) {
  std::string name;
  const auto& at = failed_command(app, name);
  fmt::print(stderr, "{}: {}\n(see `{} --help`)\n", name, explain(app, at, e), name);
}

CLI::Option* add_count(CLI::App& app, const std::string& name, std::int64_t& out, std::int64_t low, std::int64_t high,
                       const std::string& help) {
  return app.add_option(name, out, fmt::format("{}; {} to {}", help, low, high))->transform(integer_in(low, high));
}

CLI::Option* add_count(CLI::App& app, const std::string& name, int& out, int low, int high, const std::string& help) {
  return app.add_option(name, out, fmt::format("{}; {} to {}", help, low, high))->transform(integer_in(low, high));
}

CLI::Option* add_count(CLI::App& app, const std::string& name, std::uint64_t& out, std::int64_t low, std::int64_t high,
                       const std::string& help) {
  return app.add_option(name, out, help)->transform(integer_in(low, high));
}

CLI::Option* add_number(CLI::App& app, const std::string& name, double& out, double low, double high, bool high_open,
                        const std::string& help) {
  return app.add_option(name, out, help)->transform(number_in(low, false, high, high_open));
}

CLI::Option* add_fraction(CLI::App& app, const std::string& name, double& out, const std::string& help) {
  return app.add_option(name, out, help)->transform(number_in(0, true, 1, true));
}

void check_count(CLI::Option& opt, std::int64_t low, std::int64_t high) {
  opt.check(CLI::Validator(
    [=](std::string& text) {
      auto copy = text;
      return text.empty() ? std::string{} : checked_integer(copy, low, high);
    },
    ""));
}

std::vector<std::string> graph_args::overrides() const {
  auto out = sets;
  if (steps > 0)
    out.push_back(fmt::format("train.steps={}", steps));
  return out;
}

void add_graph_args(CLI::App& app, graph_args& out) {
  app.add_option("FILE", out.file, "the graph file (YAML)")->required();
  app
    .add_option("--set", out.sets,
                "override one value before validation, checked exactly like\n"
                "the file (e.g. --set pipeline.stages=2, --set\n"
                "model.precision=bf16, --set actors[1].layers=[0,3]); repeatable")
    ->option_text("KEY.PATH=VALUE")
    ->allow_extra_args(false)
    ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  add_count(app, "--steps", out.steps, 1, limits::max_steps, "train for N steps (the same as --set train.steps=N)")
    ->option_text("N");
}

void add_threads(CLI::App& app, std::int64_t& out, const std::string& where) {
  add_count(app, "--threads", out, 1, limits::max_threads,
            fmt::format("actor-system worker threads{} (default: one per core,\nor $TROUPE_THREADS)", where))
    ->option_text("N");
}

void add_timeout(CLI::App& app, std::int64_t& out) {
  add_count(app, "--timeout", out, 1, limits::max_timeout_s,
            "fail if the run takes longer, in seconds\n(default: no limit)")
    ->option_text("SECONDS");
}

void add_summary_json(CLI::App& app, std::string& out) {
  app
    .add_option("--summary-json", out,
                "write {\"steps\", \"tokens_per_s\", \"ms_per_step\", \"train_loss\",\n"
                "\"val_loss\", \"val_loss_short\" (SkipPipe), \"first_step\", \"losses\", \"parameters\": {\"total\",\n"
                "\"per_actor\"}} there at the end (null where a number does\nnot apply)")
    ->option_text("FILE");
}

void add_resume(CLI::App& app, std::string& resume, bool& restart) {
  auto* r = app
              .add_option("--resume", resume,
                          "continue from a checkpoint: DIR is a checkpoint.dir (its\n"
                          "'latest' names the step) or one step-NNNNNN folder")
              ->option_text("DIR");
  auto* s = app.add_flag("--restart", restart,
                         "start over in a checkpoint.dir that holds an earlier run's\n"
                         "checkpoints, removing them (without it, or --resume, such\na run is refused)");
  r->excludes(s);
}

void add_dashboard(CLI::App& app, bool& on, std::string& address, const std::string& alias) {
  app
    .add_option_function<std::string>(
      alias.empty() ? "--dashboard" : "--dashboard," + alias,
      [&on, &address](const std::string& a) {
        on = true;
        if (!a.empty())
          address = a;
      },
      "serve the dashboard at ADDR (default 127.0.0.1:8080; :0 picks\n"
      "a free port; other interfaces only when named, 0.0.0.0 for\nall; the URL is printed)")
    ->option_text("ADDR")
    ->expected(0, 1)
    ->check(CLI::Validator([](std::string& a) { return a.empty() ? std::string{} : checked_address(a); }, ""));
}

void add_trace_options(CLI::App& app, trace_cli_options& out) {
  auto* trace = app
                  .add_option("--trace", out.file,
                              "record spans and write Chrome Trace Event JSON there at\n"
                              "the end (also after a failure); opens in Perfetto and\n"
                              "chrome://tracing (default: the graph's trace.file)")
                  ->option_text("FILE.json");
  auto* none = app.add_flag("--no-trace", out.no_trace, "write no trace, whatever the graph's trace.file says");
  trace->excludes(none);
  app
    .add_option_function<std::int64_t>(
      "--trace-buffer", [&out](std::int64_t n) { out.buffer = static_cast<std::size_t>(n); },
      fmt::format("spans kept per thread in the recorder's ring (default\n{}); older spans are dropped; {} to {}",
                  out.buffer, 2, limits::max_trace_buffer))
    ->option_text("N")
    ->transform(integer_in(2, limits::max_trace_buffer));
  add_dashboard(app, out.dashboard, out.dashboard_address);
}

void add_run_args(CLI::App& app, run_args& out, const std::string& threads_where) {
  add_graph_args(app, out.graph);
  add_summary_json(app, out.summary);
  add_resume(app, out.resume, out.restart);
  add_threads(app, out.threads, threads_where);
  add_timeout(app, out.timeout_s);
  add_trace_options(app, out.trace);
}

} // namespace troupe::cli
