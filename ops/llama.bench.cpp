// bench_llama: a Llama-family training step against a GPT-2 step of about the same
// parameter count on the CPU (forward + backward + AdamW, one thread), alternating
// the two step by step so load on the shared cores falls on both alike; CPU-time
// medians. #27's bar: Llama within 1.3x of GPT-2. Writes a Markdown table with the
// CPU, kernel target and commit to --results (default deploy/results/llama_vs_gpt2_cpu.md).
// Usage: bench_llama [--rounds N] [--results FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/cpu/target.hpp"
#include "ops/adamw.hpp"
#include "ops/gpt.hpp"

using namespace troupe;

namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

/// The first line of a command's output, or "?".
std::string first_line(const char* cmd) {
  std::string out = "?";
  if (FILE* p = popen(cmd, "r")) {
    char buf[256];
    if (std::fgets(buf, sizeof buf, p)) {
      out = buf;
      out.erase(out.find_last_not_of("\n") + 1);
    }
    pclose(p);
  }
  return out;
}

/// One model on fixed random tokens; step() runs forward, backward and AdamW.
struct trainer {
  ops::gpt_range model;
  ops::adamw opt;
  tensor_handle tokens, targets;
  float loss = 0;

  trainer(const ops::gpt_config& cfg, int batch)
      : model(cfg, 0, cfg.layers), opt(model.params()), tokens(tensor_handle::empty({batch, cfg.context}, dtype::i32)),
        targets(tensor_handle::empty({batch, cfg.context}, dtype::i32)) {
    std::mt19937 rng(0);
    for (long i = 0; i < tokens.numel(); ++i) {
      tokens.data<std::int32_t>()[i] = std::int32_t(rng() % std::uint32_t(cfg.vocab));
      targets.data<std::int32_t>()[i] = std::int32_t(rng() % std::uint32_t(cfg.vocab));
    }
  }
  /// CPU ms of one step.
  double step() {
    const double c0 = cpu_seconds();
    model.zero_grads();
    loss = *model.forward(0, tokens, targets).data<float>();
    model.backward(0);
    opt.step(model.params(), model.grads(), 1e-3f);
    return (cpu_seconds() - c0) * 1000.0;
  }
};

/// Llama's SwiGLU width that brings its parameter count nearest GPT-2's (Llama has
/// no position table and no biases; its MLP has three matrices).
int matching_ffn_hidden(ops::gpt_config llama, const ops::gpt_config& gpt2) {
  const auto target = ops::gpt_parameter_count(gpt2, 0, gpt2.layers);
  int best = 8;
  std::int64_t best_gap = -1;
  for (int h = 8; h <= 8 * llama.d_model; h += 8) {
    llama.ffn_hidden = h;
    const auto gap = std::abs(ops::gpt_parameter_count(llama, 0, llama.layers) - target);
    if (best_gap < 0 || gap < best_gap)
      best = h, best_gap = gap;
  }
  return best;
}

} // namespace

int main(int argc, char** argv) {
  int rounds = 15;
  std::string results = "deploy/results/llama_vs_gpt2_cpu.md";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = std::max(3, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--results") && i + 1 < argc)
      results = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_llama [--rounds N] [--results FILE]\n");
      return 2;
    }
  }
  const int batch = 8;
  ops::gpt_config gpt2{.layers = 4, .d_model = 256, .heads = 4, .context = 128, .vocab = 256};
  ops::gpt_config llama = gpt2, gqa = gpt2;
  llama.family = ops::model_family::llama;
  llama.ffn_hidden = matching_ffn_hidden(llama, gpt2);
  gqa = llama;
  gqa.kv_heads = 2;
  gqa.ffn_hidden = matching_ffn_hidden(gqa, gpt2);
  struct entry {
    const char* name;
    ops::gpt_config cfg;
    std::vector<double> ms;
    float first_loss = 0, last_loss = 0;
  };
  std::vector<entry> models{
    {"gpt2", gpt2, {}}, {"llama (kv_heads = heads)", llama, {}}, {"llama (kv_heads 2)", gqa, {}}};
  std::vector<trainer> t;
  for (auto& m : models)
    t.emplace_back(m.cfg, batch);
  for (std::size_t i = 0; i < t.size(); ++i) { // warm-up: pools filled, pages touched
    t[i].step();
    models[i].first_loss = t[i].loss;
    t[i].step();
  }
  for (int r = 0; r < rounds; ++r)
    for (std::size_t k = 0; k < t.size(); ++k) { // rotate the order each round
      const std::size_t i = (k + std::size_t(r)) % t.size();
      models[i].ms.push_back(t[i].step());
      models[i].last_loss = t[i].loss;
    }
  const double base = median(models[0].ms);
  std::string table = fmt::format(
    "# A Llama-family step against a GPT-2 step of about the same size, CPU\n\n"
    "`bench_llama` (ops/llama.bench.cpp, #27 item 2): forward + backward + AdamW of the whole model in one range, "
    "one thread, batch {} x context {}, {} layers, d_model {}, {} heads, vocab {}. Llama's SwiGLU width is chosen "
    "to match GPT-2's parameter count (it has no position table and no biases). Steps alternate between the "
    "models, the order rotated each round; {} rounds after 2 warm-up steps each; CPU time per step, median.\n\n"
    "- machine: {}; {}\n- commit {}, {}\n\n"
    "| model | parameters | ffn width | ms/step (median) | min | max | vs gpt2 | loss first -> last |\n"
    "|---|---|---|---|---|---|---|---|\n",
    batch, gpt2.context, gpt2.layers, gpt2.d_model, gpt2.heads, gpt2.vocab, rounds,
    first_line("grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'"), kernels::cpu::kernel_summary(),
    first_line("git rev-parse --short HEAD 2>/dev/null"), first_line("date -u '+%Y-%m-%d %H:%M UTC'"));
  for (auto& m : models) {
    const double med = median(m.ms);
    table += fmt::format("| {} | {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.3f}x | {:.4f} -> {:.4f} |\n", m.name,
                         ops::gpt_parameter_count(m.cfg, 0, m.cfg.layers),
                         m.cfg.family == ops::model_family::llama ? ops::ffn_hidden_of(m.cfg) : 4 * m.cfg.d_model, med,
                         *std::min_element(m.ms.begin(), m.ms.end()), *std::max_element(m.ms.begin(), m.ms.end()),
                         med / base, m.first_loss, m.last_loss);
  }
  std::fputs(table.c_str(), stdout);
  std::ofstream(results) << table;
  return 0;
}
