#pragma once
// UTF-8 helpers for the tokenizers: lossy validation with U+FFFD (the "maximal subpart" rule of
// Unicode ch. 3 / WHATWG, as Rust's String::from_utf8_lossy, which HF tokenizers' decoders use),
// code-point iteration, and GPT-2's byte <-> printable-unicode alphabet.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace octet::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

/// Appends `in` to `out`, each maximal invalid subsequence replaced by one U+FFFD.
/// final == false: a trailing sequence that is a valid but incomplete character is not
/// consumed (it may complete with later bytes). Returns the number of bytes consumed.
size_t append_lossy(std::string_view in, std::string& out, bool final);

/// `in` with invalid sequences replaced by U+FFFD (append_lossy with final == true).
std::string to_valid(std::string_view in);

bool is_valid(std::string_view in);

/// Byte length of the (valid) UTF-8 character starting at s[i]; 1 for a stray byte.
size_t char_len(std::string_view s, size_t i);

/// Code point of the (valid) UTF-8 character at s[i..i+char_len).
uint32_t decode_at(std::string_view s, size_t i);

/// Appends the UTF-8 encoding of code point cp (cp <= 0x10FFFF).
void append_code_point(uint32_t cp, std::string& out);

/// Number of code points in valid UTF-8 text.
size_t count_code_points(std::string_view s);

/// GPT-2's byte-level alphabet (bytes_to_unicode): printable bytes 33..126, 161..172 and
/// 174..255 stand for themselves; the other 68 bytes map to U+0100.. in byte order, so every
/// byte is a printable character ("Ġ" = space, "Ċ" = newline).
const std::array<uint32_t, 256>& byte_to_unicode();

/// Inverse of byte_to_unicode: the byte for code point cp, or -1 when cp is not in it.
int unicode_to_byte(uint32_t cp);

}  // namespace octet::utf8
