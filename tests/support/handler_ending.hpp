// SPDX-License-Identifier: MIT
// How a test's handler ends an attempt, for the tests that take it as their parameter.
#pragma once

namespace streamq::test {

enum class Ending { returns, throws, permanent };

}  // namespace streamq::test
