// The storage pool: size classes, free lists and the CPU allocator.
#include "runtime/tensor/storage_pool.hpp"

#include <bit>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>

namespace troupe {

namespace {

/// 64-byte aligned host memory (a cache line; enough for AVX-512 loads).
class cpu_allocator final : public device_allocator {
public:
  void* allocate(std::size_t bytes) override { return std::aligned_alloc(64, (bytes + 63) / 64 * 64); }
  void deallocate(void* p, std::size_t) noexcept override { std::free(p); }
};

struct pool_registry {
  std::mutex mtx;
  cpu_allocator cpu;
  std::map<device::kind_t, device_allocator*> allocators{{device::kind_t::cpu, &cpu}};
  std::map<device, std::unique_ptr<storage_pool>> pools;
};

pool_registry& registry() {
  static auto* r = new pool_registry; // never destroyed: handles may outlive statics
  return *r;
}

} // namespace

void device_allocator::copy_to_host(void* dst, const void* src, std::size_t bytes) {
  std::memcpy(dst, src, bytes);
}

troupe::device storage::device() const noexcept {
  return pool_->device();
}

storage_pool::~storage_pool() {
  for (auto* s : all_) {
    alloc_.deallocate(s->data_, s->bytes_);
    delete s;
  }
}

std::size_t storage_pool::size_class(std::size_t bytes) noexcept {
  constexpr std::size_t min_block = 256;
  if (bytes <= min_block)
    return min_block;
  // Four classes per power of two: round up to a multiple of 2^(floor(log2) - 2).
  auto step = std::size_t{1} << (std::bit_width(bytes) - 3);
  return (bytes + step - 1) / step * step;
}

storage_ref storage_pool::acquire(std::size_t bytes) {
  auto cls = size_class(bytes);
  {
    std::lock_guard guard{mtx_};
    auto& list = free_[cls];
    if (!list.empty()) {
      auto* s = list.back();
      list.pop_back();
      ++stats_.reuses;
      stats_.bytes_live += cls;
      return storage_ref{s};
    }
  }
  void* p = alloc_.allocate(cls);
  if (p == nullptr)
    return {};
  auto* s = new storage(this, p, cls);
  std::lock_guard guard{mtx_};
  all_.push_back(s);
  ++stats_.fresh_allocations;
  stats_.bytes_reserved += cls;
  stats_.bytes_live += cls;
  return storage_ref{s};
}

void storage_pool::give_back(storage* s) noexcept {
  std::lock_guard guard{mtx_};
  stats_.bytes_live -= s->bytes_;
  try {
    free_[s->bytes_].push_back(s);
  } catch (...) {
    // Out of memory growing a free list: the block stays reserved but unused.
  }
}

void storage_pool::trim() {
  std::lock_guard guard{mtx_};
  for (auto& [cls, list] : free_) {
    for (auto* s : list) {
      std::erase(all_, s);
      stats_.bytes_reserved -= s->bytes_;
      alloc_.deallocate(s->data_, s->bytes_);
      delete s;
    }
    list.clear();
  }
}

pool_stats storage_pool::stats() const {
  std::lock_guard guard{mtx_};
  return stats_;
}

storage_pool& storage_pool::for_device(troupe::device dev) {
  auto& r = registry();
  std::lock_guard guard{r.mtx};
  if (auto i = r.pools.find(dev); i != r.pools.end())
    return *i->second;
  auto a = r.allocators.find(dev.kind);
  if (a == r.allocators.end())
    throw std::invalid_argument("no memory allocator registered for device " + to_string(dev));
  auto& p = r.pools[dev];
  p = std::make_unique<storage_pool>(dev, *a->second);
  return *p;
}

void storage_pool::register_allocator(device::kind_t kind, device_allocator& alloc) {
  auto& r = registry();
  std::lock_guard guard{r.mtx};
  r.allocators[kind] = &alloc;
}

} // namespace troupe
