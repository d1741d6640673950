// SPDX-License-Identifier: MIT
#include "fate_args.hpp"

#include "codec.hpp"

namespace streamq::detail {

void append_retry(Argv& argv, std::string_view queue, const Fields& copy) {
  argv.add("retry").add(queue);
  for (const auto& [k, v] : copy) argv.add(k).add(v);
}

void append_hand_back(Argv& argv, std::string_view queue, const Fields& fields) {
  argv.add("back").add(queue);
  for (const auto& [k, v] : fields) argv.add(k).add(v);
}

void append_delayed_retry(Argv& argv, Millis delay, std::string nonce, std::string_view stream,
                          std::string_view queue, const Fields& copy, bool attempted) {
  argv.add(attempted ? "delay" : "hold")
      .add(static_cast<std::int64_t>(delay.count()))
      .add_copy(std::move(nonce))
      .add(stream);
  argv.add(queue);
  for (const auto& [k, v] : copy) argv.add(k).add(v);
}

void append_dead_letter(Argv& argv, std::string_view reason, std::string_view error,
                        std::string_view failed_at, std::string_view queue, const Fields& fields_read) {
  argv.add("dead_letter").add(reason).add(error).add(failed_at).add(static_cast<std::int64_t>(kMaxFields));
  argv.add(queue);
  for (const auto& [k, v] : fields_read) argv.add(k).add(v);
}

}  // namespace streamq::detail
