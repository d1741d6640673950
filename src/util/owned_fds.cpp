// SPDX-License-Identifier: MIT
#include "owned_fds.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace streamq::detail {
namespace {

constexpr int kTracked = 65536;
constexpr int kBits = 64;
std::array<std::atomic<std::uint64_t>, kTracked / kBits> g_owned{};

}  // namespace

void own_fd(int fd) noexcept {
  if (fd < 0) return;
  if (const int flags = fcntl(fd, F_GETFD); flags >= 0) fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
  if (fd >= kTracked) return;
  g_owned[static_cast<std::size_t>(fd / kBits)].fetch_or(std::uint64_t{1} << (fd % kBits),
                                                         std::memory_order_relaxed);
}

void disown_fd(int fd) noexcept {
  if (fd < 0 || fd >= kTracked) return;
  g_owned[static_cast<std::size_t>(fd / kBits)].fetch_and(~(std::uint64_t{1} << (fd % kBits)),
                                                          std::memory_order_relaxed);
}

void close_owned_fds(int keep) noexcept {
  const int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  for (std::size_t word = 0; word < g_owned.size(); ++word) {
    std::uint64_t bits = g_owned[word].exchange(0, std::memory_order_relaxed);
    while (bits != 0) {
      const int bit = __builtin_ctzll(bits);
      bits &= bits - 1;
      const int fd = static_cast<int>(word) * kBits + bit;
      if (fd == keep || fd == null) continue;
      if (null < 0 || dup3(null, fd, O_CLOEXEC) < 0) close(fd);
    }
  }
  if (null >= 0) close(null);
  if (keep >= 0) own_fd(keep);
}

}  // namespace streamq::detail
