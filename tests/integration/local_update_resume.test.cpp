// Checkpoint and exact resume of local-update training (#25 item 4): for every
// built-in method, a run resumed from a checkpoint between two outer steps
// (sync_every 3, resumed after step 4; Streaming DiLoCo with an exchange under
// way at that step) gives the uninterrupted run's per-step losses to 1e-6 and
// its final parameters and outer state. The outer state matters: resumed with
// the outer momentum (or error feedback) reset, the curve leaves by far more
// than 1e-6; and a checkpoint without a sync actor's part, or one that does not
// fit the graph, is refused before anything runs, naming the file.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "runtime/checkpoint/checkpoint.hpp"
#include "tests/integration/run_text.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

constexpr int steps = 9, resume_at = 4;

struct method_case {
  const char* local_update;
  const char*
    reset; ///< a saved tensor that, reset to zero, changes the curve (DES-LOC: none, its moments are the stages')
};

/// Every built-in method, each exchanging at steps 3, 6 and 9 (Streaming
/// DiLoCo: fragment 0 prepared after step 1 and performed after step 3,
/// fragment 1 after 4 and 6, …, so its exchange of fragment 1 is under way at step 4).
const method_case methods[] = {
  {"{algorithm: diloco, sync_every: 3}", "sync.momentum.0"},
  // Its outer momentum matters only after step 9 here (fragment 0 steps again
  // after step 9, fragment 1 first after step 6): the exchange under way does.
  {"{algorithm: streaming_diloco, sync_every: 6, fragments: 2, delay: 2, alpha: 0.5}", "sync.exchange.1"},
  // route: chain keeps each replica's microbatches on its own stages: NoLoCo's
  // random routes sum gradients in arrival order, which differs from run to run by f32 rounding.
  {"{algorithm: noloco, sync_every: 3, group: 2, route: chain}", "sync.momentum"},
  {"{algorithm: desloc, periods: {params: 3, momentum: 6, variance: 6}}", nullptr},
  {"{algorithm: sparseloco, sync_every: 3, density: 0.05}", "sync.error"},
};

struct fixture {
  fs::path dir = fs::temp_directory_path() / fmt::format("troupe_lu_resume_{}", ::getpid());
  fixture() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~fixture() { fs::remove_all(dir); }

  std::string graph(const std::string& local_update, const std::string& ckpt) const {
    return fmt::format(R"(model:         {{layers: 2, d_model: 32, heads: 2, context: 16, vocab: 256}}
data:          {{corpus: kjv, batch: 2, seed: 5}}
train:         {{steps: {}, lr: 2.0e-3, weight_decay: 0.1, warmup: 2}}
pipeline:      {{stages: 2, microbatches: 2, schedule: 1f1b}}
data_parallel: {{replicas: 2}}
local_update:  {}
checkpoint:    {{dir: {}, every: 1, keep: 20}}
)",
                       steps, local_update, (dir / ckpt).string());
  }
};

graph_spec load(const std::string& text) {
  return testing::load_graph_or_fail(text, "local_update_resume.yaml");
}

/// Runs `text`, resumed from the step folder `from` when given, as `troupe run --resume` does.
run_result run(const std::string& text, const fs::path& from = {}) {
  auto g = load(text);
  if (!from.empty()) {
    auto point = open_resume(from, g);
    INFO((point ? std::string{} : error_message(point.error())));
    REQUIRE(point);
    g.checkpoint.resume_folder = point->folder, g.checkpoint.resume_step = point->step;
  }
  return testing::run_graph_or_fail(g);
}

/// The largest relative difference between `tail` and the end of `full`.
double worst(const std::vector<double>& full, const std::vector<double>& tail) {
  REQUIRE(tail.size() <= full.size());
  double w = 0;
  for (std::size_t i = 0, off = full.size() - tail.size(); i < tail.size(); ++i)
    w = std::max(w, std::fabs(tail[i] - full[off + i]) / std::fabs(full[off + i]));
  return w;
}

/// The names of the parts in step folder `folder` that hold tensors different
/// from those in `other` (every part of both).
std::vector<std::string> differing_parts(const fs::path& folder, const fs::path& other) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(folder)) {
    if (e.path().extension() != ".safetensors")
      continue;
    auto a = read_safetensors(e.path()), b = read_safetensors(other / e.path().filename());
    REQUIRE(a);
    REQUIRE(b);
    bool same = a->tensors.size() == b->tensors.size();
    for (const auto& t : a->tensors) {
      auto u = b->find(t.name);
      same =
        same && u.defined() && u.nbytes() == t.value.nbytes() && std::memcmp(u.raw(), t.value.raw(), u.nbytes()) == 0;
    }
    if (!same)
      out.push_back(e.path().filename().string());
  }
  return out;
}

/// Rewrites the tensor `name` of part `file` with `make(old)`.
void rewrite(const fs::path& file, const std::string& name, const std::function<tensor_handle(tensor_handle)>& make) {
  auto f = read_safetensors(file);
  REQUIRE(f);
  bool found = false;
  for (auto& t : f->tensors)
    if (t.name == name)
      t.value = make(t.value), found = true;
  REQUIRE(found);
  REQUIRE(!write_safetensors(file, f->tensors, f->metadata));
}

} // namespace

TEST_CASE("every local-update method resumed between outer steps follows the uninterrupted run to 1e-6") {
  fixture fx;
  for (const auto& m : methods) {
    std::string lu = m.local_update;
    CAPTURE(lu);
    auto tag = std::string{m.local_update}.substr(12, 6);
    auto full = run(fx.graph(m.local_update, tag + "_full"));
    REQUIRE(full.losses.size() == steps);
    auto mid = fx.dir / (tag + "_full") / checkpoint_folder_name(resume_at);
    REQUIRE(fs::exists(mid / "r0s1_sync.safetensors")); // the sync actors save their own parts
    auto resumed = run(fx.graph(m.local_update, tag + "_resumed"), mid);
    CHECK(resumed.first_step == resume_at);
    REQUIRE(resumed.losses.size() == steps - resume_at);
    auto w = worst(full.losses, resumed.losses);
    CHECK(w <= 1e-6);
    // The final parameters, optimizer state and outer state are the same.
    auto last = checkpoint_folder_name(steps);
    CHECK(differing_parts(fx.dir / (tag + "_full") / last, fx.dir / (tag + "_resumed") / last).empty());

    double reset = 0;
    if (m.reset) { // the same resume with the outer state reset: the curve leaves
      auto copy = fx.dir / (tag + "_reset");
      fs::copy(fx.dir / (tag + "_full"), copy, fs::copy_options::recursive);
      auto from = copy / checkpoint_folder_name(resume_at);
      for (const char* part : {"r0s0_sync", "r0s1_sync", "r1s0_sync", "r1s1_sync"})
        rewrite(from / (std::string{part} + ".safetensors"), m.reset,
                [](tensor_handle t) { return tensor_handle::zeros(t.shape()); });
      auto other = run(fx.graph(m.local_update, tag + "_other"), from);
      reset = worst(full.losses, other.losses);
      CHECK(reset > 1e-4);
    }
    MESSAGE(lu, ": resumed after step ", resume_at, " differs by ", w, "; with ", std::string{m.reset ? m.reset : "-"},
            " reset by ", reset);
  }
}

TEST_CASE("Streaming DiLoCo saves the exchange under way at a checkpoint, and it completes after the resume") {
  fixture fx;
  auto lu = methods[1].local_update;
  run(fx.graph(lu, "ck"));
  auto part = read_safetensors(fx.dir / "ck" / checkpoint_folder_name(resume_at) / "r1s0_sync.safetensors");
  REQUIRE(part);
  CHECK(part->metadata.at("outer.prepared") == "1:4"); // fragment 1, prepared after step 4
  CHECK(part->find("sync.exchange.1").defined());      // what this replica put into it
  CHECK(part->metadata.at("outer.performed") == "1");  // fragment 0's, after step 3
  for (const char* k : {"sync.global.0", "sync.global.1", "sync.momentum.0", "sync.momentum.1"})
    CHECK(part->find(k).defined());
  // At the steps in between, none is under way.
  auto at3 = read_safetensors(fx.dir / "ck" / checkpoint_folder_name(3) / "r1s0_sync.safetensors");
  REQUIRE(at3);
  CHECK(at3->metadata.at("outer.prepared").empty());
  CHECK_FALSE(at3->find("sync.exchange.0").defined());
}

TEST_CASE("a local-update checkpoint without a sync part, or one that does not fit, is refused naming the file") {
  fixture fx;
  auto lu = methods[0].local_update;
  run(fx.graph(lu, "ck"));
  auto from = fx.dir / "ck" / checkpoint_folder_name(resume_at);
  auto refusal = [&](const std::string& local_update) {
    auto g = load(fx.graph(local_update, "again"));
    auto point = open_resume(from, g);
    REQUIRE_FALSE(point);
    return error_message(point.error());
  };
  // Another method's settings.
  CHECK(refusal("{algorithm: diloco, sync_every: 4}")
          .find((from / "r0s0_sync.safetensors").string() +
                ": local_update.sync_every is 3 in the checkpoint but 4 in the graph") != std::string::npos);
  // A saved global of another size.
  rewrite(from / "r1s1_sync.safetensors", "sync.global.0", [](tensor_handle) { return tensor_handle::zeros({7}); });
  auto why = refusal(lu);
  CHECK(why.find((from / "r1s1_sync.safetensors").string() + ": 'global.0' holds 7 values, this stage's ") !=
        std::string::npos);
  // No part at all.
  fs::remove(from / "r0s1_sync.safetensors");
  CHECK(refusal(lu).find((from / "r0s1_sync.safetensors").string() + ": missing") != std::string::npos);
}
