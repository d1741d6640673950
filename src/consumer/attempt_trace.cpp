// SPDX-License-Identifier: MIT
// Tracing helpers of an attempt: the span a retry names, and the trace context a task carries.
#include "attempt.hpp"
#include "log.hpp"

namespace streamq::detail {

void note_span(Completion& c, const Span* span) {
  if (span == nullptr || c.outcome != Outcome::retry) return;
  std::string context;
  try {
    context = span->context().traceparent;
  } catch (...) {
    log(LogLevel::warning, "tracer: a span's context could not be read (it threw)");
    return;
  }
  if (!valid_traceparent(context)) return;
  for (auto& [name, value] : c.fields) {
    if (name == field::retry_of_span) {
      value = std::move(context);
      return;
    }
  }
  c.fields.emplace_back(field::retry_of_span, std::move(context));
}

std::optional<SpanContext> carried(const Task& task, std::string_view name, std::string_view state_name) {
  const auto parent = task.field(name);
  if (!parent || !valid_traceparent(*parent)) return std::nullopt;
  SpanContext c{std::string(*parent), {}};
  if (!state_name.empty()) {
    if (const auto state = task.field(state_name)) c.tracestate = std::string(*state);
  }
  return c;
}

}  // namespace streamq::detail
