// The figures scripts/gpu_check prints, rehearsed on the CPU as CI runs them: `octet bench
// kernels --device cpu --json` and `octet bench latency --load-format dummy --json` exit 0 and
// carry every key docs/benchmarks.md lists ("Device figures"), each a positive finite number or
// an "n/a (reason)" string. The keys are listed here, not taken from the code; derived figures
// are checked against arithmetic done here from the rows they come from.
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "kernels/cpu/w8a8.h"
#include "test_model_paths.h"

namespace {

using octet::testing::run_octet;
using nlohmann::json;

// The last line of the output is the JSON object (stderr lines come first).
json last_json_line(const std::string& out) {
  const size_t end = out.find_last_not_of('\n');
  REQUIRE(end != std::string::npos);
  const size_t start = out.rfind('\n', end);
  return json::parse(out.substr(start == std::string::npos ? 0 : start + 1, end + 1 -
                                (start == std::string::npos ? 0 : start + 1)));
}

// A figure: a positive finite number, or a string "n/a (reason)" with a reason.
bool is_figure(const json& v) {
  if (v.is_number()) return std::isfinite(v.get<double>()) && v.get<double>() > 0;
  if (!v.is_string()) return false;
  const std::string s = v.get<std::string>();
  return s.rfind("n/a (", 0) == 0 && s.size() > 6 && s.back() == ')';
}

void require_figure(const json& j, const std::string& key) {
  INFO("key " << key << " in " << j.dump());
  REQUIRE(j.contains(key));
  CHECK(is_figure(j.at(key)));
}

}  // namespace

TEST_CASE("bench kernels --device cpu --json: every key, sane figures, consistent rows",
          "[bench][figures]") {
  const auto r = run_octet("bench kernels --device cpu --json");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const json j = last_json_line(r.output);

  CHECK(j.at("device").is_string());
  CHECK(j.at("sizes").is_string());
  for (const char* key :
       {"fp8_gemm_tflops", "bf16_gemm_tflops", "fp8_peak_tflops", "bf16_peak_tflops",
        "fp8_gemm_fraction_of_peak", "bf16_gemm_fraction_of_peak", "d2d_copy_gbs",
        "fp8_over_bf16_attention_slope"})
    require_figure(j, key);
  for (const char* key : {"attention_bandwidth_fraction", "attention_slope_ms_per_1k",
                          "attention_slope_ms_per_1k_32_layers"}) {
    REQUIRE(j.contains(key));
    require_figure(j.at(key), "bf16");
    require_figure(j.at(key), "fp8_e4m3");
  }
  // cuBLASLt's outer-vector FP8 scales: o_proj at m = 2048, a CUDA-only experiment, so every
  // figure says why it is missing on the CPU.
  REQUIRE(j.contains("fp8_outer_vec"));
  const json& ov = j.at("fp8_outer_vec");
  INFO(ov.dump());
  CHECK(ov.at("m") == 2048);
  CHECK(ov.at("n") == 4096);
  CHECK(ov.at("k") == 4096);
  REQUIRE(ov.at("status").is_string());
  CHECK(ov.at("status").get<std::string>().rfind("n/a (CUDA only", 0) == 0);
  for (const char* key : {"ms", "plain_ms", "equal_fraction", "max_rel_diff"}) {
    REQUIRE(ov.contains(key));
    CHECK(ov.at(key).is_string());
    CHECK(is_figure(ov.at(key)));
  }
  REQUIRE(j.at("gemm_simt_fallbacks").is_number_integer());
  CHECK(j.at("gemm_simt_fallbacks").get<int>() == 0);  // the CPU has no cuBLASLt to refuse

  // GEMM rows: Llama-3.1-8B's four linears (n x k, divided by 8 on the CPU) at m = 1, 16, 64,
  // and one square peak row, per dtype.
  const std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> shapes = {
      {"qkv", {6144 / 8, 4096 / 8}},
      {"o", {4096 / 8, 4096 / 8}},
      {"gate_up", {28672 / 8, 4096 / 8}},
      {"down", {4096 / 8, 14336 / 8}}};
  std::set<std::string> seen;
  for (const json& g : j.at("gemm")) {
    INFO(g.dump());
    for (const char* key : {"shape", "dtype", "m", "n", "k", "path", "ms", "tflops", "weight_gbs"})
      REQUIRE(g.contains(key));
    const std::string shape = g["shape"], dtype = g["dtype"];
    CHECK((dtype == "fp8_e4m3" || dtype == "bf16"));
    CHECK(g["path"] == "cpu");
    for (const char* key : {"ms", "tflops", "weight_gbs"}) require_figure(g, key);
    const double m = g["m"], n = g["n"], k = g["k"];
    if (shape == "peak") {
      CHECK(m == 512);
      CHECK(n == 512);
      CHECK(k == 512);
    } else {
      bool known = false;
      for (const auto& [name, nk] : shapes) {
        if (name != shape) continue;
        known = true;
        CHECK(n == nk.first);
        CHECK(k == nk.second);
      }
      CHECK(known);
    }
    if (g["ms"].is_number() && g["tflops"].is_number()) {
      const double ms = g["ms"];
      CHECK(g["tflops"].get<double>() == Approx(2 * m * n * k / (ms * 1e-3) / 1e12).epsilon(1e-9));
      CHECK(g["weight_gbs"].get<double>() ==
            Approx(n * k * (dtype == "bf16" ? 2 : 1) / (ms * 1e-3) / 1e9).epsilon(1e-9));
    }
    seen.insert(shape + "/" + dtype + "/" + std::to_string(static_cast<int>(m)));
  }
  for (const char* dtype : {"fp8_e4m3", "bf16"}) {
    for (const auto& [name, nk] : shapes)
      for (int m : {1, 16, 64}) CHECK(seen.count(name + "/" + dtype + "/" + std::to_string(m)));
    CHECK(seen.count(std::string("peak/") + dtype + "/512"));
  }

  // Aggregate at m = 64: the four shapes' FLOPs over their summed times.
  for (const char* dtype : {"fp8_e4m3", "bf16"}) {
    double flops = 0, ms = 0, peak = 0;
    for (const json& g : j.at("gemm")) {
      if (g["dtype"] != dtype || !g["ms"].is_number()) continue;
      if (g["shape"] == "peak") {
        peak = g["tflops"];
      } else if (g["m"] == 64) {
        flops += 2.0 * g["m"].get<double>() * g["n"].get<double>() * g["k"].get<double>();
        ms += g["ms"].get<double>();
      }
    }
    const std::string prefix = std::string(dtype) == "bf16" ? "bf16" : "fp8";
    const double agg = j.at(prefix + "_gemm_tflops");
    CHECK(agg == Approx(flops / (ms * 1e-3) / 1e12).epsilon(1e-9));
    CHECK(j.at(prefix + "_peak_tflops").get<double>() == peak);
    CHECK(j.at(prefix + "_gemm_fraction_of_peak").get<double>() == Approx(agg / peak));
  }

  // Attention rows: contexts 256..2048 at batch 1 and 4 per KV dtype; KV bytes read = batch x
  // context x 8 KV heads x 128 x (K and V) x element size.
  const double copy = j.at("d2d_copy_gbs");
  int rows = 0;
  for (const json& a : j.at("attention")) {
    INFO(a.dump());
    for (const char* key : {"kv_dtype", "batch", "context", "kv_bytes", "ms", "gbs",
                            "fraction_of_copy"})
      REQUIRE(a.contains(key));
    const std::string dtype = a["kv_dtype"];
    REQUIRE((dtype == "bf16" || dtype == "fp8_e4m3"));
    const int64_t batch = a["batch"], context = a["context"];
    CHECK((batch == 1 || batch == 4));
    CHECK((context == 256 || context == 512 || context == 1024 || context == 2048));
    const int64_t elem = dtype == "bf16" ? 2 : 1;
    CHECK(a["kv_bytes"].get<int64_t>() == batch * context * 8 * 128 * 2 * elem);
    for (const char* key : {"ms", "gbs", "fraction_of_copy"}) require_figure(a, key);
    if (a["ms"].is_number()) {
      const double gbs = a["kv_bytes"].get<double>() / (a["ms"].get<double>() * 1e-3) / 1e9;
      CHECK(a["gbs"].get<double>() == Approx(gbs).epsilon(1e-9));
      CHECK(a["fraction_of_copy"].get<double>() == Approx(gbs / copy).epsilon(1e-9));
    }
    if (batch == 4 && context == 2048)
      CHECK(j["attention_bandwidth_fraction"][dtype] == a["fraction_of_copy"]);
    ++rows;
  }
  CHECK(rows == 2 * 2 * 4);
  const double bf16 = j["attention_slope_ms_per_1k"]["bf16"];
  const double fp8 = j["attention_slope_ms_per_1k"]["fp8_e4m3"];
  CHECK(j["attention_slope_ms_per_1k_32_layers"]["bf16"].get<double>() == Approx(32 * bf16));
  CHECK(j.at("fp8_over_bf16_attention_slope").get<double>() == Approx(fp8 / bf16));
}

TEST_CASE("bench kernels: the options gpu_check looks for, and bad ones", "[bench][figures]") {
  auto r = run_octet("bench kernels --help");
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("--device"));
  CHECK_THAT(r.output, Catch::Contains("--json"));
  r = run_octet("bench kernels --device tpu --json");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("tpu"));
  r = run_octet("bench kernels extra");
  CHECK(r.exit_code == 2);
#if !defined(OCTET_HAVE_CUDA)
  r = run_octet("bench kernels --device cuda --json");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Contains("without CUDA"));
#endif
}

TEST_CASE("bench latency --json: the ITL and its bytes / bandwidth floor", "[bench][figures]") {
  const std::string tokenizer = octet::testing::stories();
  for (const std::string kv : {"bf16", "fp8_e4m3"}) {
    const auto r = run_octet("bench latency --load-format dummy --model tiny-llama --tokenizer " +
                             tokenizer + " --device cpu --input-len 16 --output-len 8 " +
                             "--num-iters 1 --kv-cache-dtype " + kv + " --json");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    const json j = last_json_line(r.output);
    for (const char* key : {"prefill_tokens_per_second", "decode_tokens_per_second",
                            "decode_weight_bytes_per_step", "decode_kv_bytes_per_step",
                            "decode_bytes_per_step", "read_bandwidth_gbs",
                            "decode_floor_tokens_per_second", "fraction_of_floor", "itl_ms",
                            "itl_floor_ms", "itl_over_floor"})
      require_figure(j, key);
    CHECK(j.at("bandwidth_source") == "cpu_read");
    // The CPU's rehearsal of the CUDA kernel count (kernels/launch_counter.h): tiny-llama's 2
    // layers.
    CHECK(j.value("decode_step_kernels_source", "") == "cpu_rehearsal");
    REQUIRE(j.contains("decode_step_kernels"));
    CHECK(j["decode_step_kernels"].get<int64_t>() > 2 * 10);
    CHECK(j["decode_step_kernels_per_layer"].get<double>() ==
          Approx(j["decode_step_kernels"].get<double>() / 2));
    // The CPU's W8A8 kernel, named as the start-up log names it.
    CHECK(j.value("cpu_w8a8_kernel", "") == octet::w8a8_kernel_name());
    CHECK(j.at("input_len") == 16);
    CHECK(j.at("output_len") == 8);
    // tiny-llama: 2 layers x (K, V) x 2 KV heads x head_dim 16 x 2 bytes (bf16) or 1 (fp8)
    // per token; decode step i of 8 reads 16 + i tokens: 16 + 4.5 on average.
    const double per_token = 2 * 2 * 2 * 16 * (kv == "bf16" ? 2 : 1);
    CHECK(j["decode_kv_bytes_per_step"].get<double>() == Approx(per_token * 20.5));
    const double bytes = j["decode_weight_bytes_per_step"].get<double>() + per_token * 20.5;
    CHECK(j["decode_bytes_per_step"].get<double>() == Approx(bytes));
    const double floor_ms = bytes / (j["read_bandwidth_gbs"].get<double>() * 1e9) * 1e3;
    CHECK(j["itl_floor_ms"].get<double>() == Approx(floor_ms));
    CHECK(j["itl_ms"].get<double>() == Approx(1e3 / j["decode_tokens_per_second"].get<double>()));
    CHECK(j["itl_over_floor"].get<double>() == Approx(j["itl_ms"].get<double>() / floor_ms));
  }
}
