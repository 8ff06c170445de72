// kv-report's outputs: JSON, the table and the gnuplot heatmap (see kv_report.h).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/kv_report.h"
#include "config/run_program.h"

namespace octet {

namespace {

// "tensor", or "tensor skip=sliding_window" for a skip companion.
std::string variant_label(const KVVariantReport& v) {
  return v.source + (v.skip_layers.empty() ? "" : " skip=" + v.skip_spec);
}

// "global" or "win512" (the layer's attention window).
std::string window_label(const KVReport& r, size_t l) {
  const int64_t w = l < r.layer_window.size() ? r.layer_window[l] : 0;
  return w > 0 ? "win" + std::to_string(w) : "global";
}

// "0-4,6-10" for an ascending list.
std::string ranges(const std::vector<int64_t>& xs) {
  std::string out;
  for (size_t i = 0; i < xs.size();) {
    size_t j = i;
    while (j + 1 < xs.size() && xs[j + 1] == xs[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(xs[i]) +
           (j > i ? "-" + std::to_string(xs[j]) : "");
    i = j + 1;
  }
  return out;
}

}  // namespace

std::string kv_report_json(const KVReport& r) {
  nlohmann::json j;
  j["tokens"] = r.tokens;
  j["num_layers"] = r.num_layers;
  j["num_kv_heads"] = r.num_kv_heads;
  j["layer_window"] = r.layer_window;
  j["perplexity"] = r.perplexity;
  j["variants"] = nlohmann::json::array();
  for (const KVVariantReport& v : r.variants) {
    nlohmann::json jv = {{"format", v.format},
                         {"source", v.source},
                         {"kl", v.kl},
                         {"greedy_agreement", v.greedy_agreement},
                         {"perplexity", v.perplexity},
                         {"clipping_layers", v.clipping_layers}};
    if (!v.skip_layers.empty()) {
      jv["skip_layers"] = v.skip_layers;
      jv["skip_spec"] = v.skip_spec;
    }
    jv["layers"] = nlohmann::json::array();
    for (const auto& layer : v.heads) {
      nlohmann::json jl = nlohmann::json::array();
      for (const KVHeadReport& h : layer)
        jl.push_back({{"k_amax", h.k_amax},
                      {"v_amax", h.v_amax},
                      {"k_scale", h.k_scale},
                      {"v_scale", h.v_scale},
                      {"k_clip", h.k_clip},
                      {"v_clip", h.v_clip},
                      {"k_flush", h.k_flush},
                      {"v_flush", h.v_flush},
                      {"k_subnormal", h.k_subnormal},
                      {"v_subnormal", h.v_subnormal},
                      {"max_score_error", h.max_score_error},
                      {"output_rel_error", h.output_rel_error}});
      jv["layers"].push_back(jl);
    }
    j["variants"].push_back(jv);
  }
  for (const KVReport::LongContextRow& row : r.long_context)
    j["long_context"].push_back({{"length", row.length},
                                 {"exact_accuracy", row.exact_accuracy},
                                 {"accuracy", row.accuracy}});
  if (!r.recommend_for.empty())
    j["recommendation"] = {{"for", r.recommend_for},       {"layer_kl", r.layer_kl},
                           {"skip_layers", r.skip_layers}, {"kl_with_skip", r.kl_with_skip},
                           {"target_met", r.target_met},   {"flag", r.skip_layers_flag}};
  return j.dump();
}

std::string kv_report_table(const KVReport& r) {
  std::ostringstream os;
  os << "kv-report: " << r.tokens << " tokens, " << r.num_layers << " layers, " << r.num_kv_heads
     << " KV heads; KL = mean KL(exact KV || quantized KV) over positions, full vocabulary\n";
  std::vector<int64_t> global;
  std::vector<std::pair<int64_t, int64_t>> sliding;  // (window, layer)
  for (size_t l = 0; l < static_cast<size_t>(r.num_layers); ++l) {
    const int64_t w = l < r.layer_window.size() ? r.layer_window[l] : 0;
    if (w > 0) sliding.push_back({w, static_cast<int64_t>(l)});
    else global.push_back(static_cast<int64_t>(l));
  }
  if (!sliding.empty()) {
    std::sort(sliding.begin(), sliding.end());
    os << "layers: global " << (global.empty() ? "none" : ranges(global));
    for (size_t i = 0; i < sliding.size();) {
      std::vector<int64_t> ls;
      size_t j = i;
      for (; j < sliding.size() && sliding[j].first == sliding[i].first; ++j)
        ls.push_back(sliding[j].second);
      os << "; sliding window " << sliding[i].first << ": " << ranges(ls);
      i = j;
    }
    os << "\n";
  }
  os << "perplexity with exact (FP32) KV: " << std::setprecision(6) << r.perplexity << "\n";
  os << "format    source                              KL          greedy   perplexity  "
        "clipping layers   worst layers (attn out rel err)\n";
  for (const KVVariantReport& v : r.variants) {
    std::vector<std::pair<double, int64_t>> worst;
    for (size_t l = 0; l < v.heads.size(); ++l) {
      double e = 0;
      for (const KVHeadReport& h : v.heads[l]) e = std::max(e, h.output_rel_error);
      worst.push_back({e, static_cast<int64_t>(l)});
    }
    std::sort(worst.rbegin(), worst.rend());
    std::string clip, w;
    for (int64_t l : v.clipping_layers) clip += (clip.empty() ? "" : ",") + std::to_string(l);
    for (size_t i = 0; i < std::min<size_t>(3, worst.size()); ++i) {
      std::ostringstream s;
      s << std::setprecision(2) << worst[i].second << " (" << worst[i].first << ")";
      w += (w.empty() ? "" : ", ") + s.str();
    }
    if (!v.skip_layers.empty()) w = "(layers " + ranges(v.skip_layers) + " in bf16)";
    os << std::left << std::setw(10) << v.format << std::setw(36) << variant_label(v)
       << std::setw(12) << std::setprecision(4) << v.kl << std::setw(9) << std::fixed
       << std::setprecision(4) << v.greedy_agreement << std::setw(12) << v.perplexity
       << std::defaultfloat << std::setw(18) << (clip.empty() ? "-" : clip) << w << "\n";
  }
  for (const KVVariantReport& v : r.variants) {
    if (!v.skip_layers.empty()) continue;  // a skip companion: its parent's per-layer figures
    os << "\n"
       << v.format << " / " << v.source
       << ": layer attn     head  k_amax    v_amax    k_scale     v_scale     k_clip    v_clip    "
          "k_flush   v_flush   score_err  out_rel_err\n";
    for (size_t l = 0; l < v.heads.size(); ++l)
      for (size_t h = 0; h < v.heads[l].size(); ++h) {
        const KVHeadReport& x = v.heads[l][h];
        os << std::setprecision(3) << "  " << std::setw(6) << l << std::setw(9)
           << window_label(r, l) << std::setw(5) << h << std::setw(10) << x.k_amax
           << std::setw(10) << x.v_amax << std::setw(12) << x.k_scale
           << std::setw(12) << x.v_scale << std::setw(10) << x.k_clip << std::setw(10) << x.v_clip
           << std::setw(10) << x.k_flush << std::setw(10) << x.v_flush << std::setw(11)
           << x.max_score_error << x.output_rel_error << "\n";
      }
  }
  if (!r.long_context.empty()) {
    os << "\nlong-context copy task: greedy accuracy on the repeated half\nlength   exact";
    for (const KVVariantReport& v : r.variants) os << "  " << v.format << "/" << variant_label(v);
    os << "\n";
    for (const KVReport::LongContextRow& row : r.long_context) {
      os << std::left << std::setw(9) << row.length << std::fixed << std::setprecision(3)
         << std::setw(7) << row.exact_accuracy;
      for (size_t i = 0; i < row.accuracy.size(); ++i)
        os << "  " << std::setw(static_cast<int>(r.variants[i].format.size() + 1 +
                                                 variant_label(r.variants[i]).size()))
           << row.accuracy[i];
      os << std::defaultfloat << "\n";
    }
  }
  if (!r.recommend_for.empty()) {
    std::vector<std::pair<double, size_t>> by_kl;
    for (size_t l = 0; l < r.layer_kl.size(); ++l) by_kl.push_back({r.layer_kl[l], l});
    std::sort(by_kl.rbegin(), by_kl.rend());
    os << "\nKL with one layer quantized (worst first):";
    for (size_t i = 0; i < std::min<size_t>(8, by_kl.size()); ++i)
      os << " " << by_kl[i].second << " (" << std::setprecision(3) << by_kl[i].first << ")";
    os << "\nrecommendation for " << r.recommend_for << ": ";
    if (r.skip_layers.empty()) {
      os << "no layer needs bf16 (KL " << r.kl_with_skip << ")\n";
    } else {
      os << (r.target_met ? "" : "target not met even with every layer skipped; ")
         << r.skip_layers_flag << " (KL " << r.kl_with_skip << ")\n";
    }
  }
  return os.str();
}

std::string write_kv_report_heatmap(const KVReport& r, const std::string& png_path) {
  // No shell anywhere: gnuplot is found in $PATH and run with an argument vector, and the paths
  // inside the script are gnuplot single-quoted strings (no substitution happens there).
  if (find_program("gnuplot").empty())
    return "gnuplot not found; install it (apt-get install gnuplot) to draw the heatmap";
  namespace fs = std::filesystem;
  const std::string base = png_path + ".gnuplot";
  std::string quoted_png, quoted_dat;
  try {
    quoted_png = gnuplot_quote(png_path);
    quoted_dat = gnuplot_quote(base + ".dat");
  } catch (const std::invalid_argument& e) {
    return std::string("--heatmap: ") + e.what();
  }
  std::ofstream dat(base + ".dat");
  for (size_t i = 0; i < r.variants.size(); ++i) {
    for (size_t l = 0; l < r.variants[i].heads.size(); ++l)
      for (size_t h = 0; h < r.variants[i].heads[l].size(); ++h)
        dat << h << " " << l << " " << r.variants[i].heads[l][h].output_rel_error << "\n";
    dat << "\n\n";  // gnuplot index separator
  }
  dat.close();
  std::ofstream gp(base);
  const size_t nv = r.variants.size(), cols = std::max<size_t>(1, std::min<size_t>(nv, 4));
  gp << "set terminal pngcairo size " << 300 * cols << "," << 420 * ((nv + cols - 1) / cols)
     << "\nset output " << quoted_png << "\nset multiplot layout " << (nv + cols - 1) / cols
     << "," << cols << "\nset termoption noenhanced\nset xlabel 'KV head'\nset ylabel 'layer'\n"
     << "set cblabel 'attn out rel err'\nset xtics 1\nset xrange [-0.5:" << r.num_kv_heads - 0.5
     << "]\nset yrange [-0.5:" << r.num_layers - 0.5 << "]\n";
  for (size_t i = 0; i < nv; ++i)
    gp << "set title " << gnuplot_quote(r.variants[i].format + " / " + r.variants[i].source)
       << "\nplot " << quoted_dat << " index " << i << " using 1:2:3 with image notitle\n";
  gp << "unset multiplot\n";
  gp.close();
  if (!dat || !gp) return "cannot write " + base;
  int rc = 0;
  std::string problem;
  try {
    rc = run_program({"gnuplot", path_argument(base)});
  } catch (const std::runtime_error& e) {
    problem = e.what();
  }
  std::error_code ec;
  fs::remove(base, ec);
  fs::remove(base + ".dat", ec);
  if (!problem.empty()) return problem;
  if (rc != 0) return "gnuplot failed (exit " + std::to_string(rc) + ") drawing " + png_path;
  return "";
}

}  // namespace octet
