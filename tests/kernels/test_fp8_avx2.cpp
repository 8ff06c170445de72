// The AVX2 FP8 path (fp8_*_avx2 in kernels/cpu/fp8.h), called explicitly, held bit for bit to
// the independent reference (minifloat_reference.h). On a CPU or build without AVX2 every test
// here exits with 77, which CTest reports as skipped (never as passed). Kept in its own binary
// so that such an exit cannot cut short the scalar tests in test_fp8.cpp.
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/cpu/fp8.h"
#include "kernels/fp8_test_support.h"

using octet::DType;
using octet_test::MismatchLog;
using FormatCase = octet_test::Fp8FormatCase;

namespace {

constexpr auto& kFormats = octet_test::kFp8Formats;
uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }

void skip_unless_avx2() {
  if (octet::fp8_avx2_available()) return;
  std::printf("SKIPPED: this build or CPU has no AVX2+FMA+F16C; the AVX2 FP8 path cannot run\n");
  std::fflush(stdout);
  std::exit(77);
}

}  // namespace

TEST_CASE("fp8 avx2: decode of all 256 codes at every array length 0..300", "[fp8][avx2]") {
  skip_unless_avx2();
  for (const FormatCase& fc : kFormats) {
    INFO(fc.name);
    // 300 codes cycling through all 256, so that 32-wide, 8-wide and tail loops all see each.
    std::vector<uint8_t> codes(300);
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 37 + 11);
    MismatchLog log;
    for (size_t n = 0; n <= codes.size(); ++n) {
      std::vector<float> out(n + 8, -1.25f);
      octet::fp8_decode_avx2(fc.format, codes.data(), out.data(), n);
      for (size_t i = 0; i < n; ++i) {
        const uint32_t expected = octet_test::expected_fp8_decode_bits(fc.spec, codes[i]);
        if (bits_of(out[i]) != expected) {
          log.add("n %zu, code 0x%02X: expected 0x%08X, got 0x%08X", n, codes[i], expected,
                  bits_of(out[i]));
        }
      }
      for (size_t i = n; i < n + 8; ++i) {
        if (out[i] != -1.25f) log.add("n %zu: wrote past the end at %zu", n, i);
      }
    }
    INFO(log.summary());
    CHECK(log.count() == 0);
  }
}

TEST_CASE("fp8 avx2: 13M stress fp32 values match the reference", "[fp8][avx2]") {
  skip_unless_avx2();
  const std::vector<float>& floats = octet_test::fp8_stress_floats();
  REQUIRE(floats.size() >= 10'000'000);
  for (const FormatCase& fc : kFormats) {
    INFO(fc.name);
    std::vector<uint8_t> got(floats.size());
    octet::fp8_encode_avx2(fc.format, floats.data(), got.data(), floats.size());
    MismatchLog log;
    octet_test::compare_fp8_codes(octet_test::fp8_stress_bits(),
                                  octet_test::reference_stress_codes(fc), got, log);
    INFO(log.summary());
    CHECK(log.count() == 0);
  }
}

TEST_CASE("fp8 avx2: all 65536 bf16 and fp16 patterns match the reference", "[fp8][avx2]") {
  skip_unless_avx2();
  std::vector<uint16_t> patterns(65536);
  for (uint32_t h = 0; h < 65536; ++h) patterns[h] = static_cast<uint16_t>(h);
  for (const FormatCase& fc : kFormats) {
    std::vector<uint8_t> from_bf16(65536), from_fp16(65536);
    octet::fp8_encode_bf16_avx2(fc.format, patterns.data(), from_bf16.data(), 65536);
    octet::fp8_encode_fp16_avx2(fc.format, patterns.data(), from_fp16.data(), 65536);
    MismatchLog bf16_log, fp16_log;
    for (uint32_t h = 0; h < 65536; ++h) {
      const uint8_t bf16_expected =
          octet_test::reference_fp8(fc.spec, octet_test::code_value(octet_test::kBf16, h));
      const uint8_t fp16_expected =
          octet_test::reference_fp8(fc.spec, octet_test::code_value(octet_test::kFp16, h));
      if (from_bf16[h] != bf16_expected) {
        bf16_log.add("0x%04X: expected 0x%02X, got 0x%02X", h, bf16_expected, from_bf16[h]);
      }
      if (from_fp16[h] != fp16_expected) {
        fp16_log.add("0x%04X: expected 0x%02X, got 0x%02X", h, fp16_expected, from_fp16[h]);
      }
    }
    INFO(fc.name << " from bf16: " << bf16_log.summary());
    INFO(fc.name << " from fp16: " << fp16_log.summary());
    CHECK(bf16_log.count() == 0);
    CHECK(fp16_log.count() == 0);
  }
}

TEST_CASE("fp8 avx2: every length 0..100 at odd offsets writes exactly n codes", "[fp8][avx2]") {
  skip_unless_avx2();
  const std::vector<float>& floats = octet_test::fp8_stress_floats();
  std::vector<uint16_t> halves(floats.size() < 4096 ? floats.size() : 4096);
  for (size_t i = 0; i < halves.size(); ++i) {
    halves[i] =
        static_cast<uint16_t>(octet_test::fp8_stress_bits()[i * 2654435761u % floats.size()]);
  }
  for (const FormatCase& fc : kFormats) {
    INFO(fc.name);
    MismatchLog log;
    for (size_t n = 0; n <= 100; ++n) {
      for (size_t offset = 0; offset < 4; ++offset) {
        const size_t start = (n * 7919 + offset * 104729) % (floats.size() - 200);
        const float* src = floats.data() + start;
        const uint16_t* half_src = halves.data() + (n * 31 + offset) % (halves.size() - 200);
        std::vector<uint8_t> buffers[3];
        for (int kind = 0; kind < 3; ++kind) {
          std::vector<uint8_t>& buffer = buffers[kind];
          buffer.assign(n + 16 + offset, 0xAB);
          uint8_t* dst = buffer.data() + 8 + offset;
          if (kind == 0) octet::fp8_encode_avx2(fc.format, src, dst, n);
          if (kind == 1) octet::fp8_encode_bf16_avx2(fc.format, half_src, dst, n);
          if (kind == 2) octet::fp8_encode_fp16_avx2(fc.format, half_src, dst, n);
          for (size_t i = 0; i < buffer.size(); ++i) {
            const bool inside = i >= 8 + offset && i < 8 + offset + n;
            if (!inside && buffer[i] != 0xAB) log.add("kind %d n %zu: wrote at %zu", kind, n, i);
          }
          for (size_t i = 0; i < n; ++i) {
            const double x = kind == 0   ? static_cast<double>(src[i])
                             : kind == 1 ? octet_test::code_value(octet_test::kBf16, half_src[i])
                                         : octet_test::code_value(octet_test::kFp16, half_src[i]);
            const uint8_t expected = octet_test::reference_fp8(fc.spec, x);
            if (dst[i] != expected) {
              log.add("kind %d n %zu i %zu: expected 0x%02X, got 0x%02X", kind, n, i, expected,
                      dst[i]);
            }
          }
        }
      }
    }
    INFO(log.summary());
    CHECK(log.count() == 0);
  }
}

#if OCTET_TEST_HAVE_MXCSR
TEST_CASE("fp8 avx2: FTZ and DAZ change no result", "[fp8][avx2]") {
  skip_unless_avx2();
  const std::vector<float>& floats = octet_test::fp8_stress_floats();
  std::vector<uint16_t> halves(65536);
  for (uint32_t h = 0; h < 65536; ++h) halves[h] = static_cast<uint16_t>(h);
  std::vector<uint8_t> codes(256);
  for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
  for (const FormatCase& fc : kFormats) {
    INFO(fc.name);
    std::vector<uint8_t> encoded(floats.size()), from_bf16(65536), from_fp16(65536);
    std::vector<float> decoded(256);
    {
      octet_test::FlushDenormalsScope flush;
      octet::fp8_encode_avx2(fc.format, floats.data(), encoded.data(), floats.size());
      octet::fp8_encode_bf16_avx2(fc.format, halves.data(), from_bf16.data(), 65536);
      octet::fp8_encode_fp16_avx2(fc.format, halves.data(), from_fp16.data(), 65536);
      octet::fp8_decode_avx2(fc.format, codes.data(), decoded.data(), 256);
    }
    MismatchLog log;
    octet_test::compare_fp8_codes(octet_test::fp8_stress_bits(),
                                  octet_test::reference_stress_codes(fc), encoded, log);
    for (uint32_t h = 0; h < 65536; ++h) {
      if (from_bf16[h] !=
              octet_test::reference_fp8(fc.spec, octet_test::code_value(octet_test::kBf16, h)) ||
          from_fp16[h] !=
              octet_test::reference_fp8(fc.spec, octet_test::code_value(octet_test::kFp16, h))) {
        log.add("16-bit pattern 0x%04X", h);
      }
    }
    for (int c = 0; c < 256; ++c) {
      if (bits_of(decoded[c]) != octet_test::expected_fp8_decode_bits(fc.spec, codes[c])) {
        log.add("decode 0x%02X", c);
      }
    }
    INFO(log.summary());
    CHECK(log.count() == 0);
  }
}
#endif  // OCTET_TEST_HAVE_MXCSR
