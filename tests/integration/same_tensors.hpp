// Replicas that must agree (#26 item 3): their checkpoint parts compared
// tensor by tensor, bit for bit; how far a run's loader read; and the loss
// at its end.
#pragma once

#include <cstring>
#include <filesystem>
#include <functional>
#include <regex>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "runtime/checkpoint/safetensors.hpp"

namespace troupe::testing {

/// Every tensor of checkpoint part `a` equals `b`'s of the same name, bit for
/// bit, but those whose names `own` picks (what each replica keeps for itself);
/// a sync actor's outer-step count too. Returns how many tensors were compared.
inline int same_tensors(const std::filesystem::path& a, const std::filesystem::path& b,
                        const std::function<bool(const std::string&)>& own) {
  auto fa = read_safetensors(a), fb = read_safetensors(b);
  REQUIRE_MESSAGE(fa, a.string());
  REQUIRE_MESSAGE(fb, b.string());
  int compared = 0;
  for (const auto& [name, t] : fa->tensors) {
    if (own(name))
      continue;
    auto u = fb->find(name);
    REQUIRE_MESSAGE(u.defined(), b.string(), " has no ", name);
    REQUIRE(u.nbytes() == t.nbytes());
    CHECK_MESSAGE(std::memcmp(u.raw(), t.raw(), t.nbytes()) == 0, a.filename().string(), " and ", b.filename().string(),
                  " differ in ", name);
    ++compared;
  }
  if (auto p = fa->metadata.find("outer.performed"); p != fa->metadata.end())
    CHECK(fb->metadata.at("outer.performed") == p->second);
  return compared;
}

/// The training sequences (context windows) a run's loader had read by the
/// checkpoint in `step_dir`: its part's `position`. A run that dealt every
/// microbatch of every step read steps x replicas x microbatches x batch.
inline long loader_position(const std::filesystem::path& step_dir) {
  auto f = read_safetensors(step_dir / "loader.safetensors");
  REQUIRE_MESSAGE(f, (step_dir / "loader.safetensors").string());
  auto p = f->metadata.find("position");
  REQUIRE_MESSAGE(p != f->metadata.end(), "the loader's checkpoint part holds no position");
  return std::stol(p->second);
}

/// The mean of the last 4 validation losses a launch printed: one evaluation of a small model differs by a percent or two between
/// trajectories that saw the data in another order.
inline double last_val_loss(const std::string& out) {
  std::regex re{R"(validation after step \d+: loss ([0-9.]+))"};
  std::vector<double> losses;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it)
    losses.push_back(std::stod((*it)[1].str()));
  REQUIRE(losses.size() >= 4);
  double sum = 0;
  for (std::size_t i = losses.size() - 4; i < losses.size(); ++i)
    sum += losses[i];
  return sum / 4;
}

} // namespace troupe::testing
