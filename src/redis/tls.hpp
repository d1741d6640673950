// SPDX-License-Identifier: MIT
// TLS for rediss:// connections: an OpenSSL client context made once per connection config,
// and the handshake on a connected hiredis context. Built only when streamq links
// hiredis_ssl (hiredis >= 1.0) and OpenSSL; otherwise every rediss:// URL is a ConfigError.
#pragma once

#include <memory>
#include <string>

#include "streamq/common.hpp"

struct redisContext;

namespace streamq::detail {

/// An OpenSSL client context (SSL_CTX) with the CAs, client certificate and checks of one
/// TlsOptions. Shared by the connections of one Producer, Consumer, ...
class TlsContext;

/// Makes the context for `options` (already merged from the URL and ConnectionOptions::tls).
/// Throws ConfigError naming the field when a file cannot be read or the key does not match
/// the certificate, or when this build has no TLS.
std::shared_ptr<const TlsContext> make_tls_context(const TlsOptions& options);

/// The TLS handshake on `ctx`, a connected TCP context whose socket timeout bounds it, checking
/// the certificate against `host` (or TlsOptions::server_name). On failure returns a message
/// that says why (certificate checks, a timeout: "does this port serve TLS?"; `timed_out` is
/// then set) and leaves the context for the caller to free; returns an empty string on success.
std::string start_tls(redisContext* ctx, const TlsContext& tls, const std::string& host, bool& timed_out);

/// After an I/O error on a TLS connection, on the thread that saw it: the reasons OpenSSL
/// queued (a TLS alert of the server, e.g. "certificate required" when it wants a client
/// certificate, which TLS 1.3 reports only at the first read); "" when none.
std::string tls_failure_detail();

}  // namespace streamq::detail
