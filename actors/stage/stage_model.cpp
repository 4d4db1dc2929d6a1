// Stage models: the CPU one over gpt_range, the registry of device backends
// (loading the CUDA library on demand) and where each stage runs.
#include "actors/stage/stage_model.hpp"

#include <dlfcn.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>

#include "runtime/actor/errors.hpp"
#include "runtime/actor/plugin.hpp"

namespace troupe {

tensor_handle host_f32(const stage_tensor& t) {
  auto h = copy_to_host(t.value, t.ready.get());
  if (!h.defined() || h.type() != dtype::bf16)
    return h;
  auto f = tensor_handle::empty(h.shape(), dtype::f32);
  const auto* src = h.data<std::uint16_t>();
  auto* dst = f.data<float>();
  for (std::int64_t i = 0; i < h.numel(); ++i) { // a bf16 is the top half of an f32
    auto bits = static_cast<std::uint32_t>(src[i]) << 16;
    std::memcpy(dst + i, &bits, sizeof bits);
  }
  return f;
}

namespace {

class cpu_stage_model final : public stage_model {
public:
  explicit cpu_stage_model(ops::gpt_range& r, std::unique_ptr<ops::gpt_range> owned = {})
      : owned_(std::move(owned)), r_(r) {}

  troupe::device device() const noexcept override { return device::cpu(); }
  bool is_first() const noexcept override { return r_.is_first(); }
  bool is_last() const noexcept override { return r_.is_last(); }

  stage_tensor forward(int mb, const stage_tensor& input, const tensor_handle& targets) override {
    return {r_.forward(mb, host_f32(input), targets, input.documents), nullptr, input.documents};
  }
  stage_tensor backward(int mb, const stage_tensor& grad_out) override {
    return {r_.backward(mb, host_f32(grad_out)), nullptr};
  }
  stage_tensor backward_input(int mb, const stage_tensor& grad_out) override {
    return {r_.backward_input(mb, host_f32(grad_out)), nullptr};
  }
  void backward_weight(int mb) override { r_.backward_weight(mb); }
  stage_tensor evaluate(const stage_tensor& input, const tensor_handle& targets) override {
    return {r_.evaluate(host_f32(input), targets, input.documents), nullptr, input.documents};
  }
  int in_flight() const override { return r_.in_flight(); }

  void zero_grads() override { r_.zero_grads(); }
  void release_grads() override { r_.release_grads(); }
  double grad_sq_norm() override { return r_.grad_sq_norm(); }
  void scale_grads(float factor) override { r_.scale_grads(factor); }
  bool on_grads_done(std::function<void(std::size_t, std::size_t)> f) override {
    r_.on_grads_done(std::move(f));
    return true;
  }
  const std::vector<ops::named_tensor>& params() const override { return r_.params(); }
  const std::vector<ops::named_tensor>& grads() const override { return r_.grads(); }

  std::vector<param_info> param_layout() const override {
    std::vector<param_info> out;
    for (const auto& p : r_.params())
      out.push_back({p.name, p.value.shape(), p.value.type()});
    return out;
  }
  std::vector<ops::named_tensor> host_params() override { return r_.params(); }
  void load_params(const std::vector<tensor_handle>& params) override {
    const auto& ps = r_.params();
    if (params.size() != ps.size())
      throw std::invalid_argument(
        fmt::format("load_params: {} parameters for a model of {}", params.size(), ps.size()));
    for (std::size_t i = 0; i < ps.size(); ++i)
      if (!(params[i].shape() == ps[i].value.shape()) || params[i].type() != ps[i].value.type() ||
          !params[i].device().is_cpu())
        throw std::invalid_argument(fmt::format("load_params: parameter '{}' is {} {}, the model's is {} {}",
                                                ps[i].name, to_string(params[i].type()), to_string(params[i].shape()),
                                                to_string(ps[i].value.type()), to_string(ps[i].value.shape())));
    for (std::size_t i = 0; i < ps.size(); ++i)
      std::memcpy(ps[i].value.raw(), params[i].raw(), params[i].nbytes());
  }

private:
  std::unique_ptr<ops::gpt_range> owned_; ///< set when the model owns its range
  ops::gpt_range& r_;
};

struct backend_registry {
  std::mutex mtx;
  std::map<device::kind_t, stage_model_backend> backends;
};

backend_registry& registry() {
  static backend_registry r;
  return r;
}

std::optional<stage_model_backend> find_backend(device::kind_t kind) {
  auto& r = registry();
  std::lock_guard guard{r.mtx};
  if (auto i = r.backends.find(kind); i != r.backends.end())
    return i->second;
  return std::nullopt;
}

} // namespace

std::unique_ptr<stage_model> make_cpu_stage_model(ops::gpt_range& range) {
  return std::make_unique<cpu_stage_model>(range);
}

void register_stage_model_backend(device::kind_t kind, stage_model_backend b) {
  auto& r = registry();
  std::lock_guard guard{r.mtx};
  r.backends[kind] = std::move(b);
}

caf::expected<stage_model_backend> stage_model_backend_for(device::kind_t kind) {
  if (auto b = find_backend(kind))
    return *b;
  if (kind != device::kind_t::cuda)
    return make_error(errc::spawn_failed, "no stage model backend for this device kind");
#ifdef TROUPE_CUDA_BACKEND_FILE
  // The backend sits beside this library; loading it costs cuBLAS's start-up,
  // which CPU runs never pay.
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&stage_model_backend_for), &self) == 0 || self.dli_fname == nullptr)
    return make_error(errc::spawn_failed, "the CUDA backend could not be found (dladdr found no library path)");
  auto lib = std::filesystem::path{self.dli_fname}.parent_path() / TROUPE_CUDA_BACKEND_FILE;
  if (auto err = load_plugin(lib))
    return make_error(errc::spawn_failed,
                      fmt::format("the CUDA backend {} could not be loaded: {}", lib.string(), error_message(err)));
  if (auto b = find_backend(kind))
    return *b;
  return make_error(errc::spawn_failed, fmt::format("the CUDA backend {} registered nothing", lib.string()));
#else
  return make_error(errc::spawn_failed,
                    "this troupe was built without the CUDA backend (no nvcc was found, or TROUPE_CUDA=OFF)");
#endif
}

std::unique_ptr<stage_model> make_stage_model(const stage_model_spec& spec) {
  if (spec.device.is_cpu()) {
    auto range = std::make_unique<ops::gpt_range>(spec.model, spec.begin, spec.end);
    auto& r = *range;
    return std::make_unique<cpu_stage_model>(r, std::move(range));
  }
  auto b = stage_model_backend_for(spec.device.kind);
  if (!b)
    throw std::runtime_error(fmt::format("device {}: {}", to_string(spec.device), error_message(b.error())));
  return b->make(spec);
}

caf::expected<troupe::device> stage_device(const actor_spec& stage, const graph_spec& g,
                                           const caf::expected<int>& cuda_devices) {
  const auto& want = stage.device.empty() ? g.pipeline.device : stage.device;
  auto d = parse_device(want);
  if (!d)
    return make_error(errc::invalid_argument, fmt::format("unknown device '{}' (expected cpu, cuda or cuda:N)", want));
  if (d->is_cpu())
    return *d;
  auto refuse = [&](const std::string& why) {
    return make_error(errc::spawn_failed, fmt::format("device {} requested but {}", want, why));
  };
  if (!cuda_devices)
    return refuse(error_message(cuda_devices.error()));
  int n = *cuda_devices;
  if (n <= 0)
    return refuse("no CUDA device is available (cudaGetDeviceCount: 0 devices)");
  if (want != "cuda") {
    if (d->index >= n)
      return refuse(fmt::format("this machine has {} CUDA device{} (cuda:0 to cuda:{})", n, n == 1 ? "" : "s", n - 1));
    return *d;
  }
  // `cuda`: the next device after those of the CUDA stages before it on its node.
  int before = 0, node = g.node_of(stage);
  for (const auto& a : g.actors) {
    const auto& dev = a.device.empty() ? g.pipeline.device : a.device;
    if (a.role.holds_layers && a.rank < stage.rank && dev.starts_with("cuda") && g.node_of(a) == node)
      ++before;
  }
  return device::cuda(before % n);
}

} // namespace troupe
