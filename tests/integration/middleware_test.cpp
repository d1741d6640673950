// SPDX-License-Identifier: MIT
// Middleware around handlers and enqueues, in order, and the tracing hook: the producer's trace
// context reaches every attempt, and a retry's attempt links to the failed one.
#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>
#include <streamq/tracing.hpp>

#include "consumer_fixture.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

class MiddlewareTest : public ConsumerTest {
 protected:
  std::mutex m;
  std::vector<std::string> trail;
  void note(const std::string& s) {
    std::lock_guard lock(m);
    trail.push_back(s);
  }
};

TEST_F(MiddlewareTest, ConsumerMiddlewareRunsAroundTheHandlerInTheOrderAdded) {
  producer().enqueue("t", "{}");
  RunningConsumer worker(options(), [&](Consumer& c) {
    c.use([&](const Task& task, const Next& next) {
      note("a in " + task.type());
      next();
      note("a out");
    });
    c.use([&](const Task&, const Next& next) {
      note("b in");
      next();
      note("b out");
    });
    c.on("t", [&](const Task&) { note("handler"); });
  });
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().done == 1; }, 10s));
  worker.stop();
  EXPECT_EQ(trail, (std::vector<std::string>{"a in t", "b in", "handler", "b out", "a out"}));
}

TEST_F(MiddlewareTest, AMiddlewareMapsErrorsAndMayStopTheChain) {
  Producer p = producer();
  p.enqueue("client_error", "{}", {.max_retries = 5});
  p.enqueue("skipped", "{}");
  std::atomic<int> handled{0};
  RunningConsumer worker(options(), [&](Consumer& c) {
    c.use([&](const Task& task, const Next& next) {
      if (task.type() == "skipped") return;  // the handler does not run; the task is done
      try {
        next();
      } catch (const std::invalid_argument& e) {
        throw PermanentError(std::string("bad request: ") + e.what());
      }
    });
    c.on("client_error", [&](const Task&) {
      ++handled;
      throw std::invalid_argument("400");
    });
    c.on("skipped", [&](const Task&) { ++handled; });
  });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1 && worker.consumer().metrics().done == 1; }, 10s));
  worker.stop();
  EXPECT_EQ(handled.load(), 1) << "mapped to PermanentError: not retried; skipped: not run";
  const auto dead = client.xrange(dlq);
  EXPECT_EQ(Client::get(dead[0].second, "reason"), "permanent");
  EXPECT_EQ(Client::get(dead[0].second, "error"), "bad request: 400");
}

TEST_F(MiddlewareTest, NextTwiceIsRefusedAndTheHandlerRunsOnce) {
  producer().enqueue("t", "{}", {.max_retries = 3});
  std::atomic<int> ran{0};
  RunningConsumer worker(options(), [&](Consumer& c) {
    c.use([](const Task&, const Next& next) {
      next();
      next();
    });
    c.on("t", [&](const Task&) { ++ran; });
  });
  ASSERT_TRUE(wait_until([&] { return xlen(dlq) == 1; }, 10s));
  worker.stop();
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(Client::get(client.xrange(dlq)[0].second, "reason"), "permanent");
  Producer p = producer();
  p.use([](EnqueueCall&, const Next& next) {
    next();
    next();
  });
  EXPECT_THROW(p.enqueue("u", "{}"), MiddlewareError);
}

TEST_F(MiddlewareTest, ProducerMiddlewareWrapsEachEnqueueAndCanRefuse) {
  Producer p = producer();
  p.use([&](EnqueueCall& call, const Next& next) {
    note("outer " + call.task_type);
    call.options.extra_fields.emplace_back("tenant", "acme");
    next();
    note("written " + call.task_id);
  });
  p.use([&](EnqueueCall& call, const Next& next) {
    if (call.task_type == "forbidden") return;
    next();
  });
  const std::string id = p.enqueue("t", "{}");
  ASSERT_EQ(trail, (std::vector<std::string>{"outer t", "written " + id}));
  const auto entries = client.xrange(stream);
  ASSERT_EQ(entries.size(), 1U);
  EXPECT_EQ(Client::get(entries[0].second, "tenant"), "acme");
  EXPECT_EQ(Client::get(entries[0].second, "task_id"), id);

  EXPECT_THROW(p.enqueue("forbidden", "{}"), MiddlewareError);
  EXPECT_EQ(xlen(stream), 1) << "nothing written";

  trail.clear();
  const std::vector<std::string> ids = p.enqueue_batch({{"b1", "{}", {}}, {"b2", "{}", {}}});
  ASSERT_EQ(ids.size(), 2U);
  EXPECT_EQ(trail,
            (std::vector<std::string>{"outer b1", "written " + ids[0], "outer b2", "written " + ids[1]}));
  EXPECT_EQ(xlen(stream), 3);
  EXPECT_THROW(p.enqueue_batch({{"b3", "{}", {}}, {"forbidden", "{}", {}}}), MiddlewareError);
  EXPECT_EQ(xlen(stream), 3) << "a batch with a refused task writes nothing";
  EXPECT_THROW(p.use(ProducerMiddleware{}), ConfigError);
}

// A tracer that hands out spans numbered 1, 2, ... and records what each attempt was given.
class RecordingTracer : public Tracer {
 public:
  static std::string context_of(int n) {
    char span[17];
    std::snprintf(span, sizeof span, "%016x", n);
    return "00-0af7651916cd43dd8448eb211c80319c-" + std::string(span) + "-01";
  }
  struct Attempt {
    std::optional<std::string> parent, retry_of;
    std::string outcome, error;
  };
  std::optional<SpanContext> inject(const EnqueueCall&) override {
    return SpanContext{context_of(100), "k=v"};
  }
  std::unique_ptr<Span> start_attempt(const Task&, const std::optional<SpanContext>& parent,
                                      const std::optional<SpanContext>& retry_of) override {
    std::lock_guard lock(m);
    attempts.push_back({parent ? std::optional(parent->traceparent + "|" + parent->tracestate) : std::nullopt,
                        retry_of ? std::optional(retry_of->traceparent) : std::nullopt,
                        {},
                        {}});
    return std::make_unique<RecordingSpan>(*this, static_cast<int>(attempts.size()));
  }
  std::vector<Attempt> snapshot() {
    std::lock_guard lock(m);
    return attempts;
  }

 private:
  class RecordingSpan : public Span {
   public:
    RecordingSpan(RecordingTracer& t, int n) : t_(t), n_(n) {}
    SpanContext context() const override { return {context_of(n_), {}}; }
    void end(std::string_view outcome, std::string_view error) override {
      std::lock_guard lock(t_.m);
      t_.attempts[static_cast<std::size_t>(n_ - 1)].outcome = outcome;
      t_.attempts[static_cast<std::size_t>(n_ - 1)].error = error;
    }

   private:
    RecordingTracer& t_;
    int n_;
  };
  std::mutex m;
  std::vector<Attempt> attempts;
};

TEST_F(MiddlewareTest, TheTraceContextReachesEveryAttemptAndARetryLinksTheFailedOne) {
  auto tracer = std::make_shared<RecordingTracer>();
  Producer p({.connection = {.url = server.url()}, .stream = stream, .tracer = tracer});
  p.enqueue("t", "{}");
  ConsumerOptions o = options();
  o.tracer = tracer;
  RunningConsumer worker(o, [&](Consumer& c) {
    c.on("t", [&](const Task& task) {
      if (task.retry_count() == 0) throw std::runtime_error("first attempt fails");
    });
  });
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().done == 1; }, 10s));
  worker.stop();
  const auto attempts = tracer->snapshot();
  ASSERT_EQ(attempts.size(), 2U);
  const std::string producer_context = RecordingTracer::context_of(100) + "|k=v";
  EXPECT_EQ(attempts[0].parent, producer_context);
  EXPECT_EQ(attempts[0].retry_of, std::nullopt);
  EXPECT_EQ(attempts[0].outcome, "retry");
  EXPECT_EQ(attempts[0].error, "first attempt fails");
  EXPECT_EQ(attempts[1].parent, producer_context);
  EXPECT_EQ(attempts[1].retry_of, RecordingTracer::context_of(1)) << "linked to the failed attempt's span";
  EXPECT_EQ(attempts[1].outcome, "done");
}

TEST_F(MiddlewareTest, TheSpanOfAnAttemptGivenUpOnEndsWithTheFateWrittenForIt) {
  auto tracer = std::make_shared<RecordingTracer>();
  Producer p({.connection = {.url = server.url()}, .stream = stream, .tracer = tracer});
  p.enqueue("t", "{}", {.max_retries = 1});
  ConsumerOptions o = options();
  o.tracer = tracer;
  o.timeout_grace = 200ms;
  RunningConsumer worker(o, [&](Consumer& c) {
    c.on("t",
         [](const Task& task) {
           if (task.retry_count() == 0) std::this_thread::sleep_for(1500ms);  // ignores its timeout
         },
         {.timeout = 200ms});
  });
  ASSERT_TRUE(wait_until(
      [&] {
        const auto a = tracer->snapshot();
        return worker.consumer().metrics().done == 1 && a.size() == 2 && !a[0].outcome.empty();
      },
      10s));
  worker.stop();
  const auto attempts = tracer->snapshot();
  EXPECT_EQ(worker.consumer().metrics().given_up, 1U);
  EXPECT_EQ(attempts[0].outcome, "retry");
  EXPECT_NE(attempts[0].error.find("given up"), std::string::npos) << attempts[0].error;
  EXPECT_EQ(attempts[1].retry_of, RecordingTracer::context_of(1)) << "the given-up attempt's retry links it";
  EXPECT_EQ(attempts[1].outcome, "done");
}

TEST_F(MiddlewareTest, AMalformedTraceparentIsIgnored) {
  EXPECT_TRUE(valid_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"));
  EXPECT_FALSE(valid_traceparent("00-00000000000000000000000000000000-b7ad6b7169203331-01"));
  EXPECT_FALSE(valid_traceparent("00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01"));
  EXPECT_FALSE(valid_traceparent("00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01"));
  EXPECT_FALSE(valid_traceparent("01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"));
  EXPECT_FALSE(valid_traceparent("garbage"));
  auto tracer = std::make_shared<RecordingTracer>();
  producer().enqueue("t", "{}", {.extra_fields = {{"traceparent", "00-not-a-context"}}});
  ConsumerOptions o = options();
  o.tracer = tracer;
  RunningConsumer worker(o, [&](Consumer& c) { c.on("t", [](const Task&) {}); });
  ASSERT_TRUE(wait_until([&] { return worker.consumer().metrics().done == 1; }, 10s));
  worker.stop();
  ASSERT_EQ(tracer->snapshot().size(), 1U);
  EXPECT_EQ(tracer->snapshot()[0].parent, std::nullopt);
}

}  // namespace
}  // namespace streamq::test
