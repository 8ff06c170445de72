// kv-report's heatmap runs gnuplot without a shell (config/run_program.h): a --heatmap path
// holding quotes, `;` and `$(...)` reaches gnuplot as one verbatim argument and as a quoted
// gnuplot string, and runs nothing. A fake `gnuplot` first in $PATH records its argv, so the
// test needs no gnuplot and checks exactly what it would get.
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/kv_report.h"
#include "config/run_program.h"
#include "gguf_writer.h"

namespace octet {
namespace {

namespace fs = std::filesystem;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// A `gnuplot` in `dir` that writes its arguments, one a line, to dir/argv.txt and copies the
// script it is given to dir/script.gp; $PATH starts with `dir` while this lives.
class FakeGnuplot {
 public:
  explicit FakeGnuplot(const std::string& dir) : dir_(dir), old_path_(std::getenv("PATH")) {
    fs::create_directories(dir);
    const std::string exe = dir + "/gnuplot";
    std::ofstream(exe) << "#!/bin/sh\n: > '" << dir << "/argv.txt'\n"
                       << "for a in \"$@\"; do printf '%s\\n' \"$a\" >> '" << dir
                       << "/argv.txt'; done\ncp -- \"$1\" '" << dir << "/script.gp'\nexit 0\n";
    ::chmod(exe.c_str(), 0755);
    ::setenv("PATH", (dir + ":" + old_path_).c_str(), 1);
  }
  ~FakeGnuplot() { ::setenv("PATH", old_path_.c_str(), 1); }
  std::vector<std::string> argv() const {
    std::vector<std::string> out;
    std::istringstream in(slurp(dir_ + "/argv.txt"));
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
  std::string script() const { return slurp(dir_ + "/script.gp"); }

 private:
  std::string dir_, old_path_;
};

KVReport small_report() {
  KVReport r;
  r.num_layers = 2;
  r.num_kv_heads = 2;
  KVVariantReport v;
  v.format = "fp8_e4m3";
  v.source = "unit";
  v.heads.assign(2, std::vector<KVHeadReport>(2));
  v.heads[1][1].output_rel_error = 0.25;
  r.variants.push_back(v);
  return r;
}

}  // namespace

TEST_CASE("run_program: argv verbatim, no shell, exit status, output file", "[kv_report]") {
  testing::TempDir dir;
  const std::string out = dir.file("out.txt");
  const std::string odd = "a b'c\"d $(touch " + dir.file("pwned") + ") `id` ; |";
  CHECK(run_program({"printf", "%s|", odd, "--x"}, out) == 0);
  CHECK(slurp(out) == odd + "|--x|");
  CHECK(!fs::exists(dir.file("pwned")));
  CHECK(run_program({"sh", "-c", "echo err >&2; exit 3"}, out) == 3);
  CHECK(slurp(out) == "err\n");  // stderr goes to the same file
  CHECK(run_program({"sh", "-c", "kill -9 $$"}) == 128 + 9);
  CHECK_THROWS_WITH(run_program({"octet-no-such-program-x"}),
                    Catch::Contains("cannot run octet-no-such-program-x"));
  CHECK(!find_program("sh").empty());
  CHECK(find_program("octet-no-such-program-x").empty());
  CHECK(path_argument("-e x.gp") == "./-e x.gp");
  CHECK(path_argument("/tmp/x.gp") == "/tmp/x.gp");
  CHECK(gnuplot_quote("it's `id`") == "'it''s `id`'");
  CHECK_THROWS_AS(gnuplot_quote("a\nsystem('id')"), std::invalid_argument);
}

TEST_CASE("kv-report --heatmap: a path with quotes, semicolons and $(...) runs no command", "[kv_report]") {
  testing::TempDir dir;
  FakeGnuplot fake(dir.file("bin"));
  const std::string pwned = "/tmp/octet_pwned_heatmap_" + std::to_string(::getpid());
  const std::string png = dir.file("x'; touch " + pwned + "; '$(touch " + pwned + "_2)`touch " +
                                   pwned + "_3`.png");
  fs::create_directories(fs::path(png).parent_path());
  const std::string problem = write_kv_report_heatmap(small_report(), png);
  CHECK(problem == "");
  CHECK(!fs::exists(pwned));
  CHECK(!fs::exists(pwned + "_2"));
  CHECK(!fs::exists(pwned + "_3"));
  // gnuplot got the script's path as one argument, byte for byte ...
  CHECK(fake.argv() == std::vector<std::string>{png + ".gnuplot"});
  // ... and the script names the PNG as a single-quoted gnuplot string, its quotes doubled
  // (no substitution happens inside single quotes in gnuplot).
  std::string doubled;
  for (char c : png) doubled += c == '\'' ? std::string("''") : std::string(1, c);
  CHECK_THAT(fake.script(), Catch::Contains("set output '" + doubled + "'\n"));
  CHECK_THAT(fake.script(), Catch::Contains("plot '" + doubled + ".gnuplot.dat' index 0"));
  std::remove(pwned.c_str());
  std::remove((pwned + "_2").c_str());
  std::remove((pwned + "_3").c_str());
}

TEST_CASE("kv-report --heatmap: a path with a line break is refused, not written", "[kv_report]") {
  testing::TempDir dir;
  FakeGnuplot fake(dir.file("bin"));
  const std::string png = dir.file("a\nsystem('touch x').png");
  CHECK_THAT(write_kv_report_heatmap(small_report(), png), Catch::Contains("line break"));
  CHECK(!fs::exists(png + ".gnuplot"));
}

}  // namespace octet
