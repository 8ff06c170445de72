#pragma once
// The `octet` subcommands. Each takes the arguments after its name and returns the exit code:
// 0 success, 1 runtime failure (bad model file, ...), 2 usage error. Errors go to stderr.

namespace octet {

int run_generate(int argc, const char* const* argv);
int run_bench(int argc, const char* const* argv);
int run_calibrate(int argc, const char* const* argv);
int run_kv_report(int argc, const char* const* argv);
int run_bench_engine(int argc, const char* const* argv);  // `octet bench engine`
int run_bench_serve(int argc, const char* const* argv);   // `octet bench serve`
int run_bench_sweep(int argc, const char* const* argv);   // `octet bench sweep`
int run_bench_structured(int argc, const char* const* argv);  // `octet bench structured`
int run_plan(int argc, const char* const* argv);          // `octet plan`
int run_perplexity(int argc, const char* const* argv);
int run_quantize(int argc, const char* const* argv);
int run_serve(int argc, const char* const* argv);

}  // namespace octet
