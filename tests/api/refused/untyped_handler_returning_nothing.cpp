// expect: compiles
// The control: the same registration returning nothing, a typed one returning its result, and a
// Consumer::Handler object.
#include <streamq/streamq.hpp>

void register_handlers(streamq::Consumer& consumer) {
  consumer.on("sum", [](const streamq::Task& task) { task.set_result("42"); });
  consumer.on<int>("double", [](const int& n) { return 2 * n; });
  const streamq::Consumer::Handler handler = [](const streamq::Task&) {};
  consumer.on("other", handler);
}
