// SPDX-License-Identifier: MIT
// The only file that knows which hiredis version we build against (0.14.1 or 1.x).
#pragma once

#include <cerrno>

#include <hiredis/hiredis.h>

#define STREAMQ_HIREDIS_AT_LEAST(maj, min) \
  (HIREDIS_MAJOR > (maj) || (HIREDIS_MAJOR == (maj) && HIREDIS_MINOR >= (min)))

namespace streamq::detail {

/// True when the context's error is a socket timeout (SO_RCVTIMEO / SO_SNDTIMEO expired).
/// On Linux both 0.14 and 1.x report it as REDIS_ERR_IO with errno EAGAIN; 1.x may also use
/// REDIS_ERR_TIMEOUT.
inline bool is_timeout(const redisContext& c, int saved_errno) noexcept {
#ifdef REDIS_ERR_TIMEOUT
  if (c.err == REDIS_ERR_TIMEOUT) return true;
#endif
  return c.err == REDIS_ERR_IO &&
         (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK || saved_errno == ETIMEDOUT);
}

/// Reply types that only RESP3 (hiredis >= 1.0) knows; we speak RESP2, so these never come,
/// but a reply walker must not misread them if a server pushes one.
inline bool is_resp3_only_type(int type) noexcept {
#ifdef REDIS_REPLY_MAP
  return type > REDIS_REPLY_ERROR;
#else
  (void)type;
  return false;
#endif
}

}  // namespace streamq::detail
