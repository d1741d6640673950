// SPDX-License-Identifier: MIT
// The limits on a start: rate limit waits, putting a task back unrun, the concurrency slots in
// Redis (slot.lua) and the local HandlerOptions::max_in_flight count.
#include <algorithm>
#include <atomic>

#include "attempt.hpp"
#include "log.hpp"
#include "redis/scripts.hpp"
#include "wire/codec.hpp"
#include "wire/keys.hpp"

namespace streamq::detail {

Completion put_back(const Work& w, Millis delay) {
  Completion c{w.key, Outcome::retry, *w.fields};
  c.delay = std::max(delay, Millis(1));
  c.attempted = false;
  return c;
}

Completion hand_back(const Work& w, Millis delay) {
  Completion c{w.key, Outcome::retry, *w.fields};
  c.delay = delay;
  c.attempted = false;
  c.handed_back = true;
  return c;
}

Millis rate_wait(const Shared& s, std::string_view type, const RateLimit& rate,
                 std::unique_ptr<Channel>& ch) {
  if (!ch) ch = std::make_unique<Channel>(s.connection);
  const std::string key = rate_key(s.queue, type);  // one window for every partition
  Argv argv = ch->scripts.begin(ScriptId::rate, 1);
  argv.add(key).add(rate.limit).add(static_cast<std::int64_t>(rate.per.count()));
  // A name of this start alone: the window is the queue's, shared by every partition and
  // level, whose streams repeat entry ids, and partitions share the consumer's name.
  argv.add_copy(new_uuid_v4());
  const Reply r = ch->scripts.call(ScriptId::rate, argv);
  return Millis(r.view().check().integer());
}

Millis slot_wait() { return Millis(100 + static_cast<std::int64_t>(unit_random() * 400)); }

bool take_slots(const Shared& s, TaskControl& c, const std::vector<int>& limits,
                std::unique_ptr<Channel>& ch) {
  if (!ch) ch = std::make_unique<Channel>(s.connection);
  c.slot_holder = new_uuid_v4();
  for (std::size_t i = 0; i < c.slot_keys.size(); ++i) {
    Argv argv = ch->scripts.begin(ScriptId::slot, 1);
    argv.add(c.slot_keys[i]).add("acquire").add(c.slot_holder);
    argv.add(static_cast<std::int64_t>(s.opt.claim_min_idle.count())).add(limits[i]);
    std::int64_t taken = 0;
    try {
      taken = ch->scripts.call(ScriptId::slot, argv).view().check().integer();
    } catch (...) {
      release_slots(s, c, i, ch);
      throw;
    }
    if (taken != 1) {
      release_slots(s, c, i, ch);
      return false;
    }
  }
  return true;
}

void release_slots(const Shared& s, const TaskControl& c, std::size_t count, std::unique_ptr<Channel>& ch) {
  for (std::size_t i = 0; i < count; ++i) {
    try {
      if (!ch) ch = std::make_unique<Channel>(s.connection);
      Argv argv = ch->scripts.begin(ScriptId::slot, 1);
      argv.add(c.slot_keys[i]).add("release").add(c.slot_holder);
      ch->scripts.call(ScriptId::slot, argv).view().check();
    } catch (const std::exception& e) {
      ch.reset();
      log(LogLevel::warning, "the concurrency slot " + c.slot_keys[i] + " of task " + c.task_id +
                                 " could not be given back (" + e.what() +
                                 "); it frees itself after claim_min_idle");
    }
  }
}

bool enter_local_limit(std::atomic<int>* running, int max) {
  if (running->fetch_add(1, std::memory_order_acq_rel) < max) return true;
  running->fetch_sub(1, std::memory_order_acq_rel);
  return false;
}

}  // namespace streamq::detail
