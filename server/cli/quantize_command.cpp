// `octet quantize`: unquantized HF checkpoint -> FP8_DYNAMIC compressed-tensors checkpoint.
#include <iostream>
#include <stdexcept>

#include "config/generate_config.h"
#include "engine/quantize.h"
#include "server/cli/command.h"
#include "server/cli/commands.h"

namespace octet {

int run_quantize(int argc, const char* const* argv) {
  return cli::run_command<QuantizeConfig>("octet quantize", argc, argv, [](QuantizeConfig& cfg) {
    const QuantizeReport r = quantize_checkpoint({cfg.model, cfg.output});
    std::cout << "wrote " << cfg.output << ": " << r.quantized_linears
              << " linear weights in FP8 E4M3 (per-channel scales, dynamic per-token "
                 "activations), "
              << r.copied_tensors << " tensors unchanged; " << r.input_bytes / 1000000
              << " MB -> " << r.output_bytes / 1000000 << " MB\n";
  });
}

}  // namespace octet
