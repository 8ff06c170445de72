// `octet serve` checks OCTET_DEVICE_SAMPLING (engine/device_sampling_env.h) with the other
// environment variables, before it listens or loads a model: a bad value exits 2 naming it.
#include <catch2/catch.hpp>

#include <string>

#include "cli_run.h"

using octet::testing::run_octet;

TEST_CASE("octet serve refuses a bad OCTET_DEVICE_SAMPLING before it listens or loads",
          "[serve]") {
  // A model that does not exist: an environment checked only at load time would report the
  // model instead.
  const std::string args = "serve --model /nonexistent/octet-model.gguf --port 0";
  const auto bad = run_octet(args, "OCTET_DEVICE_SAMPLING=banana ");
  INFO(bad.output);
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("OCTET_DEVICE_SAMPLING must be 1, true, yes, on, 0, false, no or off, "
                        "not 'banana'") != std::string::npos);
  CHECK(bad.output.find("listening") == std::string::npos);
  // An accepted word gets as far as the model.
  const auto word = run_octet(args, "OCTET_DEVICE_SAMPLING=Off ");
  INFO(word.output);
  CHECK(word.exit_code != 0);
  CHECK(word.output.find("OCTET_DEVICE_SAMPLING") == std::string::npos);
  CHECK(word.output.find("octet-model.gguf") != std::string::npos);
}
