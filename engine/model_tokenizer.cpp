// ModelTokenizer::tokenize_with_plain_spans: a rendered chat prompt whose message contents are
// tokenized without special-token parsing (serve --no-special-tokens-in-content). The other
// ModelTokenizer members are defined with the model loader (engine/model_loader.cpp).
#include <stdexcept>
#include <string_view>

#include "engine/model_tokenizer.h"
#include "models/tokenizer.h"

namespace octet {

namespace {

/// True when a plain-text fragment is encoded the same at the start of a text as after a
/// special token: false for SentencePiece tokenizers that prepend "▁" to the text's first
/// fragment only (llama.cpp's add_space_prefix, Metaspace prepend_scheme "first").
bool start_insensitive(const Tokenizer& tok) {
  int32_t special = tok.eos_id() >= 0 ? tok.eos_id() : tok.bos_id();
  if (special < 0) return false;
  const std::string& s = tok.token_text(special);
  const std::vector<int32_t> whole = tok.encode(s + "a b", false, /*parse_special=*/true);
  std::vector<int32_t> parts{special};
  for (int32_t id : tok.encode("a b", false, /*parse_special=*/false)) parts.push_back(id);
  return whole == parts;
}

}  // namespace

std::vector<int32_t> ModelTokenizer::tokenize_with_plain_spans(
    const std::string& text, const std::vector<std::pair<size_t, size_t>>& plain,
    bool add_special_tokens) const {
  const Tokenizer& tok = *tokenizer_;
  // Spans whose text holds special-token text (parsed differently with and without special
  // parsing); without any, the prompt is tokenized exactly as tokenize() does.
  bool any = false;
  for (const auto& [b, e] : plain) {
    if (b > e || e > text.size())
      throw std::logic_error("tokenize_with_plain_spans: span outside the text");
    const std::string_view span(text.data() + b, e - b);
    if (tok.encode(span, false, true) != tok.encode(span, false, false)) any = true;
  }
  if (!any) return tokenize(text, add_special_tokens);

  // Special tokens of the fixed text (between the spans): each fixed piece encoded with special
  // parsing, its special tokens found in order (the matcher takes the leftmost occurrence).
  struct Hit {
    size_t begin, end;
    int32_t id;
  };
  std::vector<Hit> hits;
  auto scan_fixed = [&](size_t b, size_t e) {
    if (b >= e) return;
    const std::string_view piece(text.data() + b, e - b);
    size_t cursor = 0;
    for (int32_t id : tok.encode(piece, false, /*parse_special=*/true)) {
      if (!tok.is_special(id)) continue;
      const std::string& t = tok.token_text(id);
      const size_t at = piece.find(t, cursor);
      if (t.empty() || at == std::string_view::npos) continue;  // <unk> for unknown text
      hits.push_back({b + at, b + at + t.size(), id});
      cursor = at + t.size();
    }
  };
  size_t fixed_begin = 0;
  for (const auto& [b, e] : plain) {
    if (b < fixed_begin) throw std::logic_error("tokenize_with_plain_spans: spans out of order");
    scan_fixed(fixed_begin, b);
    fixed_begin = e;
  }
  scan_fixed(fixed_begin, text.size());

  // The plain runs between those special tokens, each encoded without special parsing. A run
  // after the text's start is encoded as a text's first fragment; a tokenizer for which that
  // differs (start_insensitive false) cannot be served exactly unless the run begins with a
  // space, so it is refused rather than tokenized differently.
  const bool insensitive = start_insensitive(tok);
  std::vector<int32_t> bos_eos = tok.encode("", add_special_tokens, false);
  std::vector<int32_t> out;
  if (!bos_eos.empty() && bos_eos.front() == tok.bos_id() && tok.add_bos()) {
    out.push_back(bos_eos.front());
    bos_eos.erase(bos_eos.begin());
  }
  auto run = [&](size_t b, size_t e) {
    if (b >= e) return;
    const std::string_view r(text.data() + b, e - b);
    if (b > 0 && !insensitive && r.front() != ' ')
      throw std::invalid_argument(
          "message content holds special-token text that this model's tokenizer cannot keep "
          "as plain text at its place in the chat template");
    for (int32_t id : tok.encode(r, false, /*parse_special=*/false)) out.push_back(id);
  };
  size_t pos = 0;
  for (const Hit& h : hits) {
    run(pos, h.begin);
    out.push_back(h.id);
    pos = h.end;
  }
  run(pos, text.size());
  out.insert(out.end(), bos_eos.begin(), bos_eos.end());
  return out;
}

}  // namespace octet
