#include "bench/sweep.h"

#include "config/run_program.h"

#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace octet::bench {

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

bool has_line_break(const std::string& s) {
  return s.find_first_of(std::string("\n\r\0", 3)) != std::string::npos;
}

std::string num(double v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.4f", v);
  return b;
}

}  // namespace

std::string ServeVariant::label() const {
  std::string s;
  if (!kv_cache_dtype.empty()) s = "kv=" + kv_cache_dtype;
  for (const auto& [f, v] : flags) s += (s.empty() ? "" : " ") + f + "=" + v;
  return s.empty() ? "default" : s;
}

std::vector<std::string> ServeVariant::serve_args() const {
  std::vector<std::string> a;
  if (!kv_cache_dtype.empty()) a = {"--kv-cache-dtype", kv_cache_dtype};
  for (const auto& [f, v] : flags) {
    a.push_back("--" + f);
    a.push_back(v);
  }
  return a;
}

std::vector<int64_t> parse_positive_list(const std::string& s, const std::string& flag) {
  std::vector<int64_t> out;
  for (const std::string& item : split(s, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || v <= 0)
      throw std::invalid_argument(flag + ": '" + item + "' is not a positive integer");
    out.push_back(v);
  }
  if (out.empty()) throw std::invalid_argument(flag + " needs at least one value");
  return out;
}

std::vector<ServeVariant> serve_variants(const std::string& kv_cache_dtypes,
                                         const std::string& grid) {
  std::vector<ServeVariant> out;
  std::vector<std::string> kvs = split(kv_cache_dtypes, ',');
  if (kvs.empty()) kvs.push_back("");
  for (const std::string& kv : kvs) {
    if (has_line_break(kv)) throw std::invalid_argument("--kv-cache-dtype: a value holds a line break");
    out.push_back({kv, {}});
  }
  for (const std::string& axis : split(grid, ';')) {
    const size_t eq = axis.find('=');
    std::string flag = axis.substr(0, eq);
    while (flag.rfind("-", 0) == 0) flag.erase(0, 1);
    if (eq == std::string::npos || flag.empty())
      throw std::invalid_argument("--serve-grid: '" + axis + "' is not FLAG=v1,v2");
    const std::vector<std::string> values = split(axis.substr(eq + 1), ',');
    if (values.empty()) throw std::invalid_argument("--serve-grid: '" + axis + "' has no values");
    if (has_line_break(axis)) throw std::invalid_argument("--serve-grid: an axis holds a line break");
    if (out.size() * values.size() > kMaxSweepVariants)
      throw std::invalid_argument("--serve-grid: more than " + std::to_string(kMaxSweepVariants) +
                                  " server configurations");
    std::vector<ServeVariant> next;
    for (const ServeVariant& v : out)
      for (const std::string& value : values) {
        ServeVariant n = v;
        n.flags.emplace_back(flag, value);
        next.push_back(n);
      }
    out = std::move(next);
  }
  return out;
}

std::vector<Workload> workloads(const std::vector<int64_t>& concurrency,
                                const std::vector<int64_t>& input_lens,
                                const std::vector<int64_t>& output_lens) {
  if (concurrency.size() * input_lens.size() > kMaxSweepWorkloads ||
      concurrency.size() * input_lens.size() * output_lens.size() > kMaxSweepWorkloads)
    throw std::invalid_argument("the sweep has more than " + std::to_string(kMaxSweepWorkloads) +
                                " workloads (--max-concurrency x --random-input-len x "
                                "--random-output-len)");
  std::vector<Workload> out;
  for (int64_t in : input_lens)
    for (int64_t o : output_lens)
      for (int64_t c : concurrency) out.push_back({c, in, o});
  return out;
}

LinearFit least_squares(const std::vector<double>& xs, const std::vector<double>& ys) {
  LinearFit f;
  const size_t n = std::min(xs.size(), ys.size());
  if (n < 2) return f;
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) mx += xs[i], my += ys[i];
  mx /= static_cast<double>(n);
  my /= static_cast<double>(n);
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxx += (xs[i] - mx) * (xs[i] - mx);
    sxy += (xs[i] - mx) * (ys[i] - my);
  }
  if (sxx == 0) return f;
  f.slope = sxy / sxx;
  f.intercept = my - f.slope * mx;
  f.valid = true;
  return f;
}

std::string csv_header() {
  return "variant,kv_cache_dtype,max_concurrency,random_input_len,random_output_len,completed,"
         "failed,duration_s,request_throughput,output_throughput,total_token_throughput,"
         "mean_ttft_ms,median_ttft_ms,p99_ttft_ms,mean_tpot_ms,median_tpot_ms,mean_itl_ms,"
         "median_itl_ms,p99_itl_ms,median_e2el_ms,decode_context\n";
}

std::string csv_row(const ServeVariant& v, const Workload& w, const BenchmarkMetrics& m,
                    double duration_s) {
  auto p99 = [](const MetricStats& s) {
    for (const auto& [p, val] : s.percentiles_ms)
      if (p == 99) return val;
    return 0.0;
  };
  std::ostringstream os;
  std::string label = v.label();  // a CSV field in double quotes: '"' doubled
  for (size_t i = label.find('"'); i != std::string::npos; i = label.find('"', i + 2))
    label.insert(i, 1, '"');
  os << '"' << label << "\"," << (v.kv_cache_dtype.empty() ? "default" : v.kv_cache_dtype)
     << ',' << w.max_concurrency << ',' << w.input_len << ',' << w.output_len << ','
     << m.completed << ',' << m.failed << ',' << num(duration_s) << ','
     << num(m.request_throughput) << ',' << num(m.output_throughput) << ','
     << num(m.total_token_throughput) << ',' << num(m.ttft.mean_ms) << ','
     << num(m.ttft.median_ms) << ',' << num(p99(m.ttft)) << ',' << num(m.tpot.mean_ms) << ','
     << num(m.tpot.median_ms) << ',' << num(m.itl.mean_ms) << ',' << num(m.itl.median_ms) << ','
     << num(p99(m.itl)) << ',' << num(m.e2el.median_ms) << ',' << num(decode_context(w)) << "\n";
  return os.str();
}

double decode_context(const Workload& w) {
  return static_cast<double>(w.input_len) + static_cast<double>(w.output_len) / 2.0;
}

std::string gnuplot_script(const std::string& csv, const std::string& dir,
                           const std::vector<std::string>& labels,
                           const std::vector<std::pair<std::string, LinearFit>>& fits) {
  std::ostringstream g;
  g << "set datafile separator ','\nset key outside below\nset grid\n"
    << "set terminal pngcairo size 900,600 noenhanced\n";
  // Columns: 1 variant, 3 concurrency, 4 input, 10 output tok/s, 18 median ITL, 21 context.
  auto per_variant = [&](int ycol, const char* extra) {
    std::string s = "plot ";
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i) s += ", ";
      s += gnuplot_quote(csv) + " using 3:(strcol(1) eq " + gnuplot_quote(labels[i]) + " ? $" +
           std::to_string(ycol) + " : 1/0) " + extra + " with linespoints title " +
           gnuplot_quote(labels[i]);
    }
    return s + "\n";
  };
  g << "set output " << gnuplot_quote(dir + "/throughput_vs_concurrency.png") << "\n"
    << "set title 'Output token throughput against concurrency'\n"
    << "set xlabel 'max concurrency'\nset ylabel 'output tokens/s'\nset logscale x 2\n"
    << per_variant(10, "");
  g << "set output " << gnuplot_quote(dir + "/itl_vs_concurrency.png") << "\n"
    << "set title 'Median inter-token latency against concurrency'\nset ylabel 'median ITL (ms)'\n"
    << per_variant(18, "");
  bool any_fit = false;
  for (const auto& f : fits) any_fit = any_fit || f.second.valid;
  if (!any_fit) return g.str();  // fewer than two input lengths: no context plot
  g << "unset logscale x\nset output " << gnuplot_quote(dir + "/itl_vs_context.png") << "\n"
    << "set title 'Decode ITL against context length (lowest concurrency)'\n"
    << "set xlabel 'context tokens (prompt + output/2)'\nset ylabel 'median ITL (ms)'\n";
  int n = 0;
  for (const auto& [label, f] : fits) {
    if (!f.valid) continue;
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s: %.4f ms per 1K tokens + %.3f ms", label.c_str(),
                  f.slope * 1000, f.intercept);
    ++n;
    g << "set label " << n << " " << gnuplot_quote(buf) << " at graph 0.02, graph " << 0.95 - 0.05 * n
      << "\n";
  }
  std::string s = "plot ";
  for (size_t i = 0; i < fits.size(); ++i) {
    const auto& [label, f] = fits[i];
    if (i) s += ", ";
    s += gnuplot_quote(csv + ".context") + " using 2:(strcol(1) eq " + gnuplot_quote(label) +
         " ? $3 : 1/0) with points pointsize 1.5 title " + gnuplot_quote(label);
    if (f.valid)
      s += ", " + num(f.slope) + "*x+" + num(f.intercept) + " with lines title " +
           gnuplot_quote(label + " fit");
  }
  g << s << "\n";
  return g.str();
}

}  // namespace octet::bench
