// The troupe command line is one CLI11 parse: every command has `--help` and
// `troupe help CMD`, a flag means the same in every command that takes it,
// contradictory flags are refused naming both, and paths in a graph file are
// relative to its folder while paths given as flags are relative to ours.
#include <signal.h>
#include <unistd.h>

#include <optional>

#include "deploy/run/run_graph.hpp"
#include "runtime/graph/graph_loader.hpp"
#include "tests/integration/troupe_process.hpp"

using namespace troupe::testing;

namespace {

/// A fresh folder for one test's output files.
fs::path scratch(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("troupe_cli_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// What `troupe CMD` prints on stderr for a command line it refuses.
std::string usage_error(const std::string& cmd, const std::string& message) {
  return "troupe " + cmd + ": " + message + "\n(see `troupe " + cmd + " --help`)\n";
}

/// Runs the test process in `dir` for the guard's scope.
struct in_folder {
  fs::path before = fs::current_path();
  explicit in_folder(const fs::path& dir) { fs::current_path(dir); }
  ~in_folder() { fs::current_path(before); }
  in_folder(const in_folder&) = delete;
  in_folder& operator=(const in_folder&) = delete;
};

} // namespace

TEST_CASE("troupe --version and troupe version print the version") {
  auto dir = scratch("version");
  for (auto args : {std::vector<std::string>{"--version"}, std::vector<std::string>{"version"}}) {
    CAPTURE(args.front());
    CHECK(run_to_end(dir, args, 30s) == 0);
    CHECK(slurp(dir / "out.txt") == "troupe 0.1.0\n");
    CHECK(slurp(dir / "err.txt").empty());
  }
  fs::remove_all(dir);
}

TEST_CASE("troupe help CMD prints what troupe CMD --help prints, listing the command's flags") {
  auto dir = scratch("help");
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> commands{
    {{"check"}, {"FILE", "--set", "--steps"}},
    {{"run"},
     {"FILE", "--set", "--steps", "--summary-json", "--resume", "--restart", "--threads", "--timeout", "--trace",
      "--no-trace", "--trace-buffer", "--dashboard"}},
    {{"launch"},
     {"FILE", "--set", "--steps", "--summary-json", "--resume", "--restart", "--threads", "--timeout", "--trace",
      "--no-trace", "--trace-buffer", "--dashboard"}},
    {{"node"}, {"--coordinator", "--node", "--token-file", "--token-stdin", "--transport", "--listen", "--threads"}},
    {{"schedule"}, {"--policy", "--plugin", "--stages", "--microbatches", "--compare", "--json", "--save-table"}},
    {{"trace"}, {"summarize"}},
    {{"trace", "summarize"}, {"TRACE", "--no-order"}},
    {{"dash"}, {"TRACE", "--dashboard"}},
  };
  for (const auto& [command, flags] : commands) {
    auto name = command.size() == 1 ? command[0] : command[0] + " " + command[1];
    CAPTURE(name);
    auto help = command;
    help.insert(help.begin(), "help");
    REQUIRE(run_to_end(dir, help, 30s) == 0);
    auto via_help = slurp(dir / "out.txt");
    auto dashed = command;
    dashed.push_back("--help");
    REQUIRE(run_to_end(dir, dashed, 30s) == 0);
    CHECK(slurp(dir / "out.txt") == via_help);
    CHECK(via_help.starts_with("usage: troupe " + name));
    for (const auto& flag : flags)
      CHECK_MESSAGE(has(via_help, "  " + flag), flag, " missing from:\n", via_help);
  }
  // The general help is not what `help run` prints.
  REQUIRE(run_to_end(dir, {"help"}, 30s) == 0);
  auto general = slurp(dir / "out.txt");
  CHECK(general.starts_with("usage: troupe COMMAND"));
  CHECK(has(general, "  run "));
  REQUIRE(run_to_end(dir, {"help", "run"}, 30s) == 0);
  CHECK(slurp(dir / "out.txt") != general);
  CHECK(has(slurp(dir / "out.txt"), "relative to the graph file's\nfolder"));
  fs::remove_all(dir);
}

TEST_CASE("troupe check takes --steps like run and launch") {
  auto dir = scratch("check_steps");
  CHECK(run_to_end(dir, {"check", "examples/two-stage.yaml", "--steps", "7"}, 30s) == 0);
  CHECK(has(slurp(dir / "out.txt"), "train: {steps: 7,"));
  CHECK(run_to_end(dir, {"check", "examples/two-stage.yaml", "--steps", "0"}, 30s) == 2);
  CHECK(slurp(dir / "err.txt") == "troupe check: --steps: expected an integer from 1 to 1000000000000, got '0'\n"
                                  "(see `troupe check --help`)\n");
  fs::remove_all(dir);
}

TEST_CASE("--trace with --no-trace is refused naming both, before anything runs") {
  auto dir = small_pipeline_graph("trace_no_trace", 4);
  auto graph = (dir / "graph.yaml").string(), trace = (dir / "t.json").string();
  for (const char* cmd : {"run", "launch"}) {
    CAPTURE(cmd);
    CHECK(run_to_end(dir, {cmd, graph, "--trace", trace, "--no-trace"}) == 2);
    CHECK(slurp(dir / "err.txt") ==
          usage_error(cmd, "--trace and --no-trace cannot be given together: give one of them"));
    CHECK(slurp(dir / "out.txt").empty());
    CHECK_FALSE(fs::exists(trace));
  }
  fs::remove_all(dir);
}

TEST_CASE("run, launch and dash take the same --dashboard flag with the same check") {
  auto dir = small_pipeline_graph("dashboard_flag", 2);
  auto graph = (dir / "graph.yaml").string(), trace = (dir / "t.json").string();
  const std::string refused = "--dashboard: expected an address HOST:PORT, :PORT or PORT with a port from 0 to "
                              "65535 (:0 picks a free one), got 'foo'";
  for (const auto& args : {std::vector<std::string>{"run", graph, "--dashboard", "foo"},
                           std::vector<std::string>{"launch", graph, "--dashboard", "foo"},
                           std::vector<std::string>{"dash", trace, "--dashboard", "foo"}}) {
    CAPTURE(args.front());
    CHECK(run_to_end(dir, args) == 2);
    CHECK(slurp(dir / "err.txt") == usage_error(args.front(), refused));
  }
  // A run serves it and writes the trace; dash serves that trace, under the flag's name and its older one.
  {
    troupe_process run{dir, {"run", graph, "--trace", trace, "--dashboard", "127.0.0.1:0"}};
    run.wait_for(R"(dashboard: (http://127\.0\.0\.1:\d+/))");
    CHECK(run.wait(120s) == 0);
  }
  REQUIRE(fs::exists(trace));
  for (const char* flag : {"--dashboard", "--address"}) {
    CAPTURE(flag);
    troupe_process dash{dir, {"dash", trace, flag, "127.0.0.1:0"}};
    dash.wait_for(R"(dashboard for \S+ \(\d+ spans\): (http://127\.0\.0\.1:\d+/))");
    REQUIRE(::kill(dash.pid, SIGTERM) == 0);
    CHECK(dash.wait(30s) == 0);
  }
  fs::remove_all(dir);
}

TEST_CASE("launch --threads reaches every node, and trace.file is relative to the graph file there too") {
  auto dir =
    small_pipeline_graph("launch_threads", 30, "cluster: {launcher: local, nodes: 2}\ntrace: {file: traces/t.json}\n");
  auto elsewhere = dir / "elsewhere";
  fs::create_directories(elsewhere);
  std::optional<troupe_process> launch;
  {
    in_folder cd{elsewhere};
    launch.emplace(dir, std::vector<std::string>{"launch", (dir / "graph.yaml").string(), "--threads", "3"});
  }
  auto coordinator = launch->wait_for(R"(coordinator on (\S+),)");
  std::vector<pid_t> nodes;
  for (auto until = std::chrono::steady_clock::now() + 60s;
       nodes.size() < 2 && std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(20ms))
    nodes = processes_with("--coordinator " + coordinator + " ");
  REQUIRE(nodes.size() == 2);
  for (auto pid : nodes) {
    auto cmdline = slurp(fs::path{"/proc"} / std::to_string(pid) / "cmdline");
    CHECK_MESSAGE(has(cmdline, std::string{"--threads\0"
                                           "3\0",
                                           12}),
                  cmdline);
  }
  CHECK(launch->wait(120s) == 0);
  CHECK(fs::exists(dir / "traces" / "t.node0.json"));
  CHECK(fs::exists(dir / "traces" / "t.node1.json"));
  CHECK_FALSE(fs::exists(elsewhere / "traces"));
  fs::remove_all(dir);
}

TEST_CASE("trace.file is relative to the graph file's folder like checkpoint.dir; --trace to the current folder") {
  auto dir =
    small_pipeline_graph("trace_paths", 2, "trace: {file: traces/t.json}\ncheckpoint: {dir: ckpt, every: 2}\n");
  auto graph = (dir / "graph.yaml").string();
  auto elsewhere = dir / "elsewhere";
  fs::create_directories(elsewhere);
  {
    in_folder cd{elsewhere};
    CHECK(run_to_end(dir, {"run", graph}) == 0);
  }
  CHECK(fs::exists(dir / "traces" / "t.json"));
  CHECK(fs::exists(dir / "ckpt" / "latest"));
  CHECK_FALSE(fs::exists(elsewhere / "traces"));
  // `--set trace.file=...` is a value of the file; `--trace` a path typed here.
  {
    in_folder cd{elsewhere};
    CHECK(run_to_end(dir, {"run", graph, "--restart", "--set", "trace.file=set.json"}) == 0);
    CHECK(run_to_end(dir, {"run", graph, "--restart", "--trace", "typed.json"}) == 0);
  }
  CHECK(fs::exists(dir / "set.json"));
  CHECK(fs::exists(elsewhere / "typed.json"));
  CHECK_FALSE(fs::exists(dir / "typed.json"));
  fs::remove_all(dir);
}

TEST_CASE("every example writes its trace and checkpoints into the repository's runs/ folder") {
  // ddp.yaml wrote to examples/runs/ while the others wrote to runs/.
  auto runs = fs::absolute("runs").lexically_normal();
  int traced = 0;
  for (const auto& e : fs::directory_iterator("examples")) {
    if (e.path().extension() != ".yaml")
      continue;
    troupe::load_options opts;
    opts.vocabulary = troupe::troupe_vocabulary;
    auto r = troupe::load_graph(e.path(), opts);
    INFO(e.path().string(), ": ", troupe::to_string(r.errors));
    REQUIRE(r.ok());
    if (const auto& t = r.graph->trace.file_path; !t.empty()) {
      CHECK(fs::absolute(t).lexically_normal().parent_path() == runs);
      ++traced;
    }
    if (const auto& c = r.graph->checkpoint.dir_path; !c.empty())
      CHECK(fs::absolute(c).lexically_normal().parent_path() == runs);
  }
  CHECK(traced >= 6);
}

TEST_CASE("check and trace summarize print one JSON object with --json, for a valid graph and an invalid one") {
  auto dir = scratch("json");
  CHECK(run_to_end(dir, {"check", "examples/zero2.yaml", "--json"}) == 0);
  auto valid = nlohmann::json::parse(slurp(dir / "out.txt"));
  CHECK(valid["valid"] == true);
  CHECK(valid["errors"].empty());
  CHECK(valid["parameters"]["total"].get<std::int64_t>() > 0);
  CHECK(valid["memory"]["r0s0_os"]["optimizer"].get<std::int64_t>() > 0);
  CHECK(has(valid["graph"].get<std::string>(), "- {name: r0s0_os, type: optimizer_shard, stage: r0s0}"));
  CHECK(run_to_end(dir, {"check", "tests/bad_input/quoted_number.yaml", "--json"}) == 2);
  auto invalid = nlohmann::json::parse(slurp(dir / "out.txt"));
  CHECK(invalid["valid"] == false);
  REQUIRE(invalid["errors"].size() == 2);
  CHECK(invalid["errors"][0]["line"] == 2);
  CHECK(invalid["errors"][0]["column"] == 17);
  CHECK(invalid["errors"][0]["path"] == "model.layers");
  auto trace = (dir / "t.json").string();
  REQUIRE(run_to_end(dir, {"run", "examples/two-stage.yaml", "--steps", "2", "--trace", trace}) == 0);
  CHECK(run_to_end(dir, {"trace", "summarize", trace, "--json"}) == 0);
  auto summary = nlohmann::json::parse(slurp(dir / "out.txt"));
  CHECK(summary["bubble_fraction"].get<double>() > 0);
  CHECK(summary["last_step"] == 1);
  REQUIRE(summary["actors"].size() == 3);
  CHECK(summary["actors"][1]["name"] == "s0");
  CHECK(summary["orders"].size() >= 2);
  fs::remove_all(dir);
}

TEST_CASE("check refuses a train.init checkpoint that run would refuse, also in JSON") {
  auto dir = scratch("init");
  CHECK(run_to_end(dir, {"check", "tests/bad_input/train_init_missing.yaml", "--json"}) == 2);
  auto j = nlohmann::json::parse(slurp(dir / "out.txt"));
  CHECK(j["valid"] == false);
  REQUIRE(j["errors"].size() == 1);
  CHECK(j["errors"][0]["path"] == "train.init");
  CHECK(j["errors"][0]["line"] == 4);
  CHECK(j["errors"][0]["message"] == "tests/bad_input/no_such_checkpoint: no such checkpoint folder");
  fs::remove_all(dir);
}

TEST_CASE("a local-update run shorter than its exchange period says that the replicas train alone") {
  auto dir = scratch("lu_short");
  std::ofstream{dir / "g.yaml"} << "model: {layers: 2, d_model: 32, heads: 2, context: 16}\n"
                                << "data: {corpus: kjv, batch: 2}\ntrain: {steps: 3}\n"
                                << "data_parallel: {replicas: 2}\nlocal_update: {algorithm: diloco, sync_every: 5}\n";
  auto note = "note: local_update never exchanges in this run: 3 steps and diloco exchanges every 5 steps "
              "(local_update.sync_every); the replicas train alone\n";
  CHECK(run_to_end(dir, {"run", (dir / "g.yaml").string(), "--no-trace"}) == 0);
  CHECK(has(slurp(dir / "out.txt"), note));
  CHECK(run_to_end(dir, {"run", (dir / "g.yaml").string(), "--no-trace", "--steps", "5"}) == 0);
  CHECK_FALSE(has(slurp(dir / "out.txt"), "never exchanges"));
  fs::remove_all(dir);
}

TEST_CASE(
  "a graph past this machine's memory: check refuses it (warns --for sim), run refuses before anything is built") {
  // d_model 100000 passed check and died at run with std::bad_alloc naming actor 'stage'.
  auto dir = scratch("memory");
  std::ofstream{dir / "g.yaml"} << "model: {layers: 4, d_model: 100000, heads: 4, context: 16}\n"
                                << "data: {corpus: kjv, batch: 2}\ntrain: {steps: 10}\n";
  auto graph = (dir / "g.yaml").string();
  CHECK(run_to_end(dir, {"check", graph}) == 2); // what run refuses, check refuses (#30 item 14)
  CHECK(has(slurp(dir / "err.txt"), graph + ": the graph needs an estimated 7681.8 GB of memory, more than "
                                            "this machine's "));
  CHECK(has(slurp(dir / "err.txt"), "`--for sim` or `--for plan` checks the graph"));
  CHECK(run_to_end(dir, {"check", graph, "--for", "sim"}) == 0); // a graph for another machine
  CHECK(has(slurp(dir / "err.txt"), graph + ": warning: the graph needs an estimated 7681.8 GB of memory, more than "
                                            "this machine's "));
  CHECK(run_to_end(dir, {"run", graph, "--no-trace"}) == 2);
  auto err = slurp(dir / "err.txt");
  CHECK(err.starts_with("troupe run: " + graph + ": the graph needs an estimated 7681.8 GB of memory"));
  CHECK(has(err, "the largest actor, s0, 7680.9 GB of parameters, gradients and optimizer state"));
  CHECK(slurp(dir / "out.txt").empty());
  fs::remove_all(dir);
}

TEST_CASE("check refuses a SkipPipe graph that run refuses (warns --for plan), and run refuses it with exit 2 before "
          "anything starts") {
  // check exited 0 while run exited 1 with "need 6 nodes, not 20" after making the actors.
  auto dir = scratch("geo20");
  auto nodes = "examples/skippipe-geo20.yaml:14:10: ";
  CHECK(run_to_end(dir, {"check", "examples/skippipe-geo20.yaml"}) == 2);
  CHECK(has(slurp(dir / "err.txt"), std::string{nodes} +
                                      "network.nodes: a run places one stage actor on each network "
                                      "node, so SkipPipe runs need pipeline.stages × data_parallel.replicas = 6 "
                                      "nodes, not 20"));
  CHECK(run_to_end(dir, {"check", "examples/skippipe-geo20.yaml", "--for", "plan"}) == 0); // plan paths and sim take it
  CHECK(has(slurp(dir / "err.txt"), std::string{nodes} +
                                      "warning: a run places one stage actor on each network "
                                      "node, so SkipPipe runs need pipeline.stages × data_parallel.replicas = 6 "
                                      "nodes, not 20"));
  auto json = run_to_end(dir, {"check", "examples/skippipe-geo20.yaml", "--json"});
  CHECK(json == 2);
  CHECK(has(slurp(dir / "out.txt"), "\"path\": \"network.nodes\""));
  CHECK(run_to_end(dir, {"run", "examples/skippipe-geo20.yaml", "--no-trace"}) == 2);
  CHECK(slurp(dir / "err.txt").starts_with(std::string{"troupe run: "} + nodes + "network.nodes: a run places one"));
  CHECK(slurp(dir / "out.txt").empty());
  fs::remove_all(dir);
}
