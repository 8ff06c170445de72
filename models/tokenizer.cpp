// Tokenizer::from_gguf (reads and validates tokenizer.ggml.*) and StreamingDetokenizer.
#include "models/tokenizer.h"

#include <spdlog/spdlog.h>

#include <cmath>

#include "models/gguf.h"
#include "models/model_file_error.h"
#include "models/tokenizer_impl.h"
#include "models/tokenizer_json.h"
#include "models/unicode_utf8.h"

namespace octet {

namespace {

using tokenizer_detail::TokenizerData;

class MetadataReader {
 public:
  explicit MetadataReader(const GGUFFile& file) : file_(file) {}

  [[noreturn]] void fail(const std::string& problem) const {
    throw ModelFileError(file_.path(), tokenizer_detail::one_line(problem));
  }

  /// The array at `key` (nullptr when absent) whose elements are of a kind accepted by `ok`
  /// (checked once on the element type: GGUFArray stores one type per array).
  template <typename Ok>
  const GGUFArray* array(const std::string& key, bool required, Ok ok, const char* kind) const {
    const GGUFValue* v = file_.find(key);
    if (!v) {
      if (required) fail("missing " + key);
      return nullptr;
    }
    if (v->type != GGUFValueType::ARRAY) fail(key + " is not an array");
    const GGUFArray& a = v->array();
    if (!a.empty() && !ok(a.type())) fail(key + " must be an array of " + kind);
    return &a;
  }

  std::vector<std::string> strings(const std::string& key, bool required) const {
    std::vector<std::string> out;
    const auto* a = array(key, required, [](GGUFValueType t) { return t == GGUFValueType::STRING; },
                          "strings");
    if (!a) return out;
    out.reserve(a->size());
    for (size_t i = 0; i < a->size(); ++i) out.emplace_back(a->string_at(i));
    return out;
  }

  std::vector<float> floats(const std::string& key) const {
    std::vector<float> out;
    const auto* a = array(key, false, [](GGUFValueType t) {
      return t == GGUFValueType::FLOAT32 || t == GGUFValueType::FLOAT64 ||
             (t != GGUFValueType::BOOL && t != GGUFValueType::STRING && t != GGUFValueType::ARRAY);
    }, "numbers");
    if (!a) return out;
    out.reserve(a->size());
    for (size_t i = 0; i < a->size(); ++i) out.push_back(float(a->float_at(i)));
    return out;
  }

  std::vector<int32_t> ints(const std::string& key) const {
    std::vector<int32_t> out;
    const auto* a = array(key, false, [](GGUFValueType t) {
      return t != GGUFValueType::FLOAT32 && t != GGUFValueType::FLOAT64 &&
             t != GGUFValueType::BOOL && t != GGUFValueType::STRING && t != GGUFValueType::ARRAY;
    }, "integers");
    if (!a) return out;
    out.reserve(a->size());
    for (size_t i = 0; i < a->size(); ++i) {
      int64_t x = 0;
      try {
        x = a->int_at(i);
      } catch (const std::runtime_error& e) {
        fail(key + "[" + std::to_string(i) + "]: " + e.what());
      }
      if (x < INT32_MIN || x > INT32_MAX)
        fail(key + "[" + std::to_string(i) + "] = " + std::to_string(x) + " does not fit in int32");
      out.push_back(int32_t(x));
    }
    return out;
  }

  std::string string(const std::string& key, bool required) const {
    const GGUFValue* v = file_.find(key);
    if (!v) {
      if (required) fail("missing " + key);
      return {};
    }
    if (v->type != GGUFValueType::STRING) fail(key + " is not a string");
    return v->as_string();
  }

  bool boolean(const std::string& key, bool fallback) const {
    const GGUFValue* v = file_.find(key);
    if (!v) return fallback;
    if (v->type != GGUFValueType::BOOL) fail(key + " is not a bool");
    return v->as_bool();
  }

  /// A token id: `fallback` when absent, -1 for llama.cpp's "none"; outside [0, vocab) is a
  /// ModelFileError naming the key (GGUFFile::get_token_id) when `required`, else a warning
  /// and -1 (an unknown or padding id the file gets wrong does not stop generation).
  int32_t token_id(const std::string& key, int32_t fallback, size_t vocab, bool required) const {
    if (required) return file_.get_token_id(key, fallback, vocab);
    try {
      return file_.get_token_id(key, fallback, vocab);
    } catch (const ModelFileError& e) {
      spdlog::warn("{}; ignoring it", e.what());
      return -1;
    }
  }

 private:
  const GGUFFile& file_;
};

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GGUFFile& file) {
  const MetadataReader md(file);
  TokenizerData d;
  d.path = file.path();
  d.model = md.string("tokenizer.ggml.model", true);
  const bool llama = d.model == "llama", gpt2 = d.model == "gpt2";
  if (!llama && !gpt2) {
    md.fail("unsupported tokenizer.ggml.model '" + d.model + "' (supported: llama, gpt2)");
  }
  d.pre = md.string("tokenizer.ggml.pre", false);
  d.tokens = md.strings("tokenizer.ggml.tokens", true);
  const size_t n = d.tokens.size();
  if (n == 0) md.fail("tokenizer.ggml.tokens is empty");
  if (n > size_t(INT32_MAX)) md.fail("tokenizer.ggml.tokens is too long");

  d.scores = md.floats("tokenizer.ggml.scores");
  if (llama && d.scores.empty()) md.fail("missing tokenizer.ggml.scores (the llama tokenizer needs them)");
  if (!d.scores.empty() && d.scores.size() != n) {
    md.fail("tokenizer.ggml.scores has " + std::to_string(d.scores.size()) + " entries for " +
            std::to_string(n) + " tokens");
  }
  for (size_t i = 0; i < d.scores.size(); ++i) {  // NaN breaks the merge order's sort
    if (std::isnan(d.scores[i])) md.fail("tokenizer.ggml.scores[" + std::to_string(i) + "] is NaN");
  }
  d.types = md.ints("tokenizer.ggml.token_type");
  if (d.types.empty()) d.types.assign(n, tokenizer_detail::kNormal);
  if (d.types.size() != n) {
    md.fail("tokenizer.ggml.token_type has " + std::to_string(d.types.size()) + " entries for " +
            std::to_string(n) + " tokens");
  }
  d.merges = md.strings("tokenizer.ggml.merges", gpt2);

  // llama.cpp's defaults for SentencePiece vocabularies: <unk> 0, <s> 1, </s> 2, add BOS.
  d.bos_id = md.token_id("tokenizer.ggml.bos_token_id", llama ? 1 : -1, n, true);
  d.eos_id = md.token_id("tokenizer.ggml.eos_token_id", llama ? 2 : -1, n, true);
  d.unk_id = md.token_id("tokenizer.ggml.unknown_token_id", llama ? 0 : -1, n, false);
  const int32_t pad_id = md.token_id("tokenizer.ggml.padding_token_id", -1, n, false);
  d.add_bos = md.boolean("tokenizer.ggml.add_bos_token", llama);
  d.add_eos = md.boolean("tokenizer.ggml.add_eos_token", false);
  d.add_space_prefix = md.boolean("tokenizer.ggml.add_space_prefix", true);
  // HF makes the named BOS/EOS/UNK/PAD tokens special whatever their stored type.
  for (int32_t id : {d.bos_id, d.eos_id, d.unk_id, pad_id}) {
    if (id >= 0 && d.types[size_t(id)] != tokenizer_detail::kControl &&
        d.types[size_t(id)] != tokenizer_detail::kUnknown) {
      d.types[size_t(id)] = tokenizer_detail::kControl;
    }
  }
  return llama ? tokenizer_detail::make_llama_tokenizer(std::move(d))
               : tokenizer_detail::make_gpt2_tokenizer(std::move(d));
}

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special,
                                           const std::vector<int32_t>& context_ids)
    : tokenizer_(tokenizer), skip_special_(skip_special) {
  for (int32_t id : context_ids) push(id);  // text discarded; state (held bytes) kept
}

std::string StreamingDetokenizer::push(int32_t id) {
  std::string bytes = tokenizer_.token_bytes(id);  // throws for a bad id
  if (skip_special_ && tokenizer_.is_special(id)) return {};
  if (at_start_ && !bytes.empty()) {
    if (tokenizer_.strips_leading_space() && bytes[0] == ' ') bytes.erase(0, 1);
    at_start_ = false;
  }
  pending_ += bytes;
  std::string out;
  const size_t used = utf8::append_lossy(pending_, out, /*final=*/false);
  pending_.erase(0, used);
  return out;
}

std::string StreamingDetokenizer::finish() {
  std::string out;
  utf8::append_lossy(pending_, out, /*final=*/true);
  pending_.clear();
  return out;
}

}  // namespace octet
