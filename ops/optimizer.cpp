// The optimizer's shared half: the per-parameter state buffers, the checks of
// every step, the state in and out of checkpoints, and the device kernel registry.
#include "ops/optimizer.hpp"

#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>

#include "ops/dispatch.hpp"

namespace troupe::ops {

namespace {

struct kernel_registry {
  std::mutex mtx;
  std::map<device::kind_t, std::shared_ptr<const optimizer_device_kernels>> kernels;
};

kernel_registry& registry() {
  static kernel_registry r;
  return r;
}

std::shared_ptr<const optimizer_device_kernels> kernels_for(device dev, const char* op) {
  auto& r = registry();
  std::lock_guard guard{r.mtx};
  if (auto i = r.kernels.find(dev.kind); i != r.kernels.end())
    return i->second;
  throw std::invalid_argument(
    fmt::format("{}: no optimizer kernels for device {} (its backend library is not loaded)", op, to_string(dev)));
}

} // namespace

void register_optimizer_kernels(device::kind_t kind, optimizer_device_kernels k) {
  auto& r = registry();
  std::lock_guard guard{r.mtx};
  r.kernels[kind] = std::make_shared<const optimizer_device_kernels>(std::move(k));
}

optimizer::optimizer(const std::vector<named_tensor>& params, std::vector<std::string> kinds, device_stream stream,
                     const char* name)
    : name_(name), kinds_(std::move(kinds)), stream_(stream) {
  if (!params.empty())
    device_ = params.front().value.device();
  for (const auto& p : params) {
    require(p.value.defined() && p.value.type() == dtype::f32, name_,
            fmt::format("parameter '{}' is not an f32 tensor", p.name));
    require(p.value.device() == device_, name_,
            fmt::format("parameters on {} and {}: one optimizer serves one device", to_string(device_),
                        to_string(p.value.device())));
    names_.push_back(p.name);
    shapes_.push_back(p.value.shape());
  }
  if (!device_.is_cpu())
    kernels_ = kernels_for(device_, name_);
  for (const auto& s : shapes_)
    for (std::size_t k = 0; k < kinds_.size(); ++k) {
      if (device_.is_cpu()) {
        state_.push_back(tensor_handle::zeros(s));
        continue;
      }
      state_.push_back(kernels_->zeros(s, device_, stream_));
    }
}

void optimizer::step(const std::vector<named_tensor>& params, const std::vector<named_tensor>& grads, float lr) {
  if (params.size() != names_.size() || grads.size() != names_.size())
    throw std::invalid_argument(fmt::format("{}::step: {} parameters and {} gradients for an optimizer over {}", name_,
                                            params.size(), grads.size(), names_.size()));
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i].value;
    const auto& g = grads[i].value;
    auto n = shapes_[i].numel();
    if (p.numel() != n || g.numel() != n || p.type() != dtype::f32 || g.type() != dtype::f32 || p.device() != device_ ||
        g.device() != device_)
      throw std::invalid_argument(fmt::format("{}::step: parameter '{}' or its gradient is not f32 {} on {}", name_,
                                              names_[i], to_string(shapes_[i]), to_string(device_)));
  }
  ++steps_;
  for (std::size_t i = 0; i < params.size(); ++i)
    update(i, params[i].value, grads[i].value, lr);
}

optimizer_state optimizer::state() const {
  optimizer_state s{steps_, {}};
  if (steps_ == 0)
    return s;
  for (std::size_t i = 0; i < names_.size(); ++i)
    for (std::size_t k = 0; k < kinds_.size(); ++k) {
      const auto& b = buffer(i, k);
      auto host = b;
      if (!device_.is_cpu()) {
        host = tensor_handle::empty(b.shape());
        kernels_->download(host.raw(), b.raw(), b.nbytes(), device_, stream_);
      }
      s.tensors.push_back({kinds_[k] + "." + names_[i], host});
    }
  return s;
}

void optimizer::load_state(const optimizer_state& s) {
  const auto op = fmt::format("{}::load_state", name_);
  require(s.steps >= 0, op, "a negative step count");
  std::size_t want = s.steps > 0 ? state_.size() : 0;
  require(s.tensors.size() == want, op,
          fmt::format("{} state tensors after {} steps, this optimizer keeps {}", s.tensors.size(), s.steps, want));
  for (std::size_t i = 0; i < want; ++i) {
    const auto& t = s.tensors[i].value;
    auto name = kinds_[i % kinds_.size()] + "." + names_[i / kinds_.size()];
    const auto& shape = shapes_[i / kinds_.size()];
    require(s.tensors[i].name == name, op, fmt::format("tensor {} is '{}', expected '{}'", i, s.tensors[i].name, name));
    require(
      t.defined() && t.type() == dtype::f32 && t.shape() == shape, op,
      fmt::format("'{}' is {} {}, expected f32 {}", name, to_string(t.type()), to_string(t.shape()), to_string(shape)));
  }
  for (std::size_t i = 0; i < state_.size(); ++i) {
    auto& b = state_[i];
    if (want == 0) {
      if (device_.is_cpu())
        std::memset(b.raw(), 0, b.nbytes());
      else
        kernels_->zero(b.data<float>(), b.numel(), device_, stream_);
      continue;
    }
    auto host = copy_to_host(s.tensors[i].value);
    if (device_.is_cpu())
      std::memmove(b.raw(), host.raw(), b.nbytes()); // may be its own state()
    else
      kernels_->upload(b.raw(), host.raw(), b.nbytes(), device_, stream_);
  }
  steps_ = s.steps;
}

} // namespace troupe::ops
