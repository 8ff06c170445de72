#include "engine/model_loader.h"

#include <filesystem>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace octet {

namespace {

// A directory that is not an HF checkpoint gets a clear message, not "not a regular file".
void check_model_path(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec) && !is_hf_checkpoint_dir(path))
    throw ModelFileError(path, "is a directory without config.json: not a Hugging Face "
                               "checkpoint (give a .gguf file or a checkpoint directory)");
}

}  // namespace

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

std::unique_ptr<LoadedModel> load_model(const std::string& path, const LoadOptions& options) {
  check_model_path(path);
  auto m = std::make_unique<LoadedModel>();
  m->path = path;
  if (is_hf_checkpoint_dir(path)) {
    m->hf.emplace(HFCheckpoint::open(path));
    m->model = std::make_unique<LlamaModel>(LlamaModel::load(*m->hf, options));
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
    m->model = std::make_unique<LlamaModel>(LlamaModel::load(*m->gguf, options));
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
  return m;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  check_model_path(path);
  if (is_hf_checkpoint_dir(path)) return Tokenizer::from_hf_dir(path);
  return Tokenizer::from_gguf(GGUFFile::open(path));
}

}  // namespace octet
