// Tokenizer behaviour beyond the golden ids (test_tokenizer_golden.cpp):
//   - tiny hand-made GGUF vocabularies whose ids are worked out by hand in the comments
//     (merge order, dummy prefix, byte fallback, <unk> fusing, user-defined tokens, digit split);
//   - malformed tokenizer metadata -> ModelFileError;
//   - UTF-8 repair and the StreamingDetokenizer on the real models (pieces are always valid
//     UTF-8 and concatenate to decode());
//   - special-token parsing on/off and byte fallback on the real models.
#include <catch2/catch.hpp>

#include <chrono>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "gguf_writer.h"
#include "models/gguf.h"
#include "models/model_file_error.h"
#include "models/tokenizer.h"
#include "models/unicode_utf8.h"

using namespace octet;
using namespace octet::testing;
using Ids = std::vector<int32_t>;

namespace {

const std::string kBlock = "\xE2\x96\x81";  // "▁"

Bytes strings(const std::vector<std::string>& v) {
  Bytes e;
  for (const std::string& s : v) e.str(s);
  return array_value(kStr, v.size(), e);
}
Bytes floats(const std::vector<float>& v) {
  Bytes e;
  for (float x : v) e.f32(x);
  return array_value(kF32, v.size(), e);
}
Bytes int32s(const std::vector<int32_t>& v) {
  Bytes e;
  for (int32_t x : v) e.i32(x);
  return array_value(kI32, v.size(), e);
}

/// Writes a GGUF with only metadata and builds its tokenizer.
std::unique_ptr<Tokenizer> tokenizer_from(const std::function<void(GGUFWriter&)>& fill) {
  TempDir dir;
  const std::string path = dir.file("tok.gguf");
  GGUFWriter w;
  w.kv_str("general.architecture", "llama");
  fill(w);
  w.write(path);
  const GGUFFile file = GGUFFile::open(path);
  return Tokenizer::from_gguf(file);
}

/// The ModelFileError message from_gguf gives for this metadata ("" when none is thrown).
std::string tokenizer_error(const std::function<void(GGUFWriter&)>& fill) {
  try {
    tokenizer_from(fill);
  } catch (const ModelFileError& e) {
    return e.what();
  }
  return "";
}

// Tiny llama vocabulary (the expectations below were also checked once against transformers
// loading the same vocabulary written by gguf-py). Scores give the derived merges
// (transformers' generate_merges):
//   "▁a" (-1): (▁,a)          rank 0
//   "ab" (-2): (a,b)          rank 1
//   "▁ab"(-3): (▁a,b) (▁,ab)  ranks 2, 3 (longer left part first)
const std::vector<std::string> kLlamaTokens = {
    "<unk>", "<s>", "</s>", kBlock, "a", "b", kBlock + "a", "ab", kBlock + "ab",
    "<0xE2>", "<0x82>", "<0xAC>", "<0x0A>", "<tool>"};
const std::vector<float> kLlamaScores = {0, 0, 0, -10, -10, -10, -1, -2, -3, 0, 0, 0, 0, 0};
const std::vector<int32_t> kLlamaTypes = {2, 3, 3, 1, 1, 1, 1, 1, 1, 6, 6, 6, 6, 4};

void tiny_llama(GGUFWriter& w) {
  w.kv_str("tokenizer.ggml.model", "llama");
  w.kv("tokenizer.ggml.tokens", kArr, strings(kLlamaTokens));
  w.kv("tokenizer.ggml.scores", kArr, floats(kLlamaScores));
  w.kv("tokenizer.ggml.token_type", kArr, int32s(kLlamaTypes));
  w.kv_u32("tokenizer.ggml.bos_token_id", 1);
  w.kv_u32("tokenizer.ggml.eos_token_id", 2);
  w.kv_u32("tokenizer.ggml.unknown_token_id", 0);
  w.kv_u32("tokenizer.ggml.padding_token_id", 4294967295u);  // llama.cpp's "none"
}

// Tiny gpt2 vocabulary (byte-level spelling, "Ġ" = space), merges in rank order.
const std::vector<std::string> kGpt2Tokens = {
    "<|endoftext|>", "a", "b", "\xC4\xA0", "1", "2", "\xC4\xA0" "a", "ab", "\xC4\xA0" "ab", "12",
    "\xC4\xA0" "1", "<|im_start|>"};
const std::vector<std::string> kGpt2Merges = {
    "\xC4\xA0 a", "a b", "\xC4\xA0" "a b", "1 2", "\xC4\xA0 1"};

void tiny_gpt2(GGUFWriter& w, const std::string& pre) {
  w.kv_str("tokenizer.ggml.model", "gpt2");
  w.kv_str("tokenizer.ggml.pre", pre);
  w.kv("tokenizer.ggml.tokens", kArr, strings(kGpt2Tokens));
  w.kv("tokenizer.ggml.token_type", kArr, int32s({3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3}));
  w.kv("tokenizer.ggml.merges", kArr, strings(kGpt2Merges));
  w.kv_u32("tokenizer.ggml.eos_token_id", 0);
}

bool valid_utf8(const std::string& s) { return utf8::is_valid(s); }

/// Streams `ids` one by one; every piece must be valid UTF-8; returns the concatenation.
std::string stream(const Tokenizer& tok, const Ids& ids, bool skip_special,
                   std::vector<std::string>* pieces = nullptr) {
  StreamingDetokenizer detok(tok, skip_special);
  std::string all;
  for (int32_t id : ids) {
    const std::string piece = detok.push(id);
    CHECK(valid_utf8(piece));
    if (pieces) pieces->push_back(piece);
    all += piece;
  }
  const std::string tail = detok.finish();
  CHECK(valid_utf8(tail));
  if (pieces) pieces->push_back(tail);
  return all + tail;
}

const GGUFFile& stories_file() {
  static const GGUFFile f = GGUFFile::open(std::string(OCTET_TEST_MODELS_DIR) + "/stories260K.gguf");
  return f;
}

const Tokenizer& stories() {
  static const auto tok = Tokenizer::from_gguf(stories_file());
  return *tok;
}

const Tokenizer& smollm2() {
  static const std::unique_ptr<Tokenizer> tok = [] {
    const std::string path = OCTET_SMOLLM2_GGUF;
    if (path.empty()) {
      FAIL("OCTET_SMOLLM2_GGUF is empty: configure with -DOCTET_SMOLLM2_GGUF=<path to "
           "SmolLM2-135M-Instruct.Q4_1.gguf> (see README.md)");
    }
    const GGUFFile file = GGUFFile::open(path);
    const auto t0 = std::chrono::steady_clock::now();
    auto t = Tokenizer::from_gguf(file);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    WARN("SmolLM2 tokenizer (49152 tokens, 48900 merges) built in " << ms << " ms");
    return t;
  }();
  return *tok;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// UTF-8 repair (the rule decode() and the detokenizer use)

TEST_CASE("tokenizer: utf8::append_lossy: maximal invalid subparts become one U+FFFD each", "[tokenizer][utf8]") {
  const std::string R = "\xEF\xBF\xBD";
  CHECK(utf8::to_valid("abc") == "abc");
  CHECK(utf8::to_valid("\xF0\x9F\x98\x80") == "\xF0\x9F\x98\x80");
  CHECK(utf8::to_valid("\xE2\x82") == R);             // truncated 3-byte sequence: one U+FFFD
  CHECK(utf8::to_valid("\xE2\x82" "A") == R + "A");
  CHECK(utf8::to_valid("\xC0\x80") == R + R);         // C0 never starts a character
  CHECK(utf8::to_valid("\xED\xA0\x80") == R + R + R); // a surrogate: ED then two strays
  CHECK(utf8::to_valid("\xF4\x90\x80\x80") == R + R + R + R);  // above U+10FFFF
  CHECK(utf8::to_valid("\xFF" "a\x80") == R + "a" + R);

  std::string out;
  CHECK(utf8::append_lossy("a\xF0\x9F\x98", out, /*final=*/false) == 1);  // holds 3 bytes back
  CHECK(out == "a");
  out.clear();
  CHECK(utf8::append_lossy("a\xF0\x9F" "b", out, false) == 4);  // known invalid: not held
  CHECK(out == "a" + R + "b");
}

// ---------------------------------------------------------------------------------------------
// Hand-made vocabularies

TEST_CASE("tokenizer: llama tokenizer on a tiny vocabulary: merges, prefix, byte fallback, unk", "[tokenizer]") {
  const auto tok = tokenizer_from(tiny_llama);
  REQUIRE(tok->vocab_size() == 14);
  CHECK(tok->bos_id() == 1);
  CHECK(tok->eos_id() == 2);
  CHECK(tok->add_bos());  // no tokenizer.ggml.add_bos_token: llama default
  CHECK(tok->strips_leading_space());

  // "ab" -> "▁ab": (▁,a) rank 0 first -> [▁a, b] -> (▁a,b) rank 2 -> [▁ab]
  CHECK(tok->encode("ab", true, true) == Ids{1, 8});
  CHECK(tok->encode("ab", false, true) == Ids{8});
  // "ba" -> [▁, b, a]: no merge applies
  CHECK(tok->encode("ba", false, true) == Ids{3, 5, 4});
  // a leading space is not doubled (HF Metaspace prepend_scheme "first"): " ab" -> "▁ab"
  CHECK(tok->encode(" ab", false, true) == Ids{8});
  CHECK(tok->encode("  ab", false, true) == Ids{3, 8});
  CHECK(tok->encode("", true, true) == Ids{1});
  // "€" is not in the vocabulary: its bytes E2 82 AC as byte tokens; "\n" -> <0x0A>
  CHECK(tok->encode("\xE2\x82\xAC\n", false, true) == Ids{3, 9, 10, 11, 12});
  CHECK(tok->decode({1, 3, 9, 10, 11, 12}, true) == "\xE2\x82\xAC\n");  // leading space stripped
  CHECK(tok->decode({1, 3, 9, 10, 11, 12}, false) == "<s> \xE2\x82\xAC\n");
  // "é" has neither a token nor byte tokens: <unk>; consecutive unknowns fuse into one.
  // (Deliberately as SentencePiece and llama.cpp: transformers' conversion has no unk_token
  // and silently drops the character, giving [▁a] here. Real files have all 256 byte tokens.)
  CHECK(tok->encode("\xC3\xA9\xC3\xA9" "a", false, true) == Ids{3, 0, 4});
  // special tokens: matched only with parse_special; no prefix after a special token
  CHECK(tok->encode("<s>ab</s>", false, true) == Ids{1, 7, 2});
  CHECK(tok->encode("<s>a", false, false) == Ids{3, 0, 4});  // "▁<s>a": < s > are unknown
  // a USER_DEFINED token is matched even without parse_special, and is not skipped
  CHECK(tok->encode("a<tool>b", false, false) == Ids{6, 13, 5});
  CHECK(tok->decode({6, 13, 5}, true) == "a<tool>b");
  CHECK(tok->is_special(0));
  CHECK(tok->is_special(1));
  CHECK_FALSE(tok->is_special(13));
  CHECK(tok->token_to_id("<tool>") == 13);
  CHECK(tok->token_to_id("zzz") == -1);
  CHECK(tok->token_bytes(6) == " a");
  CHECK(tok->token_bytes(12) == "\n");
  CHECK(tok->token_text(6) == kBlock + "a");
  CHECK_THROWS_AS(tok->decode({14}, false), std::out_of_range);
  CHECK_THROWS_AS(tok->decode({-1}, false), std::out_of_range);
}

TEST_CASE("tokenizer: llama tokenizer honours add_space_prefix=false and add_bos/eos keys", "[tokenizer]") {
  const auto tok = tokenizer_from([](GGUFWriter& w) {
    tiny_llama(w);
    w.kv("tokenizer.ggml.add_space_prefix", kBool, Bytes().u8(0));
    w.kv("tokenizer.ggml.add_bos_token", kBool, Bytes().u8(0));
    w.kv("tokenizer.ggml.add_eos_token", kBool, Bytes().u8(1));
  });
  CHECK_FALSE(tok->add_bos());
  CHECK_FALSE(tok->strips_leading_space());
  CHECK(tok->encode("ab", true, true) == Ids{7, 2});  // no "▁", no BOS, EOS appended
  CHECK(tok->encode(" ab", false, true) == Ids{8});
  CHECK(tok->decode({8}, true) == " ab");
}

TEST_CASE("tokenizer: gpt2 tokenizer on a tiny vocabulary: merge ranks and the smollm digit split", "[tokenizer]") {
  const auto smollm = tokenizer_from([](GGUFWriter& w) { tiny_gpt2(w, "smollm"); });
  const auto plain = tokenizer_from([](GGUFWriter& w) { tiny_gpt2(w, "gpt2"); });
  CHECK_FALSE(smollm->add_bos());
  CHECK(smollm->bos_id() == -1);
  CHECK(smollm->eos_id() == 0);
  CHECK_FALSE(smollm->strips_leading_space());

  // GPT-2 regex: " ab", " 12". " ab": (Ġ,a) rank 0 -> (Ġa,b) rank 2 -> [Ġab].
  // " 12": (1,2) rank 3 beats (Ġ,1) rank 4 -> [Ġ, 12].
  CHECK(plain->encode(" ab 12", true, true) == Ids{8, 3, 9});
  // smollm: digits alone first -> " ab " | "1" | "2" -> [Ġab] [Ġ] [1] [2]
  CHECK(smollm->encode(" ab 12", true, true) == Ids{8, 3, 4, 5});
  CHECK(smollm->decode({8, 3, 4, 5}, true) == " ab 12");
  // control tokens: parsed or not
  CHECK(smollm->encode("a<|im_start|>b", false, true) == Ids{1, 11, 2});
  CHECK(smollm->decode({1, 11, 2}, true) == "ab");
  CHECK(smollm->decode({1, 11, 2}, false) == "a<|im_start|>b");
  CHECK(smollm->token_bytes(3) == " ");
}

TEST_CASE("tokenizer: Malformed tokenizer metadata -> ModelFileError naming the problem", "[tokenizer][errors]") {
  using Catch::Matchers::Contains;
  auto without = [](const std::string& skip) {
    return [skip](GGUFWriter& w) {
      if (skip != "model") w.kv_str("tokenizer.ggml.model", "llama");
      if (skip != "tokens") w.kv("tokenizer.ggml.tokens", kArr, strings(kLlamaTokens));
      if (skip != "scores") w.kv("tokenizer.ggml.scores", kArr, floats(kLlamaScores));
    };
  };
  CHECK_THAT(tokenizer_error(without("model")), Contains("missing tokenizer.ggml.model"));
  CHECK_THAT(tokenizer_error(without("tokens")), Contains("missing tokenizer.ggml.tokens"));
  CHECK_THAT(tokenizer_error(without("scores")), Contains("tokenizer.ggml.scores"));
  CHECK(tokenizer_error(without("")).empty());

  CHECK_THAT(tokenizer_error([](GGUFWriter& w) {
               w.kv_str("tokenizer.ggml.model", "bert");
               w.kv("tokenizer.ggml.tokens", kArr, strings(kLlamaTokens));
             }),
             Contains("unsupported tokenizer.ggml.model 'bert'"));
  CHECK_THAT(tokenizer_error([](GGUFWriter& w) {
               w.kv_u32("tokenizer.ggml.model", 1);
               w.kv("tokenizer.ggml.tokens", kArr, strings(kLlamaTokens));
             }),
             Contains("tokenizer.ggml.model is not a string"));
  CHECK_THAT(tokenizer_error([](GGUFWriter& w) {
               w.kv_str("tokenizer.ggml.model", "llama");
               w.kv("tokenizer.ggml.tokens", kArr, strings(kLlamaTokens));
               w.kv("tokenizer.ggml.scores", kArr, floats({0, 1, 2}));
             }),
             Contains("tokenizer.ggml.scores has 3 entries for 14 tokens"));
  CHECK_THAT(tokenizer_error([](GGUFWriter& w) {
               w.kv_str("tokenizer.ggml.model", "llama");
               w.kv("tokenizer.ggml.tokens", kArr, strings(kLlamaTokens));
               w.kv("tokenizer.ggml.scores", kArr, floats(kLlamaScores));
               w.kv("tokenizer.ggml.token_type", kArr, int32s({1, 1}));
             }),
             Contains("tokenizer.ggml.token_type has 2 entries for 14 tokens"));
  CHECK_THAT(tokenizer_error([](GGUFWriter& w) {
               w.kv_str("tokenizer.ggml.model", "llama");
               w.kv("tokenizer.ggml.tokens", kArr, int32s({1, 2, 3}));
             }),
             Contains("tokenizer.ggml.tokens must be an array of strings"));
  CHECK_THAT(tokenizer_error([](GGUFWriter& w) {
               w.kv_str("tokenizer.ggml.model", "llama");
               w.kv("tokenizer.ggml.tokens", kArr, strings({}));
             }),
             Contains("tokenizer.ggml.tokens is empty"));
  CHECK_THAT(tokenizer_error([](GGUFWriter& w) {
               w.kv_str("tokenizer.ggml.model", "gpt2");
               w.kv("tokenizer.ggml.tokens", kArr, strings(kGpt2Tokens));
             }),
             Contains("missing tokenizer.ggml.merges"));
  CHECK_THAT(tokenizer_error([](GGUFWriter& w) {
               w.kv_str("tokenizer.ggml.model", "gpt2");
               w.kv("tokenizer.ggml.tokens", kArr, strings(kGpt2Tokens));
               w.kv("tokenizer.ggml.merges", kArr, strings({"a b", "a z"}));
             }),
             Contains("tokenizer.ggml.merges[1] 'a z' uses a token not in the vocabulary"));
  CHECK_THAT(tokenizer_error([](GGUFWriter& w) {
               w.kv_str("tokenizer.ggml.model", "gpt2");
               w.kv("tokenizer.ggml.tokens", kArr, strings(kGpt2Tokens));
               w.kv("tokenizer.ggml.merges", kArr, strings({"ab"}));
             }),
             Contains("tokenizer.ggml.merges[0] is not 'left right'"));
  CHECK_THAT(tokenizer_error([](GGUFWriter& w) { tiny_gpt2(w, "no-such-pre"); }),
             Contains("unsupported tokenizer.ggml.pre 'no-such-pre'"));
  // The path is part of the message.
  CHECK_THAT(tokenizer_error(without("model")), Contains("tok.gguf: "));
}

// ---------------------------------------------------------------------------------------------
// Real models

TEST_CASE("tokenizer: stories260K: byte fallback for characters outside the 512-token vocabulary", "[tokenizer]") {
  const Tokenizer& tok = stories();
  const std::string text = "\xE6\x97\xA5\xF0\x9F\x98\x80";  // "日😀": 3 + 4 UTF-8 bytes
  const Ids ids = tok.encode(text, false, false);
  REQUIRE(ids.size() == 8);  // "▁" then seven byte tokens
  CHECK(tok.token_text(ids[0]) == kBlock);
  char name[8];
  for (size_t i = 0; i < text.size(); ++i) {
    std::snprintf(name, sizeof name, "<0x%02X>", unsigned(uint8_t(text[i])));
    CHECK(tok.token_text(ids[i + 1]) == name);
    CHECK(tok.token_bytes(ids[i + 1]) == text.substr(i, 1));
  }
  CHECK(tok.decode(ids, true) == text);
}

TEST_CASE("tokenizer: Invalid UTF-8 input is encoded as U+FFFD", "[tokenizer]") {
  for (const Tokenizer* tok : {&stories(), &smollm2()}) {
    CHECK(tok->encode("a\xFF" "b\xE2\x82", true, true) ==
          tok->encode("a\xEF\xBF\xBD" "b\xEF\xBF\xBD", true, true));
  }
}

TEST_CASE("tokenizer: Special-token parsing on and off", "[tokenizer]") {
  const Tokenizer& sm = smollm2();
  const int32_t im_start = sm.token_to_id("<|im_start|>"), im_end = sm.token_to_id("<|im_end|>");
  CHECK(im_start == 1);
  CHECK(im_end == 2);
  CHECK(sm.is_special(im_start));
  const std::string chat = "<|im_start|>user\nhi<|im_end|>";
  const Ids parsed = sm.encode(chat, false, true);
  const Ids plain = sm.encode(chat, false, false);
  CHECK(parsed.front() == im_start);
  CHECK(parsed.back() == im_end);
  CHECK(std::count(plain.begin(), plain.end(), im_start) == 0);
  CHECK(std::count(plain.begin(), plain.end(), im_end) == 0);
  CHECK(sm.decode(parsed, false) == chat);
  CHECK(sm.decode(plain, false) == chat);
  CHECK(sm.decode(parsed, true) == "user\nhi");
  CHECK(sm.decode(plain, true) == chat);  // plain-text markers are not special tokens

  const Tokenizer& st = stories();
  CHECK(st.encode("<s>", false, true) == Ids{1});
  CHECK(st.encode("<s>", false, false).size() > 1);
  CHECK(st.encode("</s>", true, true) == Ids{1, 2});
}

TEST_CASE("tokenizer: StreamingDetokenizer: an emoji split over byte tokens", "[tokenizer][stream]") {
  const Tokenizer& tok = stories();
  // "a😀b": "😀" is four byte tokens in stories260K.
  const Ids ids = tok.encode("a\xF0\x9F\x98\x80" "b", true, true);
  std::vector<std::string> pieces;
  CHECK(stream(tok, ids, true, &pieces) == tok.decode(ids, true));
  CHECK(tok.decode(ids, true) == "a\xF0\x9F\x98\x80" "b");
  // The emoji's first three bytes produce nothing; the fourth releases the whole character.
  const auto emoji = std::find(pieces.begin(), pieces.end(), "\xF0\x9F\x98\x80");
  REQUIRE(emoji != pieces.end());
  CHECK(*(emoji - 1) == "");
  CHECK(*(emoji - 2) == "");
  CHECK(*(emoji - 3) == "");

  // ZWJ sequences and CJK through SmolLM2's byte-level tokens.
  const Tokenizer& sm = smollm2();
  const std::string family = "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 "
                             "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E";
  const Ids sm_ids = sm.encode(family, false, true);
  bool some_token_is_partial = false;
  for (int32_t id : sm_ids) some_token_is_partial |= !valid_utf8(sm.token_bytes(id));
  CHECK(some_token_is_partial);  // otherwise this would not test holding back
  CHECK(stream(sm, sm_ids, true) == family);
}

TEST_CASE("tokenizer: StreamingDetokenizer: invalid and unfinished bytes", "[tokenizer][stream]") {
  const Tokenizer& tok = stories();
  const int32_t f0 = tok.token_to_id("<0xF0>"), x9f = tok.token_to_id("<0x9F>");
  const int32_t a = tok.token_to_id("a");
  REQUIRE(f0 >= 0);
  REQUIRE(x9f >= 0);
  REQUIRE(a >= 0);
  StreamingDetokenizer d(tok, true);
  CHECK(d.push(a) == "a");
  CHECK(d.push(f0) == "");
  CHECK(d.push(x9f) == "");
  CHECK(d.push(a) == "\xEF\xBF\xBD" "a");  // known invalid once "a" arrives
  CHECK(d.push(f0) == "");
  CHECK(d.finish() == "\xEF\xBF\xBD");     // unfinished at the end
  const Ids ids = {a, f0, x9f, a, f0};
  CHECK(tok.decode(ids, true) == "a\xEF\xBF\xBD" "a\xEF\xBF\xBD");
  CHECK(stream(tok, ids, true) == tok.decode(ids, true));
  CHECK_THROWS_AS(d.push(100000), std::out_of_range);
}

TEST_CASE("tokenizer: StreamingDetokenizer equals decode() on every golden string", "[tokenizer][stream]") {
  // The golden strings live in the JSON; these cover the same kinds of text.
  const std::vector<std::string> texts = {
      "", " ", "  Hello", "Hello world", "\n\n\t x", "12345 3.14159 1,000,000",
      "caf\xC3\xA9 na\xC3\xAFve", "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C",
      "\xF0\x9F\x8F\xB3\xEF\xB8\x8F\xE2\x80\x8D\xF0\x9F\x8C\x88 flag",
      "<|im_start|>user\nhi<|im_end|>", "<s>Hello</s>", "don't I'll"};
  for (const Tokenizer* tok : {&stories(), &smollm2()}) {
    for (const std::string& text : texts) {
      for (const bool skip : {true, false}) {
        INFO("text '" << text << "' skip_special " << skip);
        const Ids ids = tok->encode(text, true, true);
        CHECK(stream(*tok, ids, skip) == tok->decode(ids, skip));
      }
    }
  }
}

TEST_CASE("tokenizer: StreamingDetokenizer after a prompt keeps the first space", "[tokenizer][stream]") {
  const Tokenizer& tok = stories();
  const Ids prompt = tok.encode("Once upon", true, false);
  const Ids all = tok.encode("Once upon a time", true, false);
  REQUIRE(std::equal(prompt.begin(), prompt.end(), all.begin()));
  const Ids generated(all.begin() + long(prompt.size()), all.end());

  StreamingDetokenizer with_prompt(tok, true, prompt);
  std::string text;
  for (int32_t id : generated) text += with_prompt.push(id);
  text += with_prompt.finish();
  CHECK(text == " a time");
  CHECK(tok.decode(generated, true) == "a time");  // alone, the dummy-prefix space is stripped
  CHECK(stream(tok, generated, true) == "a time");

  // From BOS alone the first word is at the start of the text: its space is stripped.
  StreamingDetokenizer from_bos(tok, true, {tok.bos_id()});
  CHECK(from_bos.push(generated[0]) == "a");
}

TEST_CASE("tokenizer: hostile GGUF tokenizer arrays -> ModelFileError", "[tokenizer][errors][hostile]") {
  using Catch::Matchers::Contains;
  SECTION("a NaN score (it would break the merge order's sort)") {
    std::vector<float> scores = kLlamaScores;
    scores[7] = std::numeric_limits<float>::quiet_NaN();
    CHECK_THAT(tokenizer_error([&](GGUFWriter& w) {
                 w.kv_str("tokenizer.ggml.model", "llama");
                 w.kv("tokenizer.ggml.tokens", kArr, strings(kLlamaTokens));
                 w.kv("tokenizer.ggml.scores", kArr, floats(scores));
               }),
               Contains("tokenizer.ggml.scores[7] is NaN"));
  }
  SECTION("a token type beyond int64 (once an uncaught std::runtime_error)") {
    Bytes types;
    for (size_t i = 0; i < kLlamaTokens.size(); ++i) types.u64(i == 3 ? ~uint64_t{0} : 1);
    CHECK_THAT(tokenizer_error([&](GGUFWriter& w) {
                 w.kv_str("tokenizer.ggml.model", "llama");
                 w.kv("tokenizer.ggml.tokens", kArr, strings(kLlamaTokens));
                 w.kv("tokenizer.ggml.scores", kArr, floats(kLlamaScores));
                 w.kv("tokenizer.ggml.token_type", kArr,
                      array_value(kU64, kLlamaTokens.size(), types));
               }),
               Contains("tokenizer.ggml.token_type[3]"));
  }
  SECTION("file text in a message stays on one line") {
    const std::string msg = tokenizer_error([](GGUFWriter& w) {
      w.kv_str("tokenizer.ggml.model", "gpt2");
      w.kv("tokenizer.ggml.tokens", kArr, strings(kGpt2Tokens));
      w.kv("tokenizer.ggml.merges", kArr, strings({"a b", "a\nz"}));
    });
    CHECK_THAT(msg, Contains("tokenizer.ggml.merges[1] is not 'left right': 'a\\x0Az'"));
    CHECK(msg.find('\n') == std::string::npos);
  }
  SECTION("tokens too long to derive merges from (each cut of each token is tried)") {
    // Two tokens of 20,000 bytes: 8e8 > 2^28 steps of the derivation.
    std::vector<std::string> tokens = kLlamaTokens;
    tokens.push_back(std::string(20000, 'a'));
    tokens.push_back(std::string(20000, 'b'));
    std::vector<float> scores = kLlamaScores;
    scores.resize(tokens.size(), -20);
    CHECK_THAT(tokenizer_error([&](GGUFWriter& w) {
                 w.kv_str("tokenizer.ggml.model", "llama");
                 w.kv("tokenizer.ggml.tokens", kArr, strings(tokens));
                 w.kv("tokenizer.ggml.scores", kArr, floats(scores));
               }),
               Contains("tokenizer.ggml.tokens: tokens too long to derive merges"));
  }
}
