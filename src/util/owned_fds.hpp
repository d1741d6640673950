// SPDX-License-Identifier: MIT
// The descriptors streamq owns in this process (its Redis connections, the process pool's
// sockets), so a process forked from it without an exec (the process executor's fork server)
// can close every one of them at once. Lock-free: the forked process reads the set after a
// fork of a threaded process, where a lock another thread held would stay held.
#pragma once

namespace streamq::detail {

/// Records `fd` as streamq's and marks it close-on-exec (a program a handler execs inherits
/// none of them). Descriptors past the set's range (65,536) are only marked.
void own_fd(int fd) noexcept;
/// `fd` is about to be closed by its owner.
void disown_fd(int fd) noexcept;
/// Closes the connection of every descriptor recorded, except `keep` (-1: none), in a freshly
/// forked process: each is replaced by /dev/null (close-on-exec), so its number is not reused
/// under an object that still names it (a Producer copied from the worker fails its next call,
/// reading end-of-file, and connects anew), and the worker's peers see nothing of this process.
void close_owned_fds(int keep = -1) noexcept;

}  // namespace streamq::detail
