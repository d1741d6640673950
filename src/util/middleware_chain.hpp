// SPDX-License-Identifier: MIT
// The one way a middleware chain runs, for the Consumer's (around a handler) and the
// Producer's (around an enqueue).
#pragma once

#include <cstddef>
#include <vector>

#include "streamq/middleware.hpp"

namespace streamq::detail {

/// Runs chain[i], chain[i + 1], ... around `last`, each with `arg` and a Next that runs the
/// rest. A middleware that calls next() a second time gets `Twice` (an exception type built
/// from a message) thrown from it.
template <class Twice, class Middleware, class Arg, class Last>
void run_chain(const std::vector<Middleware>& chain, std::size_t i, Arg& arg, const Last& last) {
  if (i == chain.size()) {
    last(arg);
    return;
  }
  struct Context {
    const std::vector<Middleware>* chain;
    std::size_t next;
    Arg* arg;
    const Last* last;
    mutable bool called = false;
  } context{&chain, i + 1, &arg, &last};
  chain[i](arg, Next(
                    [](const void* c) {
                      const auto* x = static_cast<const Context*>(c);
                      if (x->called) throw Twice("a middleware called next() twice");
                      x->called = true;
                      run_chain<Twice>(*x->chain, x->next, *x->arg, *x->last);
                    },
                    &context));
}

}  // namespace streamq::detail
