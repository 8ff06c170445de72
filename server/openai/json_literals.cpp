#include "server/openai/json_literals.h"

#include <cstddef>

namespace octet::server {

namespace {

using nlohmann::json;

/// nlohmann's DOM builder, plus the literal of each top-level floating-point member.
class LiteralKeepingSax {
 public:
  LiteralKeepingSax(json& root, NumberLiterals* literals) : dom_(root), literals_(literals) {}

  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const std::string& s) {
    if (depth_ == 1 && in_object_at_top_ && literals_) (*literals_)[key_] = s;
    return dom_.number_float(v, s);
  }
  bool string(std::string& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool start_object(std::size_t n) {
    if (++depth_ == 1) in_object_at_top_ = true;
    return dom_.start_object(n);
  }
  bool key(std::string& k) {
    if (depth_ == 1) key_ = k;
    return dom_.key(k);
  }
  bool end_object() {
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    ++depth_;
    return dom_.start_array(n);
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string& last_token, const Exception& ex) {
    return dom_.parse_error(position, last_token, ex);
  }

 private:
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  NumberLiterals* literals_;
  int depth_ = 0;                  // containers open around the current value
  bool in_object_at_top_ = false;  // the outermost container is an object
  std::string key_;                // the current top-level member
};

}  // namespace

json parse_json_keeping_literals(const std::string& text, NumberLiterals* literals) {
  json root;
  LiteralKeepingSax sax(root, literals);
  json::sax_parse(text, &sax);
  return root;
}

}  // namespace octet::server
