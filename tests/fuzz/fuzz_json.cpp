// SPDX-License-Identifier: MIT
// Fuzz target, differential: the Producer's one-pass JSON scanner (check_json) and
// nlohmann::json::accept must agree on every input, but where they differ by design (see
// json_check.hpp): a leading byte-order mark and anything after a NUL byte that ends the value
// for nlohmann. A disagreement aborts, with the input saved by libFuzzer.
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <nlohmann/json.hpp>

#include "wire/json_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  using streamq::detail::check_json;
  using streamq::detail::JsonCheck;
  // nlohmann has no depth limit: compare without one (inputs are far shorter than INT_MAX).
  const JsonCheck ours = check_json(text, INT_MAX);
  if (ours == JsonCheck::too_deep) std::abort();
  const bool theirs = nlohmann::json::accept(text);
  if ((ours == JsonCheck::ok) == theirs) return 0;
  const bool by_design = ours != JsonCheck::ok && theirs &&
                         (text.find('\0') != std::string_view::npos || text.starts_with("\xEF\xBB\xBF"));
  if (!by_design) std::abort();
  return 0;
}
