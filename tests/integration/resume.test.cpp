// Checkpoints end to end, through the real `troupe` command: a run killed with
// SIGKILL after a checkpoint resumes onto the uninterrupted run's loss curve,
// a full disk stops a run with the previous checkpoint intact, and a bad
// --resume folder is refused with exit code 2.
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <poll.h>
#include <spawn.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include <doctest/doctest.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint.hpp"
#include "tests/integration/troupe_process.hpp"

extern char** environ;

namespace fs = std::filesystem;

namespace {

constexpr int total_steps = 24;

struct fixture {
  fs::path dir = fs::temp_directory_path() / fmt::format("troupe_resume_{}", ::getpid());
  fs::path graph = dir / "resume.yaml";
  std::string troupe;

  fixture() {
    const char* build = std::getenv("TROUPE_BUILD_DIR");
    REQUIRE(build);
    troupe = std::string{build} + "/deploy/troupe";
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(graph) << fmt::format(R"(model:      {{layers: 4, d_model: 32, heads: 2, context: 64, vocab: 256}}
data:       {{corpus: kjv, batch: 8, seed: 5}}
train:      {{steps: {}, lr: 2.0e-3, weight_decay: 0.1, warmup: 4, eval_every: 8, eval_batches: 2}}
pipeline:   {{stages: 2, microbatches: 4, schedule: 1f1b}}
checkpoint: {{dir: ckpt, every: 8, keep: 2}}
)",
                                        total_steps);
  }
  ~fixture() { fs::remove_all(dir); }

  /// `troupe ARGS...` in the background, stdout and stderr to files under dir.
  pid_t spawn(const std::vector<std::string>& args, const std::string& tag) const {
    std::vector<std::string> all{troupe};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all)
      argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, (dir / (tag + ".out")).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, (dir / (tag + ".err")).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = -1;
    REQUIRE(posix_spawn(&pid, troupe.c_str(), &fa, nullptr, argv.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    return pid;
  }

  /// Runs `troupe ARGS...` to the end; returns its exit code.
  int run(const std::vector<std::string>& args, const std::string& tag) const {
    int status = 0;
    REQUIRE(::waitpid(spawn(args, tag), &status, 0) > 0);
    REQUIRE(WIFEXITED(status));
    return WEXITSTATUS(status);
  }

  std::string text(const std::string& name) const {
    std::ifstream in(dir / name);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  /// `troupe run` with a summary; returns the summary.
  nlohmann::json train(std::vector<std::string> args, const std::string& tag) const {
    auto summary = (dir / (tag + ".json")).string();
    args.insert(args.begin(), {"run", graph.string(), "--no-trace", "--summary-json", summary});
    int rc = run(args, tag);
    INFO(tag, " stderr: ", text(tag + ".err"));
    REQUIRE(rc == 0);
    std::ifstream in(summary);
    return nlohmann::json::parse(in);
  }
};

/// The largest relative difference between `tail` and the end of `full`.
double max_rel_diff(const std::vector<double>& full, const std::vector<double>& tail) {
  REQUIRE(tail.size() <= full.size());
  double worst = 0;
  auto offset = full.size() - tail.size();
  for (std::size_t i = 0; i < tail.size(); ++i)
    worst = std::max(worst, std::fabs(tail[i] - full[offset + i]) / std::fabs(full[offset + i]));
  return worst;
}

/// True when the two checkpoint parts hold the same tensors, byte for byte.
bool same_tensors(const fs::path& a, const fs::path& b) {
  auto x = troupe::read_safetensors(a), y = troupe::read_safetensors(b);
  REQUIRE(x);
  REQUIRE(y);
  if (x->tensors.size() != y->tensors.size())
    return false;
  for (const auto& t : x->tensors) {
    auto u = y->find(t.name);
    if (!u.defined() || u.nbytes() != t.value.nbytes() || std::memcmp(u.raw(), t.value.raw(), u.nbytes()) != 0)
      return false;
  }
  return true;
}

/// Waits (inotify) until `dir/latest` names `want`, then SIGKILLs `pid`.
/// Returns true when it was killed there, false when it ended first.
bool kill_after(pid_t pid, const fs::path& dir, const std::string& want) {
  int fd = inotify_init1(IN_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(inotify_add_watch(fd, dir.c_str(), IN_MOVED_TO) >= 0);
  bool killed = false;
  for (int waited_ms = 0; waited_ms < 120'000 && !killed;) {
    if (std::ifstream latest{dir / "latest"}; latest) {
      std::string name;
      std::getline(latest, name);
      if (name == want) {
        ::kill(pid, SIGKILL);
        killed = true;
        break;
      }
    }
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      ::close(fd);
      return false;
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) > 0) {
      char buf[4096];
      [[maybe_unused]] auto n = ::read(fd, buf, sizeof buf);
    } else {
      waited_ms += 50;
    }
  }
  ::close(fd);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return killed && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

std::vector<double> losses(const nlohmann::json& s) {
  return s.at("losses").get<std::vector<double>>();
}

} // namespace

TEST_CASE("a run killed after its step-16 checkpoint resumes onto the uninterrupted loss curve") {
  fixture f;
  auto full = f.train({"--set", "checkpoint.dir=" + (f.dir / "full").string()}, "full");
  auto ref = losses(full);
  REQUIRE(ref.size() == total_steps);
  CHECK(full.at("first_step") == 0);

  auto killed_dir = f.dir / "killed";
  fs::create_directories(killed_dir);
  auto pid =
    f.spawn({"run", f.graph.string(), "--no-trace", "--set", "checkpoint.dir=" + killed_dir.string()}, "killed");
  bool killed = kill_after(pid, killed_dir, "step-000016");
  INFO("the killed run's output: ", f.text("killed.out"));
  CHECK_MESSAGE(killed, "the run ended before it could be killed at step 16");
  REQUIRE(fs::exists(killed_dir / "step-000016" / "checkpoint.json"));
  REQUIRE(fs::exists(killed_dir / "step-000008" / "checkpoint.json")); // keep: 2

  // From a folder named directly, into a second folder, so the first stays as it was.
  auto from8 = f.train(
    {"--resume", (killed_dir / "step-000008").string(), "--set", "checkpoint.dir=" + (f.dir / "from8").string()},
    "from8");
  CHECK(from8.at("first_step") == 8);
  REQUIRE(losses(from8).size() == 16);
  auto diff8 = max_rel_diff(ref, losses(from8));

  // From `latest` (step 16), writing on into the killed run's folder.
  auto from16 = f.train({"--resume", killed_dir.string(), "--set", "checkpoint.dir=" + killed_dir.string()}, "from16");
  CHECK(from16.at("first_step") == 16);
  CHECK(from16.at("steps") == 8);
  REQUIRE(losses(from16).size() == 8);
  auto diff16 = max_rel_diff(ref, losses(from16));
  MESSAGE("largest relative loss difference after resuming: from step 8 ", diff8, ", from step 16 ", diff16);
  CHECK(diff8 <= 1e-6);
  CHECK(diff16 <= 1e-6);
  CHECK(f.text("from16.out").find("checkpoint step 24 -> ") != std::string::npos);
  CHECK(f.text("killed/latest") == "step-000024\n");
  // The weights and optimizer state at the end match the uninterrupted run's.
  for (const char* part : {"s0.safetensors", "s1.safetensors"}) {
    CHECK(same_tensors(f.dir / "full" / "step-000024" / part, killed_dir / "step-000024" / part));
    CHECK(same_tensors(f.dir / "full" / "step-000024" / part, f.dir / "from8" / "step-000024" / part));
  }
}

TEST_CASE("a full disk during a checkpoint stops the run with exit 1 and keeps the previous checkpoint") {
  fixture f;
  auto mnt = f.dir / "tiny";
  // One checkpoint of this model takes about 0.85 MB: the first fits, the second does not.
  troupe::testing::small_tmpfs disk{mnt, "1200k"};
  if (!disk.mounted) {
    MESSAGE("skipped: mounting a small tmpfs needs root");
    return;
  }
  int rc = f.run({"run", f.graph.string(), "--no-trace", "--set", "checkpoint.dir=" + mnt.string()}, "full_disk");
  auto err = f.text("full_disk.err");
  INFO("stderr: ", err);
  CHECK(rc == 1);
  CHECK(err.find("No space left on device") != std::string::npos);
  CHECK(err.find("step-000016/") != std::string::npos); // names the file
  CHECK(err.find("step-000008, is intact") != std::string::npos);
  CHECK(f.text("tiny/latest") == "step-000008\n");
  CHECK_FALSE(fs::exists(mnt / "step-000016")); // the partial step is discarded once every actor stopped
  for (const auto& e : fs::recursive_directory_iterator(mnt))
    CHECK_MESSAGE(e.path().string().find(".tmp.") == std::string::npos, "left behind: ", e.path());
  // And it resumes from there (writing no further checkpoints to the full disk).
  auto resumed = f.train({"--resume", mnt.string(), "--set", "checkpoint.every=0"}, "after_full");
  auto ref = f.train({"--set", "checkpoint.every=0"}, "reference");
  CHECK(resumed.at("first_step") == 8);
  CHECK(max_rel_diff(losses(ref), losses(resumed)) <= 1e-6);
}

TEST_CASE("a missing or mismatching --resume folder is refused with exit code 2 and says why") {
  fixture f;
  int rc = f.run({"run", f.graph.string(), "--no-trace", "--resume", (f.dir / "nowhere").string()}, "missing");
  CHECK(rc == 2);
  CHECK(f.text("missing.err").find("nowhere: no such checkpoint folder") != std::string::npos);

  f.train({"--steps", "8"}, "short"); // writes ckpt/step-000008 next to the graph
  REQUIRE(fs::exists(f.dir / "ckpt" / "latest"));
  rc =
    f.run({"run", f.graph.string(), "--no-trace", "--resume", (f.dir / "ckpt").string(), "--set", "model.d_model=64"},
          "wider");
  CHECK(rc == 2);
  CHECK(f.text("wider.err")
          .find("step-000008/s0.safetensors: model.d_model is 32 in the checkpoint but 64 in the "
                "graph") != std::string::npos);
  rc =
    f.run({"run", f.graph.string(), "--no-trace", "--resume", (f.dir / "ckpt").string(), "--set", "pipeline.stages=4"},
          "deeper");
  CHECK(rc == 2);
  CHECK(f.text("deeper.err")
          .find("the checkpoint has parts for loader, s0, s1 but the graph's checkpointing "
                "actors are loader, s0, s1, s2, s3") != std::string::npos);
  CHECK(f.text("deeper.out").empty()); // nothing ran
}

TEST_CASE("a run whose length is not a multiple of checkpoint.every still saves its last step") {
  fixture f;
  auto ckpt = f.dir / "odd";
  auto first = f.train({"--steps", "13", "--set", "checkpoint.dir=" + ckpt.string()}, "odd");
  CHECK(first.at("steps") == 13);
  CHECK(f.text("odd.out").find("checkpoint step 8 -> ") != std::string::npos);
  CHECK(f.text("odd.out").find("checkpoint step 13 -> ") != std::string::npos);
  CHECK(f.text("odd/latest") == "step-000013\n");
  REQUIRE(fs::exists(ckpt / "step-000013" / "checkpoint.json"));
  // Training on from the last step (a longer run) starts exactly there.
  auto more =
    f.train({"--resume", ckpt.string(), "--steps", "16", "--set", "checkpoint.dir=" + ckpt.string()}, "odd_more");
  CHECK(more.at("first_step") == 13);
  CHECK(more.at("steps") == 3);
  CHECK(f.text("odd/latest") == "step-000016\n");
}

TEST_CASE("a truncated checkpoint part is refused before anything runs, with exit code 2 naming the file") {
  fixture f;
  f.train({"--steps", "8"}, "short");
  auto part = f.dir / "ckpt" / "step-000008" / "s1.safetensors";
  REQUIRE(fs::exists(part));
  fs::resize_file(part, fs::file_size(part) / 2); // a copy that lost its end
  int rc = f.run({"run", f.graph.string(), "--no-trace", "--resume", (f.dir / "ckpt").string()}, "truncated");
  auto err = f.text("truncated.err");
  INFO("stderr: ", err);
  CHECK(rc == 2);
  CHECK(err.find("cannot resume: " + part.string() + ": truncated: its header describes ") != std::string::npos);
  CHECK(err.find("did not accept connect") == std::string::npos);
  CHECK(f.text("truncated.out").empty()); // nothing ran
}

TEST_CASE("a checkpoint tensor of the wrong shape is refused before anything runs, with exit code 2 naming it") {
  fixture f;
  f.train({"--steps", "8"}, "short");
  auto part = f.dir / "ckpt" / "step-000008" / "s0.safetensors";
  auto file = troupe::read_safetensors(part);
  REQUIRE(file);
  bool replaced = false;
  for (auto& t : file->tensors)
    if (t.name == "h.0.ln_1.weight") {
      t.value = troupe::tensor_handle::zeros({16}); // d_model is 32
      replaced = true;
    }
  REQUIRE(replaced);
  REQUIRE(!troupe::write_safetensors(part, file->tensors, file->metadata));
  int rc = f.run({"run", f.graph.string(), "--no-trace", "--resume", (f.dir / "ckpt").string()}, "reshaped");
  auto err = f.text("reshaped.err");
  INFO("stderr: ", err);
  CHECK(rc == 2);
  CHECK(err.find(part.string() + ": tensor 'h.0.ln_1.weight' is f32 [16] in the checkpoint but f32 [32] in the "
                                 "graph's model") != std::string::npos);
  CHECK(err.find("did not accept connect") == std::string::npos);
  CHECK(f.text("reshaped.out").empty());
}

TEST_CASE("a 'latest' that names a missing step folder is refused saying so, and lists the complete ones") {
  fixture f;
  f.train({"--steps", "8"}, "short");
  std::ofstream(f.dir / "ckpt" / "latest") << "step-000016\n"; // its folder was removed by hand
  int rc = f.run({"run", f.graph.string(), "--no-trace", "--resume", (f.dir / "ckpt").string()}, "gone");
  auto err = f.text("gone.err");
  INFO("stderr: ", err);
  CHECK(rc == 2);
  CHECK(err.find((f.dir / "ckpt" / "latest").string() + ": names step-000016, which does not exist in ") !=
        std::string::npos);
  CHECK(err.find("complete checkpoints there: step-000008") != std::string::npos);
  CHECK(err.find("no checkpoint.json") == std::string::npos);
}

TEST_CASE("a resumed run keeps saving where its checkpoint came from, as often, unless told otherwise") {
  fixture f;
  // A graph without a checkpoint section: where and how often came from the command line.
  auto plain = f.dir / "plain.yaml";
  {
    std::ifstream in(f.graph);
    std::ofstream out(plain);
    for (std::string line; std::getline(in, line);)
      if (!line.starts_with("checkpoint:"))
        out << line << "\n";
  }
  auto ckpt = f.dir / "elsewhere";
  REQUIRE(f.run({"run", plain.string(), "--no-trace", "--steps", "8", "--set", "checkpoint.dir=" + ckpt.string(),
                 "--set", "checkpoint.every=4"},
                "first") == 0);
  REQUIRE(f.text("elsewhere/latest") == "step-000008\n");
  // Resumed with neither repeated: it saves into the same folder every 4 steps.
  int rc = f.run({"run", plain.string(), "--no-trace", "--steps", "12", "--resume", ckpt.string()}, "resumed");
  INFO("stdout: ", f.text("resumed.out"), "\nstderr: ", f.text("resumed.err"));
  REQUIRE(rc == 0);
  CHECK(f.text("resumed.out").find("saving checkpoints to " + ckpt.string() + " every 4 steps") != std::string::npos);
  CHECK(f.text("resumed.out").find("checkpoint step 12 -> ") != std::string::npos);
  CHECK(f.text("elsewhere/latest") == "step-000012\n");
  CHECK(fs::exists(ckpt / "step-000012" / "checkpoint.json"));
  // Told otherwise, it obeys.
  rc = f.run(
    {"run", plain.string(), "--no-trace", "--steps", "16", "--resume", ckpt.string(), "--set", "checkpoint.every=0"},
    "unsaved");
  REQUIRE(rc == 0);
  CHECK(f.text("unsaved.out").find("saving no checkpoints") != std::string::npos);
  CHECK(f.text("elsewhere/latest") == "step-000012\n");
}

TEST_CASE("resuming a run that already reached train.steps says there is nothing to do") {
  fixture f;
  f.train({"--steps", "8"}, "short");
  int rc =
    f.run({"run", f.graph.string(), "--no-trace", "--steps", "8", "--resume", (f.dir / "ckpt").string()}, "finished");
  auto out = f.text("finished.out");
  INFO("stdout: ", out, "\nstderr: ", f.text("finished.err"));
  CHECK(rc == 0);
  CHECK(out.find("nothing to do: checkpoint " + (f.dir / "ckpt" / "step-000008").string() +
                 " is the run's last step (train.steps 8); raise --steps to train further") != std::string::npos);
  CHECK(out.find(" 0 steps") == std::string::npos);
  CHECK(out.find("overhead") == std::string::npos);
}

TEST_CASE("a checkpoint tensor holding NaN or Inf is refused before anything runs, naming the file and tensor") {
  // Such weights used to start the run, which failed steps later asking to lower train.lr.
  fixture f;
  f.train({"--steps", "8"}, "short");
  auto part = f.dir / "ckpt" / "step-000008" / "s0.safetensors";
  for (float bad : {std::nanf(""), INFINITY}) {
    auto file = troupe::read_safetensors(part);
    REQUIRE(file);
    for (auto& t : file->tensors)
      if (t.name == "h.0.ln_1.weight")
        t.value.data<float>()[3] = bad;
    REQUIRE(!troupe::write_safetensors(part, file->tensors, file->metadata));
    int rc = f.run({"run", f.graph.string(), "--no-trace", "--resume", (f.dir / "ckpt").string()}, "damaged");
    auto err = f.text("damaged.err");
    INFO("stderr: ", err);
    CHECK(rc == 2);
    CHECK(err.find("cannot resume: " + part.string() + ": tensor 'h.0.ln_1.weight' holds " +
                   (std::isnan(bad) ? "NaN" : "Inf") + " at element 3") != std::string::npos);
    CHECK(f.text("damaged.out").empty());
  }
}

TEST_CASE("resuming with other steps than the checkpoint's run says that the learning-rate schedule changes") {
  fixture f;
  f.train({"--steps", "8"}, "short");
  REQUIRE(f.run({"run", f.graph.string(), "--no-trace", "--steps", "10", "--resume", (f.dir / "ckpt").string(), "--set",
                 "checkpoint.every=0"},
                "longer") == 0);
  auto out = f.text("longer.out");
  INFO("stdout: ", out);
  CHECK(out.find("note: the learning-rate schedule changes: the checkpoint's run decays it over 8 steps, this one "
                 "over 10 (step 9: lr ") != std::string::npos);
  CHECK(out.find("; --steps 8 keeps the old schedule") != std::string::npos);
}
