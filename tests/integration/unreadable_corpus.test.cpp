// A corpus the process may not read (chmod 000, an unprivileged user) is an
// error of the graph, found by `troupe check` and by `troupe run` before
// anything starts, never a crash in the data loader. Root reads every file, so
// as root the commands run as nobody (65534).
#include <sys/stat.h>

#include "tests/integration/troupe_process.hpp"

using namespace troupe::testing;

namespace {

/// `troupe ARGS...` as an unprivileged user, to the end: its exit code, its stderr in `err`.
int run_unprivileged(const fs::path& dir, std::vector<std::string> args, const fs::path& err) {
  troupe_process p{dir, std::move(args), false, true};
  int rc = p.wait(120s);
  fs::rename(p.err, err);
  return rc;
}

} // namespace

TEST_CASE("a corpus the user may not read fails check and run with a positioned error, exit 2") {
  auto dir = small_pipeline_graph("unreadable_corpus", 4);
  // The graph and its folder are readable by anyone; only the corpus is closed.
  fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                         fs::perms::others_exec);
  std::ofstream{dir / "graph.yaml"} << "model: {layers: 4, d_model: 32, heads: 2, context: 16, vocab: 256}\n"
                                    << "data: {corpus: closed.txt, batch: 4}\n"
                                    << "train: {steps: 4}\n"
                                    << "pipeline: {stages: 4, microbatches: 4, schedule: 1f1b}\n";
  std::ofstream{dir / "closed.txt"} << std::string(5000, 'a');
  fs::permissions(dir / "closed.txt", fs::perms::none);
  auto graph = (dir / "graph.yaml").string();
  auto want = graph + ":2:16: data.corpus: corpus file 'closed.txt' cannot be read: Permission denied\n";

  CHECK(run_unprivileged(dir, {"check", graph}, dir / "check.err") == 2);
  CHECK(slurp(dir / "check.err") == want);
  CHECK(run_unprivileged(dir, {"run", graph, "--no-trace"}, dir / "run.err") == 2);
  CHECK(slurp(dir / "run.err") == want);
  fs::remove_all(dir);
}
