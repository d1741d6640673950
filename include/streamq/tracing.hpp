// SPDX-License-Identifier: MIT
// The tracing hook: streamq carries a W3C trace context in a task's fields from the producer to
// every attempt of the task; a Tracer (ProducerOptions::tracer, ConsumerOptions::tracer) makes
// the spans with the tracing library of the application's choice.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "streamq/export.hpp"
#include "streamq/producer.hpp"
#include "streamq/task.hpp"

namespace streamq {

/// A W3C trace context (https://www.w3.org/TR/trace-context/): `traceparent`
/// ("00-<32 hex trace id>-<16 hex span id>-<2 hex flags>") and `tracestate` (may be empty).
struct STREAMQ_EXPORT SpanContext {
  std::string traceparent;
  std::string tracestate;
};

/// Whether `traceparent` is a well-formed version-00 traceparent (lower-case hex, trace id and
/// span id not all zero). A task's field that is not is ignored.
STREAMQ_EXPORT bool valid_traceparent(std::string_view traceparent) noexcept;

/// The span of one attempt, started by Tracer::start_attempt and ended once its fate is known.
class STREAMQ_EXPORT Span {
 public:
  virtual ~Span() = default;
  /// This span's context: a retry of this attempt carries it (field `retry_of_span`), and the
  /// next attempt's span links to it. May be called from another thread than the one that
  /// started the span (a task given up on is written by the consumer's watchdog thread).
  virtual SpanContext context() const = 0;
  /// The attempt ended: `outcome` is "done", "retry", "dead" or "cancelled", `error` what the
  /// handler threw (or why it was stopped), empty for a success.
  virtual void end(std::string_view outcome, std::string_view error) = 0;
};

/// Connects streamq to a tracing library (OpenTelemetry, or any other): streamq carries the
/// context, the tracer makes the spans. Set ProducerOptions::tracer and ConsumerOptions::tracer
/// to the same kind of tracer. Called from several threads at once: it must be thread-safe.
class STREAMQ_EXPORT Tracer {
 public:
  virtual ~Tracer() = default;
  /// Producer: the context of the span that enqueues (the caller's current span), written into
  /// the task as its `traceparent` and `tracestate` fields; nullopt writes none. A task whose
  /// options already carry a traceparent extra field keeps it.
  virtual std::optional<SpanContext> inject(const EnqueueCall& call) = 0;
  /// Consumer: starts the span of one attempt of `task`, a child of `parent` (the producer's
  /// context, if the task carries a valid one), linked to `retry_of` (the span of the failed
  /// attempt this retry follows, if any). The span is ended with its fate; null: no span.
  virtual std::unique_ptr<Span> start_attempt(const Task& task, const std::optional<SpanContext>& parent,
                                              const std::optional<SpanContext>& retry_of) = 0;
};

}  // namespace streamq
