// A small expected<T> for the schedulers module, which stays free of CAF:
// callers in actors/ turn a failed one into a caf::error with its message.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace troupe::sched {

/// Why a scheduling call failed: one human-readable sentence naming where and what.
struct sched_error {
  std::string message;
};

/// Either a value or a sched_error, in the spirit of caf::expected / std::expected.
template <class T>
class expected {
public:
  expected(T value) : data_(std::move(value)) {}
  expected(sched_error err) : data_(std::move(err)) {}

  explicit operator bool() const { return data_.index() == 0; }
  bool has_value() const { return data_.index() == 0; }

  T& value() & { return std::get<0>(data_); }
  const T& value() const& { return std::get<0>(data_); }
  T&& value() && { return std::get<0>(std::move(data_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const sched_error& error() const { return std::get<1>(data_); }

private:
  std::variant<T, sched_error> data_;
};

/// expected<void>: success carries nothing.
template <>
class expected<void> {
public:
  expected() = default;
  expected(sched_error err) : err_(std::move(err)), ok_(false) {}

  explicit operator bool() const { return ok_; }
  bool has_value() const { return ok_; }
  const sched_error& error() const { return err_; }

private:
  sched_error err_;
  bool ok_ = true;
};

/// Builds a failed result from a message.
inline sched_error make_sched_error(std::string message) {
  return sched_error{std::move(message)};
}

} // namespace troupe::sched
