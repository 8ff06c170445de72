#include "engine/generator.h"

#include <chrono>
#include <cmath>
#include <random>
#include <stdexcept>

#include "engine/model_loader.h"
#include "engine/sampler.h"

namespace octet {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A NaN or infinite logit means corrupt weights or config: fail loudly instead of emitting
// token 0 forever.
void check_finite(const std::vector<float>& logits, const std::string& path, int64_t step) {
  for (float v : logits)
    if (!std::isfinite(v))
      throw std::runtime_error(path + ": the model produced a non-finite logit at generation "
                               "step " + std::to_string(step) +
                               " (corrupt weights or configuration?)");
}
}  // namespace

struct Generator::Impl {
  std::unique_ptr<LoadedModel> loaded;
  const LlamaModel& model() const { return *loaded->model; }
  const Tokenizer& tokenizer() const { return *loaded->tokenizer; }
  bool is_eos(int32_t id) const {
    for (int32_t e : loaded->eos_token_ids)
      if (e == id) return true;
    return false;
  }
};

Generator::Generator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Generator::~Generator() = default;

std::unique_ptr<Generator> Generator::load(const std::string& model_path,
                                           const GeneratorOptions& options) {
  LoadOptions load_options = make_load_options(options.quantization, options.weight_strategy);
  load_options.device = options.device;
  auto impl = std::unique_ptr<Impl>(new Impl{load_model(model_path, load_options)});
  return std::unique_ptr<Generator>(new Generator(std::move(impl)));
}

std::vector<int32_t> Generator::tokenize(const std::string& text) const {
  return impl_->tokenizer().encode(text, /*add_special=*/true, /*parse_special=*/true);
}

int64_t Generator::max_model_len() const {
  return impl_->model().config().max_position_embeddings;
}

const std::string& Generator::model_path() const { return impl_->loaded->path; }

std::string Generator::linear_format() const { return impl_->model().linear_format(); }

int64_t Generator::decode_weight_bytes() const { return impl_->model().decode_weight_bytes(); }

GenerateResult Generator::generate(const std::vector<int32_t>& prompt_ids,
                                   const SamplingParams& params,
                                   const std::function<void(const std::string&)>& on_text) const {
  params.validate();
  if (prompt_ids.empty()) throw std::invalid_argument("the prompt has no tokens");
  const int64_t n_prompt = static_cast<int64_t>(prompt_ids.size());
  const int64_t max_len = max_model_len();
  if (n_prompt > max_len || params.max_tokens > max_len - n_prompt)
    throw std::invalid_argument("the prompt (" + std::to_string(n_prompt) + " tokens) plus " +
                                "max_tokens (" + std::to_string(params.max_tokens) +
                                ") exceeds the model's context length of " +
                                std::to_string(max_len) + " tokens");
  const LlamaModel& model = impl_->model();
  const Tokenizer& tok = impl_->tokenizer();
  const int64_t vocab = model.config().vocab_size;
  for (int32_t id : prompt_ids)
    if (id < 0 || id >= vocab)
      throw std::invalid_argument("prompt token id " + std::to_string(id) +
                                  " is outside the vocabulary [0, " + std::to_string(vocab) + ")");

  GenerateResult r;
  r.prompt_token_ids = prompt_ids;
  r.finish_reason = "length";
  r.linear_format = model.linear_format();
  std::mt19937_64 rng(params.seed >= 0 ? static_cast<uint64_t>(params.seed)
                                       : std::random_device{}());
  StreamingDetokenizer detok(tok, /*skip_special=*/true, prompt_ids);
  SequenceKVCache cache = model.new_cache(n_prompt + params.max_tokens);

  const auto t0 = Clock::now();
  if (params.max_tokens > 0) {
    std::vector<float> logits = model.forward(prompt_ids.data(), n_prompt, 0, cache, false);
    r.prefill_seconds = seconds_since(t0);
    const auto t1 = Clock::now();
    for (int64_t step = 0; step < params.max_tokens; ++step) {
      if (step > 0) {
        const int32_t last = r.token_ids.back();
        logits = model.forward(&last, 1, n_prompt + step - 1, cache, false);
      }
      check_finite(logits, impl_->loaded->path, step);
      const SampleResult res = sample(logits.data(), vocab, params, prompt_ids, r.token_ids,
                                      impl_->loaded->eos_token_ids, rng);
      if (!res.ok()) throw std::runtime_error("sampling failed at step " + std::to_string(step) +
                                              ": " + res.error);
      const int32_t next = res.token_id;
      r.token_ids.push_back(next);
      std::string piece = detok.push(next);
      if (on_text && !piece.empty()) on_text(piece);
      r.text += piece;
      if (impl_->is_eos(next) && !params.ignore_eos) {
        r.finish_reason = "stop";
        break;
      }
    }
    r.decode_seconds = seconds_since(t1);
  }
  std::string rest = detok.finish();
  if (on_text && !rest.empty()) on_text(rest);
  r.text += rest;
  const double total = r.prefill_seconds + r.decode_seconds;
  r.tokens_per_second = total > 0 ? static_cast<double>(r.token_ids.size()) / total : 0.0;
  return r;
}

ThroughputResult Generator::bench(int64_t input_len, int64_t output_len) const {
  if (input_len <= 0 || output_len <= 0)
    throw std::invalid_argument("bench: input_len and output_len must be positive");
  if (input_len > max_model_len() || output_len > max_model_len() - input_len)
    throw std::invalid_argument("bench: input_len + output_len exceeds the model's context "
                                "length of " + std::to_string(max_model_len()) + " tokens");
  const LlamaModel& model = impl_->model();
  const int64_t vocab = model.config().vocab_size;
  std::vector<int32_t> ids(input_len);
  std::mt19937_64 rng(0);
  for (auto& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  SequenceKVCache cache = model.new_cache(input_len + output_len);
  ThroughputResult r;
  r.input_len = input_len;
  r.output_len = output_len;
  r.linear_format = model.linear_format();
  r.decode_weight_bytes = model.decode_weight_bytes();

  auto t0 = Clock::now();
  std::vector<float> logits = model.forward(ids.data(), input_len, 0, cache, false);
  r.prefill_tokens_per_second = static_cast<double>(input_len) / seconds_since(t0);
  t0 = Clock::now();
  for (int64_t step = 0; step < output_len; ++step) {
    const int32_t next = argmax(logits.data(), vocab);
    logits = model.forward(&next, 1, input_len + step, cache, false);
  }
  r.decode_tokens_per_second = static_cast<double>(output_len) / seconds_since(t0);
  return r;
}

}  // namespace octet
