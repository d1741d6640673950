// SPDX-License-Identifier: MIT
// A validating JSON scanner for the enqueue path: checks RFC 8259 syntax, UTF-8 and nesting
// depth in one pass without building anything. The Producer validates every payload it
// sends, and nlohmann::json::accept spends most of its time collecting token text it then
// throws away; this does the same check several times faster.
#pragma once

#include <string_view>

namespace streamq::detail {

enum class JsonCheck { ok, invalid, too_deep };

/// Checks that `text` is exactly one JSON value (surrounding whitespace allowed), with
/// well-formed UTF-8 (no overlong forms, no encoded surrogates, nothing above U+10FFFF),
/// valid escapes (a \u high surrogate must be followed by a \u low surrogate), and arrays and
/// objects nested at most `max_depth` deep, and numbers a double can hold. Stricter than
/// nlohmann in two respects only: a leading byte-order mark is refused, and so is anything
/// after the value, where nlohmann stops reading at a NUL byte and ignores the rest.
JsonCheck check_json(std::string_view text, int max_depth);

}  // namespace streamq::detail
