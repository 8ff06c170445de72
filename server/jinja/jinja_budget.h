#pragma once
// The budgets of octet's Jinja interpreter: a chat template (from a model file or
// --chat-template) and the request data it renders are not trusted to terminate or to stay
// small, so parsing and rendering are bounded. Exceeding a limit throws
// ChatTemplateError(kind Limit) whose message names the limit and its value.
//   steps:        one per expression evaluated, loop iteration, container element built or
//                 iterated, and per kBytesPerStep bytes of string built. 50 million steps take a
//                 few seconds; real templates over long conversations use well under 1%.
//   output/value: the rendered text, and any string, list or dict built, hold at most 64 MiB
//                 (request bodies are at most 16 MiB, so a 15 MB message still renders).
//   nesting:      parse depth (nested brackets, operators, filter/attribute chains and blocks,
//                 counted together) 256; render depth (nested evaluation and blocks, macro calls
//                 included) 1024; macro call depth 128; value nesting 512; JSON context depth 256.
// Each parse level uses about 2 KiB of native stack and each render level under 1 KiB (Release),
// so the deepest input stays far inside an 8 MiB thread stack (test_chat_template measures it).
#include <cstddef>
#include <cstdint>
#include <string>

namespace octet::jinja {

inline constexpr std::int64_t kMaxSteps = 50'000'000;
inline constexpr std::uint64_t kMaxOutputBytes = 64ull << 20;
inline constexpr std::uint64_t kMaxValueBytes = 64ull << 20;
inline constexpr std::uint64_t kBytesPerStep = 256;
inline constexpr int kMaxParseDepth = 256;
inline constexpr int kMaxRenderDepth = 1024;
inline constexpr int kMaxMacroDepth = 128;
inline constexpr int kMaxValueDepth = 512;
inline constexpr int kMaxJsonDepth = 256;

/// Throws ChatTemplateError(Limit, "<what> exceeds the chat template limit of <limit>", line 0).
[[noreturn]] void fail_limit(const std::string& what, const std::string& limit);

/// The step budget of the render running on this thread (none outside render(): no-op).
class StepBudget {
 public:
  explicit StepBudget(std::int64_t max_steps);
  ~StepBudget();
  StepBudget(const StepBudget&) = delete;
  StepBudget& operator=(const StepBudget&) = delete;

 private:
  friend void charge_steps(std::uint64_t n);
  std::int64_t left_;
  std::int64_t max_;
  StepBudget* outer_;
};

/// Takes `n` steps from this thread's current StepBudget; throws when it runs out.
void charge_steps(std::uint64_t n);
/// Charges building `n` bytes of string (n / kBytesPerStep steps) and checks n <= kMaxValueBytes.
void charge_string_bytes(std::uint64_t n);
/// Throws when a string or container of `n` bytes would exceed kMaxValueBytes.
void check_value_bytes(std::uint64_t n);
/// a * b, or kMaxValueBytes + 1 on overflow (for size pre-checks).
std::uint64_t mul_size(std::uint64_t a, std::uint64_t b);

}  // namespace octet::jinja
