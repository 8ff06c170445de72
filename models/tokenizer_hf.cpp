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
// Lowercase), Split behaviours other than Isolated, continuing_subword_prefix/end_of_word_suffix,
// BPE dropout. Added-token flags lstrip/rstrip/single_word/normalized are ignored.
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "models/model_file_error.h"
#include "models/tokenizer.h"
#include "models/tokenizer_impl.h"
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

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw ModelFileError(path, problem);
}

std::string type_of(const json& j) {
  const auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

/// A string field, or `fallback` when absent/null.
std::string str(const json& j, const char* key, const std::string& fallback = "") {
  const auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

bool flag(const json& j, const char* key, bool fallback) {
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : fallback;
}

/// Replace/Split patterns are {"String": s} or {"Regex": r}.
std::string pattern_text(const std::string& path, const json& j, const std::string& where,
                         bool* is_regex) {
  const auto p = j.find("pattern");
  if (p != j.end() && p->is_object()) {
    if (p->contains("String") && (*p)["String"].is_string()) {
      *is_regex = false;
      return (*p)["String"];
    }
    if (p->contains("Regex") && (*p)["Regex"].is_string()) {
      *is_regex = true;
      return (*p)["Regex"];
    }
  }
  fail(path, where + " has no pattern {\"String\"|\"Regex\": ...}");
}

std::string escape_regex(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view("\\^$.|?*+()[]{}-/#").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

void parse_normalizer(const std::string& path, const json& n, Pipeline& p) {
  if (n.is_null()) return;
  const std::string t = type_of(n);
  if (t == "Sequence") {
    for (const json& s : n.value("normalizers", json::array())) parse_normalizer(path, s, p);
  } else if (t == "Prepend") {
    p.normalizer.push_back({true, "", str(n, "prepend")});
  } else if (t == "Replace") {
    bool regex = false;
    const std::string from = pattern_text(path, n, "normalizer Replace", &regex);
    if (regex || from.empty()) fail(path, "unsupported normalizer Replace with a regex pattern");
    p.normalizer.push_back({false, from, str(n, "content")});
  } else {
    fail(path, "unsupported normalizer '" + t + "' (supported: Prepend, Replace, Sequence)");
  }
}

void parse_pre_tokenizer(const std::string& path, const json& pt, Pipeline& p, bool last) {
  if (pt.is_null()) return;
  const std::string t = type_of(pt);
  if (t == "Sequence") {
    const json steps = pt.value("pretokenizers", json::array());
    for (size_t i = 0; i < steps.size(); ++i)
      parse_pre_tokenizer(path, steps[i], p, last && i + 1 == steps.size());
  } else if (t == "ByteLevel") {
    if (!last) fail(path, "pre_tokenizer ByteLevel must be the last step of the Sequence");
    p.byte_level = true;
    p.prefix_space = flag(pt, "add_prefix_space", true);
    if (flag(pt, "use_regex", true)) p.split_patterns.push_back(byte_level_pattern());
  } else if (t == "Split") {
    bool regex = false;
    const std::string pat = pattern_text(path, pt, "pre_tokenizer Split", &regex);
    if (str(pt, "behavior") != "Isolated" || flag(pt, "invert", false))
      fail(path, "unsupported pre_tokenizer Split behavior '" + str(pt, "behavior") +
                     "' (supported: Isolated, invert false)");
    p.split_patterns.push_back(regex ? pat : escape_regex(pat));
  } else if (t == "Digits") {
    p.split_patterns.push_back(flag(pt, "individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)");
  } else if (t == "Metaspace") {
    p.metaspace = true;
    p.replacement = str(pt, "replacement", std::string(kSpm));
    if (p.replacement.empty()) fail(path, "pre_tokenizer Metaspace has an empty replacement");
    const std::string scheme = str(pt, "prepend_scheme",
                                   flag(pt, "add_prefix_space", true) ? "always" : "never");
    if (scheme == "always") p.prepend_scheme = Pipeline::Prepend::Always;
    else if (scheme == "first") p.prepend_scheme = Pipeline::Prepend::First;
    else if (scheme == "never") p.prepend_scheme = Pipeline::Prepend::Never;
    else fail(path, "unsupported Metaspace prepend_scheme '" + scheme + "'");
    p.metaspace_split = flag(pt, "split", true);
  } else {
    fail(path, "unsupported pre_tokenizer '" + t +
                   "' (supported: ByteLevel, Split, Digits, Metaspace, Sequence)");
  }
}

/// Decoders: ByteLevel (byte-level) or the SentencePiece set; sets decoder_strips_space.
void parse_decoder(const std::string& path, const json& d, Pipeline& p) {
  if (d.is_null()) return;
  const std::string t = type_of(d);
  if (t == "Sequence") {
    for (const json& s : d.value("decoders", json::array())) parse_decoder(path, s, p);
  } else if (t == "ByteLevel") {
    if (!p.byte_level) fail(path, "decoder ByteLevel without a ByteLevel pre_tokenizer");
  } else if (t == "Replace" || t == "ByteFallback" || t == "Fuse") {
    // transformers' GGUF conversion (5.x) writes Sequence[ByteFallback, Fuse, Replace("▁"," "),
    // ByteLevel] for byte-level vocabularies. With a byte-level alphabet no token is "<0xNN>"
    // or holds "▁", so these steps change nothing there: accept and skip them.
    if (p.byte_level) return;
    if (t == "Replace") {
      bool regex = false;
      const std::string from = pattern_text(path, d, "decoder Replace", &regex);
      if (regex || from != p.replacement || str(d, "content") != " ")
        fail(path, "unsupported decoder Replace (supported: \"" + p.replacement + "\" -> \" \")");
    }
  } else if (t == "Strip") {
    if (str(d, "content") != " " || d.value("start", 0) > 1 || d.value("stop", 0) != 0)
      fail(path, "unsupported decoder Strip (supported: content \" \", start 0|1, stop 0)");
    p.decoder_strips_space = d.value("start", 0) == 1;
  } else if (t == "Metaspace") {
    if (p.byte_level) fail(path, "decoder Metaspace with a ByteLevel pre_tokenizer");
    const std::string scheme = str(d, "prepend_scheme",
                                   flag(d, "add_prefix_space", true) ? "always" : "never");
    p.decoder_strips_space = scheme != "never";
  } else {
    fail(path, "unsupported decoder '" + t +
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

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t i = s.find(from); i != std::string::npos; i = s.find(from, i + to.size()))
    s.replace(i, from.size(), to);
}

class HFBpeTokenizer final : public TokenizerBase {
 public:
  HFBpeTokenizer(TokenizerData&& data, Pipeline pipeline,
                 const std::vector<std::pair<std::string, std::string>>& merges)
      : TokenizerBase(std::move(data)), p_(std::move(pipeline)), pre_(p_.split_patterns) {
    const size_t n = data_.tokens.size();
    bytes_.resize(n);
    for (size_t id = 0; id < n; ++id) {
      const std::string& t = data_.tokens[id];
      if (p_.byte_level) {
        bytes_[id] = unspell(t);
      } else if (const int b = byte_token_value(t); b >= 0) {
        bytes_[id] = std::string(1, char(b));
      } else {
        bytes_[id] = t;
        replace_all(bytes_[id], p_.replacement, " ");
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
        fail(data_.path, "model.merges[" + std::to_string(i) + "] '" + a + " " + b +
                             "' uses a token not in the vocabulary");
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
        replace_all(s, step.from, step.to);
      }
    }
    if (p_.byte_level) {
      if (p_.prefix_space && !s.empty() && s[0] != ' ') s.insert(0, " ");
      for (std::string_view piece : pre_.split(s)) encode_piece_byte_level(piece, out);
      return;
    }
    if (p_.metaspace) {
      replace_all(s, " ", p_.replacement);
      const bool starts = s.compare(0, p_.replacement.size(), p_.replacement) == 0;
      if (!starts && (p_.prepend_scheme == Pipeline::Prepend::Always ||
                      (p_.prepend_scheme == Pipeline::Prepend::First && at_text_start)))
        s.insert(0, p_.replacement);
      if (p_.metaspace_split) {  // MergedWithNext: each piece starts at a replacement
        size_t begin = 0;
        for (size_t i = s.find(p_.replacement, 1); i != std::string::npos;
             i = s.find(p_.replacement, i + p_.replacement.size())) {
          encode_piece_chars(std::string_view(s).substr(begin, i - begin), out);
          begin = i;
        }
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

json read_json(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot open");
  json j = json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(path, "not valid JSON");
  if (!j.is_object()) fail(path, "not a JSON object");
  return j;
}

/// tokenizer_config.json's "bos_token" etc.: a string, {"content": ...} or null.
std::optional<std::string> special_text(const std::string& path, const json& cfg, const char* key) {
  const auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  fail(path, std::string(key) + " must be a string or {\"content\": string}");
}

/// TemplateProcessing "single": the special token ids before and after $A.
void template_specials(const json& pp, std::vector<int32_t>& before, std::vector<int32_t>& after) {
  if (pp.is_null()) return;
  const std::string t = type_of(pp);
  if (t == "Sequence") {
    for (const json& s : pp.value("processors", json::array())) template_specials(s, before, after);
    return;
  }
  if (t != "TemplateProcessing") return;  // ByteLevel etc. add no tokens
  bool seen_a = false;
  for (const json& piece : pp.value("single", json::array())) {
    if (piece.contains("Sequence")) {
      seen_a = true;
    } else if (piece.contains("SpecialToken")) {
      const std::string id = piece["SpecialToken"].value("id", "");
      const json& st = pp.value("special_tokens", json::object());
      if (!st.contains(id)) continue;
      for (const json& x : st[id].value("ids", json::array())) {
        if (x.is_number_integer()) (seen_a ? after : before).push_back(x.get<int32_t>());
      }
    }
  }
}

}  // namespace

}  // namespace tokenizer_detail

std::unique_ptr<Tokenizer> Tokenizer::from_hf_dir(const std::string& dir) {
  using namespace tokenizer_detail;
  const std::string path = dir + "/tokenizer.json";
  if (!std::filesystem::is_regular_file(path)) fail(dir, "missing tokenizer.json");
  const json tj = read_json(path);

  const auto mi = tj.find("model");
  if (mi == tj.end() || !mi->is_object()) fail(path, "missing model");
  const json& model = *mi;
  const std::string model_type = model.contains("type") ? type_of(model) : "BPE";
  if (model_type != "BPE")
    fail(path, "unsupported model type '" + model_type + "' (supported: BPE)");
  if (model.contains("dropout") && !model["dropout"].is_null())
    fail(path, "unsupported model.dropout (BPE dropout)");
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (!str(model, k).empty()) fail(path, std::string("unsupported model.") + k);
  }

  Pipeline p;
  p.byte_fallback = flag(model, "byte_fallback", false);
  p.ignore_merges = flag(model, "ignore_merges", false);
  p.fuse_unk = flag(model, "fuse_unk", false);
  parse_normalizer(path, tj.value("normalizer", json()), p);
  parse_pre_tokenizer(path, tj.value("pre_tokenizer", json()), p, true);
  parse_decoder(path, tj.value("decoder", json()), p);
  if (!p.byte_level && !p.metaspace && p.normalizer.empty())
    fail(path, "unsupported pipeline: neither a ByteLevel pre_tokenizer nor a SentencePiece-style "
               "Metaspace pre_tokenizer or Prepend/Replace normalizer");
  // Byte-level BPE covers every byte, so byte_fallback can never trigger there (transformers'
  // GGUF conversion sets it anyway): ignore it.
  if (p.byte_level) p.byte_fallback = false;

  // Vocabulary: model.vocab {text: id} plus added_tokens [{id, content, special}].
  const auto vi = model.find("vocab");
  if (vi == model.end() || !vi->is_object() || vi->empty())
    fail(path, "model.vocab is missing or empty");
  TokenizerData d;
  d.path = path;
  d.model = p.byte_level ? "gpt2" : "llama";
  auto place = [&](int64_t id, const std::string& text, const std::string& where) {
    if (id < 0 || id >= int64_t(INT32_MAX)) fail(path, where + " has an invalid id " + std::to_string(id));
    if (size_t(id) >= d.tokens.size()) {
      d.tokens.resize(size_t(id) + 1);
      d.types.resize(size_t(id) + 1, kUnused);
    }
    d.tokens[size_t(id)] = text;
    if (d.types[size_t(id)] == kUnused) d.types[size_t(id)] = kNormal;
  };
  for (const auto& [text, id] : vi->items()) {
    if (!id.is_number_integer()) fail(path, "model.vocab[" + json(text).dump() + "] is not an integer id");
    place(id.get<int64_t>(), text, "model.vocab[" + json(text).dump() + "]");
  }
  const json added = tj.value("added_tokens", json::array());
  if (!added.is_array()) fail(path, "added_tokens is not an array");
  for (size_t i = 0; i < added.size(); ++i) {
    const json& a = added[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        !a.contains("content") || !a["content"].is_string())
      fail(path, where + " needs an integer id and a string content");
    place(a["id"].get<int64_t>(), a["content"], where);
    d.types[a["id"].get<size_t>()] = flag(a, "special", false) ? kControl : kUserDefined;
  }

  std::vector<std::pair<std::string, std::string>> merges;
  const json mj = model.value("merges", json::array());
  if (!mj.is_array()) fail(path, "model.merges is not an array");
  merges.reserve(mj.size());
  for (size_t i = 0; i < mj.size(); ++i) {
    const json& m = mj[i];
    if (m.is_string()) {
      const std::string s = m;
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        fail(path, "model.merges[" + std::to_string(i) + "] is not 'left right': '" + s + "'");
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.emplace_back(m[0], m[1]);
    } else {
      fail(path, "model.merges[" + std::to_string(i) + "] is neither 'a b' nor [a, b]");
    }
  }

  auto id_of = [&](const std::string& text) -> int32_t {
    for (size_t id = 0; id < d.tokens.size(); ++id)  // once per special token; vocab order
      if (d.types[id] != kUnused && d.tokens[id] == text) return int32_t(id);
    return -1;
  };
  if (const std::string unk = str(model, "unk_token"); !unk.empty()) {
    d.unk_id = p.unk_id = id_of(unk);
    if (d.unk_id < 0) fail(path, "model.unk_token '" + unk + "' is not in the vocabulary");
  }

  // Special tokens and BOS/EOS: tokenizer_config.json, else the post-processor's template.
  std::vector<int32_t> tmpl_before, tmpl_after;
  template_specials(tj.value("post_processor", json()), tmpl_before, tmpl_after);
  for (int32_t id : tmpl_before)
    if (id < 0 || size_t(id) >= d.tokens.size()) fail(path, "post_processor names id " + std::to_string(id) + " outside the vocabulary");
  for (int32_t id : tmpl_after)
    if (id < 0 || size_t(id) >= d.tokens.size()) fail(path, "post_processor names id " + std::to_string(id) + " outside the vocabulary");
  d.add_bos = !tmpl_before.empty();
  d.add_eos = !tmpl_after.empty();
  if (!tmpl_before.empty()) d.bos_id = tmpl_before.front();
  if (!tmpl_after.empty()) d.eos_id = tmpl_after.back();
  bool bos_decided = !tmpl_before.empty();

  int32_t pad_id = -1;
  const std::string cfg_path = dir + "/tokenizer_config.json";
  if (std::filesystem::is_regular_file(cfg_path)) {
    const json cfg = read_json(cfg_path);
    auto named = [&](const char* key) -> int32_t {
      const auto text = special_text(cfg_path, cfg, key);
      if (!text) return -1;
      const int32_t id = id_of(*text);
      if (id < 0) fail(cfg_path, std::string(key) + " '" + *text + "' is not in the vocabulary");
      return id;
    };
    if (const int32_t id = named("bos_token"); id >= 0) d.bos_id = id;
    if (const int32_t id = named("eos_token"); id >= 0) d.eos_id = id;
    if (const int32_t id = named("unk_token"); id >= 0) d.unk_id = id;
    pad_id = named("pad_token");
    if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) {
      d.add_bos = cfg["add_bos_token"].get<bool>();
      bos_decided = true;
    }
    if (cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean())
      d.add_eos = cfg["add_eos_token"].get<bool>();
  }
  if (!bos_decided) d.add_bos = !p.byte_level;  // LlamaTokenizer's default; byte-level: no
  // As HF: the named BOS/EOS/UNK/PAD tokens are special whatever added_tokens says.
  for (int32_t id : {d.bos_id, d.eos_id, d.unk_id, pad_id})
    if (id >= 0 && d.types[size_t(id)] != kUnknown) d.types[size_t(id)] = kControl;
  d.add_space_prefix = p.decoder_strips_space;

  return std::make_unique<HFBpeTokenizer>(std::move(d), std::move(p), merges);
}

}  // namespace octet
