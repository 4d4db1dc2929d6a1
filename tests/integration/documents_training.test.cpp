// Training with documents end to end: the masks travel from the loader through
// every pipeline stage, so the run's first loss is the whole model's loss on the
// same batches with document-causal attention, and not the plain causal one.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include "actors/data/token_corpus.hpp"
#include "ops/gpt.hpp"
#include "tests/integration/run_text.hpp"

using namespace troupe;

namespace {

constexpr int batch = 4, microbatches = 2, context = 64;

run_result run(const std::string& documents, int stages) {
  auto text = fmt::format(R"(model:    {{layers: 2, d_model: 32, heads: 2, context: {}, vocab: 256}}
data:     {{corpus: kjv, batch: {}, seed: 4, documents: {}}}
train:    {{steps: 2, lr: 1.0e-3, warmup: 1, eval_batches: 1}}
pipeline: {{stages: {}, microbatches: {}, schedule: 1f1b}}
)",
                          context, batch, documents, stages, microbatches);
  auto r = testing::run_graph_text(text, "documents.yaml");
  REQUIRE(r.losses.size() == 2);
  return r;
}

/// The first step's loss computed directly: the whole model on the loader's first
/// microbatches, with their document masks or (`masked` false) without.
double first_step_loss(document_source source, bool masked) {
  ops::gpt_config cfg;
  cfg.layers = 2, cfg.d_model = 32, cfg.heads = 2, cfg.context = context, cfg.vocab = 256;
  cfg.seed = 4; // the stages seed the model with data.seed
  ops::gpt_range model(cfg, 0, cfg.layers);
  token_corpus corpus(default_corpus_path(), context, 0.1, 4);
  corpus.set_documents(source);
  double sum = 0;
  for (int mb = 0; mb < microbatches; ++mb) {
    token_batch b;
    corpus.next_train(batch, b);
    sum += model.evaluate(b.tokens, b.targets, masked ? b.documents : tensor_handle{}).data<float>()[0];
  }
  return sum / microbatches;
}

} // namespace

TEST_CASE("a two-stage run with documents starts at the document-masked loss of the same batches") {
  for (auto [name, source] :
       {std::pair{"long_tail", document_source::long_tail}, {"chapters", document_source::chapters}}) {
    CAPTURE(name);
    auto masked = first_step_loss(source, true), causal = first_step_loss(source, false);
    INFO("masked " << masked << ", causal " << causal);
    if (source == document_source::long_tail) // short documents: the mask changes the loss
      REQUIRE(std::abs(masked - causal) > 1e-4);
    auto got = run(name, 2).losses[0];
    CHECK(std::abs(got - masked) < 1e-5 * masked);
    CHECK(std::abs(run(name, 1).losses[0] - masked) < 1e-5 * masked);
  }
}

TEST_CASE("without data.documents the run trains with causal attention over each window") {
  auto got = run("none", 2).losses[0];
  CHECK(std::abs(got - first_step_loss(document_source::none, false)) < 1e-5 * got);
}
