// Printing and parsing actions in the `<stage><F|I|W|B><microbatch>` form.
#include "schedulers/policies/action.hpp"

#include <charconv>

#include <fmt/format.h>

namespace troupe::sched {

std::string to_string(const action& a) {
  if (a.kind == op_kind::overlap)
    return fmt::format("{}F{}&{}B{}", a.stage, a.microbatch, a.back_stage, a.back_microbatch);
  return fmt::format("{}{}{}", a.stage, static_cast<char>(a.kind), a.microbatch);
}

std::string to_string(std::span<const action> order) {
  std::string out;
  for (const auto& a : order) {
    if (!out.empty())
      out += ' ';
    out += to_string(a);
  }
  return out;
}

namespace {

// Reads a non-negative decimal number at the front of `text`; returns chars used (0 if none).
std::size_t read_number(std::string_view text, int& value) {
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || value < 0)
    return 0;
  return static_cast<std::size_t>(ptr - text.data());
}

/// `text` for a message: bytes outside printable ASCII as \xNN (a binary file
/// must not put raw bytes on a terminal), and at most 40 of them.
std::string printable(std::string_view text) {
  constexpr std::size_t shown = 40;
  std::string out;
  for (char ch : text.substr(0, shown)) {
    auto c = static_cast<unsigned char>(ch);
    out += c >= 0x20 && c < 0x7f && c != '\\' ? std::string(1, ch) : fmt::format("\\x{:02x}", c);
  }
  if (text.size() > shown)
    out += fmt::format("... ({} bytes)", text.size());
  return out;
}

} // namespace

expected<action> parse_action(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return make_sched_error(fmt::format(
      "'{}' is not an action ({}; expected <stage><F|B|I|W><microbatch>, e.g. 2F0, or an F&B such as 1F4&6B0)",
      printable(text), why));
  };
  if (auto amp = text.find('&'); amp != std::string_view::npos) {
    auto f = parse_action(text.substr(0, amp)), b = parse_action(text.substr(amp + 1));
    if (!f || !b || f->kind != op_kind::forward || b->kind != op_kind::backward)
      return bad("an F&B joins a forward and a backward");
    return overlap(*f, *b);
  }
  action a;
  std::size_t n = read_number(text, a.stage);
  if (n == 0)
    return bad("no stage number");
  if (n == text.size())
    return bad("no kind letter");
  switch (text[n]) {
  case 'F':
    a.kind = op_kind::forward;
    break;
  case 'B':
    a.kind = op_kind::backward;
    break;
  case 'I':
    a.kind = op_kind::input_grad;
    break;
  case 'W':
    a.kind = op_kind::weight_grad;
    break;
  default:
    return bad(fmt::format("unknown kind '{}'", printable(text.substr(n, 1))));
  }
  auto rest = text.substr(n + 1);
  std::size_t k = read_number(rest, a.microbatch);
  if (k == 0)
    return bad("no microbatch number");
  if (k != rest.size())
    return bad("trailing characters");
  return a;
}

expected<std::vector<action>> parse_actions(std::string_view text) {
  std::vector<action> out;
  std::size_t i = 0;
  while (i < text.size()) {
    auto is_sep = [](char c) { return c == ' ' || c == '\t' || c == ',' || c == '\r' || c == '\n'; };
    while (i < text.size() && is_sep(text[i]))
      ++i;
    std::size_t j = i;
    while (j < text.size() && !is_sep(text[j]))
      ++j;
    if (j > i) {
      auto a = parse_action(text.substr(i, j - i));
      if (!a)
        return make_sched_error(fmt::format("action {}: {}", out.size() + 1, a.error().message));
      out.push_back(*a);
    }
    i = j;
  }
  return out;
}

} // namespace troupe::sched
