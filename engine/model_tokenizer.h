#pragma once
// ModelTokenizer: the text side of a loaded model as front ends use it (prompt text -> ids,
// ids -> text, the chat template and the BOS/EOS strings templates use). Built by load_model
// (engine/model_loader.h) with the model; the Engine hands it out (Engine::tokenizer()) but
// does not implement it. Std types only, so server/ never sees models/.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace octet {

class Tokenizer;  // models/tokenizer.h

class ModelTokenizer {
 public:
  /// `tokenizer` must outlive this object (both live in the LoadedModel).
  ModelTokenizer(const Tokenizer& tokenizer, std::string chat_template);

  /// Special tokens in the text are recognised; BOS added when add_special_tokens and the
  /// model asks for it.
  std::vector<int32_t> tokenize(const std::string& text, bool add_special_tokens) const;
  /// tokenize() of `text` with special-token texts inside the byte ranges `plain` ([begin,
  /// end), in order, disjoint: a chat prompt's message contents) taken as plain text; those
  /// outside (the template's own) are special tokens as usual. Without special-token text in
  /// any range, exactly tokenize(). Throws std::invalid_argument when a SentencePiece tokenizer
  /// that encodes a text's first fragment differently could not keep a range plain without
  /// changing the tokens around it (engine/model_tokenizer.cpp).
  std::vector<int32_t> tokenize_with_plain_spans(
      const std::string& text, const std::vector<std::pair<size_t, size_t>>& plain,
      bool add_special_tokens) const;
  /// Throws RequestError (InvalidRequest, param "tokens") for an id outside the tokenizer's
  /// vocabulary.
  std::string detokenize(const std::vector<int32_t>& ids, bool skip_special_tokens) const;
  /// The Jinja chat template from tokenizer_config.json or GGUF tokenizer.chat_template ("" if
  /// none).
  const std::string& chat_template() const { return chat_template_; }
  /// The BOS / EOS token strings ("" when the model has none).
  std::string bos_token() const;
  std::string eos_token() const;
  /// Tokens the tokenizer knows (at most the model's vocab_size).
  int64_t vocab_size() const;
  /// Token `id`'s vocabulary string as the tokenizer stores it (GPT-2 byte-level: "Ġhello";
  /// SentencePiece: "▁hello"). Throws std::out_of_range for an id outside [0, vocab_size()).
  const std::string& token_text(int32_t id) const;

 private:
  const Tokenizer* tokenizer_;
  std::string chat_template_;
};

/// detokenize() of the ids `tok` has a token for; the others (ids of a padded vocabulary past
/// the tokenizer's: the model's vocab_size may be larger, e.g. Qwen2.5) stand for "", as in
/// vLLM. Never throws for an id; the caller checks ids against the model's vocab_size.
inline std::string detokenize_known(const ModelTokenizer& tok, const std::vector<int32_t>& ids,
                                    bool skip_special_tokens) {
  std::vector<int32_t> known;
  known.reserve(ids.size());
  for (int32_t id : ids)
    if (id >= 0 && id < tok.vocab_size()) known.push_back(id);
  return tok.detokenize(known, skip_special_tokens);
}

}  // namespace octet
