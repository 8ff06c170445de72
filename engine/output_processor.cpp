// Sampling, stop checks, detokenization and output assembly of one step (output_processor.h).
#include "engine/output_processor.h"

#include <stdexcept>
#include <utility>

#include "engine/detokenizer.h"
#include "engine/grammar_compiler.h"
#include "engine/model_runner.h"
#include "kernels/common/host_parallel.h"

namespace octet {

namespace {

double seconds_between(EngineClock::time_point a, EngineClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

TokenLogprobs to_token_logprobs(const SampleResult& r) {
  TokenLogprobs t;
  t.token_id = r.token_id;
  t.logprob = r.logprob;
  t.rank = r.rank;
  t.top.reserve(r.top_logprobs.size());  // up to the whole vocabulary
  for (const TokenLogprob& x : r.top_logprobs) t.top.emplace_back(x.token_id, x.logprob);
  return t;
}

bool contains(const std::vector<int32_t>& ids, int32_t id) {
  for (int32_t e : ids)
    if (e == id) return true;
  return false;
}

}  // namespace

RequestState::RequestState() = default;
RequestState::RequestState(RequestState&&) noexcept = default;
RequestState& RequestState::operator=(RequestState&&) noexcept = default;
RequestState::~RequestState() = default;

OutputProcessor::OutputProcessor(std::vector<int32_t> eos_token_ids, int64_t max_model_len)
    : eos_token_ids_(std::move(eos_token_ids)), max_model_len_(max_model_len) {}

OutputProcessor::~OutputProcessor() = default;

void OutputProcessor::add(const std::string& request_id, RequestState state) {
  states_.emplace(request_id, std::move(state));
}

RequestState* OutputProcessor::find(const std::string& request_id) {
  auto it = states_.find(request_id);
  return it == states_.end() ? nullptr : &it->second;
}

void OutputProcessor::erase(const std::string& request_id) { states_.erase(request_id); }

std::vector<std::string> OutputProcessor::ids() const {
  std::vector<std::string> ids;
  ids.reserve(states_.size());
  for (const auto& kv : states_) ids.push_back(kv.first);
  return ids;
}

void OutputProcessor::on_scheduled(const SchedulerOutput& out, EngineClock::time_point now) {
  for (Request* r : out.scheduled) {
    RequestState& st = states_.at(r->request_id);
    if (st.scheduled_once) continue;
    st.scheduled_once = true;
    st.first_scheduled = now;
    st.num_cached_tokens = std::max<int64_t>(r->num_cached_tokens, 0);
  }
}

DeviceSampling OutputProcessor::device_sampling(const SchedulerOutput& out, int64_t vocab) {
  DeviceSampling plan;
  plan.rows.resize(out.scheduled.size());
  drawn_u_.assign(out.scheduled.size(), -1.0);
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    const Request& r = *out.scheduled[i];
    const SamplingParams& p = r.sampling_params;
    if (r.num_computed_tokens + out.num_scheduled_tokens[i] != r.num_tokens() ||
        p.max_tokens == 0 || !device_sampleable(p))
      continue;
    RequestState& st = states_.at(r.request_id);
    if (st.grammar) continue;
    const int64_t begin = static_cast<int64_t>(plan.edits.size());
    const int64_t edits =
        append_logit_edits(p, vocab, r.prompt_token_ids, r.output_token_ids, eos_token_ids_,
                           kMaxSampleEdits - begin, plan.edits);
    if (edits < 0) continue;  // the host: an id outside the vocabulary, or too many edits
    double u = 0.0;
    if (p.temperature >= kGreedyTemperature) u = drawn_u_[i] = uniform_from(st.rng);
    plan.rows[i] = device_sample_params(p, u);
    plan.rows[i].edit_begin = static_cast<int32_t>(begin);
    plan.rows[i].edit_count = static_cast<int32_t>(edits);
  }
  return plan;
}

// A request's failure (a non-finite logit, a sampler error, any exception from its own
// logprobs) is recorded and fails that request alone in updates().
void OutputProcessor::sample(const SchedulerOutput& out, const StepLogits& logits) {
  sampled_.clear();
  // Structured outputs: the grammar bitmasks of the constrained rows sampled this step, filled
  // first and in parallel on the CPU thread team (independent matchers; the forward is done, so
  // the team is idle). xgrammar's fill costs ~0.1 ms per row for a JSON schema.
  fills_.clear();
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    const Request& r = *out.scheduled[i];
    if (logits.sample_row[i] < 0 || r.sampling_params.max_tokens == 0) continue;
    RequestState& st = states_.at(r.request_id);
    if (st.grammar) fills_.push_back(st.grammar.get());
  }
  if (!fills_.empty()) {
    const EngineClock::time_point t0 = EngineClock::now();
    const int64_t n = static_cast<int64_t>(fills_.size());
    host_parallel_for(n, n > 1, [&](int64_t k) { fills_[static_cast<size_t>(k)]->fill_bitmask(); });
    bitmask_fill_s_ += seconds_between(t0, EngineClock::now());
    num_bitmask_fills_ += n;
  }
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    Request& r = *out.scheduled[i];
    RequestState& st = states_.at(r.request_id);
    const SamplingParams& p = r.sampling_params;
    try {
      if (logits.prompt_row_begin[i] >= 0) {
        const int64_t n_prompt = r.num_prompt_tokens();
        st.prompt_logprobs.resize(static_cast<size_t>(n_prompt));
        st.prompt_logprobs[0].token_id = r.prompt_token_ids[0];
        for (int64_t k = 0; k < logits.prompt_row_count[i]; ++k) {
          const int64_t pos = logits.prompt_pos_begin[i] + k;
          const int32_t next = r.prompt_token_ids[pos + 1];
          const SampleResult lp = logprobs_for(logits.row(logits.prompt_row_begin[i] + k),
                                               logits.vocab, next, p.prompt_logprobs);
          if (!lp.ok()) throw std::runtime_error("prompt logprobs: " + lp.error);
          st.prompt_logprobs[pos + 1] = to_token_logprobs(lp);
        }
      }
      if (logits.sample_row[i] < 0) continue;
      if (p.max_tokens == 0) {
        sampled_.push_back({&r, SampleResult{}, true, "", ""});
        continue;
      }
      const int32_t* bitmask = nullptr;
      if (st.grammar) {  // filled above
        if (!st.grammar->fill_error().empty())
          throw std::runtime_error("structured output: " + st.grammar->fill_error());
        bitmask = st.grammar->bitmask();
      }
      SampleResult res;
      const int64_t row = logits.sample_row[i];
      const int32_t device_id = logits.device_id(row);
      if (device_id >= 0) {  // taken on the device: the token sample() would take
        res.token_id = device_id;
      } else if (i < drawn_u_.size() && drawn_u_[i] >= 0.0) {  // drawn before the step
        res = octet::sample(logits.row(row), logits.vocab, p, r.prompt_token_ids,
                            r.output_token_ids, eos_token_ids_, drawn_u_[i], bitmask);
      } else {
        res = octet::sample(logits.row(row), logits.vocab, p, r.prompt_token_ids,
                            r.output_token_ids, eos_token_ids_, st.rng, bitmask);
      }
      if (!res.ok() && bitmask && res.error.find("grammar allows no token") != std::string::npos) {
        // The request's own constraint admits nothing here (e.g. `root ::= root`, a schema
        // that only refers to itself, or min_tokens masking the grammar's only way out): a
        // client error naming the field, not an engine fault.
        sampled_.push_back({&r, SampleResult{}, false, "sampling: " + res.error,
                            p.structured_outputs.field});
        continue;
      }
      if (!res.ok()) throw std::runtime_error("sampling: " + res.error);
      if (st.grammar && !st.grammar->accept(res.token_id))
        throw std::runtime_error("structured output: the grammar rejected sampled token " +
                                 std::to_string(res.token_id));
      r.append_output_token(res.token_id);
      sampled_.push_back({&r, std::move(res), false, "", ""});
    } catch (const std::exception& e) {
      sampled_.push_back({&r, SampleResult{}, false, e.what(), ""});
    }
  }
  drawn_u_.clear();  // this step's only
}

std::vector<RequestUpdate> OutputProcessor::updates(EngineClock::time_point now,
                                                    int64_t* new_prompt_tokens,
                                                    int64_t* new_generated) {
  std::vector<RequestUpdate> result;
  result.reserve(sampled_.size());
  for (Sampled& s : sampled_) {
    try {
      if (!s.error.empty()) throw std::runtime_error(s.error);
      *new_generated += s.no_token ? 0 : 1;
      result.push_back(update_for(*s.req, s.res, s.no_token, now, new_prompt_tokens));
    } catch (const std::exception& e) {
      RequestUpdate u;
      u.request = s.req;
      u.status = RequestStatus::FinishedAborted;
      u.output.finish_reason = "abort";
      u.output.error = e.what();
      u.output.invalid_request = !s.invalid_param.empty();
      u.output.error_param = s.invalid_param;
      result.push_back(std::move(u));
    }
  }
  sampled_.clear();
  return result;
}

// The output of request r for this step (its token `res`, or none when `no_token`): text,
// logprobs, stop checks, and the status it ends the step with.
RequestUpdate OutputProcessor::update_for(Request& r, const SampleResult& res, bool no_token,
                                          EngineClock::time_point now,
                                          int64_t* new_prompt_tokens) {
  RequestState& st = states_.at(r.request_id);
  const SamplingParams& p = r.sampling_params;
  RequestUpdate u;
  u.request = &r;
  RequestOutput& o = u.output;
  o.request_id = r.request_id;
  o.num_prompt_tokens = r.num_prompt_tokens();
  o.num_cached_tokens = st.num_cached_tokens;
  if (!st.produced_first) {
    st.produced_first = true;
    st.first_token = now;
    *new_prompt_tokens += o.num_prompt_tokens;
    if (p.prompt_logprobs >= 0) o.prompt_logprobs = std::move(st.prompt_logprobs);
  }
  RequestStatus& status = u.status;
  if (no_token) {
    status = RequestStatus::FinishedLength;
  } else {
    const int32_t tok = res.token_id;
    const int64_t n_out = r.num_output_tokens();
    o.token_ids.push_back(tok);
    if (p.logprobs >= 0) o.logprobs.push_back(to_token_logprobs(res));
    const bool may_stop = n_out >= p.min_tokens;
    if (may_stop && contains(eos_token_ids_, tok) && !p.ignore_eos) {
      status = RequestStatus::FinishedStopped;
    } else if (st.grammar && st.grammar->terminated()) {
      // The grammar ended with a stop token (EOS, even with ignore_eos): nothing can follow.
      status = RequestStatus::FinishedStopped;
    } else if (may_stop && contains(p.stop_token_ids, tok)) {
      status = RequestStatus::FinishedStopped;
      o.stop_reason = std::to_string(tok);
    }
    if (status == RequestStatus::FinishedStopped) {
      // The stop token's text is dropped (unless include_stop_str_in_output) and held-back
      // text is flushed.
      o.text = st.detok->push(tok, /*stop_terminated=*/true).text;
    } else {
      DetokenizeStep d = st.detok->push(tok);
      o.text = std::move(d.text);
      if (d.stopped) {
        status = RequestStatus::FinishedStopped;
        o.stop_reason = d.stop_str;
      } else if (n_out >= p.max_tokens || r.num_tokens() >= max_model_len_) {
        status = RequestStatus::FinishedLength;
        o.text += st.detok->finish();  // held-back text is final now
      }
    }
  }
  if (status == RequestStatus::Running) {
    o.num_generated_tokens = r.num_output_tokens();
  } else {
    o.finish_reason = status == RequestStatus::FinishedLength ? "length" : "stop";
  }
  return u;
}

void OutputProcessor::complete(const RequestState& st, const Request* r,
                               EngineClock::time_point now, RequestOutput& out) {
  if (r) {
    out.num_prompt_tokens = r->num_prompt_tokens();
    out.num_generated_tokens = r->num_output_tokens();
    out.num_preemptions = r->num_preemptions;
    out.max_tokens = r->sampling_params.max_tokens;
  }
  out.finished = true;
  out.num_cached_tokens = st.num_cached_tokens;
  out.queue_time_s = st.scheduled_once ? seconds_between(st.arrival, st.first_scheduled) : 0.0;
  out.first_token_time_s = st.produced_first ? seconds_between(st.arrival, st.first_token) : 0.0;
  out.e2e_time_s = seconds_between(st.arrival, now);
}

}  // namespace octet
