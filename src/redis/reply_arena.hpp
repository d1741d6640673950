// SPDX-License-Identifier: MIT
// Reply objects built in one arena per reply instead of hiredis' one calloc per node and one
// malloc per string: a batch of 64 tasks is ~1,800 nodes and strings, and their malloc/free
// churn was the largest cost of reading it. The replies are ordinary redisReply trees (the
// reply views read them unchanged); only their memory comes from a few blocks.
#pragma once

struct redisReader;

namespace streamq::detail {

/// Makes `reader` (a context's `reader`) build replies in arenas. Call before it reads the
/// first reply; replies it returns must be freed with free_arena_reply.
void use_reply_arena(redisReader* reader) noexcept;

/// Frees a reply built by an arena reader (its whole tree at once). Null is fine.
void free_arena_reply(void* reply) noexcept;

}  // namespace streamq::detail
