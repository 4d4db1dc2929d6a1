// `troupe export CHECKPOINT --format safetensors --names hf|troupe [--out DIR]`:
// the weights of a checkpoint as one safetensors file, with Hugging Face's
// tensor names and a config.json that transformers' GPT2LMHeadModel loads.
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "deploy/cli/commands.hpp"
#include "deploy/cli/flags.hpp"
#include "deploy/run/checkpoint_model.hpp"
#include "ops/hf_names.hpp"
#include "runtime/actor/errors.hpp"
#include "runtime/checkpoint/safetensors.hpp"

namespace fs = std::filesystem;

namespace troupe::cli {

namespace {

constexpr const char* export_description =
  R"(Writes the model of a checkpoint (a folder `--resume` takes: its `latest`, or
one step folder) as OUT/model.safetensors with OUT/config.json. With `--names hf`
(the default) tensors carry the names and layouts of Hugging Face transformers'
GPT2LMHeadModel (`transformer.h.0.attn.c_attn.weight`, Conv1D weights stored
[in, out]) and config.json its keys, so `GPT2LMHeadModel.from_pretrained(OUT)`
loads it; the head is untied (`tie_word_embeddings: false`), as troupe trains
it. With `--names troupe` the tensors keep troupe's own names and layouts.
Data-parallel checkpoints give replica 0's weights. Tensors are f32 (the
master weights, also of a bf16 model).)";

constexpr const char* export_footer =
  "Exit codes: 0 written, 1 cannot write OUT, 2 bad arguments or not a usable checkpoint.\n";

struct export_cli {
  std::string checkpoint;
  std::string format = "safetensors";
  std::string names = "hf";
  std::string out;
  bool json = false;
};

/// A troupe parameter under its Hugging Face name, in that family's layout.
named_handle hf_named(const ops::hf_family& f, const ops::named_tensor& p) {
  auto hf = ops::hf_tensor_of(f, p.name);
  if (!hf) // every parameter of the family has a rule (ops/hf_names.cpp)
    throw std::logic_error(fmt::format("no Hugging Face name for '{}' in the {} table", p.name, f.family));
  return {hf->name, hf->transposed ? ops::transposed(p.value) : p.value};
}

/// The graph's `model:` keys of the checkpoint's model (a Llama's own keys too).
nlohmann::json troupe_config(const ops::gpt_config& c) {
  nlohmann::json out{{"format", "troupe"}, {"family", ops::to_string(c.family)},
                     {"layers", c.layers}, {"d_model", c.d_model},
                     {"heads", c.heads},   {"context", c.context},
                     {"vocab", c.vocab},   {"precision", c.precision == ops::precision::bf16 ? "bf16" : "f32"}};
  if (c.family == ops::model_family::llama)
    out.update({{"kv_heads", c.kv_heads == 0 ? c.heads : c.kv_heads},
                {"ffn_hidden", c.ffn_hidden == 0 ? ops::llama_ffn_hidden(c.d_model) : c.ffn_hidden},
                {"rope_theta", c.rope_theta},
                {"tie_embeddings", c.tie_embeddings},
                {"norm_eps", c.norm_eps}});
  return out;
}

int run_export(const export_cli& a) {
  auto m = load_checkpoint_model(a.checkpoint);
  if (!m) {
    fmt::print(stderr, "troupe export: {}\n", error_message(m.error()));
    return bad_input;
  }
  fs::path out =
    a.out.empty() ? fs::path(fmt::format("export-{}", m->from.folder.filename().string())) : fs::path(a.out);
  if (!outputs_writable("export", {(out / "model.safetensors").string()}))
    return bad_input;
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) {
    fmt::print(stderr, "troupe export: {}: cannot create the folder: {}\n", out.string(), ec.message());
    return runtime_failure;
  }
  const auto& family = *ops::find_hf_family(ops::to_string(m->config.family));
  std::vector<named_handle> tensors;
  std::uint64_t bytes = 0;
  for (const auto& p : m->model->params()) {
    tensors.push_back(a.names == "hf" ? hf_named(family, p) : named_handle{p.name, p.value});
    bytes += tensors.back().value.nbytes();
  }
  std::map<std::string, std::string> metadata{
    {"format", "pt"}, {"source", m->from.folder.string()}, {"step", std::to_string(m->from.step)}};
  auto config = a.names == "hf" ? ops::hf_config(family, m->config) : troupe_config(m->config);
  if (auto err = write_safetensors(out / "model.safetensors", tensors, metadata)) {
    fmt::print(stderr, "troupe export: {}\n", error_message(err));
    return runtime_failure;
  }
  if (auto err = write_file_atomically(out / "config.json", config.dump(2) + "\n")) {
    fmt::print(stderr, "troupe export: {}\n", error_message(err));
    return runtime_failure;
  }
  if (a.json) {
    fmt::print("{}\n", nlohmann::json{{"out", out.string()},
                                      {"checkpoint", m->from.folder.string()},
                                      {"step", m->from.step},
                                      {"names", a.names},
                                      {"tensors", tensors.size()},
                                      {"bytes", bytes}}
                         .dump());
  } else {
    fmt::print("exported step {} of {} ({} tensors, {:.1f} MB, {} names) -> {}\n", m->from.step,
               m->from.folder.string(), tensors.size(), static_cast<double>(bytes) / 1e6, a.names,
               (out / "model.safetensors").string());
  }
  return ok;
}

} // namespace

command_action define_export(CLI::App& app) {
  auto a = std::make_shared<export_cli>();
  describe(app, export_description, export_footer);
  app.add_option("CHECKPOINT", a->checkpoint, "a checkpoint folder (its `latest`) or one step folder")->required();
  app.add_option("--format", a->format, "the file format")->check(CLI::IsMember({"safetensors"}));
  app.add_option("--names", a->names, "tensor names: hf (Hugging Face's GPT-2) or troupe")
    ->check(CLI::IsMember({"hf", "troupe"}));
  app.add_option("--out", a->out, "the folder to write (default: export-STEPFOLDER here)");
  app.add_flag("--json", a->json, "print what was written as one JSON object");
  return [a] { return run_export(*a); };
}

} // namespace troupe::cli
