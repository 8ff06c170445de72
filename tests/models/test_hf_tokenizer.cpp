// Tokenizer::from_hf_dir against the same golden ids the GGUF tokenizers pass
// (tests/models/golden/tokenizer_*.json, made by HF tokenizers/transformers):
//   - SmolLM2's byte-level tokenizer.json (scripts/make_hf_checkpoint.py: transformers' GGUF
//     conversion with SmolLM2's Digits+ByteLevel pre-tokenizer), in OCTET_HF_SMOLLM2_DIR;
//   - stories260K's SentencePiece-style tokenizer.json (transformers' conversion: Metaspace
//     prepend_scheme first, byte_fallback, BOS post-processor), committed as
//     golden/hf_stories260K_tokenizer*.json;
// plus hand-built tokenizer.json files (merges as pairs, added tokens, Prepend/Replace
// normalizer, Split regex) and malformed ones.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "models/model_file_error.h"
#include "models/tokenizer.h"
#include "tokenizer_golden_check.h"

#ifndef OCTET_HF_SMOLLM2_DIR
#define OCTET_HF_SMOLLM2_DIR "/root/.cache/octet/hf/SmolLM2-135M-Instruct-bf16"
#endif

using namespace octet;
using nlohmann::json;
using octet::testing::check_golden;
namespace fs = std::filesystem;

namespace {

const std::string kGolden = std::string(OCTET_SOURCE_DIR) + "/tests/models/golden/";

json load_json(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f.good());
  return json::parse(f);
}


std::string temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / "octet_test_hf_tokenizer" / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

/// A directory holding `tokenizer` as tokenizer.json (and `config` as tokenizer_config.json).
std::string make_dir(const std::string& name, const json& tokenizer, const json& config = nullptr) {
  const std::string d = temp_dir(name);
  write_text(d + "/tokenizer.json", tokenizer.dump());
  if (!config.is_null()) write_text(d + "/tokenizer_config.json", config.dump());
  return d;
}

void expect_error(const std::string& dir, const std::string& file, const std::string& needle) {
  try {
    Tokenizer::from_hf_dir(dir);
    FAIL("no error (expected '" << needle << "')");
  } catch (const ModelFileError& e) {
    INFO(e.what());
    CHECK(e.path() == dir + "/" + file);
    CHECK(std::string(e.what()).find(needle) != std::string::npos);
  }
}

/// A small byte-level BPE: vocab a b c Ġ ab Ġab abc 1, two merges, two added tokens.
/// The expected ids below were checked with HF tokenizers 0.23.3 on this same JSON.
json tiny_byte_level() {
  return json::parse(R"({
    "version": "1.0",
    "added_tokens": [
      {"id": 8, "content": "<|end|>", "special": true, "normalized": false},
      {"id": 9, "content": "<think>", "special": false, "normalized": false}
    ],
    "normalizer": null,
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
      {"type": "Split", "pattern": {"Regex": " ?[a-z]+|[0-9]"}, "behavior": "Isolated", "invert": false},
      {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]},
    "post_processor": {"type": "ByteLevel"},
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "byte_fallback": false,
              "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "Ġab": 5, "abc": 6, "1": 7},
              "merges": [["a", "b"], ["Ġ", "ab"]]}
  })");
}

}  // namespace

TEST_CASE("hf tokenizer: SmolLM2 tokenizer.json matches the golden ids", "[hf][tokenizer][golden]") {
  const std::string dir = OCTET_HF_SMOLLM2_DIR;
  if (!fs::is_regular_file(dir + "/tokenizer.json"))
    FAIL(dir << "/tokenizer.json is missing: run scripts/make_hf_checkpoint.py (see its docstring)");
  const auto tok = Tokenizer::from_hf_dir(dir);
  CHECK(tok->vocab_size() == 49152);
  CHECK(tok->bos_id() == 1);
  CHECK(tok->eos_id() == 2);
  CHECK_FALSE(tok->add_bos());
  CHECK(tok->token_to_id("<|im_end|>") == 2);
  CHECK(tok->is_special(2));
  CHECK_FALSE(tok->strips_leading_space());
  const json golden = load_json(kGolden + "tokenizer_smollm2.json");
  REQUIRE(golden["cases"].size() >= 40);
  CHECK(check_golden(*tok, golden) == 0);
}

TEST_CASE("hf tokenizer: stories260K SentencePiece-style tokenizer.json matches the golden ids",
          "[hf][tokenizer][golden]") {
  const std::string d = temp_dir("stories");
  fs::copy_file(kGolden + "hf_stories260K_tokenizer.json", d + "/tokenizer.json");
  fs::copy_file(kGolden + "hf_stories260K_tokenizer_config.json", d + "/tokenizer_config.json");
  const auto tok = Tokenizer::from_hf_dir(d);
  CHECK(tok->vocab_size() == 512);
  CHECK(tok->bos_id() == 1);
  CHECK(tok->eos_id() == 2);
  CHECK(tok->add_bos());
  CHECK(tok->strips_leading_space());
  const json golden = load_json(kGolden + "tokenizer_stories260K.json");
  REQUIRE(golden["cases"].size() >= 40);
  CHECK(check_golden(*tok, golden) == 0);

  SECTION("without tokenizer_config.json BOS comes from the post-processor template") {
    fs::remove(d + "/tokenizer_config.json");
    const auto t = Tokenizer::from_hf_dir(d);
    CHECK(t->add_bos());
    CHECK(t->bos_id() == 1);
    CHECK(t->eos_id() == -1);
    CHECK(t->encode("Hello", true, true).front() == 1);
  }
}

TEST_CASE("hf tokenizer: hand-built byte-level tokenizer.json", "[hf][tokenizer]") {
  const json t = tiny_byte_level();
  const auto tok = Tokenizer::from_hf_dir(make_dir("tiny", t));
  CHECK(tok->vocab_size() == 10);
  CHECK_FALSE(tok->add_bos());  // byte-level, no template BOS, no tokenizer_config.json
  CHECK(tok->bos_id() == -1);
  // "ab ab": pieces "ab", " ab" -> a b | Ġ a b -> merges (a,b) then (Ġ,ab).
  CHECK(tok->encode("ab ab", true, true) == std::vector<int32_t>{4, 5});
  // "abc" is in the vocab but no merge makes it (ignore_merges false): ab c.
  CHECK(tok->encode("abc", false, false) == std::vector<int32_t>{4, 2});
  // A character with no token is dropped (no unk_token), and its neighbours then merge.
  CHECK(tok->encode("axb", false, false) == std::vector<int32_t>{4});
  CHECK(tok->encode("12ab", false, false) == std::vector<int32_t>{7, 4});
  // Special added token only with parse_special; the non-special one always.
  CHECK(tok->encode("a<|end|>b", false, true) == std::vector<int32_t>{0, 8, 1});
  CHECK(tok->encode("a<|end|>", false, false).back() != 8);
  CHECK(tok->encode("<think>ab", false, false) == std::vector<int32_t>{9, 4});
  CHECK(tok->is_special(8));
  CHECK_FALSE(tok->is_special(9));
  CHECK(tok->decode({4, 5, 8}, false) == "ab ab<|end|>");
  CHECK(tok->decode({4, 5, 8}, true) == "ab ab");

  SECTION("merges as 'a b' strings give the same result") {
    json s = t;
    s["model"]["merges"] = {"a b", "Ġ ab"};
    const auto t2 = Tokenizer::from_hf_dir(make_dir("tiny_strings", s));
    CHECK(t2->encode("ab ab", false, false) == std::vector<int32_t>{4, 5});
  }
  SECTION("ignore_merges emits a piece that is a token whole") {
    json s = t;
    s["model"]["ignore_merges"] = true;
    const auto t2 = Tokenizer::from_hf_dir(make_dir("tiny_ignore", s));
    CHECK(t2->encode("abc", false, false) == std::vector<int32_t>{6});
  }
  SECTION("tokenizer_config.json names BOS/EOS and asks for BOS") {
    const json cfg = {{"bos_token", {{"content", "<|end|>"}}}, {"eos_token", "<|end|>"},
                      {"add_bos_token", true}};
    const auto t2 = Tokenizer::from_hf_dir(make_dir("tiny_cfg", t, cfg));
    CHECK(t2->bos_id() == 8);
    CHECK(t2->eos_id() == 8);
    CHECK(t2->add_bos());
    CHECK(t2->encode("ab", true, false) == std::vector<int32_t>{8, 4});
  }
}

TEST_CASE("hf tokenizer: hand-built SentencePiece-style (Prepend/Replace normalizer)", "[hf][tokenizer]") {
  // Llama-2's older tokenizer.json layout: the normalizer prepends "▁" to every fragment.
  // Expected ids checked with HF tokenizers 0.23.3 on this same JSON.
  const json t = json::parse(R"({
    "added_tokens": [{"id": 0, "content": "<unk>", "special": true},
                     {"id": 1, "content": "<s>", "special": true},
                     {"id": 2, "content": "</s>", "special": true}],
    "normalizer": {"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "▁"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": null,
    "post_processor": null,
    "decoder": {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": true,
              "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0xC3>": 3, "<0xA9>": 4,
                        "▁": 5, "h": 6, "i": 7, "hi": 8, "▁hi": 9},
              "merges": ["h i", "▁ hi"]}
  })");
  const auto tok = Tokenizer::from_hf_dir(make_dir("spm", t, {{"bos_token", "<s>"}}));
  CHECK(tok->add_bos());  // SentencePiece-style default when tokenizer_config.json is silent
  CHECK(tok->bos_id() == 1);
  CHECK(tok->strips_leading_space());
  // "hi hi" -> "▁hi▁hi" -> ▁ h i ▁ h i -> (h,i) -> (▁,hi).
  CHECK(tok->encode("hi hi", true, true) == std::vector<int32_t>{1, 9, 9});
  // Byte fallback for a missing character; unknown bytes -> <unk>, consecutive ones fused.
  CHECK(tok->encode("\xC3\xA9", false, false) == std::vector<int32_t>{5, 3, 4});
  CHECK(tok->encode("xx", false, false) == std::vector<int32_t>{5, 0});
  // The normalizer runs on every fragment, so text after a special token gets "▁" too.
  CHECK(tok->encode("<s>hi", false, true) == std::vector<int32_t>{1, 9});
  CHECK(tok->decode({1, 9, 9}, true) == "hi hi");
  CHECK(tok->decode({1, 9, 9}, false) == "<s> hi hi");
  CHECK(tok->decode({5, 3, 4}, false) == "\xC3\xA9");

  // Gemma's layout: Split(" ", MergedWithPrevious) after the normalizer replaced every " ":
  // nothing left to split, the same ids. A Split on a text the normalizer keeps still fails.
  json g = t;
  g["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}},
                        {"behavior", "MergedWithPrevious"}, {"invert", false}};
  const auto gemma = Tokenizer::from_hf_dir(make_dir("spm_gemma_split", g, {{"bos_token", "<s>"}}));
  CHECK(gemma->encode("hi hi", true, true) == std::vector<int32_t>{1, 9, 9});
  g["pre_tokenizer"]["pattern"]["String"] = "h";
  CHECK_THROWS_WITH(Tokenizer::from_hf_dir(make_dir("spm_split_h", g)),
                    Catch::Contains("unsupported pre_tokenizer Split behavior 'MergedWithPrevious'"));
}

TEST_CASE("hf tokenizer: malformed and unsupported tokenizer files", "[hf][tokenizer][errors]") {
  SECTION("missing tokenizer.json") {
    const std::string d = temp_dir("none");
    try {
      Tokenizer::from_hf_dir(d);
      FAIL("no error");
    } catch (const ModelFileError& e) {
      CHECK(std::string(e.what()).find("missing tokenizer.json") != std::string::npos);
    }
  }
  SECTION("not JSON") {
    const std::string d = temp_dir("not_json");
    write_text(d + "/tokenizer.json", "{\"model\": ");
    expect_error(d, "tokenizer.json", "malformed JSON");
  }
  SECTION("Unigram and WordPiece models") {
    json u = tiny_byte_level();
    u["model"] = {{"type", "Unigram"}, {"vocab", json::array()}};
    expect_error(make_dir("unigram", u), "tokenizer.json", "unsupported model type 'Unigram'");
    u["model"] = {{"type", "WordPiece"}, {"vocab", json::object()}};
    expect_error(make_dir("wordpiece", u), "tokenizer.json", "unsupported model type 'WordPiece'");
  }
  SECTION("missing model or vocab") {
    json t = tiny_byte_level();
    t.erase("model");
    expect_error(make_dir("no_model", t), "tokenizer.json", "missing model");
    t = tiny_byte_level();
    t["model"].erase("vocab");
    expect_error(make_dir("no_vocab", t), "tokenizer.json", "model.vocab is missing or empty");
  }
  SECTION("a merge naming a token not in the vocabulary") {
    json t = tiny_byte_level();
    t["model"]["merges"] = json::array({json::array({"a", "b"}), json::array({"b", "q"})});
    expect_error(make_dir("bad_merge", t), "tokenizer.json",
                 "model.merges[1] \"b q\" uses a token not in the vocabulary");
    t["model"]["merges"] = json::array({"a b c"});
    expect_error(make_dir("bad_merge_str", t), "tokenizer.json", "model.merges[0] is not 'left right'");
  }
  SECTION("unsupported pipeline components") {
    json t = tiny_byte_level();
    t["normalizer"] = {{"type", "NFKC"}};
    expect_error(make_dir("nfkc", t), "tokenizer.json", "unsupported normalizer 'NFKC'");
    t = tiny_byte_level();
    t["pre_tokenizer"] = {{"type", "Whitespace"}};
    expect_error(make_dir("whitespace", t), "tokenizer.json", "unsupported pre_tokenizer 'Whitespace'");
    t = tiny_byte_level();
    t["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
    expect_error(make_dir("removed", t), "tokenizer.json", "unsupported pre_tokenizer Split behavior 'Removed'");
    t = tiny_byte_level();
    t["decoder"] = {{"type", "WordPiece"}};
    expect_error(make_dir("wp_decoder", t), "tokenizer.json", "unsupported decoder 'WordPiece'");
    t = tiny_byte_level();
    t["pre_tokenizer"] = nullptr;
    t["decoder"] = nullptr;
    expect_error(make_dir("no_pipeline", t), "tokenizer.json", "unsupported pipeline");
  }
  SECTION("bad added token and bad special token names") {
    json t = tiny_byte_level();
    t["added_tokens"][0].erase("id");
    expect_error(make_dir("bad_added", t), "tokenizer.json", "added_tokens[0] needs an integer id");
    expect_error(make_dir("bad_bos", tiny_byte_level(), {{"bos_token", "<nope>"}}),
                 "tokenizer_config.json", "bos_token \"<nope>\" is not in the vocabulary");
    expect_error(make_dir("bad_eos", tiny_byte_level(), {{"eos_token", 5}}),
                 "tokenizer_config.json", "eos_token must be a string");
  }
}
