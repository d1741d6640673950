// SPDX-License-Identifier: MIT
// Test support: a struct with nlohmann_json conversions, as a typed task payload.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace streamq::test {

struct Resize {
  std::string image;
  int width = 0;
  bool operator==(const Resize&) const = default;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Resize, image, width)

}  // namespace streamq::test
