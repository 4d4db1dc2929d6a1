// One setting a registered component reads from its part of a graph file: key,
// type and range, summary and default. A component (a sync method, a routing
// policy) registers a list of them; the graph loader checks each written key
// against that list at its position, so no central file names the component.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace troupe {

/// A setting's key, the values it takes, what it does and its default.
struct option_spec {
  enum class kind { integer, number, boolean, choice, text };
  /// `fragments`, or `periods.params` for a key of a nested mapping (`periods: {params: 16}`).
  std::string key;
  kind type = kind::integer;
  std::string summary;
  /// The value when the key is absent, as written in a graph file; empty when it
  /// follows from other settings (the summary says how).
  std::string fallback;
  double low = 0, high = 0;         ///< integer and number: the range, ends included
  std::vector<std::string> choices; ///< choice: the names it takes
  bool file = false;                ///< text: names a file, resolved against the graph file's folder
};

/// An integer setting in [low, high].
inline option_spec int_setting_spec(std::string key, std::string summary, std::int64_t fallback, std::int64_t low,
                                    std::int64_t high) {
  return {std::move(key),
          option_spec::kind::integer,
          std::move(summary),
          std::to_string(fallback),
          static_cast<double>(low),
          static_cast<double>(high),
          {}};
}

/// A number setting in [low, high] (its finer rules may come from the component's checks).
inline option_spec number_setting_spec(std::string key, std::string summary, double fallback, double low, double high) {
  return {std::move(key), option_spec::kind::number, std::move(summary), fmt::format("{}", fallback), low, high, {}};
}

/// A `true`/`false` setting.
inline option_spec bool_setting_spec(std::string key, std::string summary, bool fallback) {
  return {std::move(key), option_spec::kind::boolean, std::move(summary), fallback ? "true" : "false", 0, 0, {}};
}

/// A setting that names one of `choices`; the default is the first.
inline option_spec choice_setting_spec(std::string key, std::string summary, std::vector<std::string> choices) {
  auto first = choices.empty() ? std::string{} : choices.front();
  return {std::move(key), option_spec::kind::choice, std::move(summary), std::move(first), 0, 0, std::move(choices)};
}

/// A setting whose value is text: a name, or a file (`path`: resolved against
/// the graph file's folder when read). No default unless `fallback` is given.
inline option_spec text_setting_spec(std::string key, std::string summary, std::string fallback = {}) {
  return {std::move(key), option_spec::kind::text, std::move(summary), std::move(fallback), 0, 0, {}};
}

/// A setting that names a file: its value is stored resolved against the graph file's folder.
inline option_spec file_setting_spec(std::string key, std::string summary) {
  auto o = text_setting_spec(std::move(key), std::move(summary));
  o.file = true;
  return o;
}

/// What a value of `o` must be, for listings: "an integer from 1 to 1048576".
inline std::string describe_values(const option_spec& o) {
  switch (o.type) {
  case option_spec::kind::integer:
    return fmt::format("an integer from {} to {}", static_cast<std::int64_t>(o.low), static_cast<std::int64_t>(o.high));
  case option_spec::kind::number:
    return fmt::format("a number from {} to {}", o.low, o.high);
  case option_spec::kind::boolean:
    return "true or false";
  case option_spec::kind::choice:
    return fmt::format("one of {}", fmt::join(o.choices, ", "));
  case option_spec::kind::text:
    return "text";
  }
  return {};
}

/// Why `text` is not a value of `o` ("expected an integer from 1 to 8, got
/// 'x'"), or nullopt when it is: for values that come from elsewhere than a
/// graph file (a command line's flags).
std::optional<std::string> option_value_problem(const option_spec& o, const std::string& text);

} // namespace troupe
