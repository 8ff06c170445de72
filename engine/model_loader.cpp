#include "engine/model_loader.h"

#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "engine/gemma_chat_template.h"
#include "engine/kv_cache_setup.h"
#include "engine/request_error.h"
#include "models/config_json.h"
#include "models/dummy_weights.h"

namespace octet {

namespace {

// A directory that is not an HF checkpoint gets a clear message, not "not a regular file".
void check_model_path(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec) && !is_hf_checkpoint_dir(path))
    throw ModelFileError(path, "is a directory without config.json: not a Hugging Face "
                               "checkpoint (give a .gguf file or a checkpoint directory)");
}

// The chat template a front end renders messages with: GGUF tokenizer.chat_template, or
// tokenizer_config.json's chat_template (a string, or a list of {name, template} whose
// "default" entry is used); "" when the file or the key is absent.
std::string hf_chat_template(const std::string& dir) {
  const std::string path = dir + "/tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return "";
  if (!std::filesystem::is_regular_file(path, ec))
    throw ModelFileError(path, "not a regular file");
  const nlohmann::json j = read_config_json(path);
  const auto it = j.find("chat_template");
  if (it == j.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  const std::string expected =
      "chat_template: must be a string or a list of {\"name\": string, \"template\": string}, ";
  if (!it->is_array()) throw ModelFileError(path, expected + "got " + json_brief(*it));
  for (size_t i = 0; i < it->size(); ++i) {
    const nlohmann::json& e = (*it)[i];
    const auto name = e.is_object() ? e.find("name") : e.end();
    const auto tmpl = e.is_object() ? e.find("template") : e.end();
    if (!e.is_object() || name == e.end() || !name->is_string() || tmpl == e.end() ||
        !tmpl->is_string())
      throw ModelFileError(path, expected + "entry " + std::to_string(i) + " is " + json_brief(e));
    if (*name == "default") return tmpl->get<std::string>();
  }
  return "";
}

// A tokenizer and its chat template from a GGUF file or HF directory (--tokenizer).
struct TokenizerFiles {
  std::unique_ptr<Tokenizer> tokenizer;
  std::string chat_template;
};

TokenizerFiles open_tokenizer(const std::string& path) {
  TokenizerFiles t;
  std::error_code ec;
  if (std::filesystem::is_regular_file(path + "/tokenizer.json", ec)) {
    t.tokenizer = Tokenizer::from_hf_dir(path);
    t.chat_template = hf_chat_template(path);
  } else {
    check_model_path(path);
    const GGUFFile f = GGUFFile::open(path);
    t.tokenizer = Tokenizer::from_gguf(f);
    t.chat_template = f.get_string("tokenizer.chat_template", "");
  }
  return t;
}

// The tokenizer of `tokenizer` with the vocabulary stretched to `vocab` (pad_tokenizer_vocab).
class PaddedVocabTokenizer final : public Tokenizer {
 public:
  PaddedVocabTokenizer(std::unique_ptr<Tokenizer> inner, int32_t vocab)
      : inner_(std::move(inner)), own_(inner_->vocab_size()), vocab_(vocab) {}
  std::vector<int32_t> encode(std::string_view text, bool add_special,
                              bool parse_special) const override {
    return inner_->encode(text, add_special, parse_special);
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override {
    std::vector<int32_t> known;
    known.reserve(ids.size());
    for (int32_t id : ids) {
      check(id);
      if (id < own_) known.push_back(id);
    }
    return inner_->decode(known, skip_special);
  }
  std::string token_bytes(int32_t id) const override {
    check(id);
    return id < own_ ? inner_->token_bytes(id) : std::string();
  }
  const std::string& token_text(int32_t id) const override {
    static const std::string kNone;
    check(id);
    return id < own_ ? inner_->token_text(id) : kNone;
  }
  bool is_special(int32_t id) const override {
    check(id);
    return id < own_ && inner_->is_special(id);
  }
  int32_t token_to_id(std::string_view text) const override { return inner_->token_to_id(text); }
  bool strips_leading_space() const override { return inner_->strips_leading_space(); }
  int32_t vocab_size() const override { return vocab_; }
  int32_t bos_id() const override { return inner_->bos_id(); }
  int32_t eos_id() const override { return inner_->eos_id(); }
  bool add_bos() const override { return inner_->add_bos(); }

 private:
  void check(int32_t id) const {
    if (id < 0 || id >= vocab_)
      throw std::out_of_range("token id " + std::to_string(id) + " outside the vocabulary [0, " +
                              std::to_string(vocab_) + ")");
  }
  std::unique_ptr<Tokenizer> inner_;
  int32_t own_, vocab_;
};

}  // namespace

std::unique_ptr<Tokenizer> pad_tokenizer_vocab(std::unique_ptr<Tokenizer> tokenizer,
                                               int32_t vocab) {
  if (vocab <= tokenizer->vocab_size()) return tokenizer;
  return std::make_unique<PaddedVocabTokenizer>(std::move(tokenizer), vocab);
}

ModelSource model_source(const EngineArgs& args) {
  ModelSource s;
  s.model = args.model;
  s.load_format = args.load_format;
  s.tokenizer = args.tokenizer;
  s.seed = args.seed;
  return s;
}

ModelTokenizer::ModelTokenizer(const Tokenizer& tokenizer, std::string chat_template)
    : tokenizer_(&tokenizer), chat_template_(std::move(chat_template)) {}

std::vector<int32_t> ModelTokenizer::tokenize(const std::string& text,
                                              bool add_special_tokens) const {
  return tokenizer_->encode(text, add_special_tokens, /*parse_special=*/true);
}

std::string ModelTokenizer::detokenize(const std::vector<int32_t>& ids,
                                       bool skip_special_tokens) const {
  check_token_ids(ids, tokenizer_->vocab_size(), "tokens");
  return tokenizer_->decode(ids, skip_special_tokens);
}

std::string ModelTokenizer::bos_token() const {
  return tokenizer_->bos_id() >= 0 ? tokenizer_->token_text(tokenizer_->bos_id()) : "";
}

std::string ModelTokenizer::eos_token() const {
  return tokenizer_->eos_id() >= 0 ? tokenizer_->token_text(tokenizer_->eos_id()) : "";
}

int64_t ModelTokenizer::vocab_size() const { return tokenizer_->vocab_size(); }

const std::string& ModelTokenizer::token_text(int32_t id) const {
  return tokenizer_->token_text(id);
}

LoadOptions make_load_options(const std::string& quantization,
                              const std::string& weight_strategy) {
  LoadOptions lo;
  lo.quantization = quantization;
  if (weight_strategy == "channel") {
    lo.weight_granularity = ScaleGranularity::PerRow;
  } else if (weight_strategy == "tensor") {
    lo.weight_granularity = ScaleGranularity::PerTensor;
  } else {
    throw std::invalid_argument("weight strategy must be channel or tensor, got '" +
                                weight_strategy + "'");
  }
  return lo;
}

namespace {

// Every rank's shard, each loaded (read or generated, cut, uploaded) on its own rank thread by
// load(o), o = options with o.rank set; world size 1 loads on the calling thread.
template <class Config, class Load>
void load_ranks_with(LoadedModel& m, const Config& config, const LoadOptions& options,
                     const Load& load) {
  const int world = options.world_size;
  if (world > 1) validate_tensor_parallel(config(), world);  // before any weight is read
  m.ranks = make_rank_group(options.device, world, options.placement);
  // This process's ranks (all of them on one node); comm.rank() is the global rank.
  const int local = m.ranks->world_size();
  std::vector<std::unique_ptr<LlamaModel>> models(static_cast<size_t>(local));
  m.ranks->run([&](int rank, Communicator& comm) {
    LoadOptions o = options;
    o.rank = comm.rank();
    // Each rank its own backend: the group's (CUDA: cuda:<rank>, the stream its NCCL
    // communicator uses), or one made from o.device (the CPU).
    if (world > 1) o.backend = m.ranks->rank_backend(rank);
    models[rank] = std::make_unique<LlamaModel>(load(o));
  });
  m.model = std::move(models[0]);
  for (int r = 1; r < local; ++r) m.peers.push_back(std::move(models[r]));
}

template <class File, class Config>
void load_ranks(LoadedModel& m, const File& file, const Config& config,
                const LoadOptions& options) {
  load_ranks_with(m, config, options,
                  [&](const LoadOptions& o) { return LlamaModel::load(file, o); });
}

// The checks every loaded model passes: the tokenizer fits the vocabulary, and so do its
// BOS/EOS and the EOS ids collected.
void check_vocabulary(const LoadedModel& m) {
  const std::string& path = m.path;
  const int64_t vocab = m.model->config().vocab_size;
  if (m.tokenizer->vocab_size() > vocab)
    throw ModelFileError(path, "tokenizer has " + std::to_string(m.tokenizer->vocab_size()) +
                                   " tokens but the model's vocab_size is " +
                                   std::to_string(vocab));
  for (auto [what, id] : {std::pair{"bos", m.tokenizer->bos_id()},
                          std::pair{"eos", m.tokenizer->eos_id()}})
    if (id >= vocab)
      throw ModelFileError(path, std::string(what) + " token id " + std::to_string(id) +
                                     " is outside the vocabulary of " + std::to_string(vocab));
  for (int32_t id : m.eos_token_ids)
    if (id < 0 || id >= vocab)
      throw ModelFileError(path, "eos token id " + std::to_string(id) + " is outside the "
                                 "vocabulary");
}

// EOS ids beside the tokenizer's, as vLLM takes them: generation_config.json's eos_token_id
// (an id or a list), or config.json's when there is no generation_config.json (transformers'
// GenerationConfig.from_model_config). Each must be below the model's vocab_size.
std::vector<int32_t> checkpoint_eos_ids(const HFCheckpoint& ckpt, const ModelConfig& config) {
  const nlohmann::json* gen = ckpt.generation_config();
  if (!gen) return config.eos_token_ids;  // checked by ModelConfig::validate
  const std::string path = ckpt.dir() + "/generation_config.json";
  for (const char* key : {"bos_token_id", "eos_token_id"}) {
    const std::vector<int32_t> ids = json_token_ids(*gen, key, path, /*list_ok=*/true);
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] >= config.vocab_size)
        throw ModelFileError(path, std::string(key) +
                                       (ids.size() > 1 ? "[" + std::to_string(i) + "]" : "") +
                                       ": " + std::to_string(ids[i]) +
                                       " is not below the model's vocab_size " +
                                       std::to_string(config.vocab_size));
    if (std::string(key) == "eos_token_id") return ids;
  }
  return {};
}

// --load-format dummy: the architecture from a preset or config.json, weights generated per
// rank, the tokenizer from --tokenizer (or config.json's directory).
std::unique_ptr<LoadedModel> load_dummy(const ModelSource& source, const LoadOptions& options) {
  const DummyModelSpec spec = find_dummy_model(source.model);
  std::string tok_path = source.tokenizer;
  if (tok_path.empty() && !spec.dir.empty() &&
      std::filesystem::is_regular_file(spec.dir + "/tokenizer.json"))
    tok_path = spec.dir;
  if (tok_path.empty())
    throw std::invalid_argument("--load-format dummy --model " + source.model +
                                " has no tokenizer: give --tokenizer PATH (a GGUF file or a "
                                "Hugging Face directory; any small one, e.g. stories260K.gguf)");
  TokenizerFiles tok = open_tokenizer(tok_path);
  const ModelConfig config = dummy_model_config(spec, tok.tokenizer->vocab_size());
  auto m = std::make_unique<LoadedModel>();
  m->path = source.model;
  m->load_format = "dummy";
  load_ranks_with(*m, [&] { return config; }, options, [&](const LoadOptions& o) {
    return load_dummy_model(config, source.seed, o);
  });
  if (tok.tokenizer->eos_id() >= 0) m->eos_token_ids.push_back(tok.tokenizer->eos_id());
  m->tokenizer = pad_tokenizer_vocab(std::move(tok.tokenizer),
                                     static_cast<int32_t>(config.vocab_size));
  check_vocabulary(*m);
  m->model_tokenizer = std::make_unique<ModelTokenizer>(*m->tokenizer, tok.chat_template);
  return m;
}

}  // namespace

std::unique_ptr<LoadedModel> load_model(const std::string& path, const LoadOptions& options) {
  check_model_path(path);
  auto m = std::make_unique<LoadedModel>();
  m->path = path;
  m->host_memory_available_bytes = available_host_memory_bytes();
  std::string chat_template;
  if (is_hf_checkpoint_dir(path)) {
    m->hf.emplace(HFCheckpoint::open(path));
    // The small files first: a bad config.json, generation_config.json, tokenizer or
    // tokenizer_config.json fails before any weight is read.
    const ModelConfig config = ModelConfig::from_hf_config(m->hf->config(), path + "/config.json");
    m->eos_token_ids = checkpoint_eos_ids(*m->hf, config);
    m->tokenizer = Tokenizer::from_hf_dir(path);
    chat_template = hf_chat_template(path);
    load_ranks(*m, *m->hf, [&] { return config; }, options);
  } else {
    m->gguf.emplace(GGUFFile::open(path));
    load_ranks(*m, *m->gguf, [&] { return ModelConfig::from_gguf(*m->gguf); }, options);
    m->tokenizer = Tokenizer::from_gguf(*m->gguf);
    chat_template = m->gguf->get_string("tokenizer.chat_template", "");
    if (m->gguf->get_string("general.architecture", "") == "gemma3") {
      if (chat_template.empty()) {
        spdlog::warn("{} has no tokenizer.chat_template: using Gemma 3's (engine/"
                     "gemma_chat_template.h)", path);
        chat_template = kGemma3ChatTemplate;
      }
      // Gemma ends a turn with <end_of_turn> (generation_config.json eos_token_id [1, 106]).
      if (const int32_t eot = m->tokenizer->token_to_id("<end_of_turn>"); eot >= 0)
        m->eos_token_ids.push_back(eot);
    }
  }
  if (m->tokenizer->eos_id() >= 0) m->eos_token_ids.push_back(m->tokenizer->eos_id());
  check_vocabulary(*m);
  m->model_tokenizer = std::make_unique<ModelTokenizer>(*m->tokenizer, chat_template);
  return m;
}

std::unique_ptr<LoadedModel> load_model(const ModelSource& source, const LoadOptions& options) {
  const int64_t available = available_host_memory_bytes();
  std::unique_ptr<LoadedModel> m;
  if (source.load_format == "dummy") {
    m = load_dummy(source, options);
  } else if (source.load_format == "auto") {
    m = load_model(source.model, options);
    if (!source.tokenizer.empty()) {
      TokenizerFiles tok = open_tokenizer(source.tokenizer);
      m->model_tokenizer.reset();
      m->tokenizer = std::move(tok.tokenizer);
      m->eos_token_ids.clear();
      if (m->tokenizer->eos_id() >= 0) m->eos_token_ids.push_back(m->tokenizer->eos_id());
      check_vocabulary(*m);
      m->model_tokenizer = std::make_unique<ModelTokenizer>(*m->tokenizer, tok.chat_template);
    }
  } else {
    throw std::invalid_argument("--load-format must be auto or dummy, got '" +
                                source.load_format + "'");
  }
  m->host_memory_available_bytes = available;
  return m;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  check_model_path(path);
  if (is_hf_checkpoint_dir(path)) return Tokenizer::from_hf_dir(path);
  return Tokenizer::from_gguf(GGUFFile::open(path));
}

std::unique_ptr<Tokenizer> load_tokenizer(const ModelSource& source) {
  if (!source.tokenizer.empty()) return open_tokenizer(source.tokenizer).tokenizer;
  if (source.load_format != "dummy") return load_tokenizer(source.model);
  const DummyModelSpec spec = find_dummy_model(source.model);
  if (spec.dir.empty() || !std::filesystem::is_regular_file(spec.dir + "/tokenizer.json"))
    throw std::invalid_argument("--load-format dummy --model " + source.model +
                                " has no tokenizer: give --tokenizer PATH");
  return Tokenizer::from_hf_dir(spec.dir);
}

}  // namespace octet
