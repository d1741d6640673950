// SPDX-License-Identifier: MIT
// Consumer option checks and the default consumer name. Pure: no thread, no connection.
#pragma once

#include <string>

#include "streamq/consumer_options.hpp"

namespace streamq::detail {

/// Checks every field (ConfigError names the first bad one) and fills in the default consumer
/// name. The connection options are checked by make_connection_config.
ConsumerOptions validated(ConsumerOptions options);

/// Checks a backoff (`name` prefixes the field in the ConfigError).
void check_backoff(const RetryBackoff& backoff, const std::string& name);
/// Checks the options of one Consumer::on.
void check_handler_options(const HandlerOptions& options);

/// "<hostname>-<pid>-<8 hex digits>": unique per process and per Consumer.
std::string default_consumer_name();

}  // namespace streamq::detail
