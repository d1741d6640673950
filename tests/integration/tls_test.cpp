// SPDX-License-Identifier: MIT
// TLS (rediss://): in a build with TLS (hiredis >= 1.0 with hiredis_ssl, and OpenSSL: the
// hiredis 1.4 stage of the test command), a worker and a producer over TLS against a
// redis-server with a TLS port, certificates made by `openssl` for each run; a certificate from
// another CA, a wrong server name, a missing client certificate refused; a plain-text URL to the
// TLS port and a TLS URL to a plain port failing with a message that says what is wrong. In a
// build without TLS (Debian's hiredis 0.14), a rediss:// URL is a ConfigError that says why.
// Bad TLS settings are ConfigErrors in every build.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <streamq/streamq.hpp>

#include "redis_server.hpp"
#include "running_consumer.hpp"

namespace streamq::test {
namespace {

using namespace std::chrono_literals;

std::string what_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

TEST(TlsSettings, AreConfigErrorsWhenTheyCannotWork) {
  // TLS settings without a rediss:// URL, in the options or the URL's query.
  EXPECT_THROW(Producer({.connection = {.url = "redis://127.0.0.1:1", .tls = {.ca_file = "/x"}}}),
               ConfigError);
  EXPECT_THROW(Producer({.connection = {.url = "redis://127.0.0.1:1", .tls = {.verify = false}}}),
               ConfigError);
  EXPECT_THROW(Producer({.connection = {.url = "redis://127.0.0.1:1?tls_ca_file=/x"}}), ConfigError);
  // TLS to a cluster or through sentinels is not offered.
  EXPECT_THROW(Producer({.connection = {.url = "rediss+cluster://127.0.0.1:1"}, .stream = "{q}"}),
               ConfigError);
  EXPECT_THROW(Producer({.connection = {.url = "rediss+sentinel://127.0.0.1:1/m"}}), ConfigError);
  EXPECT_THROW(Producer({.connection = {.url = "rediss://127.0.0.1:1?tls_verify=maybe"}}), ConfigError);
  EXPECT_THROW(Producer({.connection = {.url = "rediss://127.0.0.1:1?tls_ca_file="}}), ConfigError);
}

#if STREAMQ_HAS_TLS

/// Runs a shell command; fails the test run when it fails.
void run(const std::string& command) {
  if (std::system((command + " >/dev/null 2>&1").c_str()) != 0) {
    throw std::runtime_error("failed: " + command);
  }
}

/// A CA, a server certificate it signs (localhost, 127.0.0.1), a client certificate it signs,
/// and a second CA that signs nothing here, made once for the suite in a temporary directory.
class Tls : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char tmpl[] = "/tmp/streamq-tls-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = new std::string(tmpl);
    const std::string& d = *dir_;
    const std::string key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    std::ofstream(d + "/server.ext") << "subjectAltName=DNS:localhost,IP:127.0.0.1\n";
    std::ofstream(d + "/client.ext") << "extendedKeyUsage=clientAuth\n";
    run("cd " + d + " && openssl req -x509" + key +
        " -days 2 -subj /CN=streamq-test-ca -keyout ca.key -out ca.crt");
    run("cd " + d + " && openssl req -x509" + key +
        " -days 2 -subj /CN=another-ca -keyout other-ca.key -out other-ca.crt");
    for (const std::string who : {"server", "client"}) {
      run("cd " + d + " && openssl req" + key + " -subj /CN=" + who + " -keyout " + who + ".key -out " + who +
          ".csr");
      run("cd " + d + " && openssl x509 -req -in " + who +
          ".csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2" + " -extfile " + who + ".ext -out " + who +
          ".crt");
    }
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    std::filesystem::remove_all(*dir_, ec);
    delete dir_;
    dir_ = nullptr;
  }
  static std::string file(const std::string& name) { return *dir_ + "/" + name; }
  static TlsOptions trusting() { return {.ca_file = file("ca.crt")}; }

  static std::string* dir_;
};
std::string* Tls::dir_ = nullptr;

ConsumerOptions worker(const std::string& url, TlsOptions tls = {}) {
  ConsumerOptions o;
  o.connection = {.url = url, .tls = std::move(tls)};
  o.stream = "q";
  o.consumer_name = "w1";
  o.block = 200ms;
  o.stop_on_signals = false;
  return o;
}

TEST_F(Tls, AProducerAndAWorkerRunTasksOverTls) {
  RedisServer server({.tls_dir = *dir_});
  Client client(server.url());
  // The producer's settings as options, the worker's in its URL.
  Producer producer({.connection = {.url = server.tls_url(), .tls = trusting()}, .stream = "q"});
  std::vector<std::string> expected;
  for (int i = 0; i < 50; ++i) expected.push_back(producer.enqueue("t", "{\"n\":" + std::to_string(i) + "}"));
  std::mutex mu;
  std::vector<std::string> ran;
  {
    RunningConsumer w(worker(server.tls_url() + "?tls_ca_file=" + file("ca.crt")), [&](Consumer& c) {
      c.on("t", [&](const Task& t) {
        std::lock_guard lock(mu);
        ran.push_back(t.id());
      });
    });
    ASSERT_TRUE(wait_until([&] {
      std::lock_guard lock(mu);
      return ran.size() == expected.size();
    }));
    w.stop();
  }
  std::sort(ran.begin(), ran.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(ran, expected);
  EXPECT_EQ(client.integer({"XLEN", "q"}), 0);
  StatsReader stats({.connection = {.url = server.tls_url(), .tls = trusting()}, .stream = "q"});
  EXPECT_EQ(stats.read().length, 0);
  // With the host's name instead of its address, checked against the certificate's DNS name.
  Producer by_name(
      {.connection = {.url = "rediss://localhost:" + std::to_string(server.tls_port()), .tls = trusting()},
       .stream = "q"});
  by_name.enqueue("t", "{}");
  EXPECT_EQ(client.integer({"XLEN", "q"}), 1);
}

TEST_F(Tls, AServerCertificateFromAnotherCaIsRefused) {
  RedisServer server({.tls_dir = *dir_});
  Producer p(
      {.connection = {.url = server.tls_url(), .tls = {.ca_file = file("other-ca.crt")}}, .stream = "q"});
  const std::string why = what_of([&] { p.enqueue("t", "{}"); });
  EXPECT_NE(why.find("TLS handshake: the server's certificate is not accepted"), std::string::npos) << why;
  EXPECT_NE(why.find("connection.tls.ca_file/ca_dir"), std::string::npos) << why;
  EXPECT_THROW(p.enqueue("t", "{}"), ConnectionError);
  // With verification off, the same settings connect (encryption without authentication).
  Producer unchecked(
      {.connection = {.url = server.tls_url() + "?tls_verify=no", .tls = {.ca_file = file("other-ca.crt")}},
       .stream = "q"});
  unchecked.enqueue("t", "{}");
  EXPECT_EQ(Client(server.url()).integer({"XLEN", "q"}), 1);
}

TEST_F(Tls, TheServerNameIsChecked) {
  RedisServer server({.tls_dir = *dir_});
  TlsOptions other_name = trusting();
  other_name.server_name = "redis.example.com";
  Producer wrong({.connection = {.url = server.tls_url(), .tls = other_name}, .stream = "q"});
  const std::string why = what_of([&] { wrong.enqueue("t", "{}"); });
  EXPECT_NE(why.find("hostname mismatch"), std::string::npos) << why;
  EXPECT_NE(why.find("redis.example.com"), std::string::npos) << why;
  TlsOptions right_name = trusting();
  right_name.server_name = "localhost";
  Producer right({.connection = {.url = server.tls_url(), .tls = right_name}, .stream = "q"});
  right.enqueue("t", "{}");
  EXPECT_EQ(Client(server.url()).integer({"XLEN", "q"}), 1);
}

TEST_F(Tls, AServerThatWantsAClientCertificateGetsOne) {
  RedisServer server({.tls_dir = *dir_, .tls_auth_clients = true});
  Producer without({.connection = {.url = server.tls_url(), .tls = trusting()}, .stream = "q"});
  // TLS 1.3: the server's refusal comes as an alert at the first read, after the handshake.
  const std::string why = what_of([&] { without.enqueue("t", "{}"); });
  EXPECT_NE(why.find("if the server wants a client certificate, tls-auth-clients yes: set "
                     "connection.tls.cert_file and key_file"),
            std::string::npos)
      << why;
  EXPECT_THROW(without.enqueue("t", "{}"), ConnectionError);
  TlsOptions with = trusting();
  with.cert_file = file("client.crt");
  with.key_file = file("client.key");
  Producer p({.connection = {.url = server.tls_url(), .tls = with}, .stream = "q"});
  p.enqueue("t", "{}");
  std::atomic<int> done{0};
  RunningConsumer w(worker(server.tls_url(), with),
                    [&](Consumer& c) { c.on("t", [&](const Task&) { ++done; }); });
  ASSERT_TRUE(wait_until([&] { return done.load() == 1; }));
}

TEST_F(Tls, APlainTextUrlToTheTlsPortFailsClearly) {
  RedisServer server({.tls_dir = *dir_});
  Producer p({.connection = {.url = "redis://127.0.0.1:" + std::to_string(server.tls_port()),
                             .connect_timeout = 1000ms,
                             .socket_timeout = 1000ms},
              .stream = "q"});
  const auto start = std::chrono::steady_clock::now();
  const std::string why = what_of([&] { p.enqueue("t", "{}"); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_NE(why.find("the URL must be rediss://"), std::string::npos) << why;
  EXPECT_THROW(p.enqueue("t", "{}"), ConnectionError);
}

TEST_F(Tls, ATlsUrlToAPlainPortFailsClearly) {
  RedisServer server;
  Producer p({.connection = {.url = "rediss://127.0.0.1:" + std::to_string(server.port()),
                             .connect_timeout = 500ms,
                             .tls = trusting()},
              .stream = "q"});
  const auto start = std::chrono::steady_clock::now();
  const std::string why = what_of([&] { p.enqueue("t", "{}"); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_NE(why.find("does this port serve TLS?"), std::string::npos) << why;
  EXPECT_THROW(p.enqueue("t", "{}"), TimeoutError);
  EXPECT_EQ(Client(server.url()).integer({"EXISTS", "q"}), 0);
}

TEST_F(Tls, UnreadableOrMismatchedFilesAreConfigErrorsAtConstruction) {
  const auto refused = [](TlsOptions tls, const std::string& url = "rediss://127.0.0.1:1") {
    return what_of([&] { Producer({.connection = {.url = url, .tls = std::move(tls)}}); });
  };
  EXPECT_NE(refused({.ca_file = file("missing.crt")}).find("connection.tls.ca_file"), std::string::npos);
  EXPECT_NE(refused({.ca_dir = file("missing")}).find("connection.tls.ca_dir"), std::string::npos);
  EXPECT_NE(refused({.cert_file = file("client.crt")}).find("set both or neither"), std::string::npos);
  EXPECT_NE(refused({.cert_file = file("missing.crt"), .key_file = file("client.key")})
                .find("connection.tls.cert_file"),
            std::string::npos);
  EXPECT_NE(refused({.cert_file = file("client.crt"), .key_file = file("server.key")})
                .find("cannot load it as the key of connection.tls.cert_file"),
            std::string::npos);
  EXPECT_NE(refused({.ca_file = file("ca.crt")}, "rediss://127.0.0.1:1?tls_ca_file=" + file("other-ca.crt"))
                .find("differ"),
            std::string::npos);
  EXPECT_THROW(
      Producer({.connection = {.url = "rediss://127.0.0.1:1", .tls = {.ca_file = file("missing.crt")}}}),
      ConfigError);
  // The same setting given twice alike is fine.
  Producer same(
      {.connection = {.url = "rediss://127.0.0.1:1?tls_ca_file=" + file("ca.crt"), .tls = trusting()}});
}

#else

TEST(TlsSettings, ABuildWithoutTlsRefusesRedissUrls) {
  static_assert(!tls_supported);
  const std::string why = what_of([] { Producer({.connection = {.url = "rediss://127.0.0.1:6379"}}); });
  EXPECT_NE(why.find("needs a streamq built against hiredis >= 1.0 with hiredis_ssl and OpenSSL"),
            std::string::npos)
      << why;
  EXPECT_THROW(Consumer({.connection = {.url = "rediss://127.0.0.1:6379"}}), ConfigError);
}

#endif

}  // namespace
}  // namespace streamq::test
