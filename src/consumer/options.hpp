// SPDX-License-Identifier: MIT
// Consumer option checks and the consumer names. Pure: no thread, no connection.
#pragma once

#include <string>

#include "streamq/consumer_options.hpp"

namespace streamq::detail {

/// Checks every field (ConfigError names the first bad one); an empty consumer_name stays
/// empty (the name lock chooses one at start). The connection options are checked by
/// make_connection_config.
ConsumerOptions validated(ConsumerOptions options);

/// Checks a backoff (`name` prefixes the field in the ConfigError).
void check_backoff(const RetryBackoff& backoff, const std::string& name);
/// Checks the options of one Consumer::on.
void check_handler_options(const HandlerOptions& options);

/// This machine's host name ("host" when it has none).
std::string host_name();
/// "<hostname>-<pid>-<8 hex digits>": unique per process and per Consumer. The name of a
/// consumer given none when the name lock cannot tell which per-host names are free.
std::string unique_consumer_name();

}  // namespace streamq::detail
