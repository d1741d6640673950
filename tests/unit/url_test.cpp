// SPDX-License-Identifier: MIT
// Connection URL parsing: what each accepted form means and which mistakes are refused.
#include <gtest/gtest.h>

#include <string>

#include "redis/url.hpp"
#include "streamq/errors.hpp"

namespace {

using streamq::detail::Endpoint;
using streamq::detail::parse_url;

// Runs parse_url on a URL that must be refused and returns the ConfigError message.
std::string refusal(const std::string& url) {
  try {
    const Endpoint ep = parse_url(url);
    ADD_FAILURE() << "accepted " << url << " as host=" << ep.host << " port=" << ep.port << " db=" << ep.db
                  << " unix=" << ep.unix_path;
  } catch (const streamq::ConfigError& e) {
    return e.what();
  }
  return {};
}

TEST(Url, HostOnlyUsesDefaults) {
  const Endpoint ep = parse_url("redis://cache.internal");
  EXPECT_EQ(ep.host, "cache.internal");
  EXPECT_EQ(ep.port, 6379);
  EXPECT_EQ(ep.db, 0);
  EXPECT_TRUE(ep.user.empty());
  EXPECT_TRUE(ep.password.empty());
  EXPECT_FALSE(ep.is_unix());
  EXPECT_EQ(ep.describe(), "cache.internal:6379");
}

TEST(Url, HostAndPort) {
  const Endpoint ep = parse_url("redis://127.0.0.1:6380");
  EXPECT_EQ(ep.host, "127.0.0.1");
  EXPECT_EQ(ep.port, 6380);
  EXPECT_EQ(ep.db, 0);
}

TEST(Url, TrailingSlashWithoutDbKeepsDbZero) {
  const Endpoint ep = parse_url("redis://localhost:7000/");
  EXPECT_EQ(ep.host, "localhost");
  EXPECT_EQ(ep.port, 7000);
  EXPECT_EQ(ep.db, 0);
}

TEST(Url, UserPasswordHostPortDb) {
  const Endpoint ep = parse_url("redis://alice:s3cret@redis.example:6390/3");
  EXPECT_EQ(ep.user, "alice");
  EXPECT_EQ(ep.password, "s3cret");
  EXPECT_EQ(ep.host, "redis.example");
  EXPECT_EQ(ep.port, 6390);
  EXPECT_EQ(ep.db, 3);
}

TEST(Url, PasswordOnly) {
  const Endpoint ep = parse_url("redis://secret@localhost");
  EXPECT_TRUE(ep.user.empty());
  EXPECT_EQ(ep.password, "secret");
  EXPECT_EQ(ep.host, "localhost");
  EXPECT_EQ(ep.port, 6379);
}

TEST(Url, EmptyUserWithPassword) {
  const Endpoint ep = parse_url("redis://:secret@localhost:6379/1");
  EXPECT_TRUE(ep.user.empty());
  EXPECT_EQ(ep.password, "secret");
  EXPECT_EQ(ep.db, 1);
}

TEST(Url, PercentEncodedCredentialsAreDecoded) {
  const Endpoint ep = parse_url("redis://us%65r%3Ax:p%40ss%2f%25@host:6379");
  EXPECT_EQ(ep.user, "user:x");
  EXPECT_EQ(ep.password, "p@ss/%");
  EXPECT_EQ(ep.host, "host");
}

TEST(Url, LastAtSeparatesCredentialsFromHost) {
  const Endpoint ep = parse_url("redis://bob:p@ss@w@rd@db.local:6381/2");
  EXPECT_EQ(ep.user, "bob");
  EXPECT_EQ(ep.password, "p@ss@w@rd");
  EXPECT_EQ(ep.host, "db.local");
  EXPECT_EQ(ep.port, 6381);
  EXPECT_EQ(ep.db, 2);
}

TEST(Url, Ipv6WithPort) {
  const Endpoint ep = parse_url("redis://[::1]:6380");
  EXPECT_EQ(ep.host, "::1");
  EXPECT_EQ(ep.port, 6380);
}

TEST(Url, Ipv6WithoutPortAndWithCredentialsAndDb) {
  const Endpoint ep = parse_url("redis://u:p@[fe80::1:2]/4");
  EXPECT_EQ(ep.host, "fe80::1:2");
  EXPECT_EQ(ep.port, 6379);
  EXPECT_EQ(ep.user, "u");
  EXPECT_EQ(ep.password, "p");
  EXPECT_EQ(ep.db, 4);
}

TEST(Url, UnixSocketWithQuery) {
  const Endpoint ep = parse_url("unix:///tmp/r.sock?db=2&password=x");
  EXPECT_TRUE(ep.is_unix());
  EXPECT_EQ(ep.unix_path, "/tmp/r.sock");
  EXPECT_TRUE(ep.host.empty());
  EXPECT_EQ(ep.db, 2);
  EXPECT_EQ(ep.password, "x");
  EXPECT_TRUE(ep.user.empty());
  EXPECT_EQ(ep.describe(), "/tmp/r.sock");
}

TEST(Url, UnixSocketUserAndEncodedPassword) {
  const Endpoint ep = parse_url("unix:///var/run/redis/redis.sock?user=app&password=a%26b%3Dc");
  EXPECT_EQ(ep.unix_path, "/var/run/redis/redis.sock");
  EXPECT_EQ(ep.user, "app");
  EXPECT_EQ(ep.password, "a&b=c");
  EXPECT_EQ(ep.db, 0);
}

TEST(Url, UnixSocketDefaults) {
  const Endpoint ep = parse_url("unix:///tmp/redis.sock");
  EXPECT_EQ(ep.unix_path, "/tmp/redis.sock");
  EXPECT_EQ(ep.db, 0);
  EXPECT_TRUE(ep.password.empty());
}

TEST(Url, DescribeNeverShowsCredentials) {
  const Endpoint tcp = parse_url("redis://alice:hunter2@redis.example:6390/3");
  EXPECT_EQ(tcp.describe(), "redis.example:6390");
  EXPECT_EQ(tcp.describe().find("hunter2"), std::string::npos);
  EXPECT_EQ(tcp.describe().find("alice"), std::string::npos);

  const Endpoint pw_only = parse_url("redis://hunter2@localhost");
  EXPECT_EQ(pw_only.describe().find("hunter2"), std::string::npos);

  const Endpoint sock = parse_url("unix:///tmp/r.sock?user=alice&password=hunter2");
  EXPECT_EQ(sock.describe(), "/tmp/r.sock");
}

struct BadUrl {
  const char* url;
  const char* detail;  // a word the message must contain besides "connection.url"
};

class UrlRefused : public ::testing::TestWithParam<BadUrl> {};

TEST_P(UrlRefused, ThrowsConfigErrorNamingTheField) {
  const std::string url = GetParam().url;
  const std::string message = refusal(url);
  EXPECT_NE(message.find("connection.url"), std::string::npos) << message;
  // The explanation must say what is wrong on its own, not merely echo the URL back.
  std::string reason = message;
  if (!url.empty()) {
    if (const auto at = reason.find(url); at != std::string::npos) reason.erase(at, url.size());
  }
  EXPECT_NE(reason.find(GetParam().detail), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(
    Mistakes, UrlRefused,
    ::testing::Values(
        BadUrl{"http://localhost:6379", "scheme"}, BadUrl{"localhost:6379", "scheme"}, BadUrl{"", "scheme"},
        BadUrl{"rediss+cluster://localhost:6380", "TLS"}, BadUrl{"rediss+sentinel://s1/m", "TLS"},
        BadUrl{"redis://localhost?tls_ca_file=/ca", "rediss://"},
        BadUrl{"unix:///tmp/r.sock?tls_verify=no", "rediss://"},
        BadUrl{"rediss://localhost?tls_verify=maybe", "yes or no"},
        BadUrl{"rediss://localhost?tls_server_name=", "empty"}, BadUrl{"redis://", "host"},
        BadUrl{"redis://:6379", "host"}, BadUrl{"redis://user:pw@:6379/0", "host"},
        BadUrl{"redis://localhost:0", "port"}, BadUrl{"redis://localhost:70000", "port"},
        BadUrl{"redis://localhost:abc", "port"}, BadUrl{"redis://localhost:", "port"},
        BadUrl{"redis://localhost:-1", "port"}, BadUrl{"redis://[::1]:0", "port"},
        BadUrl{"redis://[::1", "IPv6"}, BadUrl{"redis://localhost/abc", "db"},
        BadUrl{"redis://localhost/-1", "db"}, BadUrl{"redis://localhost/1x", "db"},
        BadUrl{"unix:///tmp/r.sock?db=x", "db"}, BadUrl{"redis://user:p%zzss@localhost", "percent"},
        BadUrl{"redis://user:pass%4@localhost", "percent"}, BadUrl{"redis://user:pass%@localhost", "percent"},
        BadUrl{"unix://tmp/r.sock", "absolute"}, BadUrl{"unix://", "absolute"},
        BadUrl{"unix:///tmp/r.sock?timeout=5", "timeout"}, BadUrl{"redis://localhost?foo=bar", "foo"},
        BadUrl{"unix:///tmp/r.sock?db", "="}, BadUrl{"redis+sentinel://s1:26379", "master name"},
        BadUrl{"redis+sentinel://s1:26379/", "master name"},
        BadUrl{"redis+sentinel://s1:26379,/mymaster", "host"},
        BadUrl{"redis+sentinel://,s2/mymaster", "host"}, BadUrl{"redis+sentinel://s1:0/mymaster", "port"},
        BadUrl{"redis+sentinel://s1/my%20master", "letters"}, BadUrl{"redis+sentinel://s1/mymaster/x", "db"},
        BadUrl{"redis://localhost?sentinel_password=x", "sentinel_password"},
        BadUrl{"redis+sentinel://s1/m?sentinel_user", "="}));

TEST(Url, RedissCarriesTheTlsSettingsOfItsQuery) {
  const Endpoint plain = parse_url("rediss://app:pw@cache.internal:6380/3");
  EXPECT_TRUE(plain.tls);
  EXPECT_EQ(plain.host, "cache.internal");
  EXPECT_EQ(plain.port, 6380);
  EXPECT_EQ(plain.db, 3);
  EXPECT_EQ(plain.user, "app");
  EXPECT_TRUE(plain.tls_options.verify);
  EXPECT_TRUE(plain.tls_options.ca_file.empty());
  const Endpoint ep = parse_url(
      "rediss://h?tls_ca_file=%2Fetc%2Fca.crt&tls_ca_dir=/etc/cas&tls_cert_file=c.pem&tls_key_file=k.pem"
      "&tls_server_name=redis.example&tls_verify=no");
  EXPECT_EQ(ep.tls_options.ca_file, "/etc/ca.crt");
  EXPECT_EQ(ep.tls_options.ca_dir, "/etc/cas");
  EXPECT_EQ(ep.tls_options.cert_file, "c.pem");
  EXPECT_EQ(ep.tls_options.key_file, "k.pem");
  EXPECT_EQ(ep.tls_options.server_name, "redis.example");
  EXPECT_FALSE(ep.tls_options.verify);
  EXPECT_TRUE(parse_url("rediss://h?tls_verify=yes").tls_options.verify);
  EXPECT_FALSE(parse_url("redis://h").tls);
}

TEST(Url, ClusterNodesAndCredentials) {
  const Endpoint ep = parse_url("redis+cluster://app:s%40cret@10.0.0.1:7000,node-b,[::1]:7002/");
  ASSERT_TRUE(ep.is_cluster());
  EXPECT_FALSE(ep.is_sentinel());
  ASSERT_EQ(ep.cluster_nodes.size(), 3u);
  EXPECT_EQ(ep.cluster_nodes[0].describe(), "10.0.0.1:7000");
  EXPECT_EQ(ep.cluster_nodes[1].describe(), "node-b:6379");
  EXPECT_EQ(ep.cluster_nodes[2].describe(), "[::1]:7002");
  EXPECT_EQ(ep.user, "app");
  EXPECT_EQ(ep.password, "s@cret");
  EXPECT_EQ(ep.db, 0);
  EXPECT_EQ(ep.describe(), "cluster 10.0.0.1:7000,node-b:6379,[::1]:7002");
  EXPECT_EQ(parse_url("redis+cluster://h:1/0").cluster_nodes.size(), 1u);
  EXPECT_EQ(parse_url("redis+cluster://h:1?password=p").password, "p");
  EXPECT_NE(refusal("redis+cluster://h:1/2").find("only db 0"), std::string::npos);
  EXPECT_NE(refusal("redis+cluster://h:1?db=1").find("only db 0"), std::string::npos);
  EXPECT_NE(refusal("redis+cluster://h:1,").find("host"), std::string::npos);
  EXPECT_NE(refusal("redis+cluster://h:0").find("port"), std::string::npos);
  EXPECT_NE(refusal("redis+cluster://h?sentinel_user=x").find("sentinel_user"), std::string::npos);
  EXPECT_EQ(refusal("redis+cluster://u:topsecret@h:1/5").find("topsecret"), std::string::npos);
}

TEST(Url, SentinelListMasterNameAndDb) {
  const Endpoint ep = parse_url("redis+sentinel://s1.internal,10.0.0.2:26380,[::1]:5000/orders-main/2");
  ASSERT_EQ(ep.sentinels.size(), 3u);
  EXPECT_TRUE(ep.is_sentinel());
  EXPECT_EQ(ep.sentinels[0].host, "s1.internal");
  EXPECT_EQ(ep.sentinels[0].port, 26379);  // Sentinel's port by default
  EXPECT_EQ(ep.sentinels[1].host, "10.0.0.2");
  EXPECT_EQ(ep.sentinels[1].port, 26380);
  EXPECT_EQ(ep.sentinels[2].host, "::1");
  EXPECT_EQ(ep.sentinels[2].port, 5000);
  EXPECT_EQ(ep.master_name, "orders-main");
  EXPECT_EQ(ep.db, 2);
  EXPECT_TRUE(ep.password.empty());
  EXPECT_TRUE(ep.sentinel_password.empty());
  EXPECT_EQ(ep.describe(), "master orders-main of sentinels s1.internal:26379,10.0.0.2:26380,[::1]:5000");
}

TEST(Url, SentinelCredentialsAreSeparateFromTheDataNodes) {
  // The user info is the data nodes'; the sentinels' come in the query.
  const Endpoint ep = parse_url(
      "redis+sentinel://app:data%40pw@s1:26379/mymaster?sentinel_user=watch&sentinel_password=s%26p&db=1");
  EXPECT_EQ(ep.user, "app");
  EXPECT_EQ(ep.password, "data@pw");
  EXPECT_EQ(ep.sentinel_user, "watch");
  EXPECT_EQ(ep.sentinel_password, "s&p");
  EXPECT_EQ(ep.db, 1);
  ASSERT_EQ(ep.sentinels.size(), 1u);
  EXPECT_EQ(ep.master_name, "mymaster");
  const Endpoint plain = parse_url("redis+sentinel://s1/mymaster?sentinel_password=only");
  EXPECT_TRUE(plain.sentinel_user.empty());
  EXPECT_EQ(plain.sentinel_password, "only");
  EXPECT_FALSE(parse_url("redis://h").is_sentinel());
}

TEST(Url, RefusalIsAStreamqError) {
  // Callers that catch the root type see URL mistakes too.
  EXPECT_THROW(parse_url("http://x"), streamq::Error);
}

TEST(Url, RefusalsNeverShowThePassword) {
  const std::string tcp = refusal("redis://alice:hunter2@cache:0");
  EXPECT_EQ(tcp.find("hunter2"), std::string::npos) << tcp;
  EXPECT_NE(tcp.find("alice:***@cache:0"), std::string::npos) << tcp;
  const std::string only = refusal("redis://hunter2@cache:99999");
  EXPECT_EQ(only.find("hunter2"), std::string::npos) << only;
  const std::string unix_url = refusal("unix:///tmp/r.sock?password=hunter2&db=x");
  EXPECT_EQ(unix_url.find("hunter2"), std::string::npos) << unix_url;
  const std::string sentinel =
      refusal("redis+sentinel://a:hunter2@s1:0/m?password=hunter3&sentinel_password=hunter4");
  for (const char* secret : {"hunter2", "hunter3", "hunter4"}) {
    EXPECT_EQ(sentinel.find(secret), std::string::npos) << sentinel;
  }
  // An '@' after a '?' (in a query value, or after a '?' in a password) is refused, and nothing
  // after the scheme is shown; a misspelt key's value is hidden too.
  const std::string at_in_query = refusal("redis+sentinel://s1/m?sentinel_password=hun@ter5&db=x");
  EXPECT_EQ(at_in_query.find("ter5"), std::string::npos) << at_in_query;
  EXPECT_NE(at_in_query.find("percent-encode"), std::string::npos) << at_in_query;
  const std::string both = refusal("redis://u:p@zq9?wo=rk7@host");
  EXPECT_EQ(both.find("zq9"), std::string::npos) << both;
  EXPECT_EQ(both.find("rk7"), std::string::npos) << both;
  EXPECT_EQ(parse_url("redis+sentinel://s1/m?sentinel_password=hun%40ter5").sentinel_password, "hun@ter5");
  const std::string misspelt = refusal("redis+sentinel://s1/m?sentinel_pass=hunter6");
  EXPECT_EQ(misspelt.find("hunter6"), std::string::npos) << misspelt;
  // A '?' inside an unencoded password, and a query item without '='.
  const std::string question = refusal("redis://u:hun?ter7@cache:0");
  EXPECT_EQ(question.find("ter7"), std::string::npos) << question;
  EXPECT_EQ(question.find("hun"), std::string::npos) << question;
  const std::string bare = refusal("redis://cache?hunter8");
  EXPECT_EQ(bare.find("hunter8"), std::string::npos) << bare;
}

TEST(Url, DescribeBracketsIpv6) { EXPECT_EQ(parse_url("redis://[::1]:6380").describe(), "[::1]:6380"); }

}  // namespace
