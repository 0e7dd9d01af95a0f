// Result<T>: either a value of type T or a non-OK Status (C++20 has no std::expected).
//
// A Result is [[nodiscard]]. value() on an error is a programmer error and aborts; check ok()
// first or use KV_ASSIGN_OR_RETURN. Thread safety: a value type, like Status.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <type_traits>
#include <utility>

#include "kvtier/status.h"

namespace kvtier {

template <typename T>
class [[nodiscard]] Result {
 public:
  static_assert(!std::is_same_v<std::remove_cvref_t<T>, Status>, "Result<Status> is meaningless");

  // Implicit on purpose: `return value;` and `return status;` both read naturally.
  Result(T value) : value_(std::move(value)) {}         // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (status_.ok()) {
      // An OK status carries no value: that is a bug in the caller.
      std::fprintf(stderr, "kvtier: Result constructed from an OK Status without a value\n");
      std::abort();
    }
  }
  template <typename U>
  requires(std::is_constructible_v<T, U&&> && !std::is_same_v<std::remove_cvref_t<U>, T> &&
           !std::is_same_v<std::remove_cvref_t<U>, Status> &&
           !std::is_same_v<std::remove_cvref_t<U>, Result<T>>) Result(U&& value)
      : value_(T(std::forward<U>(value))) {}  // NOLINT(google-explicit-constructor)

  Result(const Result&) = default;
  Result(Result&&) noexcept = default;
  Result& operator=(const Result&) = default;
  Result& operator=(Result&&) noexcept = default;

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  T& value() & {
    CheckOk();
    return *value_;
  }
  const T& value() const& {
    CheckOk();
    return *value_;
  }
  T&& value() && {
    CheckOk();
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  // Returns the value, or `fallback` when this holds an error.
  T value_or(T fallback) const& { return ok() ? *value_ : std::move(fallback); }

 private:
  void CheckOk() const {
    if (!value_.has_value()) {
      std::fprintf(stderr, "kvtier: value() on an error Result: %s\n", status_.ToString().c_str());
      std::abort();
    }
  }

  Status status_;  // OK whenever value_ holds a value.
  std::optional<T> value_;
};

}  // namespace kvtier

#define KV_CONCAT_INNER_(a, b) a##b
#define KV_CONCAT_(a, b) KV_CONCAT_INNER_(a, b)

// KV_ASSIGN_OR_RETURN(auto x, F()); declares or assigns `x` from F()'s value, or returns F()'s
// error from the enclosing function.
#define KV_ASSIGN_OR_RETURN(lhs, rexpr) \
  KV_ASSIGN_OR_RETURN_IMPL_(KV_CONCAT_(kv_result_tmp_, __LINE__), lhs, rexpr)
#define KV_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                              \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
