// SPDX-License-Identifier: MIT
// streamq-asio-http: an HTTP endpoint written with asio coroutines that enqueues tasks on one
// shared Producer and either answers at once (202 and the task's id, to poll) or waits up to N
// seconds for the task's result, suspending the coroutine, not its thread. With --worker 1 it
// also runs a worker for the task types "add" ({"a":1,"b":2} returns 3) and "slow" ({"ms":1500}
// takes that long), so it can be tried alone.
//
//   POST /tasks/<type>          body: the JSON payload  -> 202 {"id": "..."}
//   POST /tasks/<type>?wait=5   the same, then wait up to 5 s -> 200 {"id", "state", "result"},
//                               or 202 {"id"} when the task has not finished by then
//   GET  /tasks/<id>            -> 200 the task's record (state, result, ...), 404 when none
//
//   streamq-asio-http --url redis://127.0.0.1:6379 --stream task_queue --port 8080 --worker 1
//   curl -X POST 'localhost:8080/tasks/add?wait=5' -d '{"a":2,"b":40}'
#include <condition_variable>
#include <csignal>
#include <exception>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>

#include <asio.hpp>
#include <streamq/asio.hpp>
#include <streamq/streamq.hpp>

#include "flags.hpp"

namespace {

using asio::ip::tcp;

/// The demo worker's task: {"a":1,"b":2}.
struct Add {
  long a = 0;
  long b = 0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Add, a, b)

/// The demo worker's slow task: {"ms":1500} sleeps that long (or until it is asked to stop).
struct Slow {
  int ms = 0;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Slow, ms)

constexpr const char* kUsage =
    "usage: streamq-asio-http [--url redis://127.0.0.1:6379] [--stream task_queue] [--port 8080]\n"
    "                         [--worker 0|1]\n";

struct Request {
  std::string method;
  std::string path;   // without the query
  std::string query;  // after '?', or empty
  std::string body;
};

struct Response {
  int status = 200;
  nlohmann::json body;
};

std::string reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 202: return "Accepted";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

/// Reads one request (the request line, the headers, a body of Content-Length bytes).
asio::awaitable<std::optional<Request>> read_request(tcp::socket& socket) {
  std::string data;
  const std::size_t head = co_await asio::async_read_until(socket, asio::dynamic_buffer(data, 1 << 20),
                                                           "\r\n\r\n", asio::use_awaitable);
  std::istringstream lines(data.substr(0, head));
  Request r;
  std::string target;
  lines >> r.method >> target;
  if (r.method.empty() || target.empty()) co_return std::nullopt;
  const auto q = target.find('?');
  r.path = target.substr(0, q);
  if (q != std::string::npos) r.query = target.substr(q + 1);
  std::size_t length = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.size() > 15 && (line.starts_with("Content-Length:") || line.starts_with("content-length:"))) {
      length = std::stoul(line.substr(15));
    }
  }
  if (length > (1u << 20)) co_return std::nullopt;
  r.body = data.substr(head);
  if (r.body.size() < length) {
    std::string rest(length - r.body.size(), '\0');
    co_await asio::async_read(socket, asio::buffer(rest), asio::use_awaitable);
    r.body += rest;
  }
  r.body.resize(length);
  co_return r;
}

/// `wait=<seconds>` of the query, if any.
std::optional<int> wait_seconds(const std::string& query) {
  const auto at = query.find("wait=");
  if (at == std::string::npos) return std::nullopt;
  return std::stoi(query.substr(at + 5));
}

/// What a record says, as the endpoint answers it (its JSON form: state, result, ...).
nlohmann::json describe(const streamq::TaskRecord& r) { return nlohmann::json::parse(r.to_json()); }

class Service {
 public:
  Service(streamq::Producer& producer, streamq::Inspector& inspector, std::string stream,
          asio::thread_pool& blocking)
      : producer_(producer), inspector_(inspector), stream_(std::move(stream)), blocking_(blocking) {}

  asio::awaitable<Response> handle(const Request& r) {
    if (r.path.starts_with("/tasks/") && r.method == "POST") co_return co_await enqueue(r);
    if (r.path.starts_with("/tasks/") && r.method == "GET") co_return co_await status(r.path.substr(7));
    co_return Response{r.path.starts_with("/tasks/") ? 405 : 404, {{"error", "no such endpoint"}}};
  }

 private:
  /// POST /tasks/<type>: "202 + poll", or with ?wait=N "wait up to N s for the result".
  asio::awaitable<Response> enqueue(const Request& r) {
    const std::string type = r.path.substr(7);
    const std::optional<int> wait = wait_seconds(r.query);
    streamq::EnqueueOptions options;
    options.retention = streamq::Retention{.done = std::chrono::minutes(10)};  // tracked: pollable
    // (Named objects as a co_await'ed call's arguments: GCC 12 mishandles temporaries there.)
    const streamq::Payload payload(r.body);
    std::string id;
    try {
      id = co_await producer_.async_enqueue(type, payload, options, asio::use_awaitable);
    } catch (const streamq::PayloadError& e) {
      co_return Response{400, {{"error", e.what()}}};
    } catch (const streamq::QueueFullError& e) {
      co_return Response{503, {{"error", e.what()}}};
    } catch (const streamq::ConfigError& e) {
      co_return Response{400, {{"error", e.what()}}};
    }
    if (!wait) co_return Response{202, {{"id", id}, {"status", "/tasks/" + id}}};
    const std::chrono::milliseconds timeout = std::chrono::seconds(*wait);
    try {
      const streamq::TaskRecord done = co_await producer_.async_wait(id, timeout, asio::use_awaitable);
      co_return Response{200, describe(done)};
    } catch (const streamq::TaskFailedError& e) {
      co_return Response{200, describe(e.record())};  // it ended dead or cancelled: the record says so
    } catch (const streamq::WaitTimeoutError&) {
      co_return Response{202, {{"id", id}, {"status", "/tasks/" + id}}};
    }
  }

  /// GET /tasks/<id>: the record, read by the Inspector (a blocking call) on a thread of the
  /// blocking pool, so the I/O threads never wait on it.
  asio::awaitable<Response> status(const std::string& id) {
    auto back = co_await asio::this_coro::executor;
    co_await asio::post(blocking_, asio::use_awaitable);
    std::optional<streamq::TaskRecord> record;
    std::string error;
    try {
      record = inspector_.record(stream_, id);
    } catch (const streamq::Error& e) {
      error = e.what();
    }
    co_await asio::post(back, asio::use_awaitable);
    if (!error.empty()) co_return Response{503, {{"error", error}}};
    if (!record) co_return Response{404, {{"error", "no record of task " + id}}};
    co_return Response{200, describe(*record)};
  }

  streamq::Producer& producer_;
  streamq::Inspector& inspector_;
  std::string stream_;
  asio::thread_pool& blocking_;
};

asio::awaitable<void> serve(tcp::socket socket, Service& service) {
  Response response;
  try {
    std::optional<Request> request = co_await read_request(socket);
    if (!request) {
      response = {400, {{"error", "bad request"}}};
    } else {
      response = co_await service.handle(*request);
    }
  } catch (const std::exception& e) {
    response = {400, {{"error", e.what()}}};
  }
  const std::string body = response.body.dump();
  const std::string out =
      "HTTP/1.1 " + std::to_string(response.status) + " " + reason(response.status) +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\nConnection: close\r\n\r\n" + body;
  asio::error_code ignored;
  co_await asio::async_write(socket, asio::buffer(out), asio::redirect_error(asio::use_awaitable, ignored));
}

asio::awaitable<void> listen(tcp::acceptor& acceptor, Service& service) {
  for (;;) {
    tcp::socket socket = co_await acceptor.async_accept(asio::use_awaitable);
    asio::co_spawn(acceptor.get_executor(), serve(std::move(socket), service), asio::detached);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (example::wants_help(argc, argv)) {
    std::cout << kUsage;
    return 0;
  }
  std::map<std::string, std::string> flags{
      {"--url", "redis://127.0.0.1:6379"}, {"--stream", "task_queue"}, {"--port", "8080"}, {"--worker", "0"}};
  try {
    example::parse_flags(argc, argv, flags);
    const int port = example::to_int("--port", flags["--port"], 0);
    const streamq::ConnectionOptions connection{.url = flags["--url"]};
    // One Producer for the whole service: every connection's coroutine uses it.
    streamq::Producer producer({.connection = connection, .stream = flags["--stream"]});
    streamq::Inspector inspector({.connection = connection});
    std::optional<streamq::Consumer> worker;
    std::thread worker_thread;
    if (flags["--worker"] == "1") {
      worker.emplace(streamq::ConsumerOptions{.connection = connection, .stream = flags["--stream"]});
      worker->on<Add>("add", [](const Add& x) { return x.a + x.b; });
      worker->on<Slow>("slow", [](const Slow& x, const streamq::Task& t) {
        std::mutex m;
        std::condition_variable_any cv;
        std::unique_lock lock(m);
        std::stop_token stop = t.stop_token();
        cv.wait_for(lock, stop, std::chrono::milliseconds(x.ms), [] { return false; });
        return x.ms;
      });
      worker_thread = std::thread([&] { worker->run(); });
    }

    asio::io_context io(1);
    asio::thread_pool blocking(2);
    tcp::acceptor acceptor(
        io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
    Service service(producer, inspector, flags["--stream"], blocking);
    asio::co_spawn(io, listen(acceptor, service), asio::detached);
    asio::signal_set stop(io, SIGINT, SIGTERM);
    stop.async_wait([&](const asio::error_code&, int) { io.stop(); });
    std::cout << "listening on 127.0.0.1:" << acceptor.local_endpoint().port() << std::endl;
    io.run();
    blocking.join();
    if (worker) {
      worker->stop();
      worker_thread.join();
    }
    return 0;
  } catch (const std::invalid_argument& e) {
    std::cerr << e.what() << "\n" << kUsage;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "streamq-asio-http: " << e.what() << "\n";
    return 1;
  }
}
