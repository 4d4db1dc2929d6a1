// A generic registry of factories keyed by name, with "did you mean" lookups.
// Free of CAF, so schedulers/ can keep its policy registry in one too.
#pragma once

#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe {

/// The Levenshtein distance between `a` and `b`.
std::size_t edit_distance(std::string_view a, std::string_view b);

/// The known name nearest to `word` when it is close enough to be a likely
/// typo (distance at most a third of the longer name, and at least 1 allowed).
std::optional<std::string> nearest_name(std::string_view word, const std::vector<std::string>& known);

/// Factories (or any value) registered under unique names, with a "did you
/// mean" lookup. Registration normally happens once at start-up
/// (`register_builtin_actors()`, plugins); lookups are thread-safe.
template <class Factory>
class named_registry {
public:
  struct entry {
    std::string name;
    std::string summary; ///< one line for `--help` listings
    Factory factory;
  };

  /// Registers `f` under `name`; false (and no change) when the name is taken.
  bool add(std::string name, Factory f, std::string summary = {}) {
    std::lock_guard guard{mtx_};
    for (const auto& e : entries_)
      if (e.name == name)
        return false;
    entries_.push_back(entry{std::move(name), std::move(summary), std::move(f)});
    return true;
  }

  /// Registers or replaces `name`.
  void set(std::string name, Factory f, std::string summary = {}) {
    std::lock_guard guard{mtx_};
    for (auto& e : entries_)
      if (e.name == name) {
        e.factory = std::move(f);
        e.summary = std::move(summary);
        return;
      }
    entries_.push_back(entry{std::move(name), std::move(summary), std::move(f)});
  }

  /// The entry called `name`, copied (so it stays valid while others register).
  std::optional<entry> find(std::string_view name) const {
    std::lock_guard guard{mtx_};
    for (const auto& e : entries_)
      if (e.name == name)
        return e;
    return std::nullopt;
  }

  bool contains(std::string_view name) const { return find(name).has_value(); }

  /// Every name, in registration order.
  std::vector<std::string> names() const {
    std::lock_guard guard{mtx_};
    std::vector<std::string> out;
    out.reserve(entries_.size());
    for (const auto& e : entries_)
      out.push_back(e.name);
    return out;
  }

  /// The registered name nearest to `name` by edit distance, when close enough.
  std::optional<std::string> suggest(std::string_view name) const { return nearest_name(name, names()); }

  /// Removes `name` (tests use it to undo registrations); false when absent.
  bool remove(std::string_view name) {
    std::lock_guard guard{mtx_};
    for (auto i = entries_.begin(); i != entries_.end(); ++i)
      if (i->name == name) {
        entries_.erase(i);
        return true;
      }
    return false;
  }

private:
  mutable std::mutex mtx_;
  std::vector<entry> entries_;
};

} // namespace troupe
