// --max-logprobs (octet serve): vLLM's default 20, -1 for no cap (the vocabulary size), any
// count up to a vocabulary's size (vLLM's test_chat_echo.py starts its server with 151936, the
// Qwen vocabulary).
#include <catch2/catch.hpp>

#include <string>

#include "config/serve_config.h"

using octet::ServeConfig;
using Catch::Matchers::Contains;

TEST_CASE("max-logprobs flag: default 20, -1 or any count up to int32", "[config][serve]") {
  ServeConfig c;
  c.engine.model = "m";
  CHECK(c.max_logprobs == 20);  // vLLM's default
  CHECK_NOTHROW(c.validate());
  for (int64_t ok : {int64_t{-1}, int64_t{0}, int64_t{21}, int64_t{151936},
                     int64_t{2147483647}}) {
    INFO(ok);
    c.max_logprobs = ok;
    CHECK_NOTHROW(c.validate());
  }
  c.max_logprobs = -2;
  CHECK_THROWS_WITH(c.validate(), Contains("--max-logprobs must be in [-1, 2147483647]") &&
                                      Contains("got -2"));
  c.max_logprobs = int64_t{1} << 31;  // no vocabulary of int32 token ids is larger
  CHECK_THROWS_WITH(c.validate(), Contains("--max-logprobs") && Contains("got 2147483648"));
}
