// Tests of the graph loader: typed sections, defaults, expansion, and the
// diagnostics for invalid files.
#include "runtime/graph/graph_loader.hpp"

#include <string>
#include <unistd.h>

#include <doctest/doctest.h>

#include "actors/builtin.hpp"

#include <cstdio>
#include <fstream>

namespace {

using namespace troupe;

// runtime/ names no actor type: the built-in types' roles and the `pipeline:`
// expander come from actors/ (this test links it).
[[maybe_unused]] const bool builtin_types = (register_builtin_actors(), true);

load_options no_corpus() {
  load_options o;
  o.check_corpus = false;
  return o;
}

load_result load(std::string_view text, load_options o = no_corpus()) {
  return load_graph_text(text, "g.yaml", o);
}

std::string errors(const load_result& r) {
  return to_string(r.errors);
}

constexpr const char* tiny = R"(model:    {layers: 4, d_model: 128, heads: 4, context: 64, vocab: 256}
data:     {corpus: kjv, batch: 12, seed: 1}
train:    {steps: 2000, lr: 1.0e-3, weight_decay: 0.1, warmup: 100, eval_every: 200}
pipeline: {stages: 4, microbatches: 8, schedule: 1f1b}
trace:    {file: runs/tiny-gpt.json}
)";

} // namespace

TEST_CASE("the shorthand of the issue loads into typed specs with defaults filled in") {
  auto r = load(tiny);
  REQUIRE_MESSAGE(r.ok(), errors(r));
  const auto& g = *r.graph;
  CHECK(g.model.layers == 4);
  CHECK(g.model.d_model == 128);
  CHECK(g.model.precision == dtype::f32);
  CHECK(g.data.batch == 12);
  CHECK(g.data.val_fraction == doctest::Approx(0.1));
  CHECK(g.train.lr == doctest::Approx(1e-3));
  CHECK(g.train.grad_clip == doctest::Approx(1.0));
  CHECK(g.pipeline.present);
  CHECK(g.pipeline.schedule == "1f1b");
  CHECK(g.trace.file == "runs/tiny-gpt.json");
  CHECK(g.tokens_per_step() == 12 * 8 * 64);
}

TEST_CASE(
  "a pipeline expands into a loader, stages with even contiguous layers, a chain of channels and the targets' channel") {
  auto r = load(R"(model: {layers: 7, d_model: 64, heads: 4, context: 16}
data: {batch: 2}
train: {steps: 1}
pipeline: {stages: 3, microbatches: 4, schedule: gpipe}
)");
  REQUIRE_MESSAGE(r.ok(), errors(r));
  const auto& a = r.graph->actors;
  REQUIRE(a.size() == 4);
  CHECK(a[0].name == "loader");
  CHECK(a[0].type == "data_loader");
  CHECK(a[1].layers == std::vector<layer_range>{{0, 3}});
  CHECK(a[2].layers == std::vector<layer_range>{{3, 5}});
  CHECK(a[3].layers == std::vector<layer_range>{{5, 7}});
  CHECK(a[3].rank == 2);
  const auto& c = r.graph->channels;
  REQUIRE(c.size() == 4);
  CHECK((c[0].from == "loader" && c[0].to == "s0"));
  CHECK((c[1].from == "loader" && c[1].to == "s2")); // the targets go to the stage that computes the loss
  CHECK((c[3].from == "s1" && c[3].to == "s2"));
}

TEST_CASE("interleaved stages hold every p-th chunk and the last stage feeds the first") {
  auto r = load(R"(model: {layers: 8, d_model: 64, heads: 4, context: 16}
data: {batch: 2}
train: {steps: 1}
pipeline: {stages: 2, microbatches: 4, schedule: interleaved_1f1b, virtual: 2}
)");
  REQUIRE_MESSAGE(r.ok(), errors(r));
  CHECK(r.graph->find_actor("s0")->layers == std::vector<layer_range>{{0, 2}, {4, 6}});
  CHECK(r.graph->find_actor("s1")->layers == std::vector<layer_range>{{2, 4}, {6, 8}});
  CHECK(r.graph->channels.back().from == "s1");
  CHECK(r.graph->channels.back().to == "s0");
}

TEST_CASE("without a pipeline section a run is one stage with one microbatch") {
  auto r = load("model: {layers: 2, d_model: 8, heads: 2, context: 4}\ndata: {batch: 1}\ntrain: {steps: 3}\n");
  REQUIRE_MESSAGE(r.ok(), errors(r));
  CHECK(r.graph->pipeline.stages == 1);
  CHECK(r.graph->pipeline.microbatches == 1);
  CHECK(r.graph->actors.size() == 2);
  CHECK(r.graph->find_actor("s0")->layers == std::vector<layer_range>{{0, 2}});
}

TEST_CASE("explicit actors with an expanded name override the shorthand and keep what they omit") {
  auto r = load(R"(model: {layers: 4, d_model: 8, heads: 2, context: 4}
data: {batch: 1}
train: {steps: 3}
pipeline: {stages: 2}
actors:
  - {name: s0, type: pipeline_stage, layers: [0, 3]}
  - {name: s1, layers: [3, 4], node: gpu1}
)");
  REQUIRE_MESSAGE(r.ok(), errors(r));
  CHECK(r.graph->find_actor("s0")->layers == std::vector<layer_range>{{0, 3}});
  CHECK(r.graph->find_actor("s1")->type == "pipeline_stage");
  CHECK(r.graph->find_actor("s1")->node == "gpu1");
  CHECK_FALSE(r.graph->find_actor("s1")->expanded);
}

TEST_CASE("the explicit form of the issue needs no shorthand") {
  auto r = load(R"(model: {layers: 4, d_model: 8, heads: 2, context: 4}
data: {batch: 1}
train: {steps: 3}
actors:
  - {name: loader, type: data_loader}
  - {name: s0, type: pipeline_stage, layers: [0, 2]}
  - {name: s1, type: pipeline_stage, layers: [2, 4]}
channels:
  - {from: loader, to: s0}
  - {from: loader, to: s1}
  - {from: s0, to: s1}
)");
  REQUIRE_MESSAGE(r.ok(), errors(r));
  CHECK(r.graph->actors.size() == 3);
  CHECK(r.graph->channels.size() == 3);
  CHECK(r.graph->pipeline.stages == 2);
}

TEST_CASE("an unknown schedule is reported at its position with the nearest name and the choices") {
  auto r = load("model: {layers: 4, d_model: 8, heads: 2, context: 4}\ndata: {batch: 1}\ntrain: {steps: 3}\n"
                "pipeline: {stages: 2, schedule: 1fb1}\n");
  REQUIRE(r.errors.size() == 1);
  CHECK(to_string(r.errors[0]) ==
        "g.yaml:4:33: pipeline.schedule: unknown schedule '1fb1' (did you mean "
        "'1f1b'? known: gpipe, 1f1b, interleaved_1f1b, zb_h1, zbv, v_half, v_min, dualpipev, table)");
}

TEST_CASE("all errors of a file are reported together in file order") {
  auto r = load(R"(model: {layers: 0, d_model: 10, heads: 4, context: 4, colour: red}
data: {batch: -1}
train: {steps: many}
)");
  auto text = errors(r);
  CHECK(r.errors.size() == 5);
  CHECK(text.find("model.layers: must be at least 1, got 0") != std::string::npos);
  CHECK(text.find("model.d_model: d_model 10 is not divisible by heads 4") != std::string::npos);
  CHECK(text.find("model.colour: unknown key 'colour'") != std::string::npos);
  CHECK(text.find("data.batch: must be at least 1, got -1") != std::string::npos);
  CHECK(text.find("train.steps: expected an integer, got 'many'") != std::string::npos);
  CHECK(r.errors.front().pos.line == 1);
  CHECK(r.errors.back().pos.line == 3);
}

TEST_CASE("overlapping, missing and excessive stage layers are each reported") {
  auto r = load(R"(model: {layers: 6, d_model: 8, heads: 2, context: 4}
data: {batch: 1}
train: {steps: 3}
actors:
  - {name: a, type: pipeline_stage, layers: [0, 2]}
  - {name: b, type: pipeline_stage, layers: [1, 3]}
  - {name: c, type: pipeline_stage, layers: [4, 7]}
)");
  auto text = errors(r);
  CHECK(text.find("layers [1, 3) of 'b' overlap layers [0, 2) of 'a'") != std::string::npos);
  CHECK(text.find("layers [3, 4) are held by no pipeline_stage") != std::string::npos);
  CHECK(text.find("layers [4, 7) of 'c' exceed model.layers 6") != std::string::npos);
}

TEST_CASE("a missing corpus file is an error that names the file") {
  load_options o;
  auto r = load("model: {layers: 1, d_model: 8, heads: 2, context: 4}\ndata: {batch: 1, corpus: nowhere.txt}\n"
                "train: {steps: 3}\n",
                o);
  REQUIRE(r.errors.size() == 1);
  CHECK(to_string(r.errors[0]).starts_with("g.yaml:2:26: data.corpus: corpus file 'nowhere.txt' does not exist"));
}

TEST_CASE("a corpus path is resolved against the graph file's folder") {
  auto dir =
    std::filesystem::temp_directory_path() / (std::string{"troupe_loader_test"} + "_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream words{dir / "words.txt"}; // long enough for context 4 and a 10% validation split
  for (int i = 0; i < 4; ++i)
    words << "in the beginning was the word\n";
  words.close();
  load_options o;
  auto r = load_graph_text("model: {layers: 1, d_model: 8, heads: 2, context: 4}\ndata: {batch: 1, corpus: words.txt}\n"
                           "train: {steps: 3}\n",
                           dir / "g.yaml", o);
  REQUIRE_MESSAGE(r.ok(), errors(r));
  CHECK(r.graph->data.corpus_path == dir / "words.txt");
  std::filesystem::remove_all(dir);
}

TEST_CASE("trace.file and checkpoint.dir are resolved against the graph file's folder, as the corpus is") {
  auto o = no_corpus();
  o.overrides = {"checkpoint.dir=ckpt"};
  auto r = load_graph_text(std::string{tiny} + "checkpoint: {dir: x, every: 2}\n", "runs/g.yaml", o);
  REQUIRE_MESSAGE(r.ok(), errors(r));
  CHECK(r.graph->trace.file == "runs/tiny-gpt.json"); // as written
  CHECK(r.graph->trace.file_path == std::filesystem::path{"runs/runs/tiny-gpt.json"});
  CHECK(r.graph->checkpoint.dir_path == std::filesystem::path{"runs/ckpt"});
  o.overrides = {"trace.file=/tmp/t.json"};
  r = load_graph_text(tiny, "runs/g.yaml", o);
  REQUIRE_MESSAGE(r.ok(), errors(r));
  CHECK(r.graph->trace.file_path == std::filesystem::path{"/tmp/t.json"});
}

TEST_CASE("empty, comment-only and binary files are rejected without a crash") {
  CHECK(errors(load("")) == "g.yaml: the file is empty (a graph needs model, data and train sections; see "
                            "examples/tiny-gpt.yaml)\n");
  CHECK(load("# nothing here\n").errors.size() == 1);
  std::string binary{"\x7f"
                     "ELF\x02\x01\x01\0\0\0",
                     10};
  CHECK(errors(load(binary)) == "g.yaml: not a text file (byte 0x00 at offset 7); a graph file is YAML text\n");
  CHECK(errors(load("model: [1, 2\n")).starts_with("g.yaml:2:1: YAML syntax error"));
}

TEST_CASE("the printed graph loads back to the same actors and channels") {
  auto first = load(tiny);
  REQUIRE(first.ok());
  auto text = to_yaml(*first.graph);
  auto second = load(text);
  REQUIRE_MESSAGE(second.ok(), std::string{errors(second) + text});
  CHECK(to_yaml(*second.graph) == text);
}

TEST_CASE("a custom vocabulary admits plugin actor types and checks their keys") {
  load_options o = no_corpus();
  o.vocabulary = [] {
    auto v = graph_vocabulary::builtin();
    v.actor_types["echo"].keys = {"count"};
    return v;
  };
  auto text = "model: {layers: 1, d_model: 8, heads: 2, context: 4}\ndata: {batch: 1}\ntrain: {steps: 3}\n"
              "actors:\n  - {name: e, type: echo, count: 3}\n  - {name: f, type: echo, cuont: 3}\n"
              "  - {name: g, type: ehco}\n";
  auto r = load(text, o);
  REQUIRE(r.errors.size() == 2);
  CHECK(to_string(r.errors[0]) == "g.yaml:6:27: actors[1].cuont: unknown key 'cuont' for actor type 'echo' (did "
                                  "you mean 'count'? known: name, type, node, layers, count)");
  CHECK(to_string(r.errors[1])
          .starts_with("g.yaml:7:21: actors[2].type: unknown actor type 'ehco' (did you "
                       "mean 'echo'?"));
  CHECK(load(text, no_corpus()).errors.size() == 3);
}

TEST_CASE("stages run on pipeline.device unless their entry names another, and the printed graph shows each") {
  load_options o = no_corpus();
  o.overrides = {"pipeline.device=cuda"};
  auto r = load(std::string{tiny} + "actors:\n  - {name: s1, device: 'cuda:1'}\n  - {name: s2, device: cpu}\n", o);
  REQUIRE_MESSAGE(r.ok(), errors(r));
  const auto& g = *r.graph;
  CHECK(g.pipeline.device == "cuda");
  CHECK(g.find_actor("s0")->device == "cuda");
  CHECK(g.find_actor("s1")->device == "cuda:1");
  CHECK(g.find_actor("s1")->layers == std::vector<layer_range>{{1, 2}}); // the rest from the shorthand
  CHECK(g.find_actor("s2")->device == "cpu");
  CHECK(g.find_actor("s3")->device == "cuda");
  CHECK(g.find_actor("loader")->device.empty());
  auto text = to_yaml(g);
  CHECK(text.find("device: cuda}\n") != std::string::npos); // the pipeline line
  CHECK(text.find("{name: s1, type: pipeline_stage, layers: [1, 2], device: cuda:1}") != std::string::npos);
  CHECK(text.find("{name: s2, type: pipeline_stage, layers: [2, 3], device: cpu}") != std::string::npos);
  CHECK(text.find("{name: loader, type: data_loader}") != std::string::npos);
  auto again = load(text);
  REQUIRE_MESSAGE(again.ok(), errors(again));
  CHECK(to_yaml(*again.graph) == text);
  CHECK(load(tiny).graph->find_actor("s0")->device == "cpu"); // the default
}

TEST_CASE("an unknown device and a device on an actor that is not a stage are errors with their positions") {
  auto r = load(R"(model: {layers: 2, d_model: 8, heads: 2, context: 4}
data: {batch: 1}
train: {steps: 3}
pipeline: {stages: 2, device: gpu}
actors:
  - {name: loader, device: cuda}
  - {name: s1, device: 'cuda:x'}
)");
  CHECK(errors(r) ==
        "g.yaml:4:31: pipeline.device: unknown device 'gpu' (did you mean 'cuda'? known: cpu, cuda, cuda:N); N is a "
        "device index (cuda:0, cuda:1, ...)\n"
        "g.yaml:6:28: actors[0].device: only pipeline_stage actors run on a device ('loader' is a data_loader)\n"
        "g.yaml:7:24: actors[1].device: unknown device 'cuda:x' (did you mean 'cuda:N'? known: cpu, cuda, cuda:N); "
        "N is a device index (cuda:0, cuda:1, ...)\n");
}

TEST_CASE("the graph keeps where each key was written, for checks outside the loader to point at") {
  auto o = no_corpus();
  o.overrides = {"pipeline.stages=2"};
  auto r = load(tiny, o);
  REQUIRE_MESSAGE(r.ok(), errors(r));
  const auto& g = *r.graph;
  CHECK(to_string(g.where("model.vocab")) == "g.yaml:1:67");
  CHECK(to_string(g.where("pipeline.schedule")) == "g.yaml:4:50");
  CHECK(to_string(g.where("pipeline.stages")) == "--set pipeline.stages=2");
  CHECK(to_string(g.where("model.precision")) == "g.yaml:1:11"); // not written: its section
  CHECK(to_string(g.where("checkpoint.dir")) == "g.yaml");       // no such section: the file
}

namespace {
/// A 2-stage graph of 4 layers with `data_parallel` (and any other sections) as given.
std::string two_stage_with(std::string_view rest) {
  return std::string{R"(model: {layers: 4, d_model: 64, heads: 2, context: 16}
data: {batch: 3}
train: {steps: 10}
pipeline: {stages: 2, microbatches: 4}
)"} + std::string{rest};
}
} // namespace

TEST_CASE("data_parallel replicas expand to the grid r0s0 .. r1s1 with a ring of all-reduce peers per position") {
  auto r = load(two_stage_with("data_parallel: {replicas: 2, bucket: 512KB}\n"));
  REQUIRE_MESSAGE(r.ok(), errors(r));
  const auto& g = *r.graph;
  CHECK(g.data_parallel.replicas == 2);
  CHECK(g.data_parallel.bucket == 512000);
  CHECK(g.tokens_per_step() == 2 * 3 * 4 * 16); // the global batch
  std::vector<std::string> stages;
  for (const auto& a : g.actors)
    if (a.type == "pipeline_stage")
      stages.push_back(a.name);
  CHECK(stages == std::vector<std::string>{"r0s0", "r0s1", "r1s0", "r1s1"});
  for (const auto& [name, rank, replica] :
       std::vector<std::tuple<std::string, int, int>>{{"r0s0", 0, 0}, {"r0s1", 1, 0}, {"r1s0", 0, 1}, {"r1s1", 1, 1}}) {
    const auto* a = g.find_actor(name);
    REQUIRE(a);
    CHECK(a->rank == rank);
    CHECK(a->replica == replica);
    CHECK(a->layers == g.find_actor(name.substr(2) == "s0" ? "r0s0" : "r0s1")->layers);
    const auto* peer = g.find_actor(name + "_ar");
    REQUIRE(peer);
    CHECK(peer->type == "allreduce_peer");
  }
  auto has = [&](const std::string& from, const std::string& to) {
    for (const auto& c : g.channels)
      if (c.from == from && c.to == to)
        return true;
    return false;
  };
  for (const auto* edge : {"loader>r0s0", "loader>r0s1", "loader>r1s0", "loader>r1s1", "r0s0>r0s1", "r1s0>r1s1",
                           "r0s0>r0s0_ar", "r0s0_ar>r0s0", "r0s0_ar>r1s0_ar", "r1s0_ar>r0s0_ar", "r0s1_ar>r1s1_ar"}) {
    std::string e{edge};
    CHECK_MESSAGE(has(e.substr(0, e.find('>')), e.substr(e.find('>') + 1)), e);
  }
  CHECK_FALSE(has("r0s0", "r1s1")); // replicas share no activations
}

TEST_CASE("one replica keeps the plain stage names and no all-reduce peers") {
  auto r = load(two_stage_with("data_parallel: {replicas: 1}\n"));
  REQUIRE_MESSAGE(r.ok(), errors(r));
  CHECK(r.graph->find_actor("s0"));
  CHECK(r.graph->find_actor("s1"));
  CHECK(r.graph->actors.size() == 3);
}

TEST_CASE("replicas are placed a replica per node, each peer beside its stage, the loader beside r0s0") {
  auto r = load(two_stage_with("data_parallel: {replicas: 2}\ncluster: {nodes: 2}\n"));
  REQUIRE_MESSAGE(r.ok(), errors(r));
  const auto& g = *r.graph;
  for (const auto& [name, node] : std::vector<std::pair<std::string, int>>{
         {"loader", 0}, {"r0s0", 0}, {"r0s1", 0}, {"r1s0", 1}, {"r1s1", 1}, {"r0s1_ar", 0}, {"r1s0_ar", 1}})
    CHECK_MESSAGE(g.node_of(*g.find_actor(name)) == node, name);
}

TEST_CASE("cluster.restart needs checkpoints only where a restart resumes the whole run from one") {
  // Elastic runs take a lost replica back live (#26): no checkpoint is read for that.
  for (
    const char* elastic :
    {"data_parallel: {replicas: 2}\ncluster: {nodes: 2, restart: 3}\n",
     "data_parallel: {replicas: 2, zero: 2}\ncluster: {nodes: 2, restart: 3}\n",
     "data_parallel: {replicas: 2}\nlocal_update: {algorithm: diloco, sync_every: 4}\ncluster: {nodes: 2, restart: 3}\n"}) {
    auto r = load(two_stage_with(elastic));
    CHECK_MESSAGE(r.ok(), elastic, "\n", errors(r));
  }
  // Not elastic: without a checkpoint every restart would start over.
  for (const char* whole : {"data_parallel: {replicas: 2}\ncluster: {nodes: 2, restart: 3, elastic: false}\n",
                            "cluster: {nodes: 2, restart: 3}\n"}) {
    auto r = load(two_stage_with(whole));
    REQUIRE_FALSE_MESSAGE(r.ok(), whole);
    CHECK(errors(r).find("cluster.restart: restarting a run that lost a node resumes it from its latest checkpoint") !=
          std::string::npos);
    auto saved = load(two_stage_with(std::string(whole) + "checkpoint: {dir: ck, every: 2}\n"));
    CHECK_MESSAGE(saved.ok(), errors(saved));
  }
}

TEST_CASE("bad data_parallel values are reported at their keys, all at once") {
  auto r = load(two_stage_with("data_parallel: {replicas: -1, bucket: lots, zero: 1}\n"));
  REQUIRE_FALSE(r.ok());
  auto e = errors(r);
  CHECK(e.find("g.yaml:5:27: data_parallel.replicas") != std::string::npos);
  CHECK(e.find("data_parallel.bucket: expected a size") != std::string::npos);
  CHECK(e.find("data_parallel.zero: ZeRO stage 1 shards the optimizer state over the replicas: it needs "
               "data_parallel.replicas of 2 or more") != std::string::npos);
  auto three = errors(load(two_stage_with("data_parallel: {replicas: 2, zero: 3}\n")));
  CHECK(three.find("g.yaml:5:36: data_parallel.zero: must be at most 2, got 3") != std::string::npos);
}

TEST_CASE("data_parallel.zero puts an optimizer_shard ring beside the stages instead of all-reduce peers") {
  auto r = load(two_stage_with("data_parallel: {replicas: 2, zero: 2}\n"));
  REQUIRE(r.ok());
  const auto& g = *r.graph;
  for (const auto* name : {"r0s0_os", "r0s1_os", "r1s0_os", "r1s1_os"}) {
    const auto* a = g.find_actor(name);
    REQUIRE_MESSAGE(a, name);
    CHECK(a->type == "optimizer_shard");
  }
  CHECK_FALSE(g.find_actor("r0s0_ar"));
}

TEST_CASE("a llama model loads with its keys' defaults and survives the expanded form") {
  auto r = load(R"(model: {family: llama, layers: 4, d_model: 64, heads: 4, context: 16, kv_heads: 2}
data: {batch: 1}
train: {steps: 3}
pipeline: {stages: 2, microbatches: 2}
)");
  REQUIRE_MESSAGE(r.ok(), errors(r));
  const auto& m = r.graph->model;
  CHECK(m.family == "llama");
  CHECK(m.kv_heads == 2);
  CHECK(m.ffn_hidden == 0); // ops::llama_ffn_hidden(d_model)
  CHECK(m.rope_theta == 10000.0);
  CHECK(!m.tie_embeddings);
  CHECK(m.norm_eps == doctest::Approx(1e-5));
  auto text = to_yaml(*r.graph);
  CHECK(text.find("family: llama") != std::string::npos);
  auto again = load(text);
  REQUIRE_MESSAGE(again.ok(), errors(again));
  CHECK(to_yaml(*again.graph) == text);
}

TEST_CASE(
  "a bad family, llama keys given to gpt2, and kv_heads or a tied head that cannot work are positioned errors") {
  auto tail = "data: {batch: 1}\ntrain: {steps: 3}\n";
  auto r = load(std::string("model: {family: lama, layers: 2, d_model: 8, heads: 2, context: 4}\n") + tail);
  REQUIRE(r.errors.size() == 1);
  CHECK(to_string(r.errors[0]) ==
        "g.yaml:1:17: model.family: unknown family 'lama' (did you mean 'llama'? known: gpt2, llama)");
  r = load(std::string("model: {layers: 2, d_model: 8, heads: 2, context: 4, kv_heads: 1, rope_theta: 500}\n") + tail);
  REQUIRE(r.errors.size() == 2);
  CHECK(to_string(r.errors[0]).starts_with("g.yaml:1:64: model.kv_heads: kv_heads is a llama key; the gpt2 family"));
  CHECK(to_string(r.errors[1]).starts_with("g.yaml:1:79: model.rope_theta: rope_theta is a llama key"));
  r = load(std::string("model: {family: llama, layers: 2, d_model: 24, heads: 4, context: 4, kv_heads: 3}\n") + tail);
  REQUIRE(r.errors.size() == 1);
  CHECK(to_string(r.errors[0]) == "g.yaml:1:80: model.kv_heads: kv_heads 3 does not divide heads 4");
  r = load(std::string("model: {family: llama, layers: 2, d_model: 12, heads: 4, context: 4}\n") + tail);
  REQUIRE(r.errors.size() == 1);
  CHECK(to_string(r.errors[0]).find("model.heads: the head width d_model/heads = 3 must be even") != std::string::npos);
  r = load("model: {family: llama, layers: 2, d_model: 8, heads: 2, context: 4, tie_embeddings: true}\n"
           "data: {batch: 1}\ntrain: {steps: 3}\npipeline: {stages: 2, microbatches: 2}\n");
  CHECK_MESSAGE(r.ok(), errors(r)); // the stages exchange the tied matrix's gradients
  r = load("model: {family: llama, layers: 2, d_model: 8, heads: 2, context: 4, tie_embeddings: true}\n"
           "data: {batch: 1}\ntrain: {steps: 3}\npipeline: {stages: 2, microbatches: 2}\n"
           "data_parallel: {replicas: 2}\nlocal_update: {algorithm: diloco, sync_every: 2}\n");
  CHECK_MESSAGE(r.ok(), errors(r)); // the head's copy follows the embedding's outer steps
  r = load("model: {family: llama, layers: 2, d_model: 8, heads: 2, context: 4, tie_embeddings: true}\n"
           "data: {batch: 1}\ntrain: {steps: 3}\npipeline: {stages: 1, microbatches: 2}\n");
  CHECK_MESSAGE(r.ok(), errors(r));
  r = load("model: {family: llama, layers: 2, d_model: 8, heads: 2, context: 4}\n"
           "data: {batch: 1}\ntrain: {steps: 3}\npipeline: {stages: 2, microbatches: 2, device: cuda}\n");
  REQUIRE(r.errors.size() == 1);
  CHECK(to_string(r.errors[0]) ==
        "g.yaml:4:48: pipeline.device: the llama family runs on the CPU only so far ('s0' is on cuda)");
}
