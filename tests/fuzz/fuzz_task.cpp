// SPDX-License-Identifier: MIT
// Fuzz target: an entry's fields, as anyone with write access to the stream could have written
// them, decoded into a Task. decode_task must never throw for bad input: it returns a Task whose
// accessors all work, or the reason the entry goes to the dead letters.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>

#include "streamq/task.hpp"
#include "wire/codec.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  if (in.empty()) return 0;
  // First byte: the delivery count; then NUL-separated name, value, name, value, ...
  const auto deliveries = static_cast<std::int64_t>(static_cast<unsigned char>(in[0]));
  in.remove_prefix(1);
  auto fields = std::make_shared<streamq::Fields>();
  std::string name;
  bool have_name = false;
  while (true) {
    const auto nul = in.find('\0');
    const std::string_view token = in.substr(0, nul);
    if (have_name) {
      fields->emplace_back(std::move(name), std::string(token));
    } else {
      name = std::string(token);
    }
    have_name = !have_name;
    if (nul == std::string_view::npos) break;
    in.remove_prefix(nul + 1);
  }
  streamq::detail::DecodeLimits limits;
  limits.max_payload_bytes = 4096;
  limits.max_payload_depth = 16;
  const streamq::detail::Decoded d = streamq::detail::decode_task("1-1", fields, deliveries, limits);
  if (const auto* task = std::get_if<streamq::Task>(&d)) {
    if (task->id().empty() || task->type().empty()) std::abort();  // a Task has both
    if (task->retry_count() < 0 || task->max_retries() < 0) std::abort();
    (void)task->json().dump();
    (void)task->field("payload");
    (void)task->created_at();
    if (task->fields().size() != fields->size()) std::abort();
    // A flow_children field (a parent's children's outcomes) is read as written or refused with
    // std::runtime_error; each child it yields came from within the field.
    try {
      const auto field = task->field(streamq::field::flow_children);
      for (const streamq::ChildResult& c : task->children_results()) {
        if (!field || c.task_id.size() + c.result.size() + c.error.size() > field->size()) std::abort();
      }
    } catch (const std::runtime_error&) {
    }
  } else if (std::get<std::string>(d).empty()) {
    std::abort();  // a refusal names its reason
  }
  return 0;
}
