#include "server/jinja/jinja_budget.h"

#include "server/jinja/chat_template_error.h"

namespace octet::jinja {
namespace {
thread_local StepBudget* current_budget = nullptr;
}  // namespace

void fail_limit(const std::string& what, const std::string& limit) {
  throw ChatTemplateError(ChatTemplateError::Kind::Limit, what + " exceeds the chat template limit of " + limit, 0);
}

StepBudget::StepBudget(std::int64_t max_steps) : left_(max_steps), max_(max_steps), outer_(current_budget) {
  current_budget = this;
}
StepBudget::~StepBudget() { current_budget = outer_; }

void charge_steps(std::uint64_t n) {
  StepBudget* b = current_budget;
  if (!b) return;
  if (n > static_cast<std::uint64_t>(b->left_)) {
    b->left_ = 0;
    fail_limit("rendering", std::to_string(b->max_) + " steps");
  }
  b->left_ -= static_cast<std::int64_t>(n);
}

void check_value_bytes(std::uint64_t n) {
  if (n > kMaxValueBytes) fail_limit("a value of " + std::to_string(n) + " bytes", std::to_string(kMaxValueBytes) + " bytes per value");
}

void charge_string_bytes(std::uint64_t n) {
  check_value_bytes(n);
  if (n >= kBytesPerStep) charge_steps(n / kBytesPerStep);
}

std::uint64_t mul_size(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return kMaxValueBytes + 1;
  return r;
}

}  // namespace octet::jinja
