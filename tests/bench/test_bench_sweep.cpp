// `octet bench sweep` (bench/sweep.h): the grid, the least-squares fit (values by hand), the CSV,
// and one real sweep that starts and stops `octet serve` on stories260K per kv_cache_dtype.
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "bench/sweep.h"
#include "cli_run.h"
#include "fake_openai_server.h"
#include "test_model_paths.h"

using namespace octet::bench;
using octet::testing::FakeRequest;
using octet::testing::FakeServer;

TEST_CASE("least squares: exact line and a hand-worked noisy one") {
  // y = 0.5 x + 2 exactly.
  LinearFit f = least_squares({0, 1000, 2000}, {2, 502, 1002});
  REQUIRE(f.valid);
  CHECK(f.slope == Approx(0.5).margin(1e-12));
  CHECK(f.intercept == Approx(2).margin(1e-9));
  // x 1 2 3, y 1 3 2: mean x 2, mean y 2, Sxy = (-1)(-1) + 0 + (1)(0) = 1, Sxx = 2 -> slope 0.5,
  // intercept 2 - 0.5 x 2 = 1.
  f = least_squares({1, 2, 3}, {1, 3, 2});
  CHECK(f.slope == Approx(0.5));
  CHECK(f.intercept == Approx(1));
  CHECK(!least_squares({5}, {1}).valid);
  CHECK(!least_squares({5, 5}, {1, 2}).valid);  // no spread in x
}

TEST_CASE("the grid: kv dtypes times serve flags, workloads nested input, output, concurrency") {
  const auto v = serve_variants("bf16,fp8_e4m3", "max-num-seqs=8,16;--block-size=16");
  REQUIRE(v.size() == 4);
  CHECK(v[0].label() == "kv=bf16 max-num-seqs=8 block-size=16");
  CHECK(v[3].label() == "kv=fp8_e4m3 max-num-seqs=16 block-size=16");
  CHECK(v[1].serve_args() == std::vector<std::string>{"--kv-cache-dtype", "bf16", "--max-num-seqs",
                                                      "16", "--block-size", "16"});
  CHECK(serve_variants("", "").size() == 1);
  CHECK(serve_variants("", "")[0].label() == "default");
  CHECK_THROWS_AS(serve_variants("", "max-num-seqs"), std::invalid_argument);
  const auto w = workloads({1, 4}, {128, 512}, {64});
  REQUIRE(w.size() == 4);
  CHECK((w[1].max_concurrency == 4 && w[1].input_len == 128));
  CHECK((w[2].max_concurrency == 1 && w[2].input_len == 512));
  CHECK(decode_context(w[2]) == 544);  // 512 + 64 / 2
  CHECK(parse_positive_list("1,4,16", "--x") == std::vector<int64_t>{1, 4, 16});
  CHECK_THROWS_WITH(parse_positive_list("1,0", "--max-concurrency"), Catch::Contains("'0'"));
}

TEST_CASE("CSV header and row agree in columns") {
  BenchmarkMetrics m;
  m.completed = 3;
  m.output_throughput = 12.5;
  m.itl.median_ms = 7.25;
  m.itl.percentiles_ms = {{50, 7.25}, {99, 9.5}};
  const std::string h = csv_header(), r = csv_row({"fp8_e4m3", {}}, {4, 128, 64}, m, 2.0);
  auto cols = [](const std::string& s) { return std::count(s.begin(), s.end(), ','); };
  CHECK(cols(h) == cols(r));
  CHECK(r.rfind("\"kv=fp8_e4m3\",fp8_e4m3,4,128,64,3,0,2.0000,", 0) == 0);
  CHECK(r.find(",12.5000,") != std::string::npos);
  CHECK(r.find(",7.2500,9.5000,") != std::string::npos);  // median and p99 ITL
}

TEST_CASE("a real sweep starts octet serve per kv dtype and writes every point") {
  const std::string stories = octet::testing::stories();
  const std::string dir = "/tmp/octet_sweep_test_" + std::to_string(getpid());
  const std::string cmd = std::string(OCTET_BINARY) + " bench sweep --model " + stories +
                          " --max-concurrency 1,2 --random-input-len 16,48 --random-output-len 8"
                          " --kv-cache-dtype bf16,fp8_e4m3 --serve-args '--calculate-kv-scales'"
                          " --num-prompts 4 --output-dir " + dir + " 2>&1";
  const octet::testing::RunResult r = octet::testing::run_command(cmd);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::ifstream csv(dir + "/results.csv");
  std::string line;
  std::getline(csv, line);
  CHECK(line + "\n" == csv_header());
  int rows = 0;
  while (std::getline(csv, line)) {
    ++rows;
    CHECK(line.find(",4,0,") != std::string::npos);  // completed 4, failed 0
  }
  CHECK(rows == 8);  // 2 kv dtypes x 2 input lengths x 1 output length x 2 concurrencies
  CHECK_THAT(r.output, Catch::Contains("decode ITL fit (kv=bf16)"));
  CHECK_THAT(r.output, Catch::Contains("decode ITL fit (kv=fp8_e4m3)"));
  // Plots when gnuplot is installed; otherwise a message that says how to get them.
  if (r.output.find("gnuplot not found") == std::string::npos) {
    CHECK(std::filesystem::file_size(dir + "/throughput_vs_concurrency.png") > 0);
    CHECK(std::filesystem::file_size(dir + "/itl_vs_context.png") > 0);
  } else {
    CHECK_THAT(r.output, Catch::Contains("apt-get install gnuplot-nox"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("the gnuplot script quotes every path and label, a line break is refused") {
  const std::string g = gnuplot_script("/d/it's/results.csv", "/d/it's", {"kv=a'b `id`"},
                                       {{"kv=a'b `id`", {0.5, 1.0, true}}});
  // Single-quoted gnuplot strings with quotes doubled: no substitution happens inside them.
  CHECK_THAT(g, Catch::Contains("set output '/d/it''s/throughput_vs_concurrency.png'\n"));
  CHECK_THAT(g, Catch::Contains("plot '/d/it''s/results.csv' using 3:(strcol(1) eq 'kv=a''b `id`' ?"));
  CHECK_THAT(g, Catch::Contains("set label 1 'kv=a''b `id`: 500.0000 ms per 1K tokens + 1.000 ms'"));
  CHECK(g.find('"') == std::string::npos);  // no double-quoted string (backquotes expand there)
  CHECK_THROWS_AS(gnuplot_script("/d/x\nsystem('id')", "/d", {"default"}, {}), std::invalid_argument);
  CHECK_THROWS_AS(serve_variants("bf16\nx", ""), std::invalid_argument);
  CHECK_THROWS_WITH(serve_variants("", "a=1,2;b=1,2;c=1,2;d=1,2;e=1,2;f=1,2;g=1,2;h=1,2;i=1,2;"
                                       "j=1,2;k=1,2"),
                    Catch::Contains("more than 1024 server configurations"));
}

TEST_CASE("sweep --output-dir with quotes, semicolons and $(...) runs no command, gnuplot gets argv") {
  // The old sweep ran `gnuplot DIR/plots.gnuplot 2>DIR/gnuplot.log` through /bin/sh. A fake
  // gnuplot first in $PATH records its arguments: one, the script's path, byte for byte.
  const std::string stories = octet::testing::stories();
  FakeServer server([](const FakeRequest& req, int fd) {
    if (req.method == "GET")
      return FakeServer::reply(fd, 200, "{\"object\":\"list\",\"data\":[{\"id\":\"fake\"}]}");
    FakeServer::start_sse(fd);
    FakeServer::event(fd, "{\"choices\":[{\"text\":\"hi\"}]}");
    FakeServer::event(fd, "[DONE]");
  });
  const std::string base = "/tmp/octet_sweep_inject_" + std::to_string(getpid());
  const std::string pwned = base + "_pwned";
  const std::string dir = base + "/out'; touch " + pwned + "; '$(touch " + pwned + "_2)`touch " +
                          pwned + "_3`";
  const std::string bin = base + "/bin";
  std::filesystem::create_directories(bin);
  std::ofstream(bin + "/gnuplot") << "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > '"
                                  << bin << "/argv.txt'\nexit 0\n";
  std::filesystem::permissions(bin + "/gnuplot", std::filesystem::perms::owner_all);
  // The test's own command line: the directory single-quoted for /bin/sh ('\'' for a quote).
  std::string sh_dir = "'";
  for (char c : dir) sh_dir += c == '\'' ? std::string("'\\''") : std::string(1, c);
  sh_dir += "'";
  const octet::testing::RunResult r = octet::testing::run_command(
      "PATH=" + bin + ":$PATH " + std::string(OCTET_BINARY) + " bench sweep --base-url " +
      server.url() + " --tokenizer " + stories + " --max-concurrency 1 --random-input-len 8"
      " --random-output-len 4 --num-prompts 1 --output-dir " + sh_dir + " 2>&1");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(!std::filesystem::exists(pwned));
  CHECK(!std::filesystem::exists(pwned + "_2"));
  CHECK(!std::filesystem::exists(pwned + "_3"));
  std::ifstream argv(bin + "/argv.txt");
  std::string line;
  std::vector<std::string> args;
  while (std::getline(argv, line)) args.push_back(line);
  CHECK(args == std::vector<std::string>{dir + "/plots.gnuplot"});
  CHECK(std::filesystem::exists(dir + "/results.csv"));
  std::filesystem::remove_all(base);
  for (const std::string& p : {pwned, pwned + "_2", pwned + "_3"}) std::remove(p.c_str());
}

TEST_CASE("sweep: bad option combinations exit 2") {
  const std::string bin = OCTET_BINARY;
  CHECK(WEXITSTATUS(std::system((bin + " bench sweep --max-concurrency 1 >/dev/null 2>&1").c_str())) == 2);
  CHECK(WEXITSTATUS(std::system((bin + " bench sweep --base-url http://127.0.0.1:9 --kv-cache-dtype "
                                       "bf16 >/dev/null 2>&1").c_str())) == 2);
  CHECK(WEXITSTATUS(std::system((bin + " bench sweep --model x --server-start-timeout 1e300 "
                                       ">/dev/null 2>&1").c_str())) == 2);
  CHECK(WEXITSTATUS(std::system((bin + " bench sweep --base-url http://127.0.0.1:9 --output-dir "
                                       "\"$(printf 'a\\nb')\" >/dev/null 2>&1").c_str())) == 2);
}
