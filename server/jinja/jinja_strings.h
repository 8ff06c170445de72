#pragma once
// Python str semantics on UTF-8 text for octet's Jinja interpreter (CPython 3 str methods).
// Positions and lengths count code points. Case mapping covers Latin-1, Latin Extended-A,
// Greek and Cyrillic (other scripts are left as they are); whitespace is str.isspace().
#include <string>
#include <vector>

#include "server/jinja/jinja_value.h"

namespace octet::jinja {

bool py_space(char32_t c);
char32_t to_upper_cp(char32_t c);
char32_t to_lower_cp(char32_t c);
/// Has an upper/lower case variant (a "cased" character for str.title/islower/isupper).
bool is_cased(char32_t c);
/// One code point upper-cased as UTF-8 ("ß" gives "SS", as Python).
std::string upper_cp(char32_t c);
std::string lower_cp(char32_t c);

/// str.strip/lstrip/rstrip: chars absent (or None) = whitespace.
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right);
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
/// str.title(): first cased letter of each run of letters upper, the rest lower.
std::string py_title(const std::string& s);
/// str.capitalize().
std::string py_capitalize(const std::string& s);
/// str.replace(old, new, count); count < 0 replaces all.
std::string py_replace(const std::string& s, const std::string& old, const std::string& repl, long count);
/// printf-style `fmt % args` (%s %r %d %i %f %x %%, flags, width, precision, %(name)s).
std::string py_percent_format(const std::string& fmt, const Value& args);
/// str.format with "{}", "{0}", "{name}" fields and "{{" / "}}" (format specs are refused).
std::string py_str_format(const std::string& fmt, const CallArgs& args);
/// str.split(sep, maxsplit) (sep null or None: runs of whitespace); maxsplit < 0: no limit.
std::vector<std::string> py_split(const std::string& s, const Value* sep, long maxsplit);
/// str.rsplit(sep, maxsplit).
std::vector<std::string> py_rsplit(const std::string& s, const Value* sep, long maxsplit);
/// markupsafe.escape of a plain string: & < > " ' become entities.
std::string html_escape(const std::string& s);

}  // namespace octet::jinja
