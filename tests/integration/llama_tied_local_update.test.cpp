// Tied embeddings across stages under local update (#27): the head's copy of
// the tied matrix stays out of its stage's outer exchange and takes the
// embedding's values (and DES-LOC's averaged moments) after every outer step
// (actors/boundary/tied_mirror.hpp). For every method on 2 stages x 2 replicas
// the copies are bit-identical after every step; DiLoCo at H = 1, outer lr 1
// and no momentum is plain tied training; the deterministic methods follow
// tied on one stage, where there is one matrix; a resumed run follows the
// uninterrupted one.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "runtime/checkpoint/checkpoint.hpp"
#include "runtime/checkpoint/safetensors.hpp"
#include "tests/data_graph.hpp"
#include "tests/integration/run_text.hpp"

using namespace troupe;
using namespace troupe::testing;
namespace fs = std::filesystem;

namespace {

constexpr int steps = 6;

/// Every built-in method, each with an outer step after steps 2, 4 and 6 at
/// least (DES-LOC: its moments after 3 and 5 too).
const char* const methods[] = {
  "{algorithm: diloco, sync_every: 2}",
  "{algorithm: streaming_diloco, sync_every: 2, fragments: 1, delay: 1, alpha: 0.5}",
  "{algorithm: streaming_diloco, sync_every: 4, fragments: 2}", // fragment 1's steps leave the matrix alone
  "{algorithm: noloco, sync_every: 2, group: 2}",               // random routes across the replicas
  "{algorithm: sparseloco, sync_every: 2, density: 0.05}",
  "{algorithm: desloc, periods: {params: 2, momentum: 3, variance: 5}}", // moments alone after steps 3 and 5
};

/// A tied llama on `stages` stages x `replicas`; grad_clip 0.05 binds, so the
/// matrix must be counted once in each replica's norm.
std::string graph(int stages, int replicas, const std::string& local_update, const std::string& extra = "",
                  const std::string& schedule = "") {
  return fmt::format(
    R"(model: {{family: llama, layers: 4, d_model: 32, heads: 4, kv_heads: 2, context: 16, tie_embeddings: true}}
data: {{corpus: kjv, batch: 4, seed: 3, documents: long_tail}}
train: {{steps: {}, lr: 3.0e-3, warmup: 2, eval_batches: 1, grad_clip: 0.05}}
pipeline: {{stages: {}, microbatches: 4, schedule: {}}}
{}{}{})",
    steps, stages,
    !schedule.empty() ? schedule
    : stages == 1     ? "gpipe"
                      : "1f1b",
    replicas > 1 && extra.find("data_parallel") == std::string::npos
      ? fmt::format("data_parallel: {{replicas: {}}}\n", replicas)
      : "",
    local_update.empty() ? "" : "local_update: " + local_update + "\n", extra);
}

std::string checkpoint_every_step(const fs::path& dir) {
  return fmt::format("checkpoint: {{dir: {}, every: 1, keep: 20}}\n", dir.string());
}

/// Runs `text`, resumed from the step folder `from` when given.
run_result run(const std::string& text, const fs::path& from = {}) {
  auto g = load_graph_or_fail(text, "tied_local_update.yaml");
  if (!from.empty()) {
    auto point = open_resume(from, g);
    REQUIRE(point);
    g.checkpoint.resume_folder = point->folder, g.checkpoint.resume_step = point->step;
  }
  return run_graph_or_fail(g);
}

safetensors_file part(const fs::path& folder, const std::string& name) {
  auto f = read_safetensors(folder / (name + ".safetensors"));
  REQUIRE_MESSAGE(f, (folder / name).string());
  return std::move(*f);
}

/// How many of replica `r`'s tensors (the matrix and, with `moments`, its two moments) differ
/// between its embedding and its head's copy in step folder `folder`.
int differing_copies(const fs::path& folder, int r, bool moments = true, int head_stage = 1) {
  auto embedding = part(folder, fmt::format("r{}s0", r)), head = part(folder, fmt::format("r{}s{}", r, head_stage));
  int differ = 0;
  for (std::string kind : {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq."}) {
    if (!moments && !kind.empty())
      continue; // ZeRO's shards hold them
    auto want = embedding.find(kind + "embed_tokens.weight"), got = head.find(kind + "lm_head.weight");
    REQUIRE_MESSAGE(want.defined(), kind);
    REQUIRE_MESSAGE(got.defined(), kind);
    REQUIRE(got.nbytes() == want.nbytes());
    differ += std::memcmp(got.raw(), want.raw(), want.nbytes()) != 0;
  }
  return differ;
}

} // namespace

TEST_CASE("under every local-update method each replica's two copies of the tied matrix and their moments are "
          "bit-identical after every step, and the replicas differ") {
  scratch_dir tmp{"tied_lu"};
  int k = 0;
  for (std::string lu : methods) {
    CAPTURE(lu);
    auto ck = tmp.path / fmt::format("m{}", k++);
    auto r = run(graph(2, 2, lu, checkpoint_every_step(ck)));
    REQUIRE(r.losses.size() == steps);
    int compared = 0, differ = 0;
    for (int step = 1; step <= steps; ++step)
      for (int rep = 0; rep < 2; ++rep) {
        CAPTURE(step);
        CAPTURE(rep);
        int d = differing_copies(ck / checkpoint_folder_name(step), rep);
        CHECK(d == 0);
        differ += d, compared += 3;
      }
    CHECK(compared == 3 * 2 * steps);
    // Local update, not DDP: between outer steps the replicas' matrices are their own.
    auto between = ck / checkpoint_folder_name(5);
    auto a = part(between, "r0s0").find("embed_tokens.weight"), b = part(between, "r1s0").find("embed_tokens.weight");
    CHECK(std::memcmp(a.raw(), b.raw(), a.nbytes()) != 0);
    MESSAGE(lu, ": ", differ, " of ", compared, " copies (matrix, moments; steps 1-", steps,
            ", both replicas) differ from their embedding; loss ", r.losses.front(), " -> ", r.losses.back());
  }
}

// torchft's DiLoCo over HSDP: ZeRO's shards inside each group of 2, the outer
// exchange between the groups; the shards send back both copies alike.
TEST_CASE("tied DiLoCo between 2 replica groups of ZeRO-1 keeps every replica's copies bit-identical") {
  scratch_dir tmp{"tied_lu"};
  auto ck = tmp.path / "groups";
  auto r = run(graph(2, 4, "{algorithm: diloco, sync_every: 2, replica_groups: 2}",
                     "data_parallel: {replicas: 4, zero: 1}\n" + checkpoint_every_step(ck)));
  REQUIRE(r.losses.size() == steps);
  int differ = 0;
  for (int step = 1; step <= steps; ++step)
    for (int rep = 0; rep < 4; ++rep) {
      CAPTURE(step);
      CAPTURE(rep);
      int d = differing_copies(ck / checkpoint_folder_name(step), rep, false);
      CHECK(d == 0);
      differ += d;
    }
  MESSAGE("2 groups x 2 replicas of ZeRO-1: ", differ, " of ", 4 * steps, " head copies differ; loss ",
          r.losses.front(), " -> ", r.losses.back());
}

TEST_CASE(
  "tied DiLoCo with H = 1, outer lr 1 and no momentum on 2 stages is plain tied training; outer lr 0.5 is not") {
  auto plain = run(graph(2, 1, ""));
  auto diloco = run(graph(2, 1, "{algorithm: diloco, sync_every: 1, outer: {lr: 1, momentum: 0}}"));
  auto worst = largest_difference(diloco.losses, plain.losses);
  CHECK(worst <= 1e-6);
  // The outer step is really taken, on both copies: at outer lr 0.5 the curve leaves.
  auto half = run(graph(2, 1, "{algorithm: diloco, sync_every: 1, outer: {lr: 0.5, momentum: 0}}"));
  auto apart = largest_difference(half.losses, plain.losses);
  CHECK(apart > 1e-4);
  MESSAGE("H = 1, outer lr 1 against plain tied training: ", worst, "; outer lr 0.5: ", apart);
}

// One stage holds one matrix, which its exchange steps once; on two stages the
// embedding's exchange steps it and the head's copy takes the result. Methods
// that cut their fragments or their top-k by position in the stage's values
// (Streaming DiLoCo with 2 fragments, SparseLoCo) or route across replicas
// (NoLoCo's random routes) are another computation on 2 stages, not compared.
TEST_CASE("tied local update on 2 stages x 2 replicas follows tied local update on 1 stage x 2 replicas") {
  for (std::string lu :
       {"{algorithm: diloco, sync_every: 2}", "{algorithm: diloco, sync_every: 1, outer: {lr: 0.7, momentum: 0.9}}",
        "{algorithm: streaming_diloco, sync_every: 2, fragments: 1, delay: 1, alpha: 0.5}",
        "{algorithm: noloco, sync_every: 2, group: 2, route: chain}",
        "{algorithm: desloc, periods: {params: 1, momentum: 2, variance: 3}}"}) {
    CAPTURE(lu);
    auto one = run(graph(1, 2, lu));
    auto two = run(graph(2, 2, lu));
    auto worst = largest_difference(two.losses, one.losses);
    CHECK(worst <= 1e-6);
    REQUIRE(one.val_loss);
    REQUIRE(two.val_loss);
    CHECK(std::fabs(*two.val_loss - *one.val_loss) <= 1e-6 * *one.val_loss);
    MESSAGE(lu, ": 2 stages against 1, largest relative difference ", worst);
  }
}

// Interleaved chunks put the head's copy on the last rank's last chunk; V-shaped
// ones put both copies on stage 0, which copies the embedding's values in place.
TEST_CASE("with interleaved and V-shaped chunks the copies stay bit-identical and follow tied on 1 stage") {
  scratch_dir tmp{"tied_lu"};
  int k = 0;
  for (auto [schedule, head_stage] :
       {std::pair<std::string, int>{"interleaved_1f1b, virtual: 2", 1}, {"dualpipev, virtual: 2", 0}}) {
    for (std::string lu : {methods[0], methods[5]}) {
      CAPTURE(schedule);
      CAPTURE(lu);
      auto ck = tmp.path / fmt::format("c{}", k++);
      auto one = run(graph(1, 2, lu));
      auto two = run(graph(2, 2, lu, checkpoint_every_step(ck), schedule));
      int differ = 0;
      for (int step = 1; step <= steps; ++step)
        for (int rep = 0; rep < 2; ++rep) {
          CAPTURE(step);
          CAPTURE(rep);
          int d = differing_copies(ck / checkpoint_folder_name(step), rep, true, head_stage);
          CHECK(d == 0);
          differ += d;
        }
      auto worst = largest_difference(two.losses, one.losses);
      CHECK(worst <= 1e-6);
      MESSAGE(schedule, ", ", lu, ": ", differ, " of ", 3 * 2 * steps, " copies differ; against 1 stage ", worst);
    }
  }
}

TEST_CASE("a tied local-update run resumed between outer steps follows the uninterrupted one, copies and all") {
  scratch_dir tmp{"tied_lu"};
  for (std::string lu : {methods[0], methods[1], methods[5]}) {
    CAPTURE(lu);
    auto full_dir = tmp.path / "full", resumed_dir = tmp.path / "resumed";
    fs::remove_all(full_dir), fs::remove_all(resumed_dir);
    auto full = run(graph(2, 2, lu, checkpoint_every_step(full_dir)));
    auto resumed = run(graph(2, 2, lu, checkpoint_every_step(resumed_dir)), full_dir / checkpoint_folder_name(3));
    CHECK(resumed.first_step == 3);
    REQUIRE(resumed.losses.size() == steps - 3);
    double worst = 0;
    for (std::size_t i = 0; i < resumed.losses.size(); ++i)
      worst = std::max(worst, std::fabs(resumed.losses[i] - full.losses[i + 3]) / std::fabs(full.losses[i + 3]));
    CHECK(worst <= 1e-6);
    for (int rep = 0; rep < 2; ++rep)
      CHECK(differing_copies(resumed_dir / checkpoint_folder_name(steps), rep) == 0);
    auto last = checkpoint_folder_name(steps);
    for (const auto* name : {"r0s0", "r0s1", "r1s0", "r1s1"}) {
      auto a = part(full_dir / last, name), b = part(resumed_dir / last, name);
      for (const auto& t : a.tensors) {
        auto u = b.find(t.name);
        REQUIRE_MESSAGE(u.defined(), name, " ", t.name);
        CHECK_MESSAGE(std::memcmp(u.raw(), t.value.raw(), u.nbytes()) == 0, name, " ", t.name);
      }
    }
    MESSAGE(lu, ": resumed after step 3 differs by ", worst);
  }
}
