// Output files are tried before a command starts its work: a trace, summary or
// schedule table that cannot be written is exit 2 naming the path and the
// reason, and a trace that still cannot be written at the end fails the run
// (exit 1) and leaves no temporary file.
#include "tests/integration/troupe_process.hpp"

using namespace troupe::testing;

TEST_CASE("an unwritable --trace, --summary-json or --save-table is exit 2 before anything runs") {
  auto dir = small_pipeline_graph("output_paths", 4);
  auto graph = (dir / "graph.yaml").string();
  std::ofstream{dir / "a_file"} << "not a folder\n";
  auto under_file = (dir / "a_file" / "out.json").string();
  fs::create_directories(dir / "a_folder");

  SUBCASE("a trace under a regular file") {
    CHECK(run_to_end(dir, {"run", graph, "--trace", under_file}) == 2);
    CHECK(slurp(dir / "err.txt").find(under_file + ": cannot write: Not a directory") != std::string::npos);
  }
  SUBCASE("a trace naming a folder") {
    auto folder = (dir / "a_folder").string();
    CHECK(run_to_end(dir, {"run", graph, "--trace", folder}) == 2);
    CHECK(slurp(dir / "err.txt") == "troupe run: " + folder + ": cannot write: Is a directory\n");
    CHECK_FALSE(fs::exists(folder + ".tmp"));
  }
  SUBCASE("a summary under a regular file") {
    CHECK(run_to_end(dir, {"run", graph, "--no-trace", "--summary-json", under_file}) == 2);
    CHECK(slurp(dir / "err.txt").find(under_file + ": cannot write: Not a directory") != std::string::npos);
  }
  SUBCASE("a launch's summary under a regular file") {
    CHECK(run_to_end(dir, {"launch", graph, "--no-trace", "--summary-json", under_file}) == 2);
    CHECK(slurp(dir / "err.txt").find(under_file + ": cannot write: Not a directory") != std::string::npos);
  }
  SUBCASE("a schedule table under a regular file") {
    CHECK(run_to_end(dir, {"schedule", "--policy", "1f1b", "--stages", "4", "--microbatches", "8", "--save-table",
                           under_file}) == 2);
    CHECK(slurp(dir / "err.txt").find(under_file + ": cannot write: Not a directory") != std::string::npos);
  }
  CHECK(slurp(dir / "out.txt").find("steps in") == std::string::npos); // nothing trained
  fs::remove_all(dir);
}

TEST_CASE("a trace that cannot be written at the end fails the run with exit 1 and leaves no temporary file") {
  // Long enough that the folder is replaced well before the end in a release
  // build (about 1 s), short enough for the sanitizer build (about 30 s of CPU;
  // 1000 steps with a checkpoint every 2 outlasted the wait there).
  auto dir = small_pipeline_graph("trace_at_end", 300);
  auto traces = dir / "traces";
  troupe_process run{dir, {"run", (dir / "graph.yaml").string(), "--trace", (traces / "t.json").string()}};
  run.wait_for(R"(step +1/300)");
  // The folder checked at the start turns into a file while the run goes on.
  fs::remove_all(traces);
  std::ofstream{traces} << "in the way\n";
  int rc = run.wait(300s);
  auto err = slurp(run.err);
  INFO("stderr: ", err);
  CHECK(slurp(run.out).find("300 steps in") != std::string::npos); // the run itself finished
  CHECK(rc == 1);
  CHECK(err.find("cannot write trace") != std::string::npos);
  for (const auto& e : fs::directory_iterator(dir))
    CHECK_MESSAGE(e.path().extension() != ".tmp", "left behind: ", e.path());
  fs::remove_all(dir);
}

TEST_CASE("a summary that cannot be written at the end (a full device) fails the run with exit 1") {
  // /dev/full opens for writing, so the check before the run passes; the bytes fail at the flush.
  auto dir = small_pipeline_graph("summary_full", 2);
  CHECK(run_to_end(dir, {"run", (dir / "graph.yaml").string(), "--no-trace", "--summary-json", "/dev/full"}) == 1);
  CHECK(slurp(dir / "err.txt") == "troupe run: cannot write the summary to '/dev/full': No space left on device\n");
  fs::remove_all(dir);
}

TEST_CASE("two outputs that name one file, or a file in the checkpoint folder, are exit 2 before anything runs") {
  auto dir = small_pipeline_graph("same_output", 4, "checkpoint: {dir: ckpt, every: 2}\n");
  auto graph = (dir / "graph.yaml").string();
  SUBCASE("--trace and --summary-json, spelled differently") {
    auto trace = (dir / "t.json").string(), summary = (dir / "." / "t.json").string();
    CHECK(run_to_end(dir, {"run", graph, "--trace", trace, "--summary-json", summary}) == 2);
    CHECK(slurp(dir / "err.txt") == "troupe run: '" + trace + "' and '" + summary +
                                      "' name one file: each output (the trace, --summary-json) needs its own, "
                                      "or one overwrites the other\n");
  }
  SUBCASE("the summary in the checkpoint folder") {
    CHECK(run_to_end(dir, {"run", graph, "--no-trace", "--summary-json", (dir / "ckpt" / "latest").string()}) == 2);
    CHECK(slurp(dir / "err.txt") == "troupe run: '" + (dir / "ckpt" / "latest").string() +
                                      "' is in the checkpoint folder '" + (dir / "ckpt").string() +
                                      "', which the run keeps for its checkpoints; write it elsewhere\n");
  }
  CHECK(slurp(dir / "out.txt").empty());
  fs::remove_all(dir);
}
