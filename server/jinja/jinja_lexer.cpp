#include "server/jinja/jinja_lexer.h"

#include <cctype>
#include <cstring>

namespace octet::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

[[noreturn]] void syntax_error(const std::string& message, int line) {
  throw ChatTemplateError(ChatTemplateError::Kind::Syntax, message, line);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's "unicode-escape" decoding of a string literal's body (jinja2 lexer.py wrap()).
std::string unescape(const std::string& body, int line) {
  std::string out;
  for (std::size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      continue;
    }
    const char e = body[++i];
    auto hex_escape = [&](int digits) {
      char32_t cp = 0;
      for (int k = 1; k <= digits; ++k) {
        const int h = i + k < body.size() ? hex_value(body[i + k]) : -1;
        if (h < 0) syntax_error("truncated \\" + std::string(1, e) + " escape", line);
        cp = cp * 16 + static_cast<char32_t>(h);
      }
      i += digits;
      out += utf8_encode(std::u32string_view(&cp, 1));
    };
    switch (e) {
      case '\n': break;  // line continuation
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x': hex_escape(2); break;
      case 'u': hex_escape(4); break;
      case 'U': hex_escape(8); break;
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = e - '0';
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
            cp = cp * 8 + static_cast<char32_t>(body[++i] - '0');
          out += utf8_encode(std::u32string_view(&cp, 1));
        } else {
          out.push_back('\\');  // unknown escapes stay as written
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) {
      std::size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit_text(s_.substr(pos_));
        pos_ = s_.size();
        break;
      }
      const char kind = s_[tag + 1];
      std::size_t after = tag + 2;
      const char sign = (after < s_.size() && (s_[after] == '-' || s_[after] == '+')) ? s_[after] : 0;
      if (sign) ++after;
      std::string text = s_.substr(pos_, tag - pos_);
      const int newlines = count_newlines(text);
      std::size_t raw_body = std::string::npos;
      if (kind == '%') raw_body = match_raw_begin(after);
      strip_before(text, sign, kind != '{');
      emit_text(std::move(text));
      line_ += newlines;
      if (raw_body != std::string::npos) {
        line_ += count_newlines(s_.substr(after, raw_body - after));
        lex_raw(raw_body);
      } else if (kind == '#') {
        lex_comment(after);
      } else {
        lex_tag(kind, after);
      }
    }
    tokens_.push_back(Token{Tok::Eof, "", {}, line_});
    return std::move(tokens_);
  }

 private:
  std::string s_;
  std::size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;  // the previous match ended with a newline (or nothing came yet)
  std::vector<Token> tokens_;

  static int count_newlines(const std::string& t) {
    int n = 0;
    for (char c : t) n += c == '\n';
    return n;
  }

  std::size_t find_tag(std::size_t from) const {
    for (std::size_t i = s_.find('{', from); i != std::string::npos; i = s_.find('{', i + 1)) {
      if (i + 1 < s_.size() && (s_[i + 1] == '{' || s_[i + 1] == '%' || s_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  // `{%` sign already consumed; matches `\s*raw\s*(-%}\s*|%})` and returns where the raw body starts.
  std::size_t match_raw_begin(std::size_t p) const {
    while (p < s_.size() && is_space(s_[p])) ++p;
    if (s_.compare(p, 3, "raw") != 0) return std::string::npos;
    p += 3;
    while (p < s_.size() && is_space(s_[p])) ++p;
    if (s_.compare(p, 3, "-%}") == 0) {
      p += 3;
      while (p < s_.size() && is_space(s_[p])) ++p;
      return p;
    }
    if (s_.compare(p, 2, "%}") == 0) return p + 2;
    return std::string::npos;
  }

  // jinja2's OptionalLStrip: "-" strips all trailing whitespace of the text; otherwise, for block
  // and comment tags, lstrip_blocks removes the spaces between the last line start and the tag.
  void strip_before(std::string& text, char sign, bool lstrip_kind) const {
    if (sign == '-') {
      std::size_t end = text.size();
      while (end > 0 && is_space(text[end - 1])) --end;
      text.resize(end);
    } else if (sign != '+' && lstrip_kind) {
      const std::size_t nl = text.rfind('\n');
      const std::size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && l_pos < text.size()) {
        bool all_space = true;
        for (std::size_t i = l_pos; i < text.size(); ++i) all_space &= is_space(text[i]);
        if (all_space) text.resize(l_pos);
      }
    }
  }

  void emit_text(std::string text) {
    if (!text.empty()) tokens_.push_back(Token{Tok::Text, std::move(text), {}, line_});
  }

  // After a closing delimiter: "-" eats all whitespace, plain block/comment ends eat one newline
  // (trim_blocks), "+" eats nothing.
  void close(std::size_t p, char sign, bool trim_newline) {
    if (sign == '-') {
      while (p < s_.size() && is_space(s_[p])) {
        line_ += s_[p] == '\n';
        ++p;
      }
    } else if (sign == 0 && trim_newline && p < s_.size() && s_[p] == '\n') {
      ++p;
      ++line_;
    }
    line_starting_ = s_[p - 1] == '\n';
    pos_ = p;
  }

  void lex_comment(std::size_t p) {
    for (std::size_t i = p; i + 1 < s_.size(); ++i) {
      if (s_[i] == '#' && s_[i + 1] == '}') {
        const char sign = (i > p && (s_[i - 1] == '-' || s_[i - 1] == '+')) ? s_[i - 1] : 0;
        line_ += count_newlines(s_.substr(p, i - p));
        close(i + 2, sign, true);
        return;
      }
    }
    syntax_error("Missing end of comment tag", line_);
  }

  void lex_raw(std::size_t body) {
    // (.*?)({%(-|+|)\s*endraw\s*(+%}|-%}\s*|%}\n?))
    for (std::size_t i = s_.find("{%", body); i != std::string::npos; i = s_.find("{%", i + 1)) {
      std::size_t p = i + 2;
      const char sign = (p < s_.size() && (s_[p] == '-' || s_[p] == '+')) ? s_[p] : 0;
      if (sign) ++p;
      while (p < s_.size() && is_space(s_[p])) ++p;
      if (s_.compare(p, 6, "endraw") != 0) continue;
      p += 6;
      while (p < s_.size() && is_space(s_[p])) ++p;
      char end_sign = 0;
      if (s_.compare(p, 3, "+%}") == 0 || s_.compare(p, 3, "-%}") == 0) {
        end_sign = s_[p];
        ++p;
      } else if (s_.compare(p, 2, "%}") != 0) {
        continue;
      }
      std::string text = s_.substr(body, i - body);
      const int newlines = count_newlines(text) + count_newlines(s_.substr(i, p - i));
      line_starting_ = body > 0 && s_[body - 1] == '\n';
      strip_before(text, sign, true);
      emit_text(std::move(text));
      line_ += newlines;
      close(p + 2, end_sign, true);
      return;
    }
    syntax_error("Missing end of raw directive", line_);
  }

  void lex_tag(char kind, std::size_t p) {
    const bool block = kind == '%';
    tokens_.push_back(Token{block ? Tok::BlockBegin : Tok::VarBegin, "", {}, line_});
    std::vector<char> balance;
    while (true) {
      while (p < s_.size() && is_space(s_[p])) {
        line_ += s_[p] == '\n';
        ++p;
      }
      if (p >= s_.size())
        syntax_error(std::string("unexpected end of template, expected '") + (block ? "%}" : "}}") + "'",
                     line_);
      if (balance.empty()) {
        const char* end = block ? "%}" : "}}";
        if ((s_[p] == '-' || (block && s_[p] == '+')) && s_.compare(p + 1, 2, end) == 0) {
          tokens_.push_back(Token{block ? Tok::BlockEnd : Tok::VarEnd, "", {}, line_});
          close(p + 3, s_[p], block);
          return;
        }
        if (s_.compare(p, 2, end) == 0) {
          tokens_.push_back(Token{block ? Tok::BlockEnd : Tok::VarEnd, "", {}, line_});
          close(p + 2, 0, block);
          return;
        }
      }
      p = lex_one(p, balance);
    }
  }

  std::size_t lex_one(std::size_t p, std::vector<char>& balance) {
    const char c = s_[p];
    // float: digits (. digits)? e[+-]digits | digits . digits   (not right after a '.')
    if (is_digit(c) && !(p > 0 && s_[p - 1] == '.')) {
      std::size_t q = p;
      auto digits = [&](std::size_t& k) {
        const std::size_t start = k;
        while (k < s_.size() && (is_digit(s_[k]) || (s_[k] == '_' && k + 1 < s_.size() && is_digit(s_[k + 1]) &&
                                                      k > start)))
          ++k;
        return k > start;
      };
      digits(q);
      std::size_t r = q;
      bool is_float = false;
      if (r + 1 < s_.size() && s_[r] == '.' && is_digit(s_[r + 1])) {
        ++r;
        digits(r);
        is_float = true;
      }
      if (r < s_.size() && (s_[r] == 'e' || s_[r] == 'E')) {
        std::size_t k = r + 1;
        if (k < s_.size() && (s_[k] == '+' || s_[k] == '-')) ++k;
        if (k < s_.size() && is_digit(s_[k])) {
          digits(k);
          r = k;
          is_float = true;
        }
      }
      if (is_float) {
        std::string t;
        for (std::size_t k = p; k < r; ++k)
          if (s_[k] != '_') t.push_back(s_[k]);
        double v = 0.0;
        try {
          v = std::stod(t);
        } catch (const std::exception&) {  // out_of_range: beyond a double
          syntax_error("float literal " + t.substr(0, 40) + " is out of range", line_);
        }
        tokens_.push_back(Token{Tok::Float, t, Value(v), line_});
        return r;
      }
    }
    if (is_digit(c)) {
      std::size_t q = p;
      int base = 10;
      if (c == '0' && q + 1 < s_.size() && std::strchr("bBoOxX", s_[q + 1]) && s_[q + 1] != '\0') {
        const char b = static_cast<char>(std::tolower(s_[q + 1]));
        base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
        q += 2;
      }
      std::string t;
      while (q < s_.size() && (std::isxdigit(static_cast<unsigned char>(s_[q])) || s_[q] == '_')) {
        if (base == 10 && !is_digit(s_[q])) break;
        if (s_[q] != '_') t.push_back(s_[q]);
        ++q;
      }
      if (t.empty()) syntax_error("invalid integer literal", line_);
      std::int64_t v = 0;
      try {
        std::size_t used = 0;
        v = static_cast<std::int64_t>(std::stoll(t, &used, base));
        if (used != t.size()) throw std::invalid_argument(t);
      } catch (const std::out_of_range&) {  // integers are 64-bit (chat_template.h)
        syntax_error("integer literal " + t.substr(0, 40) + " exceeds 64 bits", line_);
      } catch (const std::invalid_argument&) {
        syntax_error("invalid integer literal " + t.substr(0, 40), line_);
      }
      tokens_.push_back(Token{Tok::Int, t, Value(v), line_});
      return q;
    }
    if (is_name_start(c)) {
      std::size_t q = p;
      while (q < s_.size() && is_name_char(s_[q])) ++q;
      tokens_.push_back(Token{Tok::Name, s_.substr(p, q - p), {}, line_});
      return q;
    }
    if (c == '\'' || c == '"') {
      std::size_t q = p + 1;
      while (q < s_.size() && s_[q] != c) q += s_[q] == '\\' ? 2 : 1;
      if (q >= s_.size()) syntax_error(std::string("unexpected char '") + c + "'", line_);
      const std::string body = s_.substr(p + 1, q - p - 1);
      tokens_.push_back(Token{Tok::String, unescape(body, line_), {}, line_});
      line_ += count_newlines(body);
      return q + 1;
    }
    static const char* const two[] = {"//", "**", "==", "!=", ">=", "<="};
    for (const char* op : two) {
      if (s_.compare(p, 2, op) == 0) {
        tokens_.push_back(Token{Tok::Op, op, {}, line_});
        return p + 2;
      }
    }
    if (std::strchr("+-/*%~[](){}><=.:|,;", c)) {
      if (c == '(' || c == '[' || c == '{') {
        balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      } else if (c == ')' || c == ']' || c == '}') {
        if (balance.empty()) syntax_error(std::string("unexpected '") + c + "'", line_);
        if (balance.back() != c)
          syntax_error(std::string("unexpected '") + c + "', expected '" + balance.back() + "'", line_);
        balance.pop_back();
      }
      tokens_.push_back(Token{Tok::Op, std::string(1, c), {}, line_});
      return p + 1;
    }
    syntax_error(std::string("unexpected char '") + c + "'", line_);
  }
};

std::string normalize(const std::string& src) {
  std::string out;
  out.reserve(src.size());
  for (std::size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out.push_back(src[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline=False
  return out;
}

}  // namespace

std::vector<Token> tokenize(const std::string& source) { return Lexer(normalize(source)).run(); }

}  // namespace octet::jinja
