// SPDX-License-Identifier: MIT
#include "fetcher.hpp"

#include <algorithm>
#include <tuple>

#include "completer.hpp"
#include "log.hpp"
#include "pending.hpp"
#include "redis/error_code.hpp"
#include "streamq/errors.hpp"

namespace streamq::detail {
namespace {

constexpr std::size_t kDeliverChunk = 16;

}  // namespace

void ensure_group(Connection& conn, const std::string& stream, const std::string& group) {
  const Reply r = conn.command(Argv{"XGROUP", "CREATE", stream, group, "0", "MKSTREAM"});
  if (!r.view().is_error() || r.view().error().starts_with("BUSYGROUP")) return;
  // A full server (noeviction) refuses XGROUP CREATE with OOM before it sees that the group
  // exists; then workers could never start to drain the queue that filled it. Look, with
  // XPENDING (which the worker's ACL role has): NOGROUP if the group does not exist.
  if (error_code(r.view().error()) == "OOM" &&
      conn.command(Argv{"XPENDING", stream, group}).view().is_array()) {
    return;
  }
  r.view().check();
}

bool ensure_only_group(Connection& conn, const std::vector<QueueKeys>& streams, const std::string& group,
                       bool create) {
  ScriptRunner scripts(conn);
  Argv argv = scripts.begin(ScriptId::group, static_cast<int>(streams.size()));
  for (const QueueKeys& level : streams) argv.add(level.stream);
  argv.add(group).add(create ? "create" : "check");
  const Reply r = scripts.call(ScriptId::group, argv);
  const ReplyView v = r.view();
  if (v.is_error()) {
    // As in ensure_group: a full server refuses the write, and existing groups will do.
    if (error_code(v.error()) == "OOM" &&
        std::all_of(streams.begin(), streams.end(), [&](const QueueKeys& level) {
          return conn.command(Argv{"XPENDING", level.stream, group}).view().is_array();
        })) {
      return true;
    }
    v.check();
  }
  const std::string_view what = v.check()[0].str();
  if (what == "other") {
    const std::string other(v[1].str());
    const std::string stream(v[2].str());
    throw ConfigError("stream \"" + stream + "\" has consumer group \"" + other + "\" besides \"" + group +
                      "\": streamq runs one group per queue (a success deletes its entry, so a second group "
                      "would never see the tasks the first finished); use one group, or remove the other "
                      "(XGROUP DESTROY " +
                      stream + " " + other + ")");
  }
  return what != "unchecked";
}

Fetcher::Fetcher(Shared& shared, std::function<void()> on_first_replay)
    : s_(shared),
      on_first_replay_(std::move(on_first_replay)),
      conn_(shared.connection),
      scripts_(conn_),
      read_batch_(static_cast<std::size_t>(shared.opt.prefetch - shared.opt.prefetch / 2)),
      order_(shared.opt.priority_weights),
      dispatch_(shared, scripts_) {
  // Every connect goes through main()'s loop top, which replays this consumer's pending
  // entries on it and refreshes the id CLIENT UNBLOCK uses; none may happen inside a send.
  conn_.set_reconnect_on_use(false);
}

Fetcher::~Fetcher() {
  request_stop();
  join();
}

void Fetcher::start() {
  thread_ = std::jthread([this](const std::stop_token& stop) { main(stop); });
}

void Fetcher::request_stop() noexcept { thread_.request_stop(); }

void Fetcher::join() {
  if (thread_.joinable()) thread_.join();
}

bool Fetcher::pause(const std::stop_token& stop, Millis delay) {
  std::mutex m;
  std::condition_variable_any cv;
  std::unique_lock lock(m);
  return !cv.wait_for(lock, stop, delay, [] { return false; }) && !stop.stop_requested();
}

void Fetcher::replay_own(const std::stop_token& stop) {
  // Every level, the most important first; one line for them all once they are delivered.
  std::size_t replayed = 0;
  std::string streams;
  const auto say = [&] {
    if (replayed == 0) return;
    log(LogLevel::info, "replaying " + std::to_string(replayed) + " pending entries of consumer " +
                            s_.consumer_name + " (" + streams + ")");
  };
  for (std::uint16_t level = 0; level < s_.stream_count() && !stop.stop_requested(); ++level) {
    std::string cursor = "0-0";
    bool level_named = false;  // in `streams`
    while (!stop.stop_requested()) {
      // Within the prefetch, like any read: a long own pending list is replayed as room frees.
      if (!s_.inflight.wait_for_room(stop)) return say();
      PendingBatch batch;
      try {
        batch = fetch_pending(s_, scripts_, level, PendingMode::own, cursor, read_batch_);
      } catch (const ReplyError& e) {
        // The group is gone (a Redis that came back empty, a deleted stream): so is its pending
        // list. Recreate it at 0 and read on; nothing of this consumer is left to replay there.
        if (std::string_view(e.what()).find("NOGROUP") == std::string_view::npos) throw;
        log(LogLevel::warning, "consumer group " + s_.opt.group + " on " + s_.keys(level).stream +
                                   " is gone (" + e.what() + "); recreating it");
        ensure_group(conn_, s_.keys(level).stream, s_.opt.group);
        break;
      }
      if (const std::size_t n = s_.inflight.deliver(batch.works); n > 0) {
        Metrics::add(s_.metrics.replayed, n);
        if (!level_named) streams += (replayed == 0 ? "" : ", ") + s_.keys(level).stream;
        level_named = true;
        replayed += n;
      }
      if (batch.cursor == "0-0") break;
      cursor = std::move(batch.cursor);
    }
  }
  say();
  if (stop.stop_requested()) return;
  if (!replayed_once_.exchange(true)) on_first_replay_();
}

void Fetcher::append_read(std::vector<Argv>& argvs, const std::vector<std::uint16_t>& levels,
                          std::size_t count, std::optional<Millis> block) const {
  Argv read{"XREADGROUP", "GROUP", s_.opt.group, s_.consumer_name, "COUNT"};
  read.add(static_cast<std::int64_t>(count));
  if (block) read.add("BLOCK").add(static_cast<std::int64_t>(block->count()));
  read.add("STREAMS");
  for (const std::uint16_t l : levels) read.add(s_.keys(l).stream);
  for (std::size_t i = 0; i < levels.size(); ++i) read.add(">");
  argvs.push_back(std::move(read));
}

bool Fetcher::send(std::size_t in_hand) {
  // Nothing in flight: the moment to ask whether the master is still this one (a sentinel
  // URL). If not, nothing is sent; main()'s loop top connects to the new one first.
  if (requests_.empty()) {
    conn_.recheck_master();
    if (!conn_.connected()) return false;
  }
  Request req;
  std::vector<EntryKey> acks;
  // Ahead of a batch in hand, read only a whole batch; a smaller read waits for the next turn
  // (successes taken now still go out). A paused queue is not read at all.
  std::size_t room = s_.inflight.take_acks(acks, reserved_ + in_hand, in_hand > 0);
  if (s_.pause.paused()) room = 0;
  if (acks.empty() && room == 0) return false;
  // One MULTI per level with successes; usually all of them are of one level.
  if (!acks.empty()) {
    const std::uint16_t first = acks.front().stream;
    if (std::all_of(acks.begin(), acks.end(), [&](const EntryKey& k) { return k.stream == first; })) {
      req.blocks.push_back(AckBlock{std::move(acks), {}});
    } else {
      for (std::uint16_t level = 0; level < s_.stream_count(); ++level) {
        AckBlock b;
        for (EntryKey& k : acks) {
          if (k.stream == level) b.acks.push_back(std::move(k));
        }
        if (!b.acks.empty()) req.blocks.push_back(std::move(b));
      }
    }
  }
  // The views below point into the blocks' vectors, whose buffers stay put from here on.
  std::vector<Argv> argvs;
  const bool transaction = acks_in_multi(s_);  // one mode for the whole pipeline
  for (AckBlock& b : req.blocks) {
    std::vector<std::string_view> ids;
    ids.reserve(b.acks.size());
    for (const EntryKey& k : b.acks) ids.push_back(k.id);
    b.at = append_acks(argvs, s_, b.acks.front().stream, ids, {}, {}, transaction);
  }
  if (room > 0) {
    req.plan = order_.plan(room);
    if (dispatch_.wanted(std::chrono::steady_clock::now())) {
      argvs.push_back(dispatch_.call(req.plan.most()));
      req.dispatched = true;
    }
    if (!req.plan.probe.empty()) append_read(argvs, req.plan.probe, 1, std::nullopt);
    append_read(
        argvs, req.plan.main, req.plan.count,
        req.plan.block ? std::optional(dispatch_.block_for(s_.opt.block, req.dispatched)) : std::nullopt);
    req.count = req.plan.most();
  }
  reserved_ += req.count;
  requests_.push_back(std::move(req));
  for (const Argv& argv : argvs) conn_.append(argv);
  conn_.flush();
  return true;
}

void Fetcher::drop_requests() noexcept {
  // Written or not: the completer writes the successes (again). A read that was served is
  // in this consumer's pending list; the replay after the reconnect runs it.
  for (Request& req : requests_) {
    for (AckBlock& b : req.blocks) s_.inflight.acks_refused(b.acks);
  }
  requests_.clear();
  reserved_ = 0;
  conn_.disconnect();
}

namespace {

/// Entries per level of one XREADGROUP reply over `levels` (nil: none), in `levels`' order.
std::vector<ReplyView> entries_by_level(const ReplyView r, const Shared& s,
                                        const std::vector<std::uint16_t>& levels) {
  std::vector<ReplyView> out(levels.size(), ReplyView(nullptr));
  if (r.is_nil()) return out;
  for (std::size_t i = 0; i < r.size(); ++i) {
    const std::string_view name = r[i][0].str();
    for (std::size_t j = 0; j < levels.size(); ++j) {
      if (s.keys(levels[j]).stream == name) out[j] = r[i][1];
    }
  }
  return out;
}

}  // namespace

bool Fetcher::receive(const std::stop_token& stop) {
  // The request stays queued until its replies are read: if the connection fails meanwhile,
  // drop_requests() still hands its successes to the completer.
  Request& req = requests_.front();
  if (!req.blocks.empty()) {
    std::vector<Reply> replies;
    for (std::size_t i = 0; i <= req.blocks.back().at.last; ++i) replies.push_back(conn_.read_reply());
    bool refused = false;
    for (AckBlock& b : req.blocks) {
      refused = refused || exec_refused(replies, b.at);
      const std::string error = acks_error(replies, b.at);
      note_acks(s_, b.at, error);
      acked(b.acks, error);
    }
    if (refused) {
      drop_requests();  // not left inside a MULTI
      return false;
    }
  }
  if (req.dispatched) dispatch_.read_reply(conn_);
  if (req.count == 0) {
    requests_.pop_front();
    return true;
  }
  const ReadPlan plan = std::move(req.plan);
  struct Read {
    Reply reply;
    const std::vector<std::uint16_t>* levels;
    std::size_t count;
    std::vector<ReplyView> entries{};
  };
  std::vector<Read> reads;
  if (!plan.probe.empty()) reads.push_back(Read{conn_.read_reply(), &plan.probe, 1});
  reads.push_back(Read{conn_.read_reply(), &plan.main, plan.count});
  reserved_ -= req.count;
  requests_.pop_front();
  // What each level brought decides the next read: tell the order before sending it.
  std::size_t n = 0;
  bool ok = true;
  const Reply* failed = nullptr;
  for (Read& read : reads) {
    const ReplyView r = read.reply.view();
    if (r.is_error()) {
      const std::string_view err = r.error();
      // (UNBLOCKED also ends a blocked read when the master turns replica: a passing state.)
      if ((!err.starts_with("NOGROUP") && !err.starts_with("UNBLOCKED")) || is_demotion_error(err)) {
        failed = &read.reply;
      } else {
        // A stream or its group was deleted: recreate the groups at 0 (once the pipeline is
        // drained) so nothing added afterwards is skipped. This is data loss someone caused; say so.
        log(LogLevel::warning, "consumer group " + s_.opt.group + " on " + s_.keys().stream +
                                   " or one of its priority levels is gone (" + std::string(err) +
                                   "); recreating it");
        group_gone_ = true;
      }
      ok = false;
      continue;
    }
    read.entries = entries_by_level(r, s_, *read.levels);
    for (std::size_t j = 0; j < read.levels->size(); ++j) {
      const std::size_t got = read.entries[j].is_array() ? read.entries[j].size() : 0;
      order_.observe((*read.levels)[j], got, read.count);
      n += got;
    }
  }
  // A full batch: ask for the next one before handing this one over, so Redis serves it
  // meanwhile. A few entries (a queue that is not backlogged): hand them over first, the
  // task's latency is what counts then.
  const bool overlap = ok && n > kDeliverChunk;
  if (overlap && !stop.stop_requested() && requests_.empty()) send(n);
  // Handed over in small chunks, most important level first, so handlers start on the first
  // entries while this thread still reads the rest.
  std::size_t done = 0;
  for (std::uint16_t level = 0; level < kLevels; ++level) {
    for (const Read& read : reads) {
      for (std::size_t j = 0; j < read.entries.size(); ++j) {
        if ((*read.levels)[j] != level || !read.entries[j].is_array()) continue;
        const ReplyView entries = read.entries[j];
        for (std::size_t i = 0; i < entries.size(); ++i) {
          works_.push_back(read_entry(entries[i], level, 1, Origin::fresh));
          ++done;
          if (works_.size() == kDeliverChunk || done == n) s_.inflight.deliver(works_);
          if (done == n) break;
        }
      }
    }
  }
  if (!works_.empty()) s_.inflight.deliver(works_);
  if (failed != nullptr) failed->view().check();  // throws, after what was read is held
  if (!ok) return false;
  if (!overlap && !stop.stop_requested() && requests_.empty()) send(0);
  return true;
}

void Fetcher::acked(std::vector<EntryKey>& acks, const std::string& error) {
  if (error.empty()) {
    Metrics::add(s_.metrics.done, acks.size());
    s_.inflight.acks_written(acks);
  } else if (is_transient_error(error)) {
    s_.inflight.acks_refused(acks);  // the completer retries them with backoff
  } else {
    log(LogLevel::error, "acknowledging " + std::to_string(acks.size()) + " completed entries: " + error +
                             "; they stay pending and will be reclaimed after claim_min_idle");
    s_.inflight.acks_written(acks);
  }
  acks.clear();
}

void Fetcher::main(const std::stop_token& stop) {
  block_sigpipe_for_this_thread();  // library code only runs on this thread
  std::uint64_t replayed_generation = 0;
  Backoff error_backoff(s_.connection.backoff_base, s_.connection.backoff_max);
  // Requests in flight are always read to the end, also when stopping: entries a served read
  // delivered must be held here, so that they are released.
  while (!stop.stop_requested() || !requests_.empty()) {
    try {
      if (!conn_.connected()) {
        conn_.connect();
        count_reconnect(conn_, s_.metrics);
        reader_.connected(conn_);
      }
      if (conn_.generation() != replayed_generation) {
        order_.reset();  // nothing is known about the levels after a reconnect
        replay_own(stop);
        replayed_generation = conn_.generation();
      }
      if (requests_.empty()) {
        if (group_gone_) {
          for (const QueueKeys& level : s_.streams) ensure_group(conn_, level.stream, s_.opt.group);
          group_gone_ = false;
        }
        if (!s_.inflight.wait_to_read(stop)) break;
        if (!send(0)) {
          // Nothing to read or acknowledge now. Paused: wait for the resume (the completer
          // writes the acknowledgements of what finishes meanwhile).
          if (s_.pause.paused() && !s_.pause.wait_resumed(stop)) break;
          continue;
        }
      }
      if (receive(stop)) {
        error_backoff.reset();
      } else {
        error_backoff.fail();
        if (requests_.empty() && !pause(stop, error_backoff.delay())) break;
      }
    } catch (const ConnectionError& e) {
      drop_requests();
      if (stop.stop_requested()) break;
      const Millis delay = conn_.backoff_delay();
      log(LogLevel::warning,
          std::string("fetcher: ") + e.what() + "; reconnecting in " + std::to_string(delay.count()) + " ms");
      if (!pause(stop, delay)) break;
    } catch (const std::exception& e) {
      // Server-side trouble (LOADING after a restart, NOPERM, a failing script): back off
      // rather than spin, and keep going.
      error_backoff.fail();
      const Millis delay = error_backoff.delay();
      log(retry_level(e),
          std::string("fetcher: ") + e.what() + "; retrying in " + std::to_string(delay.count()) + " ms");
      if (requests_.empty() && !pause(stop, delay)) break;
    }
  }
  drop_requests();
  reader_.finished();
}

}  // namespace streamq::detail
