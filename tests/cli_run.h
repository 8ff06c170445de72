#pragma once
// Test helper: runs a shell command, usually the `octet` binary under test, and collects what
// it printed and its exit code (popen(3) and pclose(3): the command runs under /bin/sh -c).
// For a server that must keep running while the test talks to it, see serve_process.h.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include <catch2/catch.hpp>

namespace octet::testing {

struct RunResult {
  int exit_code = -1;  // the exit status; -1 when the command did not exit (a signal)
  std::string output;  // its stdout (and stderr where the command line says 2>&1)
};

/// Runs `command` with /bin/sh and reads its stdout to the end; REQUIREs that it could start.
inline RunResult run_command(const std::string& command) {
  RunResult r;
  FILE* p = popen(command.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

/// Runs `prefix OCTET_BINARY args` (prefix: e.g. "taskset -c 0 ", or "") with stdout and
/// stderr together in `output`.
inline RunResult run_octet(const std::string& args, const std::string& prefix = "") {
  return run_command(prefix + std::string(OCTET_BINARY) + " " + args + " 2>&1");
}

}  // namespace octet::testing
