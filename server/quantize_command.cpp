// `octet quantize`: unquantized HF checkpoint -> FP8_DYNAMIC compressed-tensors checkpoint.
#include <iostream>
#include <stdexcept>

#include "config/generate_config.h"
#include "engine/quantize.h"
#include "server/cli.h"
#include "server/commands.h"

namespace octet {

int run_quantize(int argc, const char* const* argv) {
  QuantizeConfig cfg;
  try {
    std::string help;
    if (!cli::parse_flags(cfg, argc, argv, "octet quantize options", help)) {
      std::cout << help;
      return 0;
    }
    cfg.validate();
  } catch (const std::invalid_argument& e) {
    std::cerr << "octet quantize: " << e.what() << "\n";
    return 2;
  }
  try {
    const QuantizeReport r = quantize_checkpoint({cfg.model, cfg.output});
    std::cout << "wrote " << cfg.output << ": " << r.quantized_linears
              << " linear weights in FP8 E4M3 (per-channel scales, dynamic per-token "
                 "activations), "
              << r.copied_tensors << " tensors unchanged; " << r.input_bytes / 1000000 << " MB -> "
              << r.output_bytes / 1000000 << " MB\n";
  } catch (const std::invalid_argument& e) {
    std::cerr << "octet quantize: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "octet quantize: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace octet
