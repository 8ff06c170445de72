#define PCRE2_CODE_UNIT_WIDTH 8
#include "models/bounded_regex.h"

#include <pcre2.h>

namespace octet {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR msg[256];
  if (pcre2_get_error_message(code, msg, sizeof msg) < 0) return "error " + std::to_string(code);
  return reinterpret_cast<const char*>(msg);
}

/// The pattern for messages: at most 80 bytes (a hostile pattern can be 64 KiB).
std::string shown(std::string_view p) {
  return p.size() <= 80 ? std::string(p) : std::string(p.substr(0, 80)) + "...";
}

}  // namespace

struct BoundedRegex::Impl {
  pcre2_code* code = nullptr;
  pcre2_match_context* match_ctx = nullptr;
  ~Impl() {
    pcre2_match_context_free(match_ctx);
    pcre2_code_free(code);
  }
};

BoundedRegex::BoundedRegex(std::string_view pattern)
    : pattern_(pattern), impl_(std::make_unique<Impl>()) {
  if (pattern.size() > kMaxPatternBytes)
    throw RegexLimitError("regex '" + shown(pattern) + "' is " + std::to_string(pattern.size()) +
                          " bytes, over the " + std::to_string(kMaxPatternBytes) + "-byte limit");
  pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
  if (!cc) throw std::bad_alloc();
  pcre2_set_parens_nest_limit(cc, kMaxNesting);
  pcre2_set_max_pattern_length(cc, kMaxPatternBytes);
  int error = 0;
  PCRE2_SIZE offset = 0;
  // PCRE2_ANCHORED: Python's re.match anchors at the start only (no $ implied).
  constexpr uint32_t kOptions = PCRE2_ANCHORED | PCRE2_UTF | PCRE2_UCP | PCRE2_NEVER_BACKSLASH_C;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                              kOptions, &error, &offset, cc);
  pcre2_compile_context_free(cc);
  if (!impl_->code)
    throw RegexLimitError("invalid regex '" + shown(pattern) + "' at offset " +
                          std::to_string(offset) + ": " + pcre2_message(error) +
                          (error == PCRE2_ERROR_PARENTHESES_NEST_TOO_DEEP
                               ? " (limit " + std::to_string(kMaxNesting) + ")"
                               : ""));
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);  // the interpreter when JIT is unavailable
  impl_->match_ctx = pcre2_match_context_create(nullptr);
  if (!impl_->match_ctx) throw std::bad_alloc();
  pcre2_set_match_limit(impl_->match_ctx, kMatchLimit);
  pcre2_set_depth_limit(impl_->match_ctx, kDepthLimit);
  pcre2_set_heap_limit(impl_->match_ctx, kHeapLimitKiB);
}

BoundedRegex::~BoundedRegex() = default;

bool BoundedRegex::match_prefix(std::string_view subject) const {
  pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
  if (!md) throw std::bad_alloc();
  const int rc = pcre2_match(impl_->code, reinterpret_cast<PCRE2_SPTR>(subject.data()),
                             subject.size(), 0, 0, md, impl_->match_ctx);
  pcre2_match_data_free(md);
  if (rc >= 0) return true;
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  throw RegexLimitError("regex '" + shown(pattern_) + "' on '" + shown(subject) +
                        "': " + pcre2_message(rc) + " (limits: " + std::to_string(kMatchLimit) +
                        " steps, depth " + std::to_string(kDepthLimit) + ")");
}

}  // namespace octet
