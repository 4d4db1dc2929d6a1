// The checkpoint bookkeeping on real files: completion only when every actor
// reported, `latest` replaced atomically, pruning, and checks before a resume.
#include "runtime/checkpoint/checkpoint.hpp"

#include <fstream>
#include <unistd.h>

#include <doctest/doctest.h>

#include "actors/builtin.hpp"
#include "ops/gpt.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/graph/graph_loader.hpp"

using namespace troupe;
namespace fs = std::filesystem;

namespace {

// runtime/ names no actor type: the built-in types' roles and the `pipeline:`
// expander come from actors/ (this test links it).
[[maybe_unused]] const bool builtin_types = (register_builtin_actors(), true);

fs::path fresh_dir(const std::string& name) {
  auto d = fs::temp_directory_path() / ("troupe_ckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

tensor_handle filled(std::int64_t n, float v) {
  auto t = tensor_handle::empty({n});
  for (std::int64_t i = 0; i < n; ++i)
    t.data<float>()[i] = v;
  return t;
}

/// Writes `actor`'s part for `step` and reports it to `t`.
bool write_and_report(checkpoint_tracker& t, const fs::path& dir, const std::string& actor, std::int64_t step) {
  auto file = write_checkpoint_part(dir, step, actor, {{"w", filled(16, float(step))}}, {});
  REQUIRE(file);
  return t.on_report(actor, step, *file);
}

const char* graph_text = R"(model: {layers: 2, d_model: 16, heads: 2, context: 8}
data: {corpus: kjv, batch: 2}
train: {steps: 40}
pipeline: {stages: 2, microbatches: 2}
)";

graph_spec load(const std::string& text, const fs::path& dir) {
  load_options opts;
  opts.check_corpus = false;
  auto r = load_graph_text(text, dir / "g.yaml", opts);
  INFO(to_string(r.errors));
  REQUIRE(r.ok());
  return *r.graph;
}

/// What `a` writes after `step` steps of a fresh model: a stage its parameters
/// (no optimizer state before the first update), the loader its position.
std::pair<std::vector<named_handle>, std::map<std::string, std::string>>
part_of(const graph_spec& g, const actor_spec& a, std::int64_t step) {
  auto md = checkpoint_identity(g, a);
  std::vector<named_handle> tensors;
  if (a.role.holds_layers) {
    ops::gpt_config cfg{.layers = g.model.layers,
                        .d_model = g.model.d_model,
                        .heads = g.model.heads,
                        .context = g.model.context,
                        .vocab = g.model.vocab};
    for (auto r : a.layers)
      for (const auto& p : ops::gpt_param_specs(cfg, r.begin, r.end))
        tensors.push_back({p.name, tensor_handle::zeros(p.shape)});
    md["optimizer.steps"] = "0";
  } else {
    md["position"] = "0";
    md["sent"] = std::to_string(step * g.pipeline.microbatches);
  }
  return {tensors, md};
}

} // namespace

TEST_CASE("checkpoints fall every `every` steps and after the last step, never with every = 0") {
  CHECK(checkpoint_due(8, 8, 20));
  CHECK(checkpoint_due(16, 8, 20));
  CHECK_FALSE(checkpoint_due(12, 8, 20));
  CHECK(checkpoint_due(20, 8, 20)); // the last step, though 20 % 8 != 0
  CHECK(checkpoint_due(16, 8, 16));
  CHECK_FALSE(checkpoint_due(0, 8, 20));
  CHECK_FALSE(checkpoint_due(20, 0, 20));
}

TEST_CASE("a checkpoint is complete only when every checkpointing actor reported its step") {
  auto dir = fresh_dir("complete");
  checkpoint_tracker t(dir, {"loader", "s0", "s1"}, 2);
  CHECK_FALSE(write_and_report(t, dir, "loader", 8));
  CHECK_FALSE(write_and_report(t, dir, "s0", 8));
  CHECK_FALSE(t.on_report("stranger", 8, "x.safetensors")); // not one of the list: ignored
  CHECK_FALSE(write_and_report(t, dir, "loader", 16));      // runs ahead: a later step
  CHECK_FALSE(fs::exists(dir / "latest"));
  CHECK(write_and_report(t, dir, "s1", 8));
  auto c = t.commit(8);
  REQUIRE(c);
  CHECK(c->folder == dir / "step-000008");
  std::uintmax_t bytes = 0;
  for (const char* f : {"loader.safetensors", "s0.safetensors", "s1.safetensors"})
    bytes += fs::file_size(dir / "step-000008" / f);
  CHECK(c->bytes == bytes);
  CHECK(read_text(dir / "latest") == "step-000008\n");
  CHECK(fs::exists(dir / "step-000008" / "checkpoint.json"));
  CHECK(t.last_committed() == 8);
  CHECK_FALSE(t.on_report("s0", 8, "s0.safetensors")); // a repeat of a committed step
  CHECK_FALSE(t.commit(16));                           // s0 and s1 have not reported 16
  CHECK(read_text(dir / "latest") == "step-000008\n");
  fs::remove_all(dir);
}

TEST_CASE("latest moves only on commit and no temporary file is left behind") {
  auto dir = fresh_dir("latest");
  checkpoint_tracker t(dir, {"s0"}, 3);
  for (std::int64_t step : {4, 8}) {
    REQUIRE(write_and_report(t, dir, "s0", step));
    REQUIRE(t.commit(step));
    CHECK(read_text(dir / "latest") == checkpoint_folder_name(step) + "\n");
  }
  // A part written but not yet committed (the run died here): latest still names step 8.
  write_checkpoint_part(dir, 12, "s0", {{"w", filled(4, 1)}}, {});
  CHECK(read_text(dir / "latest") == "step-000008\n");
  for (const auto& e : fs::recursive_directory_iterator(dir))
    CHECK_MESSAGE(e.path().string().find(".tmp.") == std::string::npos, "left behind: ", e.path());
  auto part = read_checkpoint_part(dir / "step-000008", "s0", 8);
  REQUIRE(part);
  CHECK(part->find("w").data<float>()[0] == 8.0f);
  CHECK_FALSE(read_checkpoint_part(dir / "step-000008", "s0", 4)); // wrong step is an error
  // A resumed run writing step 4 again: the folder stops being complete at its first part.
  REQUIRE(fs::exists(dir / "step-000004" / "checkpoint.json"));
  write_checkpoint_part(dir, 4, "s0", {{"w", filled(4, 2)}}, {});
  CHECK_FALSE(fs::exists(dir / "step-000004" / "checkpoint.json"));
  fs::remove_all(dir);
}

TEST_CASE("a part that fails leaves the other parts alone; the runner discards the step once all stopped") {
  auto dir = fresh_dir("failed_part");
  checkpoint_tracker t(dir, {"s0", "s1"}, 3);
  CHECK_FALSE(write_and_report(t, dir, "s0", 8));
  REQUIRE(write_and_report(t, dir, "s1", 8));
  REQUIRE(t.commit(8));
  // s1's part of step 16 is in; s0's cannot be moved into place (a folder stands
  // where its file goes). Had s0's failure removed the step folder, s1 — still
  // writing in a real run — would fail with "No such file or directory" instead.
  CHECK_FALSE(write_and_report(t, dir, "s1", 16)); // s0 has not reported
  fs::create_directories(dir / "step-000016" / checkpoint_part_name("s0") / "blocker");
  auto failed = write_checkpoint_part(dir, 16, "s0", {{"w", filled(4, 1)}}, {});
  REQUIRE_FALSE(failed);
  CHECK(fs::exists(dir / "step-000016" / checkpoint_part_name("s1")));
  write_checkpoint_part(dir, 24, "s1", {{"w", filled(4, 1)}}, {});
  t.discard_incomplete();
  CHECK_FALSE(fs::exists(dir / "step-000016"));
  CHECK_FALSE(fs::exists(dir / "step-000024"));
  CHECK(fs::exists(dir / "step-000008" / "checkpoint.json"));
  CHECK(read_text(dir / "latest") == "step-000008\n");
  fs::remove_all(dir);
}

TEST_CASE("pruning keeps the newest keep complete checkpoints and leaves later folders alone") {
  auto dir = fresh_dir("prune");
  checkpoint_tracker t(dir, {"s0"}, 2);
  write_checkpoint_part(dir, 6, "s0", {}, {});  // incomplete and older: removed
  write_checkpoint_part(dir, 40, "s0", {}, {}); // incomplete and newer: kept (in progress)
  for (std::int64_t step : {8, 16, 24, 32}) {
    REQUIRE(write_and_report(t, dir, "s0", step));
    REQUIRE(t.commit(step));
  }
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir))
    left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::string>{"latest", "step-000024", "step-000032", "step-000040"});
  fs::remove_all(dir);
}

TEST_CASE("resuming checks the checkpoint against the graph and names what differs") {
  auto dir = fresh_dir("resume");
  auto g = load(graph_text, dir);
  auto actors = checkpoint_actors(g);
  REQUIRE(actors.size() == 3); // the loader and two stages
  CHECK_FALSE(open_resume(dir / "absent", g));
  auto none = open_resume(dir, g);
  REQUIRE_FALSE(none);
  CHECK(error_message(none.error()).find("no checkpoint here") != std::string::npos);

  checkpoint_tracker t(dir, actors, 2, 8);
  auto write_all = [&](const graph_spec& gs, std::int64_t step) {
    bool complete = false;
    for (const auto& a : gs.actors) {
      auto [tensors, metadata] = part_of(gs, a, step);
      auto file = write_checkpoint_part(dir, step, a.name, tensors, metadata);
      REQUIRE(file);
      complete = t.on_report(a.name, step, *file);
    }
    REQUIRE(complete);
    REQUIRE(t.commit(step));
  };
  write_all(g, 8);
  auto ok = open_resume(dir, g);
  REQUIRE(ok);
  CHECK(ok->step == 8);
  CHECK(ok->folder == dir / "step-000008");
  CHECK(ok->dir == dir);
  CHECK(ok->every == 8); // the run's settings, for a resumed run to keep
  CHECK(ok->keep == 2);
  auto by_folder = open_resume(dir / "step-000008", g);
  REQUIRE(by_folder);
  CHECK(by_folder->step == 8);
  CHECK(by_folder->dir == dir);

  std::string wider = graph_text;
  wider.replace(wider.find("d_model: 16"), 11, "d_model: 32");
  auto mismatch = open_resume(dir, load(wider, dir));
  REQUIRE_FALSE(mismatch);
  CHECK(error_message(mismatch.error()).find("model.d_model is 16 in the checkpoint but 32 in the graph") !=
        std::string::npos);

  std::string three = graph_text;
  three.replace(three.find("layers: 2"), 9, "layers: 3");
  three.replace(three.find("stages: 2"), 9, "stages: 3");
  auto stages = open_resume(dir, load(three, dir));
  REQUIRE_FALSE(stages);
  CHECK(error_message(stages.error()).find("the graph's checkpointing actors are") != std::string::npos);

  // A part whose tensor has another shape, then one cut short: refused from its header, naming the file.
  auto s1 = dir / "step-000008" / "s1.safetensors";
  auto part = read_safetensors(s1);
  REQUIRE(part);
  part->tensors.front().value = tensor_handle::zeros({3});
  REQUIRE_FALSE(write_safetensors(s1, part->tensors, part->metadata));
  auto reshaped = open_resume(dir, g);
  REQUIRE_FALSE(reshaped);
  CHECK(error_message(reshaped.error())
          .find("s1.safetensors: tensor '" + part->tensors.front().name +
                "' is f32 [3] in the checkpoint but f32 [16] in the graph's model") != std::string::npos);
  fs::resize_file(s1, fs::file_size(s1) - 8);
  auto cut = open_resume(dir, g);
  REQUIRE_FALSE(cut);
  CHECK(error_message(cut.error()).find("s1.safetensors: truncated") != std::string::npos);

  fs::remove(dir / "step-000008" / "s1.safetensors");
  auto missing = open_resume(dir, g);
  REQUIRE_FALSE(missing);
  CHECK(error_message(missing.error()).find("s1.safetensors: missing") != std::string::npos);

  write_checkpoint_part(dir, 16, "s0", {}, {}); // a step folder the run never completed
  auto partial = open_resume(dir / "step-000016", g);
  REQUIRE_FALSE(partial);
  CHECK(error_message(partial.error()).find("not a complete checkpoint") != std::string::npos);

  std::ofstream(dir / "latest") << "step-000024\n"; // its folder was removed
  auto gone = open_resume(dir, g);
  REQUIRE_FALSE(gone);
  CHECK(error_message(gone.error())
          .find("latest: names step-000024, which does not exist in " + dir.string() +
                " (complete checkpoints there: step-000008)") != std::string::npos);
  fs::remove_all(dir);
}
