// bench_block: where a training step's time goes, op by op. Replays what gpt_range
// does for one step with its fused backward (same ops, same order, same shapes) with
// a timer around each op.
// Usage: bench_block [--config A|B] [--steps N] [--bf16]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ops/adamw.hpp"
#include "ops/core_attention.hpp"
#include "ops/cross_entropy.hpp"
#include "ops/embedding.hpp"
#include "ops/gelu.hpp"
#include "ops/gpt.hpp"
#include "ops/layer_norm.hpp"
#include "ops/linear.hpp"
#include "ops/output_projection.hpp"
#include "ops/qkv_projection.hpp"

using namespace troupe;
using namespace troupe::ops;

namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

/// Per-op CPU time of the current step, summed over layers.
struct timers {
  std::map<std::string, double> now;
  std::map<std::string, std::vector<double>> steps;
  template <class F>
  auto time(const std::string& name, F&& f) {
    double t0 = cpu_seconds();
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      now[name] += cpu_seconds() - t0;
    } else {
      auto r = f();
      now[name] += cpu_seconds() - t0;
      return r;
    }
  }
  void end_step() {
    for (auto& [k, v] : now)
      steps[k].push_back(v);
    now.clear();
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct layer {
  tensor_handle x, ln1, qkv, att, x_mid, ln2, fc, act, d_out, d_fc, d_ln2, d_mid, d_qkv, d_ln1;
  layer_norm_saved ln1s, ln2s;
  core_attention_saved attn;
};

} // namespace

int main(int argc, char** argv) {
  gpt_config cfg{.layers = 4, .d_model = 128, .heads = 4, .context = 64, .vocab = 256};
  int batch = 12, steps = 40;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--config") && i + 1 < argc && !std::strcmp(argv[i + 1], "B")) {
      cfg = {.layers = 4, .d_model = 256, .heads = 4, .context = 128, .vocab = 256};
      batch = 8;
      ++i;
    } else if (!std::strcmp(argv[i], "--config") && i + 1 < argc) {
      ++i;
    } else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--bf16")) {
      cfg.precision = precision::bf16;
    } else {
      std::fprintf(stderr, "usage: bench_block [--config A|B] [--steps N] [--bf16]\n");
      return 2;
    }
  }
  gpt_range model(cfg, 0, cfg.layers);
  adamw opt(model.params());
  const auto& ps = model.params();
  const auto& gs = model.grads();
  auto p = [&](int li, int s) { return ps[2 + std::size_t(li) * 12 + std::size_t(s)].value; };
  auto g = [&](int li, int s) { return gs[2 + std::size_t(li) * 12 + std::size_t(s)].value; };
  const std::size_t h = 2 + std::size_t(cfg.layers) * 12;
  const long t = cfg.context;
  auto tokens = tensor_handle::empty({batch, t}, dtype::i32), targets = tensor_handle::empty({batch, t}, dtype::i32);
  std::mt19937 rng(0);
  for (long i = 0; i < batch * t; ++i) {
    tokens.data<std::int32_t>()[i] = std::int32_t(rng() % 256u);
    targets.data<std::int32_t>()[i] = std::int32_t(rng() % 256u);
  }
  const auto pr = cfg.precision;
  std::vector<layer> ls(std::size_t(cfg.layers));
  timers tm;
  for (int s = 0; s < steps + 3; ++s) {
    double t0 = cpu_seconds();
    tm.time("zero_grads", [&] { model.zero_grads(); });
    auto x = tm.time("embedding fwd", [&] { return embedding_forward(tokens, ps[0].value, ps[1].value); });
    for (int li = 0; li < cfg.layers; ++li) {
      auto& k = ls[std::size_t(li)];
      k.x = x;
      k.ln1 = tm.time("layer_norm fwd", [&] { return layer_norm_forward(x, p(li, 0), p(li, 1), k.ln1s); });
      k.qkv = tm.time("qkv fwd", [&] { return qkv_projection_forward(k.ln1, p(li, 2), p(li, 3), pr); });
      k.att = tm.time("attention fwd", [&] { return core_attention_forward(k.qkv, cfg.heads, k.attn); });
      k.x_mid = tm.time("proj fwd", [&] { return output_projection_forward(k.att, p(li, 4), p(li, 5), x, pr); });
      k.ln2 = tm.time("layer_norm fwd", [&] { return layer_norm_forward(k.x_mid, p(li, 6), p(li, 7), k.ln2s); });
      k.fc = tm.time("fc fwd", [&] { return linear_forward(k.ln2, p(li, 8), p(li, 9), {}, pr); });
      k.act = tm.time("gelu fwd", [&] { return gelu_forward(k.fc); });
      x = tm.time("mlp fwd", [&] { return linear_forward(k.act, p(li, 10), p(li, 11), k.x_mid, pr); });
    }
    layer_norm_saved fs;
    auto lnf = tm.time("layer_norm fwd", [&] { return layer_norm_forward(x, ps[h].value, ps[h + 1].value, fs); });
    auto logits = tm.time("head fwd", [&] { return linear_forward(lnf, ps[h + 2].value, {}, {}, pr); });
    auto dlogits = tm.time("cross_entropy", [&] { return cross_entropy_backward(logits, targets, 1.0f, -1); });
    auto d_lnf = tm.time("head bwd input", [&] { return linear_backward_input(dlogits, ps[h + 2].value, pr); });
    auto dx = tm.time("layer_norm bwd input", [&] { return layer_norm_backward_input(d_lnf, x, fs, ps[h].value); });
    tensor_handle gh2 = gs[h + 2].value, no_bias;
    tm.time("head bwd weight", [&] { linear_backward_weight(dlogits, lnf, gh2, no_bias, 1.0f, pr); });
    tensor_handle gw = gs[h].value, gb = gs[h + 1].value;
    tm.time("layer_norm bwd weight", [&] { layer_norm_backward_weight(d_lnf, x, fs, gw, gb); });
    for (int li = cfg.layers - 1; li >= 0; --li) { // the fused backward: each block's I then its W
      auto& c = ls[std::size_t(li)];
      c.d_out = dx;
      auto d_act = tm.time("mlp bwd input", [&] { return linear_backward_input(dx, p(li, 10), pr); });
      c.d_fc = tm.time("gelu bwd", [&] { return gelu_backward(d_act, c.fc); });
      c.d_ln2 = tm.time("fc bwd input", [&] { return linear_backward_input(c.d_fc, p(li, 8), pr); });
      c.d_mid = tm.time("layer_norm bwd input",
                        [&] { return layer_norm_backward_input(c.d_ln2, c.x_mid, c.ln2s, p(li, 6), dx); });
      auto d_att = tm.time("proj bwd input", [&] { return output_projection_backward_input(c.d_mid, p(li, 4), pr); });
      c.d_qkv = tm.time("attention bwd", [&] { return core_attention_backward(d_att, c.qkv, c.attn, cfg.heads); });
      c.d_ln1 = tm.time("qkv bwd input", [&] { return qkv_projection_backward_input(c.d_qkv, p(li, 2), pr); });
      dx = tm.time("layer_norm bwd input",
                   [&] { return layer_norm_backward_input(c.d_ln1, c.x, c.ln1s, p(li, 0), c.d_mid); });
      tensor_handle w[12];
      for (int i = 0; i < 12; ++i)
        w[i] = g(li, i);
      tm.time("mlp bwd weight", [&] { linear_backward_weight(c.d_out, c.act, w[10], w[11], 1.0f, pr); });
      tm.time("fc bwd weight", [&] { linear_backward_weight(c.d_fc, c.ln2, w[8], w[9], 1.0f, pr); });
      tm.time("layer_norm bwd weight", [&] { layer_norm_backward_weight(c.d_ln2, c.x_mid, c.ln2s, w[6], w[7]); });
      tm.time("proj bwd weight", [&] { output_projection_backward_weight(c.d_mid, c.att, w[4], w[5], pr); });
      tm.time("qkv bwd weight", [&] { qkv_projection_backward_weight(c.d_qkv, c.ln1, w[2], w[3], pr); });
      tm.time("layer_norm bwd weight", [&] { layer_norm_backward_weight(c.d_ln1, c.x, c.ln1s, w[0], w[1]); });
      c = layer{};
    }
    tensor_handle g0 = gs[0].value, g1 = gs[1].value;
    tm.time("embedding bwd", [&] { embedding_backward_weight(dx, tokens, g0, g1); });
    tm.time("adamw", [&] { opt.step(model.params(), model.grads(), 1e-3f); });
    tm.now["step"] = cpu_seconds() - t0;
    if (s >= 3)
      tm.end_step();
    else
      tm.now.clear();
  }
  const double flops = gpt_step_flops(cfg, batch, cfg.context);
  double step = median(tm.steps["step"]);
  std::printf("%-24s %9s %7s\n", "op (all layers)", "ms/step", "share");
  std::vector<std::pair<double, std::string>> rows;
  for (auto& [k, v] : tm.steps)
    if (k != "step")
      rows.push_back({median(v), k});
  std::sort(rows.rbegin(), rows.rend());
  for (auto& [ms, k] : rows)
    std::printf("%-24s %9.3f %6.1f%%\n", k.c_str(), ms * 1e3, 100 * ms / step);
  std::printf("%-24s %9.3f  (%.1f GFLOP/s by the model's FLOP count)\n", "step", step * 1e3, flops / step / 1e9);
  return 0;
}
