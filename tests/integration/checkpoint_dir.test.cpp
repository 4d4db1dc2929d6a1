// One run owns its checkpoint folder: a second run into it is refused naming
// the first, a fresh run over an earlier run's checkpoints needs --resume or
// --restart, the folder is checked before the run, and a save that fails
// leaves no partial step folder and claims no checkpoint that is not there.

#include "tests/integration/troupe_process.hpp"

using namespace troupe::testing;

TEST_CASE("a second run into a checkpoint folder in use is refused with exit 2, naming the first run") {
  auto dir = small_pipeline_graph("ckpt_lock", 10000000, "checkpoint: {dir: ckpt, every: 10}\n");
  auto graph = (dir / "graph.yaml").string();
  {
    troupe_process first{dir, {"run", graph, "--no-trace"}};
    first.wait_for(R"(checkpoint step 10 ->)");
    auto second_dir = dir / "second";
    fs::create_directories(second_dir);
    troupe_process second{second_dir, {"run", graph, "--no-trace", "--resume", (dir / "ckpt").string()}};
    CHECK(second.wait(60s) == 2);
    auto err = slurp(second.err);
    INFO("stderr: ", err);
    CHECK(err.find((dir / "ckpt").string() + ": another run is writing checkpoints here (pid " +
                   std::to_string(first.pid) + " on host ") != std::string::npos);
    CHECK(first.wait(0ms) == -1); // the first goes on (until it is killed here)
  }
  fs::remove_all(dir);
}

TEST_CASE("a fresh run over an earlier run's checkpoints is refused unless --resume or --restart") {
  auto dir = small_pipeline_graph("ckpt_fresh", 8, "checkpoint: {dir: ckpt, every: 4, keep: 5}\n");
  auto graph = (dir / "graph.yaml").string();
  auto ckpt = dir / "ckpt";
  {
    troupe_process p{dir, {"run", graph, "--no-trace"}};
    REQUIRE(p.wait(120s) == 0);
  }
  REQUIRE(slurp(ckpt / "latest") == "step-000008\n");
  {
    troupe_process p{dir, {"run", graph, "--no-trace", "--steps", "4"}};
    CHECK(p.wait(60s) == 2);
    auto err = slurp(p.err);
    CHECK(err == "troupe run: " + ckpt.string() +
                   ": holds an earlier run's checkpoints (2 step folders, 'latest' "
                   "names step-000008); a fresh run here would mix its steps with them: --resume " +
                   ckpt.string() +
                   " to continue that run, --restart to remove them and start over, or another checkpoint.dir\n");
    CHECK(slurp(p.out).empty());
    CHECK(slurp(ckpt / "latest") == "step-000008\n"); // untouched
  }
  {
    troupe_process p{dir, {"run", graph, "--no-trace", "--steps", "4", "--restart"}};
    CHECK(p.wait(120s) == 0);
    CHECK(slurp(ckpt / "latest") == "step-000004\n");
    CHECK_FALSE(fs::exists(ckpt / "step-000008")); // the earlier run's steps are gone, not mixed in
  }
  {
    troupe_process p{dir, {"run", graph, "--no-trace", "--resume", ckpt.string()}};
    CHECK(p.wait(120s) == 0);
    CHECK(slurp(ckpt / "latest") == "step-000008\n");
  }
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint folder that cannot be made is exit 2 before the run, not at the first save") {
  auto dir = small_pipeline_graph("ckpt_unwritable", 8, "checkpoint: {dir: a_file/ckpt, every: 4}\n");
  std::ofstream{dir / "a_file"} << "not a folder\n";
  troupe_process p{dir, {"run", (dir / "graph.yaml").string(), "--no-trace"}};
  CHECK(p.wait(60s) == 2);
  auto err = slurp(p.err);
  INFO("stderr: ", err);
  // Found by the graph's check, as `troupe check` finds it, with the file's position.
  CHECK(err == (dir / "graph.yaml").string() + ":5:19: checkpoint.dir: cannot create 'a_file/ckpt': Not a directory\n");
  CHECK(slurp(p.out).empty());
  fs::remove_all(dir);
}

TEST_CASE("a save that fails on a full disk removes its partial step folder and claims no earlier checkpoint") {
  auto dir = small_pipeline_graph("ckpt_full", 8, "checkpoint: {dir: tiny, every: 4}\n");
  auto mnt = dir / "tiny";
  {
    small_tmpfs disk{mnt, "64k"}; // room for the lock file, not for one part of the first checkpoint
    if (!disk.mounted) {
      MESSAGE("skipped: mounting a small tmpfs needs root");
      return;
    }
    troupe_process p{dir, {"run", (dir / "graph.yaml").string(), "--no-trace"}};
    CHECK(p.wait(120s) == 1);
    auto err = slurp(p.err);
    INFO("stderr: ", err);
    CHECK(err.find("No space left on device") != std::string::npos);
    CHECK(err.find("previous") == std::string::npos); // there is no previous file or checkpoint
    CHECK(err.find("intact") == std::string::npos);
    CHECK_FALSE(fs::exists(mnt / "step-000004"));
    CHECK_FALSE(fs::exists(mnt / "latest"));
  }
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint section without every saves the run's last step, as check says") {
  // It used to exit 0 having saved nothing: no folder, no lock, no message.
  auto dir = small_pipeline_graph("ckpt_no_every", 6, "checkpoint: {dir: ckpt}\n");
  auto graph = (dir / "graph.yaml").string();
  CHECK(run_to_end(dir, {"check", graph}) == 0);
  CHECK(slurp(dir / "out.txt").find("checkpoint: {dir: ckpt, every: 6, keep: 2}") != std::string::npos);
  CHECK(run_to_end(dir, {"run", graph, "--no-trace"}) == 0);
  INFO("stdout: ", slurp(dir / "out.txt"), "stderr: ", slurp(dir / "err.txt"));
  CHECK(slurp(dir / "ckpt" / "latest") == "step-000006\n");
  CHECK(fs::exists(dir / "ckpt" / "step-000006" / "checkpoint.json"));
  fs::remove_all(dir);
}
