#pragma once
// The shape every `octet` subcommand shares: parse flags into its config struct (--help prints
// them), validate, run the body, and turn exceptions into one line on stderr and an exit code:
// 0 ok, 2 usage error (std::invalid_argument: bad flags or values), 1 everything else (bad model
// files, I/O, out of memory). A failed write to stdout is an error too.
#include <iostream>
#include <new>
#include <stdexcept>
#include <string>

#include "server/cli/cli.h"

namespace octet::cli {

template <class Config, class Body>
int run_command(const std::string& name, int argc, const char* const* argv, Body&& body) {
  Config cfg;
  try {
    std::string help;
    if (!parse_flags(cfg, argc, argv, name + " options", help)) {
      std::cout << help;
      return 0;
    }
    cfg.validate();
    body(cfg);
    std::cout.flush();
    if (!std::cout) throw std::runtime_error("cannot write the output (stdout)");
  } catch (const std::invalid_argument& e) {
    std::cerr << name << ": " << e.what() << "\n";
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << name << ": out of memory\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << name << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace octet::cli
