// SPDX-License-Identifier: MIT
#include "streamq/errors.hpp"

#include "redis/error_code.hpp"

namespace streamq {

ReplyError::ReplyError(const std::string& server_message)
    : Error(std::string(detail::unwrap_script_error(server_message))),
      prefix_(detail::error_code(server_message)) {}

}  // namespace streamq
