// SPDX-License-Identifier: MIT
// What the documentation's code fragments (blocks without a main()) may use without declaring
// it: the library, the standard headers below, a `producer` and a `consumer` (parameters of
// the function each fragment becomes), and the "your code" functions the examples call.
#pragma once

#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <streamq/streamq.hpp>

void send_email(const std::string& to);
void resize(const std::string& image, int width, const std::string& task_id);
struct HttpResult {
  int status = 200;
  int retry_after_s = 0;
};
HttpResult call_api(const std::string& body);
