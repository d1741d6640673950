// SPDX-License-Identifier: MIT
// The name lock: two live processes started with the same
// consumer_name would share one pending entries list, each taking the other's entries for its
// own after a restart, without a word. So a consumer holds its name in a key of the queue,
// live_key() (`<stream>:live:<group length>:<group>:<consumer>`), holding "<client id>
// <token> <ms>": the Redis client id of the connection that renews it, a token of this run and
// the server's time of the write. It is written at start, renewed every heartbeat_interval
// (the duty runner's first duty), lives for claim_min_idle after its last renewal, and is
// deleted at a clean stop.
// - A start that finds the name held by a live client (CLIENT LIST ID) throws ConfigError.
// - A start that finds it held by a client that is gone (its process crashed or was killed:
//   the server closed its connection), or by one that connected after the name was last
//   written (client ids start again from 1 after a server restart), takes the name at once.
// - A holder that finds, when renewing, that another process took its name (it was stopped or
//   cut off for longer than claim_min_idle) stops its consumer, whose run() then throws
//   ConfigError: two processes never go on sharing a name.
// - A user whose ACL does not reach the key, or may not run CLIENT LIST (set up before this
//   existed), runs without the check, with a warning that says what to grant.
// - A consumer given no name takes the lowest "<host>-<n>" whose key no live client holds, so
//   a worker restarted after a crash replays its own pending entries at once. It reads the
//   names in one pass and looks at their holders together (free_slots), so the Nth worker of a
//   host starts as soon as the second. Whether a holder is live is wire/name_holder.hpp's one
//   check, which the Inspector makes too. When which names
//   are free cannot be told (the ACL, as above), it keeps its unique name (unique_consumer_name).
// A duty of partition 0's duty runner (during shutdown too). Talks to: Redis only.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "duties.hpp"
#include "wire/name_holder.hpp"

namespace streamq::detail {

class NameLock final : public Duty {
 public:
  /// `on_lost` runs on the duty thread when another process took the name.
  NameLock(Shared& shared, std::function<void()> on_lost);

  /// At start, on a connected `conn`: takes the name (Shared::consumer_name), or throws
  /// ConfigError when a live process holds it. A consumer given no name (an empty
  /// opt.consumer_name) takes the lowest free "<host>-<n>" instead, and sets
  /// Shared::consumer_name to it. When the server refuses the write for now (OOM: a full
  /// server), the consumer starts anyway (a consumer given no name under its unique name) and
  /// the duty runner takes the name once it can.
  void claim(Connection& conn);
  /// At the end of a clean stop: deletes the key if it is still this run's. Never throws.
  void release(Connection& conn) noexcept;
  /// Whether another process took the name while this one ran.
  bool lost() const noexcept { return lost_.load(); }
  /// The message run() throws when lost().
  const std::string& lost_message() const noexcept { return lost_reason_; }

  std::string_view name() const noexcept override { return "name lock"; }
  Clock::time_point next() const override { return next_; }
  void tick(ScriptRunner& scripts, Clock::time_point now) override;
  bool during_shutdown() const noexcept override { return true; }

 private:
  /// Another process's hold of the name: its value ("<client id> <token> <ms written>") and
  /// the server's time.
  struct Holder {
    std::string value;
    std::int64_t now_ms = 0;
  };
  /// What a try to take the current name came to.
  enum class Take {
    taken,      // this run holds it
    in_use,     // a live process holds it (live_client_ says which)
    unknown,    // the ACL user cannot tell (unknown_why_ says why); not taken
    contended,  // other processes took and dropped it while this one tried
  };

  /// Runs the name script with this connection's client id; nullopt when done.
  std::optional<Holder> call(ScriptRunner& scripts, const char* mode, const std::string& found = {});
  /// Takes the current name unless a live process holds it. `must_know`: a holder whose
  /// liveness cannot be told is left alone (Take::unknown) instead of taken over.
  Take try_take(Connection& conn, bool must_know);
  /// try_take for a given name: ConfigError when it is in use.
  void try_claim(Connection& conn);
  /// For a consumer given no name: the lowest free "<host>-<n>", else the unique name.
  void claim_free_slot(Connection& conn);
  /// Goes by `name` (Shared::consumer_name and the key).
  void rename(std::string name);
  /// "consumer_name \"...\" (group ... of ...)", for messages.
  std::string who() const;
  /// Marks the name lost (`why` is what run() throws) and stops the consumer.
  void lose(std::string why);
  /// Whether each holder's process is still there (wire/name_holder.hpp), by the server's time
  /// `now_ms` of the values: every holder looked at at once, and a holder found live below the
  /// lowest one gone looked at again (all at once) until it has been live kLiveChecks times.
  /// Sets unknown_why_ when this user may not look.
  std::vector<HolderLook> look_until_sure(Connection& conn, const std::vector<NameHolder>& holders,
                                          std::int64_t now_ms);
  /// For claim_free_slot: the names "<host>-<n>" worth trying, lowest first: those no live
  /// process holds below the lowest free one, then every one from it on, found in one pass (the
  /// values in one pipeline, their holders looked at at once). nullopt when which are free
  /// cannot be told (unknown_why_ says why).
  std::optional<std::vector<std::string>> free_slots(Connection& conn, const std::string& host);

  Shared& s_;
  const bool chosen_here_;         // the consumer was given no name: claim() chooses one
  const std::string unique_name_;  // its name until then, and when none can be chosen
  std::string key_;
  const std::string token_;
  std::function<void()> on_lost_;
  Clock::time_point next_{};
  bool held_ = false;           // claimed (false: not yet, or the ACL user cannot reach the key)
  bool claim_pending_ = false;  // the start could not write it (a full server): tick() claims it
  bool full_logged_ = false;    // a refused renewal was logged
  std::atomic<bool> lost_{false};
  std::string lost_reason_;  // written before lost_ is set
  std::string live_client_;  // the live holder found by claim(), for its message
  std::string unknown_why_;  // why a holder's liveness, or the key, could not be read
};

}  // namespace streamq::detail
