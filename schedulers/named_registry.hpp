// A thread-safe table of registered components by name, in registration order
// (sync methods, SkipPipe planners): built-ins first, then plugins'.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::sched {

template <class Entry>
class named_registry {
public:
  /// Adds (or replaces) `entry` under `name`; a new name goes to the end of the order.
  void add(std::string name, Entry entry) {
    std::lock_guard lock(mu_);
    if (!entries_.contains(name))
      order_.push_back(name);
    entries_[std::move(name)] = std::move(entry);
  }
  /// The entry under `name`, or null. Entries are never removed, so the pointer stays good.
  const Entry* find(std::string_view name) {
    std::lock_guard lock(mu_);
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
  }
  std::vector<std::string> names() {
    std::lock_guard lock(mu_);
    return order_;
  }

private:
  std::mutex mu_;
  std::map<std::string, Entry, std::less<>> entries_;
  std::vector<std::string> order_;
};

} // namespace troupe::sched
