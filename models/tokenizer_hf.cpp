// Tokenizer::from_hf_dir: a Hugging Face tokenizer.json (+ tokenizer_config.json) with a BPE
// model, in one of the two pipelines Llama-family checkpoints use:
//   byte-level   pre_tokenizer ByteLevel, alone or last in a Sequence after Split(regex,
//                Isolated) / Digits stages; decoder ByteLevel (GPT-2, SmolLM2, Llama-3, Qwen2);
//   SentencePiece normalizer Sequence[Prepend("▁"), Replace(" ", "▁")] and/or pre_tokenizer
//                Metaspace(replacement, prepend_scheme always|first|never, split); BPE with
//                byte_fallback; decoder Sequence[Replace("▁", " "), ByteFallback, Fuse,
//                Strip(" ", 1, 0)] or Metaspace (Llama-2, TinyLlama, Mistral).
// Encoding follows HF tokenizers: added tokens are cut out first (special ones only when
// parse_special; non-special ones always), then each remaining fragment is normalized,
// pre-tokenized, and each piece is BPE-merged by merge rank (MergeTable). ignore_merges: a piece
// that is itself a vocabulary token is emitted whole. Unknown characters: <0xNN> byte tokens with
// byte_fallback, else unk_token (consecutive ones fused with fuse_unk), else dropped.
// Not supported (ModelFileError naming tokenizer.json and the component): models other than
// BPE (Unigram, WordPiece, WordLevel), normalizers other than Prepend/Replace (e.g. NFC, NFKC,
// Lowercase), Split behaviours other than Isolated (except a plain-string Split the normalizer
// already removed every match of: Gemma's Replace(" ", "▁") then Split(" ", MergedWithPrevious),
// a no-op), continuing_subword_prefix/end_of_word_suffix,
// BPE dropout. Added-token flags lstrip/rstrip/single_word/normalized are ignored.
#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "config/file_read.h"
#include "models/model_file_error.h"
#include "models/tokenizer.h"
#include "models/tokenizer_impl.h"
#include "models/tokenizer_json.h"
#include "models/tokenizer_pretokenize.h"
#include "models/unicode_utf8.h"

namespace octet {

namespace tokenizer_detail {

namespace {

using nlohmann::json;

constexpr std::string_view kSpm = "\xE2\x96\x81";  // U+2581 "▁"

/// What tokenizer.json's normalizer, pre_tokenizer, model flags and decoder amount to.
struct Pipeline {
  bool byte_level = false;
  // normalizer: applied in order to each plain-text fragment
  struct Step {
    bool prepend;          // true: Prepend(text) to a non-empty fragment; false: Replace
    std::string from, to;  // Replace(from -> to); Prepend uses `to`
  };
  std::vector<Step> normalizer;
  // pre-tokenizer
  bool prefix_space = false;               // ByteLevel add_prefix_space
  std::vector<std::string> split_patterns;  // regex stages (byte-level)
  bool metaspace = false;
  std::string replacement = std::string(kSpm);
  enum class Prepend { Always, First, Never } prepend_scheme = Prepend::Always;
  bool metaspace_split = false;
  // model
  bool byte_fallback = false, ignore_merges = false, fuse_unk = false;
  int32_t unk_id = -1;  // model.unk_token (may differ from tokenizer_config's unk_token)
  // decoder
  bool decoder_strips_space = false;
};

/// How deep Sequence normalizers / pre_tokenizers / decoders / post_processors may nest
/// (real files: 1 level). Deeper: ModelFileError naming the component.
constexpr int kMaxSequenceDepth = 16;
/// Steps one Sequence may hold (real files: 2 to 5), so that a wide list costs nothing to reject.
constexpr size_t kMaxSequenceSteps = 64;
/// How many times the normalizer may lengthen a text (Replace(" ", "▁"): 3x; a chain of
/// lengthening Replace steps would grow a prompt exponentially).
constexpr double kMaxNormalizerGrowth = 64;
/// Special-token ids a TemplateProcessing post-processor may add around a text (real: 1 to 3),
/// and the entries of its "single" template.
constexpr size_t kMaxTemplateSpecialIds = 64;
constexpr size_t kMaxTemplateEntries = 256;

/// Token ids may leave gaps (padded vocabularies): every id in model.vocab / added_tokens must
/// be below (model.vocab entries + added_tokens entries + kTokenIdSlack). Bounds the dense
/// id tables by the file's own size.
constexpr int64_t kTokenIdSlack = 65536;

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw ModelFileError(path, one_line(problem));
}

std::string type_of(const json& j) {
  if (!j.is_object()) return "";
  const auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

/// Replace/Split patterns are {"String": s} or {"Regex": r}.
std::string pattern_text(const JsonFields& f, bool* is_regex) {
  if (const json* p = f.find("pattern"); p && p->is_object()) {
    const JsonFields pf(f.path(), *p, f.name("pattern"));
    if (const json* s = pf.find("String"); s && s->is_string()) {
      *is_regex = false;
      return s->get<std::string>();
    }
    if (const json* r = pf.find("Regex"); r && r->is_string()) {
      *is_regex = true;
      return r->get<std::string>();
    }
  }
  f.fail(f.name("pattern") + " is not {\"String\"|\"Regex\": string}");
}

std::string escape_regex(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}-/#").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

/// The components of a Sequence at `where` (normalizers / pretokenizers / decoders /
/// processors), after checking the nesting depth.
const json& sequence_steps(const JsonFields& f, const char* key, int depth) {
  if (depth >= kMaxSequenceDepth) {
    const std::string component = f.name(key).substr(0, f.name(key).find('.'));
    f.fail(component + ": Sequence nested deeper than " + std::to_string(kMaxSequenceDepth) +
           " levels");
  }
  const json& steps = f.array(key);
  if (steps.size() > kMaxSequenceSteps)
    f.fail(f.name(key) + ": a Sequence of " + std::to_string(steps.size()) + " steps (at most " +
           std::to_string(kMaxSequenceSteps) + ")");
  return steps;
}

std::string step_name(const JsonFields& f, const char* key, size_t i) {
  return f.name(key) + "[" + std::to_string(i) + "]";
}

void parse_normalizer(const JsonFields& f, Pipeline& p, int depth) {
  const std::string t = type_of(f.object());
  if (t == "Sequence") {
    const json& steps = sequence_steps(f, "normalizers", depth);
    for (size_t i = 0; i < steps.size(); ++i)
      parse_normalizer(JsonFields(f.path(), steps[i], step_name(f, "normalizers", i)), p,
                       depth + 1);
  } else if (t == "Prepend") {
    p.normalizer.push_back({true, "", f.str("prepend")});
  } else if (t == "Replace") {
    bool regex = false;
    const std::string from = pattern_text(f, &regex);
    if (regex || from.empty()) f.fail("unsupported normalizer Replace with a regex pattern");
    p.normalizer.push_back({false, from, f.str("content")});
  } else {
    f.fail("unsupported normalizer '" + t + "' (supported: Prepend, Replace, Sequence)");
  }
}

void parse_pre_tokenizer(const JsonFields& f, Pipeline& p, bool last, int depth) {
  const std::string t = type_of(f.object());
  if (t == "Sequence") {
    const json& steps = sequence_steps(f, "pretokenizers", depth);
    for (size_t i = 0; i < steps.size(); ++i)
      parse_pre_tokenizer(JsonFields(f.path(), steps[i], step_name(f, "pretokenizers", i)), p,
                          last && i + 1 == steps.size(), depth + 1);
  } else if (t == "ByteLevel") {
    if (!last) f.fail("pre_tokenizer ByteLevel must be the last step of the Sequence");
    p.byte_level = true;
    p.prefix_space = f.flag("add_prefix_space", true);
    if (f.flag("use_regex", true)) p.split_patterns.push_back(byte_level_pattern());
  } else if (t == "Split") {
    bool regex = false;
    const std::string pat = pattern_text(f, &regex);
    // Gemma's tokenizer.json: normalizer Replace(" " -> "▁"), then Split(" ",
    // MergedWithPrevious). The normalizer runs first, so no " " is left to split on: whatever
    // the behavior, a plain-string Split on a text every normalizer Replace removed is a no-op.
    const auto removed = [&] {
      if (regex || pat.empty() || p.normalizer.empty()) return false;
      bool replaced = false;
      for (const Pipeline::Step& n : p.normalizer) {
        if (n.to.find(pat) != std::string::npos) return false;  // a later step could add it
        replaced |= !n.prepend && n.from == pat;
      }
      return replaced;
    };
    if (!f.flag("invert", false) && removed()) return;
    if (f.str("behavior") != "Isolated" || f.flag("invert", false))
      f.fail("unsupported pre_tokenizer Split behavior '" + f.str("behavior") +
             "' (supported: Isolated, invert false)");
    p.split_patterns.push_back(regex ? pat : escape_regex(pat));
  } else if (t == "Digits") {
    p.split_patterns.push_back(f.flag("individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
  } else if (t == "Metaspace") {
    p.metaspace = true;
    p.replacement = f.str("replacement", std::string(kSpm));
    if (p.replacement.empty()) f.fail("pre_tokenizer Metaspace has an empty replacement");
    const std::string scheme =
        f.str("prepend_scheme", f.flag("add_prefix_space", true) ? "always" : "never");
    if (scheme == "always") p.prepend_scheme = Pipeline::Prepend::Always;
    else if (scheme == "first") p.prepend_scheme = Pipeline::Prepend::First;
    else if (scheme == "never") p.prepend_scheme = Pipeline::Prepend::Never;
    else f.fail("unsupported Metaspace prepend_scheme '" + scheme + "'");
    p.metaspace_split = f.flag("split", true);
  } else {
    f.fail("unsupported pre_tokenizer '" + t +
           "' (supported: ByteLevel, Split, Digits, Metaspace, Sequence)");
  }
}

/// Decoders: ByteLevel (byte-level) or the SentencePiece set; sets decoder_strips_space.
void parse_decoder(const JsonFields& f, Pipeline& p, int depth) {
  const std::string t = type_of(f.object());
  if (t == "Sequence") {
    const json& steps = sequence_steps(f, "decoders", depth);
    for (size_t i = 0; i < steps.size(); ++i)
      parse_decoder(JsonFields(f.path(), steps[i], step_name(f, "decoders", i)), p, depth + 1);
  } else if (t == "ByteLevel") {
    if (!p.byte_level) f.fail("decoder ByteLevel without a ByteLevel pre_tokenizer");
  } else if (t == "Replace" || t == "ByteFallback" || t == "Fuse") {
    // transformers' GGUF conversion (5.x) writes Sequence[ByteFallback, Fuse, Replace("▁"," "),
    // ByteLevel] for byte-level vocabularies. With a byte-level alphabet no token is "<0xNN>"
    // or holds "▁", so these steps change nothing there: accept and skip them.
    if (p.byte_level) return;
    if (t == "Replace") {
      bool regex = false;
      const std::string from = pattern_text(f, &regex);
      if (regex || from != p.replacement || f.str("content") != " ")
        f.fail("unsupported decoder Replace (supported: \"" + p.replacement + "\" -> \" \")");
    }
  } else if (t == "Strip") {
    if (f.str("content") != " " || f.integer("start", 0) > 1 || f.integer("stop", 0) != 0)
      f.fail("unsupported decoder Strip (supported: content \" \", start 0|1, stop 0)");
    p.decoder_strips_space = f.integer("start", 0) == 1;
  } else if (t == "Metaspace") {
    if (p.byte_level) f.fail("decoder Metaspace with a ByteLevel pre_tokenizer");
    const std::string scheme =
        f.str("prepend_scheme", f.flag("add_prefix_space", true) ? "always" : "never");
    p.decoder_strips_space = scheme != "never";
  } else {
    f.fail("unsupported decoder '" + t +
           "' (supported: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace)");
  }
}

/// The bytes a byte-level token text stands for (HF's ByteLevel decoder); a text with a
/// character outside GPT-2's byte alphabet stands for its own UTF-8.
std::string unspell(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size(); i += utf8::char_len(text, i)) {
    const int b = utf8::unicode_to_byte(utf8::decode_at(text, i));
    if (b < 0) return std::string(text);
    out.push_back(char(b));
  }
  return out;
}

std::string spell(std::string_view bytes) {
  std::string out;
  for (char c : bytes) utf8::append_code_point(utf8::byte_to_unicode()[uint8_t(c)], out);
  return out;
}

/// Calls match(pos) for each occurrence of `pattern` (non-empty) in `text`, left to right,
/// non-overlapping (as std::string::find stepping past each match). Knuth-Morris-Pratt:
/// O(text + pattern) whatever the pattern (std::string::find is O(text * pattern)).
template <typename Match>
void for_each_match(std::string_view text, std::string_view pattern, Match match) {
  const size_t m = pattern.size();
  if (m == 0) return;
  std::vector<size_t> fail_to(m, 0);  // longest proper border of pattern[0..i]
  for (size_t i = 1, k = 0; i < m; ++i) {
    while (k > 0 && pattern[i] != pattern[k]) k = fail_to[k - 1];
    if (pattern[i] == pattern[k]) ++k;
    fail_to[i] = k;
  }
  for (size_t i = 0, k = 0; i < text.size(); ++i) {
    while (k > 0 && text[i] != pattern[k]) k = fail_to[k - 1];
    if (text[i] == pattern[k]) ++k;
    if (k == m) {
      match(i + 1 - m);
      k = 0;  // non-overlapping: start afresh after the match
    }
  }
}

/// `s` with every non-overlapping `from` (non-empty) replaced by `to`, left to right. Linear.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t done = 0;
  for_each_match(s, from, [&](size_t pos) {
    out.append(s.substr(done, pos - done));
    out.append(to);
    done = pos + from.size();
  });
  out.append(s.substr(done));
  return out;
}

/// The Split/ByteLevel regex stages; a pattern PCRE2 rejects is a ModelFileError.
PreTokenizer make_pre_tokenizer(const std::string& path, const std::vector<std::string>& patterns) {
  try {
    return PreTokenizer(patterns);
  } catch (const std::invalid_argument& e) {
    fail(path, std::string("pre_tokenizer: ") + e.what());
  }
}

class HFBpeTokenizer final : public TokenizerBase {
 public:
  HFBpeTokenizer(TokenizerData&& data, Pipeline pipeline,
                 const std::vector<std::pair<std::string, std::string>>& merges)
      : TokenizerBase(std::move(data)), p_(std::move(pipeline)),
        pre_(make_pre_tokenizer(data_.path, p_.split_patterns)) {
    const size_t n = data_.tokens.size();
    bytes_.resize(n);
    for (size_t id = 0; id < n; ++id) {
      const std::string& t = data_.tokens[id];
      if (p_.byte_level) {
        bytes_[id] = unspell(t);
      } else if (const int b = byte_token_value(t); b >= 0) {
        bytes_[id] = std::string(1, char(b));
      } else {
        bytes_[id] = replace_all(t, p_.replacement, " ");
      }
    }
    for (int b = 0; b < 256; ++b) {
      if (p_.byte_level) {
        byte_ids_[size_t(b)] = token_to_id(spell(std::string(1, char(b))));
      } else {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        byte_ids_[size_t(b)] = token_to_id(name);
      }
    }
    for (size_t i = 0; i < merges.size(); ++i) {
      const auto& [a, b] = merges[i];
      const int32_t l = token_to_id(a), r = token_to_id(b), m = token_to_id(a + b);
      if (l < 0 || r < 0 || m < 0)
        fail(data_.path, "model.merges[" + std::to_string(i) + "] " + quote(a + " " + b) +
                             " uses a token not in the vocabulary");
      merges_.add(l, r, m);
    }
  }

  bool strips_leading_space() const override { return p_.decoder_strips_space; }

 private:
  void encode_text(std::string_view text, bool at_text_start,
                   std::vector<int32_t>& out) const override {
    std::string s(text);
    for (const Pipeline::Step& step : p_.normalizer) {
      if (step.prepend) {
        if (!s.empty()) s.insert(0, step.to);
      } else {
        s = replace_all(s, step.from, step.to);
      }
    }
    if (p_.byte_level) {
      if (p_.prefix_space && !s.empty() && s[0] != ' ') s.insert(0, " ");
      for (std::string_view piece : pre_.split(s)) encode_piece_byte_level(piece, out);
      return;
    }
    if (p_.metaspace) {
      s = replace_all(s, " ", p_.replacement);
      const bool starts = s.compare(0, p_.replacement.size(), p_.replacement) == 0;
      if (!starts && (p_.prepend_scheme == Pipeline::Prepend::Always ||
                      (p_.prepend_scheme == Pipeline::Prepend::First && at_text_start)))
        s.insert(0, p_.replacement);
      if (p_.metaspace_split) {  // MergedWithNext: each piece starts at a replacement
        size_t begin = 0;
        // Occurrences after byte 0, as find(replacement, 1) stepping past each one.
        const std::string_view rest = std::string_view(s).substr(s.empty() ? 0 : 1);
        for_each_match(rest, p_.replacement, [&](size_t pos) {
          encode_piece_chars(std::string_view(s).substr(begin, pos + 1 - begin), out);
          begin = pos + 1;
        });
        encode_piece_chars(std::string_view(s).substr(begin), out);
        return;
      }
    }
    encode_piece_chars(s, out);
  }

  void encode_piece_byte_level(std::string_view piece, std::vector<int32_t>& out) const {
    if (piece.empty()) return;
    if (p_.ignore_merges) {
      if (const int32_t id = token_to_id(spell(piece)); id >= 0) {
        out.push_back(id);
        return;
      }
    }
    std::vector<int32_t> ids;
    ids.reserve(piece.size());
    for (char c : piece) {
      const int32_t id = byte_ids_[static_cast<uint8_t>(c)];
      if (id >= 0) ids.push_back(id);
      else push_unk(ids);
    }
    merges_.apply(ids);
    out.insert(out.end(), ids.begin(), ids.end());
  }

  /// SentencePiece-style: characters looked up whole, then byte fallback, then unk.
  void encode_piece_chars(std::string_view piece, std::vector<int32_t>& out) const {
    if (piece.empty()) return;
    if (p_.ignore_merges) {
      if (const int32_t id = token_to_id(piece); id >= 0) {
        out.push_back(id);
        return;
      }
    }
    std::vector<int32_t> ids;
    ids.reserve(piece.size());
    for (size_t i = 0; i < piece.size();) {
      const size_t len = utf8::char_len(piece, i);
      const std::string_view ch = piece.substr(i, len);
      i += len;
      if (const int32_t id = token_to_id(ch); id >= 0) {
        ids.push_back(id);
        continue;
      }
      bool have_bytes = p_.byte_fallback;
      for (char c : ch) have_bytes = have_bytes && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (have_bytes) {
        for (char c : ch) ids.push_back(byte_ids_[static_cast<uint8_t>(c)]);
      } else {
        push_unk(ids);
      }
    }
    merges_.apply(ids);
    out.insert(out.end(), ids.begin(), ids.end());
  }

  void push_unk(std::vector<int32_t>& ids) const {
    if (p_.unk_id < 0) return;  // HF without model.unk_token: the character is dropped
    if (p_.fuse_unk && !ids.empty() && ids.back() == p_.unk_id) return;
    ids.push_back(p_.unk_id);
  }

  Pipeline p_;
  PreTokenizer pre_;
  std::array<int32_t, 256> byte_ids_{};  // byte-level: the single-byte token; else <0xNN>
  MergeTable merges_;
};

/// tokenizer_config.json's "bos_token" etc.: a string, {"content": ...} or null.
std::optional<std::string> special_text(const JsonFields& cfg, const char* key) {
  const json* v = cfg.find(key);
  if (!v) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (v->is_object()) {
    if (const json* c = JsonFields(cfg.path(), *v, key).find("content"); c && c->is_string())
      return c->get<std::string>();
  }
  cfg.fail(std::string(key) + " must be a string or {\"content\": string}");
}

/// TemplateProcessing "single": the special token ids before and after $A, each checked to be
/// in [0, vocab).
void template_specials(const JsonFields& f, size_t vocab, std::vector<int32_t>& before,
                       std::vector<int32_t>& after, int depth) {
  const std::string t = type_of(f.object());
  if (t == "Sequence") {
    const json& steps = sequence_steps(f, "processors", depth);
    for (size_t i = 0; i < steps.size(); ++i)
      template_specials(JsonFields(f.path(), steps[i], step_name(f, "processors", i)), vocab,
                        before, after, depth + 1);
    return;
  }
  if (t != "TemplateProcessing") return;  // ByteLevel etc. add no tokens
  const json* specials = f.find("special_tokens");
  if (specials && !specials->is_object()) f.fail(f.name("special_tokens") + " is not an object");
  bool seen_a = false;
  const json& single = f.array("single");
  if (single.size() > kMaxTemplateEntries)
    f.fail(f.name("single") + ": " + std::to_string(single.size()) + " entries (at most " +
           std::to_string(kMaxTemplateEntries) + ")");
  for (size_t i = 0; i < single.size(); ++i) {
    const JsonFields piece(f.path(), single[i], step_name(f, "single", i));
    if (piece.find("Sequence")) {
      seen_a = true;
    } else if (const json* st = piece.find("SpecialToken")) {
      if (!st->is_object()) piece.fail(piece.name("SpecialToken") + " is not an object");
      const std::string name =
          JsonFields(f.path(), *st, piece.name("SpecialToken")).str("id");
      if (!specials) continue;
      const auto it = specials->find(name);
      if (it == specials->end()) continue;
      const JsonFields entry(f.path(), *it, f.name("special_tokens") + "[" + quote(name) + "]");
      const json& ids = entry.array("ids");
      for (size_t k = 0; k < ids.size(); ++k) {
        const json& x = ids[k];
        const std::string where = step_name(entry, "ids", k);
        if (!x.is_number_integer()) entry.fail(where + " is not an integer id");
        const bool in_vocab = x.is_number_unsigned() ? x.get<uint64_t>() < vocab
                                                     : x.get<int64_t>() >= 0 &&
                                                           uint64_t(x.get<int64_t>()) < vocab;
        if (!in_vocab)
          entry.fail(where + ": id " + x.dump() + " outside the vocabulary [0, " +
                     std::to_string(vocab) + ")");
        (seen_a ? after : before).push_back(int32_t(x.get<int64_t>()));
        if (before.size() + after.size() > kMaxTemplateSpecialIds)
          f.fail(f.name("single") + ": adds more than " + std::to_string(kMaxTemplateSpecialIds) +
                 " special-token ids around a text");
      }
    }
  }
}

/// model.vocab {text: id} and added_tokens [{id, content, special}] into d.tokens / d.types.
/// Ids are bounded by the entry count + kTokenIdSlack (the dense tables are sized by them).
void read_vocabulary(const JsonFields& model, const JsonFields& top, TokenizerData& d) {
  const json* vocab = model.find("vocab");
  if (!vocab || !vocab->is_object() || vocab->empty()) model.fail("model.vocab is missing or empty");
  const json& added = top.array("added_tokens");
  const int64_t max_id = int64_t(vocab->size() + added.size()) + kTokenIdSlack;
  auto place = [&](const json& id_json, const std::string& text, auto where) -> size_t {
    if (!id_json.is_number_integer()) model.fail(where() + " is not an integer id");
    const bool ok = id_json.is_number_unsigned() ? id_json.get<uint64_t>() < uint64_t(max_id)
                                                 : id_json.get<int64_t>() >= 0 &&
                                                       id_json.get<int64_t>() < max_id;
    if (!ok)
      model.fail(where() + ": id " + id_json.dump() + " is negative or beyond the " +
                 std::to_string(max_id - kTokenIdSlack) + " entries of model.vocab and " +
                 "added_tokens (+" + std::to_string(kTokenIdSlack) + ")");
    const size_t id = id_json.get<size_t>();
    if (id >= d.tokens.size()) {
      d.tokens.resize(id + 1);
      d.types.resize(id + 1, kUnused);
    }
    d.tokens[id] = text;
    if (d.types[id] == kUnused) d.types[id] = kNormal;
    return id;
  };
  for (const auto& [text, id] : vocab->items())
    place(id, text, [&, &text = text] { return "model.vocab[" + quote(text) + "]"; });
  for (size_t i = 0; i < added.size(); ++i) {
    const JsonFields a(top.path(), added[i], "added_tokens[" + std::to_string(i) + "]");
    const json* id = a.find("id");
    const json* content = a.find("content");
    if (!added[i].is_object() || !id || !content || !content->is_string())
      a.fail("added_tokens[" + std::to_string(i) + "] needs an integer id and a string content");
    const size_t at = place(*id, content->get<std::string>(), [&] { return a.name("id"); });
    d.types[at] = a.flag("special", false) ? kControl : kUserDefined;
  }
}

/// model.merges: "left right" strings or [left, right] pairs.
std::vector<std::pair<std::string, std::string>> read_merges(const JsonFields& model) {
  std::vector<std::pair<std::string, std::string>> merges;
  const json& mj = model.array("merges");
  merges.reserve(mj.size());
  for (size_t i = 0; i < mj.size(); ++i) {
    const json& m = mj[i];
    const std::string where = "model.merges[" + std::to_string(i) + "]";
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        model.fail(where + " is not 'left right': " + quote(s));
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
    } else {
      model.fail(where + " is neither 'a b' nor [a, b]");
    }
  }
  return merges;
}

}  // namespace

}  // namespace tokenizer_detail

std::unique_ptr<Tokenizer> Tokenizer::from_hf_dir(const std::string& dir) {
  using namespace tokenizer_detail;
  const std::string path = dir + "/tokenizer.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) fail(dir, "missing tokenizer.json");
  const json tj = read_json_file(path, kMaxTokenizerJsonBytes);
  const JsonFields top(path, tj, "");

  const json* mi = top.find("model");
  if (!mi || !mi->is_object()) fail(path, "missing model");
  const JsonFields model(path, *mi, "model");
  const std::string model_type = model.find("type") ? type_of(*mi) : "BPE";
  if (model_type != "BPE")
    fail(path, "unsupported model type '" + model_type + "' (supported: BPE)");
  if (model.find("dropout")) fail(path, "unsupported model.dropout (BPE dropout)");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!model.str(k).empty()) fail(path, std::string("unsupported model.") + k);
  }

  Pipeline p;
  p.byte_fallback = model.flag("byte_fallback", false);
  p.ignore_merges = model.flag("ignore_merges", false);
  p.fuse_unk = model.flag("fuse_unk", false);
  if (const json* n = top.find("normalizer")) {
    parse_normalizer(JsonFields(path, *n, "normalizer"), p, 0);
    // Each Replace multiplies the worst-case length by |content| / |pattern|; Prepend adds one
    // string per fragment (at most doubling a one-byte fragment's length per byte prepended).
    double growth = 1;
    for (const auto& step : p.normalizer)
      growth *= step.prepend ? 1.0 + double(step.to.size())
                             : std::max(1.0, double(step.to.size()) / double(step.from.size()));
    if (growth > kMaxNormalizerGrowth)
      throw ModelFileError(path, "normalizer: its steps can lengthen a text " +
                                     std::to_string(int64_t(std::min(growth, 1e18))) +
                                     "-fold (at most " +
                                     std::to_string(int64_t(kMaxNormalizerGrowth)) + ")");
  }
  if (const json* pt = top.find("pre_tokenizer"))
    parse_pre_tokenizer(JsonFields(path, *pt, "pre_tokenizer"), p, true, 0);
  if (const json* dec = top.find("decoder")) parse_decoder(JsonFields(path, *dec, "decoder"), p, 0);
  if (!p.byte_level && !p.metaspace && p.normalizer.empty())
    fail(path, "unsupported pipeline: neither a ByteLevel pre_tokenizer nor a SentencePiece-style "
               "Metaspace pre_tokenizer or Prepend/Replace normalizer");
  // Byte-level BPE covers every byte, so byte_fallback can never trigger there (transformers'
  // GGUF conversion sets it anyway): ignore it.
  if (p.byte_level) p.byte_fallback = false;

  TokenizerData d;
  d.path = path;
  d.model = p.byte_level ? "gpt2" : "llama";
  read_vocabulary(model, top, d);
  const std::vector<std::pair<std::string, std::string>> merges = read_merges(model);

  auto id_of = [&](const std::string& text) -> int32_t {
    for (size_t id = 0; id < d.tokens.size(); ++id)  // once per special token; vocab order
      if (d.types[id] != kUnused && d.tokens[id] == text) return int32_t(id);
    return -1;
  };
  if (const std::string unk = model.str("unk_token"); !unk.empty()) {
    d.unk_id = p.unk_id = id_of(unk);
    if (d.unk_id < 0) fail(path, "model.unk_token " + quote(unk) + " is not in the vocabulary");
  }

  // Special tokens and BOS/EOS: tokenizer_config.json, else the post-processor's template.
  std::vector<int32_t> tmpl_before, tmpl_after;
  if (const json* pp = top.find("post_processor"))
    template_specials(JsonFields(path, *pp, "post_processor"), d.tokens.size(), tmpl_before,
                      tmpl_after, 0);
  d.add_bos = !tmpl_before.empty();
  d.add_eos = !tmpl_after.empty();
  if (!tmpl_before.empty()) d.bos_id = tmpl_before.front();
  if (!tmpl_after.empty()) d.eos_id = tmpl_after.back();
  bool bos_decided = !tmpl_before.empty();

  int32_t pad_id = -1;
  const std::string cfg_path = dir + "/tokenizer_config.json";
  if (std::filesystem::is_regular_file(cfg_path, ec)) {
    const json cfg_json = read_json_file(cfg_path, kMaxJsonConfigBytes);
    const JsonFields cfg(cfg_path, cfg_json, "");
    auto named = [&](const char* key) -> int32_t {
      const auto text = special_text(cfg, key);
      if (!text) return -1;
      const int32_t id = id_of(*text);
      if (id < 0) cfg.fail(std::string(key) + " " + quote(*text) + " is not in the vocabulary");
      return id;
    };
    if (const int32_t id = named("bos_token"); id >= 0) d.bos_id = id;
    if (const int32_t id = named("eos_token"); id >= 0) d.eos_id = id;
    if (const int32_t id = named("unk_token"); id >= 0) d.unk_id = id;
    pad_id = named("pad_token");
    if (const json* v = cfg.find("add_bos_token"); v && v->is_boolean()) {
      d.add_bos = v->get<bool>();
      bos_decided = true;
    }
    if (const json* v = cfg.find("add_eos_token"); v && v->is_boolean()) d.add_eos = v->get<bool>();
  }
  if (!bos_decided) d.add_bos = !p.byte_level;  // LlamaTokenizer's default; byte-level: no
  // As HF: the named BOS/EOS/UNK/PAD tokens are special whatever added_tokens says.
  for (int32_t id : {d.bos_id, d.eos_id, d.unk_id, pad_id})
    if (id >= 0 && d.types[size_t(id)] != kUnknown) d.types[size_t(id)] = kControl;
  d.add_space_prefix = p.decoder_strips_space;

  return std::make_unique<HFBpeTokenizer>(std::move(d), std::move(p), merges);
}

}  // namespace octet
