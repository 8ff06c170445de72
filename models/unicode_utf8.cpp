#include "models/unicode_utf8.h"

namespace octet::utf8 {

namespace {

/// Expected length of a character with lead byte b (0 when b cannot start one) and the valid
/// range of its second byte (Unicode Table 3-7: no overlongs, no surrogates, <= U+10FFFF).
struct Lead {
  int len;
  uint8_t lo, hi;
};

Lead lead_of(uint8_t b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

size_t append_lossy(std::string_view in, std::string& out, bool final) {
  size_t i = 0;
  const size_t n = in.size();
  while (i < n) {
    const auto b = static_cast<uint8_t>(in[i]);
    const Lead lead = lead_of(b);
    if (lead.len == 1) {
      out.push_back(char(b));
      ++i;
      continue;
    }
    if (lead.len == 0) {
      out.append(kReplacement);
      ++i;
      continue;
    }
    // j = number of bytes of this character seen valid so far (lead included).
    int j = 1;
    bool bad = false;
    while (j < lead.len) {
      if (i + j >= n) break;
      const auto c = static_cast<uint8_t>(in[i + j]);
      const uint8_t lo = j == 1 ? lead.lo : 0x80, hi = j == 1 ? lead.hi : 0xBF;
      if (c < lo || c > hi) {
        bad = true;
        break;
      }
      ++j;
    }
    if (j == lead.len) {
      out.append(in.substr(i, size_t(j)));
      i += size_t(j);
    } else if (bad || final) {
      out.append(kReplacement);  // the maximal valid prefix becomes one U+FFFD
      i += size_t(j);
    } else {
      return i;  // incomplete character at the end: wait for more bytes
    }
  }
  return i;
}

std::string to_valid(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  append_lossy(in, out, true);
  return out;
}

bool is_valid(std::string_view in) {
  for (size_t i = 0; i < in.size();) {
    const Lead lead = lead_of(static_cast<uint8_t>(in[i]));
    if (lead.len == 0 || i + size_t(lead.len) > in.size()) return false;
    for (int j = 1; j < lead.len; ++j) {
      const auto c = static_cast<uint8_t>(in[i + size_t(j)]);
      if (c < (j == 1 ? lead.lo : 0x80) || c > (j == 1 ? lead.hi : 0xBF)) return false;
    }
    i += size_t(lead.len);
  }
  return true;
}

size_t char_len(std::string_view s, size_t i) {
  const int len = lead_of(static_cast<uint8_t>(s[i])).len;
  if (len <= 1 || i + size_t(len) > s.size()) return 1;
  return size_t(len);
}

uint32_t decode_at(std::string_view s, size_t i) {
  const auto b = static_cast<uint8_t>(s[i]);
  const size_t len = char_len(s, i);
  if (len == 1) return b;
  uint32_t cp = b & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  return cp;
}

void append_code_point(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

size_t count_code_points(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += char_len(s, i)) ++n;
  return n;
}

const std::array<uint32_t, 256>& byte_to_unicode() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      t[b] = printable ? b : next++;
    }
    return t;
  }();
  return table;
}

int unicode_to_byte(uint32_t cp) {
  static const std::array<int16_t, 324> inverse = [] {
    std::array<int16_t, 324> inv{};
    inv.fill(-1);
    const auto& t = byte_to_unicode();
    for (int b = 0; b < 256; ++b) inv[t[size_t(b)]] = int16_t(b);
    return inv;
  }();
  return cp < inverse.size() ? inverse[cp] : -1;
}

}  // namespace octet::utf8
