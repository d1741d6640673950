// SPDX-License-Identifier: MIT
#include "tls.hpp"

#include "streamq/errors.hpp"
#include "streamq/version.hpp"

#if STREAMQ_HAS_TLS
#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <filesystem>

#include <hiredis/hiredis.h>
#include <hiredis/hiredis_ssl.h>
#endif

namespace streamq::detail {

#if STREAMQ_HAS_TLS

class TlsContext {
 public:
  TlsContext(SSL_CTX* ctx, TlsOptions options) : ctx_(ctx), options_(std::move(options)) {}
  ~TlsContext() { SSL_CTX_free(ctx_); }
  TlsContext(const TlsContext&) = delete;
  TlsContext& operator=(const TlsContext&) = delete;

  SSL_CTX* ctx() const noexcept { return ctx_; }
  const TlsOptions& options() const noexcept { return options_; }

 private:
  SSL_CTX* ctx_;
  TlsOptions options_;
};

namespace {

/// The reasons OpenSSL queued on this thread, oldest first, "; "-separated (and the queue
/// emptied).
std::string openssl_errors() {
  std::string out;
  while (const unsigned long e = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(e, text, sizeof text);
    if (!out.empty()) out += "; ";
    out += text;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

[[noreturn]] void refuse(const std::string& field, const std::string& value, const char* what) {
  throw ConfigError("connection.tls." + field + " \"" + value + "\": " + what + ": " + openssl_errors());
}

bool is_ip_address(const std::string& host) {
  unsigned char buf[16];
  return inet_pton(AF_INET, host.c_str(), buf) == 1 || inet_pton(AF_INET6, host.c_str(), buf) == 1;
}

}  // namespace

std::shared_ptr<const TlsContext> make_tls_context(const TlsOptions& options) {
  if (options.cert_file.empty() != options.key_file.empty()) {
    throw ConfigError(
        "connection.tls.cert_file and connection.tls.key_file go together: set both or neither");
  }
  ERR_clear_error();
  SSL_CTX* raw = SSL_CTX_new(TLS_client_method());
  if (raw == nullptr)
    throw ConfigError("connection.tls: cannot create an OpenSSL context: " + openssl_errors());
  auto tls = std::make_shared<const TlsContext>(raw, options);
  // No passphrase prompt on the terminal for an encrypted key: it is refused instead.
  SSL_CTX_set_default_passwd_cb(raw, [](char*, int, int, void*) { return 0; });
  // Redis 6+ speaks TLS 1.2 and 1.3; nothing older is offered.
  SSL_CTX_set_min_proto_version(raw, TLS1_2_VERSION);
  SSL_CTX_set_verify(raw, options.verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, nullptr);
  // OpenSSL reads a CA directory lazily, at each handshake: a wrong path would only show as
  // every certificate refused.
  if (!options.ca_dir.empty() && !std::filesystem::is_directory(options.ca_dir)) {
    throw ConfigError("connection.tls.ca_dir \"" + options.ca_dir + "\": not a directory");
  }
  if (!options.ca_file.empty() || !options.ca_dir.empty()) {
    const char* file = options.ca_file.empty() ? nullptr : options.ca_file.c_str();
    const char* dir = options.ca_dir.empty() ? nullptr : options.ca_dir.c_str();
    if (SSL_CTX_load_verify_locations(raw, file, dir) != 1) {
      if (file != nullptr) refuse("ca_file", options.ca_file, "cannot load CA certificates");
      refuse("ca_dir", options.ca_dir, "cannot use as a CA directory");
    }
  } else if (SSL_CTX_set_default_verify_paths(raw) != 1) {
    throw ConfigError("connection.tls: cannot load the system's CA certificates: " + openssl_errors());
  }
  if (!options.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(raw, options.cert_file.c_str()) != 1) {
      refuse("cert_file", options.cert_file, "cannot load the client certificate");
    }
    if (SSL_CTX_use_PrivateKey_file(raw, options.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      refuse("key_file", options.key_file,
             "cannot load it as the key of connection.tls.cert_file (PEM, without a passphrase)");
    }
    if (SSL_CTX_check_private_key(raw) != 1) {
      refuse("key_file", options.key_file, "is not the key of connection.tls.cert_file");
    }
  }
  return tls;
}

std::string start_tls(redisContext* ctx, const TlsContext& tls, const std::string& host, bool& timed_out) {
  timed_out = false;
  const TlsOptions& o = tls.options();
  const std::string& name = o.server_name.empty() ? host : o.server_name;
  ERR_clear_error();
  SSL* ssl = SSL_new(tls.ctx());
  if (ssl == nullptr) return "cannot start TLS: " + openssl_errors();
  const bool ip = is_ip_address(name);
  bool ok = true;
  // SNI carries host names only (RFC 6066), never an address.
  if (!ip) ok = SSL_set_tlsext_host_name(ssl, name.c_str()) == 1;
  if (ok && o.verify) {
    ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str()) == 1
            : SSL_set1_host(ssl, name.c_str()) == 1;
  }
  if (!ok) {
    SSL_free(ssl);
    return "cannot check the server's name \"" + name + "\": " + openssl_errors();
  }
  errno = 0;
  if (redisInitiateSSL(ctx, ssl) == REDIS_OK) return {};  // the context owns ssl now
  const int saved_errno = errno;
  std::string why;
  const long verify = SSL_get_verify_result(ssl);
  if (o.verify && verify != X509_V_OK) {
    why = "the server's certificate is not accepted: " + std::string(X509_verify_cert_error_string(verify)) +
          " (checked against " +
          (o.ca_file.empty() && o.ca_dir.empty() ? std::string("the system's CAs")
                                                 : "connection.tls.ca_file/ca_dir") +
          " and the name \"" + name + "\")";
  } else if (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK) {
    timed_out = true;
    why = "no TLS handshake within the connect timeout: does this port serve TLS?";
  } else {
    why = std::string(ctx->errstr[0] != '\0' ? ctx->errstr : "TLS handshake failed") +
          " (does this port serve TLS? does the server want a client certificate: "
          "connection.tls.cert_file?)";
  }
  SSL_free(ssl);
  ERR_clear_error();
  return "TLS handshake: " + why;
}

std::string tls_failure_detail() {
  if (ERR_peek_error() == 0) return {};
  return "TLS: " + openssl_errors();
}

#else  // no TLS in this build

class TlsContext {};

std::shared_ptr<const TlsContext> make_tls_context(const TlsOptions&) {
  throw ConfigError(
      "connection.url: TLS (rediss://) needs a streamq built against hiredis >= 1.0 with hiredis_ssl and "
      "OpenSSL; this build has no TLS (see docs/tls.md, \"Building with TLS\")");
}

std::string start_tls(redisContext*, const TlsContext&, const std::string&, bool& timed_out) {
  timed_out = false;
  return "this build has no TLS";
}

std::string tls_failure_detail() { return {}; }

#endif

}  // namespace streamq::detail
