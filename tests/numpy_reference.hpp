// What the tests that hold troupe against the independent NumPy models of
// tests/hf/ share: running a reference on some tokens, troupe's logits from a
// checkpoint, comparing the two, and comparing two runs' checkpoint parts byte
// for byte.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "deploy/run/checkpoint_model.hpp"
#include "runtime/checkpoint/safetensors.hpp"

namespace troupe::testing {

/// Debian's Python (with python3-numpy, which `deploy/setup.sh --test` installs) when there is one.
inline std::string numpy_python() {
  return std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

/// The logits [T, vocab] that `script` (tests/hf/gpt2_numpy.py, llama_numpy.py)
/// computes for `tokens` from the Hugging Face folder `model`, written through the file `scratch`.
inline std::vector<float> numpy_logits(const std::string& script, const std::filesystem::path& model,
                                       const std::vector<std::int32_t>& tokens, const std::filesystem::path& scratch) {
  std::string list;
  for (auto t : tokens)
    list += (list.empty() ? "" : ",") + std::to_string(t);
  auto cmd = fmt::format("{} {} {} {} {} 2>&1", numpy_python(), script, model.string(), list, scratch.string());
  REQUIRE_MESSAGE(std::system(cmd.c_str()) == 0,
                  "the NumPy reference failed (it needs python3-numpy: deploy/setup.sh --test installs it): " << cmd);
  std::ifstream in(scratch, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

/// A model's logits for one sequence of `tokens`: `model.logits` or `.evaluate` of an i32 [1, T] tensor.
template <class Model>
tensor_handle logits_of(const Model& model, const std::vector<std::int32_t>& tokens) {
  auto in = tensor_handle::empty({1, static_cast<std::int64_t>(tokens.size())}, dtype::i32);
  std::copy(tokens.begin(), tokens.end(), in.data<std::int32_t>());
  if constexpr (requires { model.logits(in); })
    return model.logits(in);
  else
    return model.evaluate(in);
}

/// The largest |logit| troupe gives and its largest difference from the reference's.
struct logit_gap {
  double largest = 0, worst = 0;
};
inline logit_gap compare_logits(const std::vector<float>& theirs, const tensor_handle& ours) {
  REQUIRE(theirs.size() == static_cast<std::size_t>(ours.numel()));
  logit_gap g;
  for (std::size_t i = 0; i < theirs.size(); ++i) {
    g.worst = std::max(g.worst, static_cast<double>(std::fabs(theirs[i] - ours.data<float>()[i])));
    g.largest = std::max(g.largest, static_cast<double>(std::fabs(ours.data<float>()[i])));
  }
  return g;
}

/// Checks that each of `parts` (`r0s0`) holds the same tensors, byte for byte,
/// in the step folders `a` and `b`; the number of tensors compared.
inline int compare_parts(const std::filesystem::path& a, const std::filesystem::path& b,
                         std::initializer_list<const char*> parts) {
  int compared = 0;
  for (const auto* part : parts) {
    auto x = read_safetensors(a / (std::string(part) + ".safetensors"));
    auto y = read_safetensors(b / (std::string(part) + ".safetensors"));
    REQUIRE(x);
    REQUIRE(y);
    REQUIRE(x->tensors.size() == y->tensors.size());
    for (const auto& t : y->tensors) {
      auto mine = x->find(t.name);
      REQUIRE_MESSAGE(mine.defined(), t.name);
      REQUIRE(mine.nbytes() == t.value.nbytes());
      CHECK_MESSAGE(std::memcmp(mine.raw(), t.value.raw(), t.value.nbytes()) == 0, part, " ", t.name);
      ++compared;
    }
  }
  return compared;
}

} // namespace troupe::testing
