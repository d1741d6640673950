// expect: compiles
// The control: a QueueStats made, copied, moved and compared field by field, reading the
// whole-queue numbers, warns about nothing (its deprecated fields warn only where they are used).
#include <utility>
#include <vector>

#include <streamq/streamq.hpp>

std::int64_t backlog(const streamq::QueueStats& st) {
  streamq::QueueStats copy = st;
  std::vector<streamq::QueueStats> all{copy, streamq::QueueStats{}};
  streamq::QueueStats moved = std::move(copy);
  return moved.length + all.front().pending_total;
}
