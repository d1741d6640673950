// SPDX-License-Identifier: MIT
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace streamq::detail {

/// The parts joined into one string, sized once. Used where `"literal" + std::string(...)` would
/// be written: GCC 12 warns about that expression at -O2 (-Wrestrict, a false positive in its
/// inlined std::string::insert; GCC bugs 105329 and 105651), and the default build has no
/// warnings.
template <typename... Parts>
std::string concat(const Parts&... parts) {
  const std::string_view views[] = {std::string_view(parts)...};
  std::size_t size = 0;
  for (const std::string_view v : views) size += v.size();
  std::string out;
  out.reserve(size);
  for (const std::string_view v : views) out.append(v);
  return out;
}

}  // namespace streamq::detail
