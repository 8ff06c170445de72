#pragma once
// Running a helper program (gnuplot) without a shell: the arguments reach it verbatim, so a path
// holding quotes, `$(...)` or `;` is only ever a path. Used by kv-report's heatmap and
// `octet bench sweep`'s plots.
#include <string>
#include <vector>

namespace octet {

/// The path of the executable regular file `name` in the directories of $PATH (an empty entry
/// is the current directory), or "" when there is none. A `name` holding '/' is checked as is.
/// No shell is involved (the answer of `command -v name`).
std::string find_program(const std::string& name);

/// Runs argv[0] (searched in $PATH when it holds no '/') with arguments argv[1..], passed
/// verbatim (posix_spawnp, no shell); stdin from /dev/null, stdout and stderr both written to
/// `output_path` (created or truncated, mode 0644), or to /dev/null when it is "". Waits for it and returns its exit status (0-255), or 128 + the signal that ended it.
/// Throws std::runtime_error naming the program when it cannot be started (not found, output
/// file not writable) or argv is empty.
int run_program(const std::vector<std::string>& argv, const std::string& output_path = "");

/// `path` as a program argument that cannot be read as an option: "./" before a path that
/// starts with '-' ("-e x.gp" would make gnuplot run "x.gp" as a command).
std::string path_argument(const std::string& path);

/// `s` as a gnuplot single-quoted string: quotes doubled, the only escape there is (no
/// backslash escapes and no backquote command substitution happen inside single quotes).
/// Throws std::invalid_argument for a line break or NUL, which would end the command.
std::string gnuplot_quote(const std::string& s);

}  // namespace octet
