// SPDX-License-Identifier: MIT
// One Producer shared by every thread of a service: overlapping calls, pipelined together on one
// connection, each caller answered on its own (its id, or its own refusal), through a restart.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "redis_server.hpp"
#include "wire/codec.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

/// Runs `body(thread index)` on `threads` threads at once (they start together) and joins them.
void on_threads(int threads, const std::function<void(int)>& body) {
  std::atomic<int> ready{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < threads) std::this_thread::yield();
      body(t);
    });
  }
  for (auto& th : pool) th.join();
}

class SharedProducerTest : public ::testing::Test {
 protected:
  RedisServer server{RedisServerOptions{.appendonly = true}};
  Client client{server.url()};
  std::string stream = unique_key();

  ProducerOptions options() const {
    return {.connection = {.url = server.url(), .client_name = "shared-producer"},
            .stream = stream,
            .max_len = 1'000'000};
  }

  /// How many connections named `name` the server has.
  int connections_named(const std::string& name) {
    std::istringstream list{std::string(client.cmd({"CLIENT", "LIST"}).view().check().str())};
    int n = 0;
    for (std::string line; std::getline(list, line);) {
      if (line.find(" name=" + name + " ") != std::string::npos) ++n;
    }
    return n;
  }

  /// The task ids of the stream's entries.
  std::vector<std::string> ids_in_stream() {
    std::vector<std::string> ids;
    for (const auto& [entry, fields] : client.xrange(stream)) ids.push_back(Client::get(fields, "task_id"));
    return ids;
  }

  /// On this thread (the server dies with the thread that started it: PR_SET_PDEATHSIG), while
  /// `callers` call: the server is killed (kill -9) and restarted, `restarted` set, `callers` joined.
  void kill_and_restart_the_server(std::atomic<bool>& restarted, std::thread& callers) {
    std::this_thread::sleep_for(300ms);
    server.kill9();
    server.restart();
    restarted = true;
    callers.join();
  }
  /// Each task of the stream is there once, and each of `acknowledged` is there.
  void expect_each_in_the_stream_once(const std::vector<std::string>& acknowledged) {
    const std::vector<std::string> stored = ids_in_stream();
    const std::set<std::string> in_stream(stored.begin(), stored.end());
    EXPECT_EQ(in_stream.size(), stored.size()) << "a task in the stream twice";
    std::size_t lost = 0;
    for (const auto& id : acknowledged) lost += in_stream.count(id) == 0 ? 1 : 0;
    EXPECT_EQ(lost, 0u) << "of " << acknowledged.size() << " acknowledged enqueues";
  }
  /// Eight threads enqueue on one Producer while the server is killed (kill -9) and restarted:
  /// no enqueue the producer acknowledged is lost, and none is written twice.
  void restart_under_concurrent_callers() {
    ProducerOptions o = options();
    o.connection.socket_timeout = 2s;
    Producer producer(o);
    constexpr int kThreads = 8;
    std::atomic<bool> stop{false};
    std::atomic<int> answered_after_restart{0};
    std::atomic<bool> restarted{false};
    std::mutex m;
    std::vector<std::string> acknowledged;
    std::atomic<int> errors{0};
    std::thread callers([&] {
      on_threads(kThreads, [&](int) {
        while (!stop.load()) {
          try {
            std::string id = producer.enqueue("job", R"({"n":1})");
            std::lock_guard lock(m);
            acknowledged.push_back(std::move(id));
          } catch (const ConnectionError&) {  // TimeoutError too: the outcome is unknown
            errors.fetch_add(1);
          } catch (const ReplyError& e) {  // a server still loading its data refuses the session: LOADING
            EXPECT_EQ(e.prefix(), "LOADING") << e.what();
            errors.fetch_add(1);
          }
          if (restarted.load() && answered_after_restart.fetch_add(1) > 2000) stop = true;
        }
      });
    });
    kill_and_restart_the_server(restarted, callers);
    expect_each_in_the_stream_once(acknowledged);
    EXPECT_GT(errors.load(), 0) << "the restart was not seen by any caller";
    EXPECT_GT(acknowledged.size(), 2000u);
  }
};

TEST_F(SharedProducerTest, SixteenThreadsEnqueueOnOneProducerOverOneConnection) {
  Producer producer(options());
  constexpr int kThreads = 16;
  constexpr int kEach = 1000;
  std::vector<std::vector<std::string>> ids(kThreads);
  std::atomic<int> failures{0};
  on_threads(kThreads, [&](int t) {
    for (int i = 0; i < kEach; ++i) {
      try {
        ids[static_cast<std::size_t>(t)].push_back(
            producer.enqueue("count", nlohmann::json{{"thread", t}, {"i", i}}));
      } catch (const Error&) {
        failures.fetch_add(1);
      }
    }
  });
  EXPECT_EQ(failures.load(), 0);
  std::multiset<std::string> returned;
  for (const auto& v : ids) returned.insert(v.begin(), v.end());
  ASSERT_EQ(returned.size(), std::size_t{kThreads * kEach});
  EXPECT_EQ(std::set<std::string>(returned.begin(), returned.end()).size(), returned.size())
      << "an id was returned twice";
  const std::vector<std::string> stored = ids_in_stream();
  EXPECT_EQ(std::multiset<std::string>(stored.begin(), stored.end()), returned)
      << "every task in the stream once, and only those";
  // The calls of one thread land in the order it made them.
  for (int t = 0; t < kThreads; ++t) {
    std::vector<std::string> order;
    for (const auto& id : stored) {
      if (std::find(ids[static_cast<std::size_t>(t)].begin(), ids[static_cast<std::size_t>(t)].end(), id) !=
          ids[static_cast<std::size_t>(t)].end()) {
        order.push_back(id);
      }
    }
    EXPECT_EQ(order, ids[static_cast<std::size_t>(t)]) << "thread " << t;
  }
  EXPECT_EQ(connections_named("shared-producer"), 1);
}

// Each thread's calls are written in the order it made them, blocking and asynchronous ones
// interleaved (docs/producer.md). Eight threads alternate enqueue and enqueue_async on one
// Producer; each task carries its thread and its place, and the stream is read back per thread.
// (Before merging moved into the connection's queue, 33-640 of 32,000 landed out of order: an
// asynchronous call i after the same thread's blocking call i+1.)
TEST_F(SharedProducerTest, EachThreadsBlockingAndAsynchronousCallsAreWrittenInTheOrderItMadeThem) {
  Producer producer(options());
  constexpr int kThreads = 8;
  constexpr int kEach = 4000;
  std::atomic<int> answered{0};
  std::atomic<int> failures{0};
  on_threads(kThreads, [&](int t) {
    for (int i = 0; i < kEach; ++i) {
      const nlohmann::json payload{{"t", t}, {"i", i}};
      if (i % 2 == 0) {
        producer.enqueue_async("ordered", payload, {},
                               [&](const std::exception_ptr& error, const std::string&) {
                                 if (error) failures.fetch_add(1);
                                 answered.fetch_add(1);
                               });
      } else {
        try {
          producer.enqueue("ordered", payload);
        } catch (const Error&) {
          failures.fetch_add(1);
        }
        answered.fetch_add(1);
      }
    }
  });
  ASSERT_TRUE(wait_until([&] { return answered.load() == kThreads * kEach; }, 60s)) << answered.load();
  EXPECT_EQ(failures.load(), 0);
  std::vector<int> last(kThreads, -1);
  int inversions = 0;
  int read = 0;
  for (const auto& [entry, fields] : client.xrange(stream)) {
    const auto payload = nlohmann::json::parse(Client::get(fields, "payload"));
    const auto t = payload.at("t").get<std::size_t>();
    const int i = payload.at("i").get<int>();
    if (i < last.at(t)) ++inversions;
    last[t] = std::max(last[t], i);
    ++read;
  }
  EXPECT_EQ(read, kThreads * kEach);
  EXPECT_EQ(inversions, 0) << "tasks written after a later call of their own thread";
}

TEST_F(SharedProducerTest, ARefusedCallAmongConcurrentOnesFailsAlone) {
  Producer producer(options());
  producer.enqueue("job", R"({})", {.unique_for = 60s, .unique_key = "taken"});
  constexpr int kThreads = 8;
  constexpr int kEach = 300;
  std::atomic<int> duplicates{0};
  std::atomic<int> written{0};
  std::atomic<int> other{0};
  on_threads(kThreads, [&](int t) {
    for (int i = 0; i < kEach; ++i) {
      // Every other call of thread 0 is refused; its neighbours' calls, in the same writes, are not.
      const bool refused = t == 0 && i % 2 == 0;
      try {
        if (refused) {
          producer.enqueue("job", R"({})", {.unique_for = 60s, .unique_key = "taken"});
        } else {
          producer.enqueue("job", R"({})");
        }
        written.fetch_add(1);
      } catch (const DuplicateTaskError&) {
        duplicates.fetch_add(refused ? 1 : 1000000);
      } catch (const Error&) {
        other.fetch_add(1);
      }
    }
  });
  EXPECT_EQ(duplicates.load(), kEach / 2);
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(written.load(), kThreads * kEach - kEach / 2);
  EXPECT_EQ(client.integer({"XLEN", stream}), 1 + kThreads * kEach - kEach / 2);
}

/// Calls of the enqueue script the server ran so far (INFO commandstats).
std::int64_t script_calls(Client& client) {
  const std::string info{client.cmd({"INFO", "commandstats"}).view().check().str()};
  std::int64_t calls = 0;
  for (const std::string name : {"cmdstat_evalsha:calls=", "cmdstat_eval:calls="}) {
    if (const auto at = info.find(name); at != std::string::npos)
      calls += std::stoll(info.substr(at + name.size()));
  }
  return calls;
}

// Asynchronous enqueues in flight together are merged into script calls of many tasks (in the
// shared connection's queue, MergedEnqueue); the queue's bound still admits each task on its own, in order,
// as calls of their own would be, and each completion gets its own id or its own QueueFullError.
TEST_F(SharedProducerTest, MergedAsynchronousEnqueuesAreEachAdmittedOrRefusedOnTheirOwn) {
  ProducerOptions o = options();
  o.max_len = 1000;
  Producer producer(o);
  client.cmd({"CONFIG", "RESETSTAT"}).view().check();
  constexpr int kThreads = 4;
  constexpr int kEach = 500;
  std::mutex m;
  std::vector<std::string> returned;
  std::atomic<int> answered{0}, refused{0}, other{0};
  on_threads(kThreads, [&](int) {
    for (int i = 0; i < kEach; ++i) {
      producer.enqueue_async("job", R"({})", {}, [&](std::exception_ptr error, const std::string& id) {
        if (!error) {
          std::lock_guard lock(m);
          returned.push_back(id);
        } else {
          try {
            std::rethrow_exception(error);
          } catch (const QueueFullError& e) {
            if (std::string(e.what()).find("would exceed max_len 1000") == std::string::npos)
              other.fetch_add(1);
            refused.fetch_add(1);
          } catch (...) {
            other.fetch_add(1);
          }
        }
        answered.fetch_add(1);
      });
    }
  });
  ASSERT_TRUE(wait_until([&] { return answered.load() == kThreads * kEach; }, 20s)) << answered.load();
  const std::int64_t calls = script_calls(client);
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(returned.size(), 1000u);  // exactly the bound: none refused while there was room
  EXPECT_EQ(refused.load(), kThreads * kEach - 1000);
  std::vector<std::string> stored = ids_in_stream();
  std::sort(returned.begin(), returned.end());
  std::sort(stored.begin(), stored.end());
  EXPECT_EQ(stored, returned);  // every id answered once, every task stored once
  EXPECT_LT(calls, kThreads * kEach) << "no call was merged";
  std::printf("%d asynchronous enqueues from %d threads in %lld script calls\n", kThreads * kEach, kThreads,
              static_cast<long long>(calls));
}

// A merged call Redis refuses whole (here its stream is a string) fails each of its tasks with
// that refusal, as calls of their own would fail.
TEST_F(SharedProducerTest, AMergedCallRefusedWholeFailsEachOfItsTasks) {
  client.cmd({"SET", stream, "not a stream"}).view().check();
  Producer producer(options());
  // The errors are looked at in the completions: an exception object read on another thread
  // after its future handed it over is freed by whichever thread drops it last, through
  // libstdc++'s reference count, which ThreadSanitizer does not see.
  std::mutex m;
  std::vector<std::string> prefixes;
  std::atomic<int> answered{0};
  for (int i = 0; i < 200; ++i) {
    producer.enqueue_async("job", R"({})", {}, [&](std::exception_ptr error, const std::string&) {
      std::string prefix = "written into a string";
      try {
        if (error) std::rethrow_exception(error);
      } catch (const ReplyError& e) {
        prefix = e.prefix();
      } catch (...) {
        prefix = "another error";
      }
      std::lock_guard lock(m);
      prefixes.push_back(prefix);
      answered.fetch_add(1);
    });
  }
  ASSERT_TRUE(wait_until([&] { return answered.load() == 200; }, 10s)) << answered.load();
  std::lock_guard lock(m);
  EXPECT_EQ(prefixes, std::vector<std::string>(200, "WRONGTYPE"));
}

// Merged tasks keep their place: a thread's blocking call of another kind (a tracked task, a
// script call of its own) made after its asynchronous merged ones is written after them.
TEST_F(SharedProducerTest, ACallMadeAfterMergedOnesIsWrittenAfterThem) {
  Producer producer(options());
  std::atomic<int> answered{0};
  for (int i = 0; i < 3000; ++i) {
    producer.enqueue_async("early", R"({})", {},
                           [&](std::exception_ptr, const std::string&) { answered.fetch_add(1); });
  }
  const std::string last = producer.enqueue("late", R"({})", {.retention = Retention{}});
  ASSERT_TRUE(wait_until([&] { return answered.load() == 3000; }, 20s)) << answered.load();
  const std::vector<std::string> ids = ids_in_stream();
  ASSERT_EQ(ids.size(), 3001u);
  EXPECT_EQ(ids.back(), last);
}

// A merged task is written with every field it was given: its deadline included, a string the
// merged call views (before it viewed copies of the tasks freed before the call was sent).
TEST_F(SharedProducerTest, MergedTasksAreWrittenWithTheirDeadlines) {
  Producer producer(options());
  const auto base =
      std::chrono::time_point_cast<std::chrono::milliseconds>(std::chrono::system_clock::now()) + 1h;
  std::vector<std::future<std::string>> written;
  std::map<std::string, std::string> deadline_of;
  for (int i = 0; i < 500; ++i) {
    const auto deadline = base + std::chrono::milliseconds(i);
    written.push_back(producer.enqueue_async("job", nlohmann::json{{"i", i}}.dump(), {.deadline = deadline}));
  }
  for (int i = 0; i < 500; ++i) {
    deadline_of[written[static_cast<std::size_t>(i)].get()] =
        std::to_string((base + std::chrono::milliseconds(i)).time_since_epoch().count());
  }
  const auto entries = client.xrange(stream);
  ASSERT_EQ(entries.size(), 500u);
  for (const auto& [entry, fields] : entries) {
    const std::string id = Client::get(fields, "task_id");
    ASSERT_EQ(deadline_of.count(id), 1u) << id;
    EXPECT_EQ(Client::get(fields, "deadline"), deadline_of[id]) << id;
  }
}

// A completion that throws loses only its own answer: the others merged with it still run.
TEST_F(SharedProducerTest, AThrowingCompletionOfAMergedCallLosesOnlyItsOwnAnswer) {
  Producer producer(options());
  std::atomic<int> ran{0};
  for (int i = 0; i < 1000; ++i) {
    producer.enqueue_async("job", R"({})", {}, [&](std::exception_ptr, const std::string&) {
      ran.fetch_add(1);
      throw std::runtime_error("a completion that throws");
    });
  }
  ASSERT_TRUE(wait_until([&] { return ran.load() == 1000; }, 20s)) << ran.load();
  EXPECT_EQ(client.integer({"XLEN", stream}), 1000);
}

TEST_F(SharedProducerTest, ARestartUnderConcurrentCallersLosesNoAcknowledgedEnqueue) {
  restart_under_concurrent_callers();
}

// With appendfsync everysec (a write is in the kernel's page cache before its reply, fsynced
// within a second): a crash of the Redis process, not of the machine, loses nothing either.
TEST_F(SharedProducerTest, ARestartUnderConcurrentCallersLosesNoAcknowledgedEnqueueWithEverysec) {
  server.restart({"--appendfsync", "everysec"});
  ASSERT_EQ(Client(server.url()).cmd({"CONFIG", "GET", "appendfsync"}).view().check()[1].str(), "everysec");
  restart_under_concurrent_callers();
}

// The same kill -9 and restart under enqueue_async calls from several threads, most of them
// merged: every call is answered, once, with its id or with its own error (what the connection
// met), and no task an answer acknowledged is lost.
TEST_F(SharedProducerTest,
       ARestartUnderAsynchronousCallersAnswersEveryCallOnceAndLosesNoAcknowledgedEnqueue) {
  ProducerOptions o = options();
  o.connection.socket_timeout = 2s;
  constexpr int kThreads = 4;
  constexpr int kMostUnanswered = 1000;
  std::mutex m;
  std::vector<std::string> acknowledged;
  std::map<int, int> answers;  // per call (by the order it was made in): how often answered
  std::vector<std::string> unexpected;
  std::atomic<int> issued{0}, answered{0}, errors{0}, answered_after_restart{0};
  std::atomic<bool> stop{false}, restarted{false};
  {
    Producer producer(o);
    std::thread callers([&] {
      on_threads(kThreads, [&](int) {
        while (!stop.load()) {
          while (issued.load() - answered.load() > kMostUnanswered) std::this_thread::sleep_for(1ms);
          const int call = issued.fetch_add(1);
          producer.enqueue_async("job", Payload(std::string(R"({"n":1})")), {},
                                 [&, call](const std::exception_ptr& error, std::string id) {
                                   std::lock_guard lock(m);
                                   ++answers[call];
                                   if (!error) {
                                     acknowledged.push_back(std::move(id));
                                   } else {
                                     try {
                                       std::rethrow_exception(error);
                                     } catch (const ConnectionError&) {  // TimeoutError too
                                       errors.fetch_add(1);
                                     } catch (const ReplyError& e) {  // a server still loading
                                       if (e.prefix() != "LOADING") unexpected.emplace_back(e.what());
                                       errors.fetch_add(1);
                                     } catch (const std::exception& e) {
                                       unexpected.emplace_back(e.what());
                                     }
                                   }
                                   answered.fetch_add(1);
                                 });
          if (restarted.load() && answered_after_restart.fetch_add(1) > 20000) stop = true;
        }
      });
    });
    kill_and_restart_the_server(restarted, callers);
    EXPECT_TRUE(wait_until([&] { return answered.load() == issued.load(); }, 30s))
        << answered.load() << " of " << issued.load() << " answered";
  }
  std::lock_guard lock(m);
  EXPECT_EQ(answered.load(), issued.load()) << "the Producer went with calls unanswered";
  ASSERT_EQ(answers.size(), static_cast<std::size_t>(issued.load()));
  for (const auto& [call, times] : answers) EXPECT_EQ(times, 1) << "call " << call;
  EXPECT_TRUE(unexpected.empty()) << unexpected.front();
  expect_each_in_the_stream_once(acknowledged);
  EXPECT_GT(errors.load(), 0) << "the restart was not seen by any caller";
  EXPECT_GT(acknowledged.size(), 20000u);
}

TEST_F(SharedProducerTest, AsynchronousEnqueuesFromManyThreadsAreEachAnsweredOnceOnTheCompletionThread) {
  Producer producer(options());
  constexpr int kThreads = 4;
  constexpr int kEach = 2000;
  std::mutex m;
  std::vector<std::string> ids;
  std::set<std::thread::id> completion_threads;
  std::set<std::thread::id> callers;
  std::atomic<int> answered{0};
  std::atomic<int> errors{0};
  on_threads(kThreads, [&](int t) {
    {
      std::lock_guard lock(m);
      callers.insert(std::this_thread::get_id());
    }
    for (int i = 0; i < kEach; ++i) {
      producer.enqueue_async("count", nlohmann::json{{"thread", t}, {"i", i}}, {},
                             [&](std::exception_ptr error, std::string id) {
                               std::lock_guard lock(m);
                               completion_threads.insert(std::this_thread::get_id());
                               if (error) {
                                 errors.fetch_add(1);
                               } else {
                                 ids.push_back(std::move(id));
                               }
                               answered.fetch_add(1);
                             });
    }
  });
  ASSERT_TRUE(wait_until([&] { return answered.load() == kThreads * kEach; }, 30s)) << answered.load();
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(answered.load(), kThreads * kEach) << "a completion ran twice";
  EXPECT_EQ(errors.load(), 0);
  const std::set<std::string> unique(ids.begin(), ids.end());
  EXPECT_EQ(unique.size(), ids.size());
  const std::vector<std::string> stored = ids_in_stream();
  EXPECT_EQ(std::set<std::string>(stored.begin(), stored.end()), unique);
  EXPECT_EQ(stored.size(), ids.size());
  ASSERT_EQ(completion_threads.size(), 1u) << "every completion on the one completion thread";
  EXPECT_EQ(callers.count(*completion_threads.begin()), 0u) << "never inside a caller's call";
  EXPECT_EQ(connections_named("shared-producer"), 1);
}

TEST_F(SharedProducerTest, TheFutureOfAnAsynchronousEnqueueHoldsItsIdOrItsOwnError) {
  Producer producer(options());
  std::future<std::string> written = producer.enqueue_async("job", R"({"a":1})");
  std::future<std::string> not_json = producer.enqueue_async("job", "{not json");
  std::future<std::string> first =
      producer.enqueue_async("job", R"({})", {.unique_for = 60s, .unique_key = "one"});
  std::future<std::string> second =
      producer.enqueue_async("job", R"({})", {.unique_for = 60s, .unique_key = "one"});
  const std::string id = written.get();
  EXPECT_EQ(ids_in_stream().front(), id);
  EXPECT_THROW(not_json.get(), PayloadError);
  const std::string holder = first.get();
  try {
    second.get();
    ADD_FAILURE() << "the second task with the unique key was written";
  } catch (const DuplicateTaskError& e) {
    EXPECT_EQ(e.existing_task_id(), holder);
  }
  EXPECT_EQ(client.integer({"XLEN", stream}), 2);
}

TEST_F(SharedProducerTest, AnAsynchronousBatchRefusedPartWayTellsWhichTasksWereWritten) {
  ProducerOptions o = options();
  o.max_len = 100;
  Producer producer(o);
  std::vector<TaskSpec> tasks;
  for (int i = 0; i < 150; ++i) tasks.push_back({.task_type = "job", .payload = nlohmann::json{{"i", i}}});
  std::future<std::vector<std::string>> f = producer.enqueue_batch_async(tasks);
  try {
    f.get();
    ADD_FAILURE() << "150 tasks fitted in a queue of 100";
  } catch (const QueueFullError& e) {
    EXPECT_EQ(e.accepted(), 64u);
    ASSERT_EQ(e.batch_ids().size(), 150u);
    EXPECT_EQ(ids_in_stream(), std::vector<std::string>(e.batch_ids().begin(), e.batch_ids().begin() + 64));
  }
  const std::vector<std::string> ids =
      producer.enqueue_batch_async(std::vector<TaskSpec>(tasks.begin(), tasks.begin() + 30)).get();
  EXPECT_EQ(ids.size(), 30u);
  // What the batch's commands viewed (its tasks, their time) lived until they were written.
  const auto entries = client.xrange(stream);
  const auto& last = entries.back().second;
  EXPECT_EQ(Client::get(last, "task_id"), ids.back());
  EXPECT_EQ(Client::get(last, "payload"), R"({"i":29})");
  EXPECT_TRUE(detail::parse_timestamp(Client::get(last, "created_at")).has_value())
      << Client::get(last, "created_at");
  EXPECT_EQ(client.integer({"XLEN", stream}), 94);
  EXPECT_TRUE(producer.enqueue_batch_async({}).get().empty());
}

TEST_F(SharedProducerTest, ADestroyedProducerFirstAnswersItsQueuedAsynchronousCalls) {
  std::atomic<int> answered{0};
  std::atomic<int> written{0};
  {
    Producer producer(options());
    for (int i = 0; i < 3000; ++i) {
      producer.enqueue_async("job", R"({})", {}, [&](std::exception_ptr error, const std::string&) {
        written.fetch_add(error ? 0 : 1);
        answered.fetch_add(1);
      });
    }
  }
  EXPECT_EQ(answered.load(), 3000);
  EXPECT_EQ(written.load(), 3000);
  EXPECT_EQ(client.integer({"XLEN", stream}), 3000);
}

TEST_F(SharedProducerTest, ACompletionMayCallTheProducerAgain) {
  Producer producer(options());
  std::promise<std::string> chained;
  producer.enqueue_async("first", R"({})", {}, [&](std::exception_ptr error, const std::string&) {
    if (error) return chained.set_exception(error);
    try {
      chained.set_value(producer.enqueue("second", R"({})"));  // a synchronous call, from the completion
    } catch (...) {
      chained.set_exception(std::current_exception());
    }
  });
  std::future<std::string> f = chained.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(ids_in_stream().back(), f.get());
  EXPECT_EQ(client.integer({"XLEN", stream}), 2);
}

TEST_F(SharedProducerTest, CallsAnsweredNoscriptTogetherAreSentAgainAndEachAnswered) {
  Producer producer(options());
  producer.enqueue("warm", R"({})");  // the script is cached: the next calls send EVALSHA
  constexpr int kRounds = 20;
  for (int round = 0; round < kRounds; ++round) {
    client.cmd({"SCRIPT", "FLUSH"}).view().check();  // every EVALSHA written now is answered NOSCRIPT
    std::atomic<int> async_answered{0};
    std::atomic<int> failures{0};
    for (int i = 0; i < 20; ++i) {
      producer.enqueue_async("job", R"({})", {}, [&](std::exception_ptr error, const std::string&) {
        failures.fetch_add(error ? 1 : 0);
        async_answered.fetch_add(1);
      });
    }
    on_threads(4, [&](int) {
      for (int i = 0; i < 5; ++i) {
        try {
          producer.enqueue("job", R"({})");
        } catch (const Error&) {
          failures.fetch_add(1);
        }
      }
    });
    ASSERT_TRUE(wait_until([&] { return async_answered.load() == 20; }, 10s))
        << "round " << round << ": " << async_answered.load() << " of 20 asynchronous calls answered";
    EXPECT_EQ(failures.load(), 0) << "round " << round;
  }
  EXPECT_EQ(client.integer({"XLEN", stream}), 1 + kRounds * 40);
}

TEST_F(SharedProducerTest, AnInspectorAndAStatsReaderAreSharedByThreads) {
  Producer producer(options());
  std::vector<TaskSpec> tasks(50, TaskSpec{.task_type = "job", .payload = R"({})"});
  const std::vector<std::string> ids = producer.enqueue_batch(tasks);
  Inspector inspector({.connection = {.url = server.url()}});
  StatsReader stats({.connection = {.url = server.url()}, .stream = stream});
  std::atomic<int> wrong{0};
  on_threads(8, [&](int t) {
    for (int i = 0; i < 40; ++i) {
      if (stats.read().length != 50) wrong.fetch_add(1);
      if (inspector.stats(stream).length != 50) wrong.fetch_add(1);
      const auto found = inspector.task(stream, ids[static_cast<std::size_t>((t * 40 + i) % 50)]);
      if (!found || found->task_id() != ids[static_cast<std::size_t>((t * 40 + i) % 50)]) wrong.fetch_add(1);
    }
  });
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace streamq::test
