#pragma once
// `octet bench sweep`: the grid of bench serve runs, the CSV of their results, the least-squares
// line of decode ITL against context length, and the gnuplot script that draws the plots.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench/metrics.h"

namespace octet::bench {

/// One server configuration of the grid: the serve flags that differ between them.
struct ServeVariant {
  std::string kv_cache_dtype;                           // "" = the server's default
  std::vector<std::pair<std::string, std::string>> flags;  // (flag without --, value)
  /// "kv=fp8_e4m3 max-num-seqs=8" (for labels and the CSV); "default" when empty.
  std::string label() const;
  /// --kv-cache-dtype D --flag value ... for `octet serve`.
  std::vector<std::string> serve_args() const;
};

/// One client workload of the grid.
struct Workload {
  int64_t max_concurrency = 1, input_len = 0, output_len = 0;
};

/// Comma-separated positive integers. Throws std::invalid_argument naming `flag`.
std::vector<int64_t> parse_positive_list(const std::string& s, const std::string& flag);

/// Bounds of the grid (a usage error beyond): server configurations, client workloads.
inline constexpr size_t kMaxSweepVariants = 1024;
inline constexpr size_t kMaxSweepWorkloads = 65536;

/// The server variants: every kv dtype (comma list, "" = one default) times every combination of
/// `grid` ("flag=v1,v2;flag2=v3", any `octet serve` flag). Throws std::invalid_argument for a
/// malformed grid, a line break in a value, or more than kMaxSweepVariants variants.
std::vector<ServeVariant> serve_variants(const std::string& kv_cache_dtypes, const std::string& grid);

/// Workloads: every concurrency x input length x output length, in that nesting order (input
/// outermost). Throws std::invalid_argument for more than kMaxSweepWorkloads.
std::vector<Workload> workloads(const std::vector<int64_t>& concurrency,
                                const std::vector<int64_t>& input_lens,
                                const std::vector<int64_t>& output_lens);

struct LinearFit {
  double slope = 0, intercept = 0;  // y = slope * x + intercept
  bool valid = false;               // at least two distinct x
};
/// Ordinary least squares of ys on xs.
LinearFit least_squares(const std::vector<double>& xs, const std::vector<double>& ys);

/// The CSV header, and one row of results (values in the header's order).
std::string csv_header();
std::string csv_row(const ServeVariant& v, const Workload& w, const BenchmarkMetrics& m,
                    double duration_s);

/// Decode context of a workload for the ITL-against-context plot: the prompt plus half the
/// output (the mean length the KV cache has during decode).
double decode_context(const Workload& w);

/// A gnuplot script drawing, from `csv`, into `dir`: throughput_vs_concurrency.png,
/// itl_vs_concurrency.png, and itl_vs_context.png with one line per variant and its fit
/// (`fits`: label, fit in ms per token of context) printed on the plot; the last plot only when
/// some fit is valid (two context lengths or more). Every outside string (paths, labels) is a
/// gnuplot single-quoted string; throws std::invalid_argument for one holding a line break.
std::string gnuplot_script(const std::string& csv, const std::string& dir,
                           const std::vector<std::string>& variant_labels,
                           const std::vector<std::pair<std::string, LinearFit>>& fits);

}  // namespace octet::bench
