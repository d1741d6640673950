// SPDX-License-Identifier: MIT
#include "streamq/errors.hpp"

namespace streamq {

ReplyError::ReplyError(const std::string& server_message)
    : Error(server_message), prefix_(server_message.substr(0, server_message.find(' '))) {}

}  // namespace streamq
