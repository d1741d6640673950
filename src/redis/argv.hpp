// SPDX-License-Identifier: MIT
// The arguments of a Redis command, and their RESP encoding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace streamq::detail {

/// The arguments of one command. Views are stored as is (the caller keeps the bytes alive
/// until the command is sent); numbers and other temporaries are copied into owned storage.
class Argv {
 public:
  Argv() = default;
  Argv(Argv&&) noexcept = default;
  Argv& operator=(Argv&&) noexcept = default;
  Argv(const Argv&) = delete;
  Argv& operator=(const Argv&) = delete;
  Argv(std::initializer_list<std::string_view> args) {
    for (auto a : args) add(a);
  }
  Argv& add(std::string_view arg) {
    ptrs_.push_back(arg.data());
    lens_.push_back(arg.size());
    return *this;
  }
  /// Copies `arg` into storage owned by this Argv.
  Argv& add_copy(std::string arg) {
    owned_.push_back(std::make_unique<std::string>(std::move(arg)));
    return add(*owned_.back());
  }
  Argv& add(std::int64_t number) { return add_copy(std::to_string(number)); }
  /// Replaces argument `i` (a view, as add()).
  void set(std::size_t i, std::string_view arg) {
    ptrs_[i] = arg.data();
    lens_[i] = arg.size();
  }
  void clear() {
    ptrs_.clear();
    lens_.clear();
    owned_.clear();
  }
  std::size_t size() const noexcept { return ptrs_.size(); }
  std::string_view operator[](std::size_t i) const noexcept { return {ptrs_[i], lens_[i]}; }
  const char* const* data() const noexcept { return ptrs_.data(); }
  const std::size_t* lengths() const noexcept { return lens_.data(); }

 private:
  std::vector<const char*> ptrs_;
  std::vector<std::size_t> lens_;
  // Each owned string lives in its own allocation, so neither growing this vector nor moving
  // the Argv (into a std::vector<Argv>, say) moves the bytes ptrs_ points at.
  std::vector<std::unique_ptr<std::string>> owned_;
};

/// The RESP encoding of one command (what redisAppendFormattedCommand takes); `out` is reused.
void format_command(const Argv& argv, std::string& out);

}  // namespace streamq::detail
