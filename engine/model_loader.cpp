#include "engine/model_loader.h"

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "engine/request_error.h"

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
// "default" entry is used).
std::string find_chat_template(const LoadedModel& m) {
  if (m.gguf) return m.gguf->get_string("tokenizer.chat_template", "");
  std::ifstream in(m.path + "/tokenizer_config.json");
  if (!in) return "";
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "";
  const auto it = j.find("chat_template");
  if (it == j.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array())
    for (const auto& e : *it)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
          e["template"].is_string())
        return e["template"].get<std::string>();
  return "";
}

}  // namespace

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

// Every rank's shard, each loaded (read, cut, uploaded) on its own rank thread; world size 1
// loads on the calling thread exactly as before.
template <class File, class Config>
void load_ranks(LoadedModel& m, const File& file, const Config& config,
                const LoadOptions& options) {
  const int world = options.world_size;
  if (world > 1) validate_tensor_parallel(config(), world);  // before any weight is read
  m.ranks = make_rank_group(options.device, world);
  std::vector<std::unique_ptr<LlamaModel>> models(static_cast<size_t>(world));
  m.ranks->run([&](int rank, Communicator&) {
    LoadOptions o = options;
    o.rank = rank;
    if (world > 1) o.backend = nullptr;  // each rank its own backend
    models[rank] = std::make_unique<LlamaModel>(LlamaModel::load(file, o));
  });
  m.model = std::move(models[0]);
  for (int r = 1; r < world; ++r) m.peers.push_back(std::move(models[r]));
}

}  // namespace

std::unique_ptr<LoadedModel> load_model(const std::string& path, const LoadOptions& options) {
  check_model_path(path);
  auto m = std::make_unique<LoadedModel>();
  m->path = path;
  if (is_hf_checkpoint_dir(path)) {
    m->hf.emplace(HFCheckpoint::open(path));
    load_ranks(*m, *m->hf, [&] {
      return ModelConfig::from_hf_config(m->hf->config(), path + "/config.json");
    }, options);
    m->tokenizer = Tokenizer::from_hf_dir(path);
    if (const nlohmann::json* gen = m->hf->generation_config()) {
      if (auto it = gen->find("eos_token_id"); it != gen->end() && !it->is_null()) {
        const nlohmann::json ids = it->is_array() ? *it : nlohmann::json::array({*it});
        for (const auto& e : ids) {
          if (!e.is_number_integer())
            throw ModelFileError(path + "/generation_config.json",
                                 "eos_token_id must be an integer or a list of integers, got " +
                                     it->dump());
          m->eos_token_ids.push_back(e.get<int32_t>());
        }
      }
    }
  } else {
    m->gguf.emplace(GGUFFile::open(path));
    load_ranks(*m, *m->gguf, [&] { return ModelConfig::from_gguf(*m->gguf); }, options);
    m->tokenizer = Tokenizer::from_gguf(*m->gguf);
  }
  if (m->tokenizer->eos_id() >= 0) m->eos_token_ids.push_back(m->tokenizer->eos_id());
  const int64_t vocab = m->model->config().vocab_size;
  if (m->tokenizer->vocab_size() > vocab)
    throw ModelFileError(path, "tokenizer has " + std::to_string(m->tokenizer->vocab_size()) +
                                   " tokens but the model's vocab_size is " +
                                   std::to_string(vocab));
  for (auto [what, id] : {std::pair{"bos", m->tokenizer->bos_id()},
                          std::pair{"eos", m->tokenizer->eos_id()}})
    if (id >= vocab)
      throw ModelFileError(path, std::string(what) + " token id " + std::to_string(id) +
                                     " is outside the vocabulary of " + std::to_string(vocab));
  for (int32_t id : m->eos_token_ids)
    if (id < 0 || id >= vocab)
      throw ModelFileError(path, "eos token id " + std::to_string(id) + " is outside the "
                                 "vocabulary");
  m->model_tokenizer = std::make_unique<ModelTokenizer>(*m->tokenizer, find_chat_template(*m));
  return m;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  check_model_path(path);
  if (is_hf_checkpoint_dir(path)) return Tokenizer::from_hf_dir(path);
  return Tokenizer::from_gguf(GGUFFile::open(path));
}

}  // namespace octet
