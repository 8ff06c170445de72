# xgrammar 0.2.8 (https://github.com/mlc-ai/xgrammar, Apache-2.0): the grammar engine behind
# structured outputs (engine/structured_output.h). Built from PyPI's pinned sdist as our own
# static library: the C++ core only (cpp/*.cc, cpp/support, cpp/converter_ext), without the
# Python / nanobind / tvm_ffi bindings, cpptrace, -flto or -Werror.
#
# OCTET_XGRAMMAR_TARBALL: the sdist. Downloaded once (hash-checked) when absent; offline builds
# (gpu_check, the image) pass a staged copy. The hash is always verified; the sources are
# extracted under ${CMAKE_BINARY_DIR}/_deps, again whenever the stamp differs.
set(octet_xgrammar_version 0.2.8)
set(octet_xgrammar_sha256 8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80)
set(octet_xgrammar_url "https://files.pythonhosted.org/packages/03/0f/29f521535729be740779c2c98b630ef6607cf28be9b669895dd2b821ff63/xgrammar-${octet_xgrammar_version}.tar.gz")
set(OCTET_XGRAMMAR_TARBALL "${octet_cache_default}/xgrammar-${octet_xgrammar_version}.tar.gz"
    CACHE FILEPATH "xgrammar ${octet_xgrammar_version} sdist (downloaded here when absent)")

if(NOT EXISTS "${OCTET_XGRAMMAR_TARBALL}")
  message(STATUS "octet: downloading xgrammar ${octet_xgrammar_version} to ${OCTET_XGRAMMAR_TARBALL}")
  get_filename_component(octet_xgrammar_dir "${OCTET_XGRAMMAR_TARBALL}" DIRECTORY)
  file(MAKE_DIRECTORY "${octet_xgrammar_dir}")
  file(DOWNLOAD "${octet_xgrammar_url}" "${OCTET_XGRAMMAR_TARBALL}.part"
       EXPECTED_HASH SHA256=${octet_xgrammar_sha256} STATUS octet_xgrammar_status TLS_VERIFY ON
       INACTIVITY_TIMEOUT 30 TIMEOUT 600)
  list(GET octet_xgrammar_status 0 octet_xgrammar_code)
  if(NOT octet_xgrammar_code EQUAL 0)
    file(REMOVE "${OCTET_XGRAMMAR_TARBALL}.part")
    message(FATAL_ERROR "octet: could not download ${octet_xgrammar_url}: ${octet_xgrammar_status}"
                        "; place the file at OCTET_XGRAMMAR_TARBALL (${OCTET_XGRAMMAR_TARBALL})")
  endif()
  file(RENAME "${OCTET_XGRAMMAR_TARBALL}.part" "${OCTET_XGRAMMAR_TARBALL}")
endif()
file(SHA256 "${OCTET_XGRAMMAR_TARBALL}" octet_xgrammar_actual)
if(NOT octet_xgrammar_actual STREQUAL octet_xgrammar_sha256)
  message(FATAL_ERROR "octet: ${OCTET_XGRAMMAR_TARBALL} has SHA-256 ${octet_xgrammar_actual}, "
                      "expected ${octet_xgrammar_sha256} (xgrammar ${octet_xgrammar_version})")
endif()

set(octet_xgrammar_deps "${CMAKE_BINARY_DIR}/_deps")
set(octet_xgrammar_src "${octet_xgrammar_deps}/xgrammar-${octet_xgrammar_version}")
set(octet_xgrammar_stamp "${octet_xgrammar_deps}/xgrammar.sha256")
set(octet_xgrammar_stamped "")
if(EXISTS "${octet_xgrammar_stamp}")
  file(READ "${octet_xgrammar_stamp}" octet_xgrammar_stamped)
endif()
if(NOT octet_xgrammar_stamped STREQUAL octet_xgrammar_sha256 OR NOT EXISTS "${octet_xgrammar_src}/cpp")
  file(REMOVE_RECURSE "${octet_xgrammar_src}")
  file(MAKE_DIRECTORY "${octet_xgrammar_deps}")
  file(ARCHIVE_EXTRACT INPUT "${OCTET_XGRAMMAR_TARBALL}" DESTINATION "${octet_xgrammar_deps}")
  if(NOT EXISTS "${octet_xgrammar_src}/cpp/grammar_compiler.cc")
    message(FATAL_ERROR "octet: ${OCTET_XGRAMMAR_TARBALL} did not extract to ${octet_xgrammar_src}")
  endif()
  file(WRITE "${octet_xgrammar_stamp}" "${octet_xgrammar_sha256}")
endif()

file(GLOB octet_xgrammar_srcs "${octet_xgrammar_src}/cpp/*.cc" "${octet_xgrammar_src}/cpp/support/*.cc"
     "${octet_xgrammar_src}/cpp/converter_ext/*.cc")
add_library(xgrammar STATIC ${octet_xgrammar_srcs})
set_target_properties(xgrammar PROPERTIES CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
                      CXX_EXTENSIONS OFF POSITION_INDEPENDENT_CODE ON)
target_include_directories(xgrammar SYSTEM PUBLIC "${octet_xgrammar_src}/include"
                           "${octet_xgrammar_src}/3rdparty/picojson"
                           "${octet_xgrammar_src}/3rdparty/dlpack/include")
target_compile_definitions(xgrammar PUBLIC XGRAMMAR_ENABLE_CPPTRACE=0)
# xgrammar's log hooks (support/logging.h): octet defines LogFatalImpl and LogMessageImpl
# (engine/xgrammar_log.cpp), so its warnings go to spdlog instead of stderr; engine/ includes
# "support/logging.h" for LogFatalError.
target_compile_definitions(xgrammar PUBLIC XGRAMMAR_LOG_CUSTOMIZE=1)
target_include_directories(xgrammar SYSTEM INTERFACE "${octet_xgrammar_src}/cpp")
# Third-party code: its warnings are not ours (-w); -O2 whatever the build type (Release's -O3
# gains nothing measurable here and costs build time). Not instrumented for fuzzer coverage.
target_compile_options(xgrammar PRIVATE -w -O2)
# The sanitizer tree does not instrument it either: its checks are xgrammar's own business, and
# ASan + UBSan made its compile the slowest part of that tree's build. Our code calling it is
# instrumented; allocations are still ASan's (its malloc interposes process-wide).
if(OCTET_SANITIZE)
  target_compile_options(xgrammar PRIVATE -fno-sanitize=all)
endif()
target_link_libraries(xgrammar PUBLIC Threads::Threads)
