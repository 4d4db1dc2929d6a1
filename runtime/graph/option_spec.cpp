// A setting's value given as text, checked against its option_spec.
#include "runtime/graph/option_spec.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace troupe {

std::optional<std::string> option_value_problem(const option_spec& o, const std::string& text) {
  auto bad = [&] { return fmt::format("expected {}, got '{}'", describe_values(o), text); };
  try {
    std::size_t used = 0;
    switch (o.type) {
    case option_spec::kind::integer: {
      auto v = std::stoll(text, &used);
      if (used != text.size() || static_cast<double>(v) < o.low || static_cast<double>(v) > o.high)
        return bad();
      return std::nullopt;
    }
    case option_spec::kind::number: {
      auto v = std::stod(text, &used);
      if (used != text.size() || !std::isfinite(v) || v < o.low || v > o.high)
        return bad();
      return std::nullopt;
    }
    case option_spec::kind::boolean:
      return text == "true" || text == "false" ? std::nullopt : std::optional{bad()};
    case option_spec::kind::choice:
      return std::find(o.choices.begin(), o.choices.end(), text) != o.choices.end() ? std::nullopt
                                                                                    : std::optional{bad()};
    case option_spec::kind::text:
      return std::nullopt;
    }
  } catch (const std::logic_error&) { // stoll/stod: not a number, or out of range
    return bad();
  }
  return std::nullopt;
}

} // namespace troupe
