// expect: register it with on<T>(type, handler)
// An untyped handler's return value would be dropped: Consumer::on refuses it.
#include <streamq/streamq.hpp>

void register_handlers(streamq::Consumer& consumer) {
  consumer.on("sum", [](const streamq::Task&) { return 42; });
}
