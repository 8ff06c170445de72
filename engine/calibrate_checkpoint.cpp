// `octet calibrate --output DIR`: a compressed-tensors checkpoint with calibrated KV scales
// (see write_kv_calibrated_checkpoint in calibrate.h).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "engine/calibrate.h"
#include "engine/quantize.h"
#include "models/checkpoint.h"
#include "models/checkpoint_writer.h"
#include "models/quant_config.h"

namespace octet {

namespace fs = std::filesystem;

void write_kv_calibrated_checkpoint(const std::string& model_dir, const std::string& out_dir,
                                    const KVCalibration& cal) {
  std::error_code ec;
  if (!is_hf_checkpoint_dir(model_dir))
    throw std::invalid_argument(model_dir +
                                ": a checkpoint output (--output DIR) needs a "
                                "Hugging Face checkpoint directory as --model; for a GGUF "
                                "model write a scales file instead (--output FILE.json, then "
                                "--kv-scales-path FILE.json)");
  if (fs::exists(out_dir, ec) && !fs::is_directory(out_dir, ec))
    throw std::invalid_argument(out_dir + ": exists and is not a directory");
  if (fs::exists(fs::path(out_dir) / "config.json", ec))
    throw std::invalid_argument(out_dir +
                                ": already holds a checkpoint (config.json); choose "
                                "a new output directory");
  fs::create_directories(out_dir, ec);
  if (ec || !fs::is_directory(out_dir))
    throw std::runtime_error(out_dir + ": cannot create the output directory: " + ec.message());

  const HFCheckpoint source = HFCheckpoint::open(model_dir);
  const QuantConfig q = QuantConfig::from_hf_config(source.config(), model_dir + "/config.json");
  std::string src_dir = model_dir;
  const fs::path tmp = fs::path(out_dir) / ".octet-calibrate-quantized";
  if (q.quant_method == "none") {  // FP8 W8A8 weights first, as `octet quantize` writes them
    fs::remove_all(tmp, ec);
    quantize_checkpoint({model_dir, tmp.string()});
    src_dir = tmp.string();
  }
  {
    const HFCheckpoint src = HFCheckpoint::open(src_dir);
    std::vector<WriterTensor> tensors;
    for (const std::string& name : src.tensor_names()) {
      if (is_kv_scale_tensor_name(name)) continue;  // replaced below
      const TensorView* t = src.find(name);
      WriterTensor w;
      w.name = name;
      w.dtype = t->dtype;
      w.shape = t->shape;
      w.produce = [t] { return std::vector<uint8_t>(t->data, t->data + t->nbytes); };
      tensors.push_back(std::move(w));
    }
    const int64_t nkv =
        src.config().value("num_key_value_heads", src.config().value("num_attention_heads", 1));
    std::vector<LayerKVScales> scales(cal.k_scale.size());
    for (size_t l = 0; l < scales.size(); ++l) scales[l] = {cal.k_scale[l], cal.v_scale[l]};
    for (WriterTensor& t : kv_scale_tensors(scales, cal.strategy, nkv))
      tensors.push_back(std::move(t));
    write_safetensors_checkpoint(out_dir, tensors);

    nlohmann::json config = src.config();
    config["quantization_config"]["kv_cache_scheme"] = kv_cache_scheme_config(cal.strategy);
    const std::string cpath = (fs::path(out_dir) / "config.json").string();
    std::ofstream out(cpath, std::ios::binary | std::ios::trunc);
    out << config.dump(2) << "\n";
    out.close();
    if (!out) throw std::runtime_error(cpath + ": cannot write");

    for (const auto& e : fs::directory_iterator(src_dir)) {
      const std::string f = e.path().filename().string();
      if (!e.is_regular_file() || e.path().extension() == ".safetensors" ||
          f == "model.safetensors.index.json" || f == "config.json")
        continue;
      fs::copy_file(e.path(), fs::path(out_dir) / f, fs::copy_options::overwrite_existing, ec);
      if (ec) throw std::runtime_error(out_dir + "/" + f + ": cannot copy: " + ec.message());
    }
  }
  fs::remove_all(tmp, ec);
}

}  // namespace octet
