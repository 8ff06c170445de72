# FlashInfer 0.7.4 (https://github.com/flashinfer-ai/flashinfer, Apache-2.0): the attention
# kernels of the CUDA backend (kernels/cuda/flashinfer/). Header-only CUDA templates shipped in
# PyPI's pinned flashinfer-python wheel (flashinfer/data/include); its CCCL's libcudacxx
# (flashinfer/data/cccl/libcudacxx/include) comes first on the path: fastdiv.cuh needs
# cuda::fast_mod_div, which CUDA 13.0's own CCCL lacks. No Python, no JIT, no CUTLASS.
#
# OCTET_FLASHINFER_WHEEL: the wheel, downloaded once (hash-checked) when absent.
# OCTET_FLASHINFER_HEADERS_TARBALL: instead of the wheel (offline builds: scripts/gpu_check),
#   a .tar.gz of the extracted headers as this file leaves them in ${CMAKE_BINARY_DIR}/_deps
#   (flashinfer-0.7.4/, its stamp naming the wheel's hash).
# Defines octet_flashinfer_include_dirs.
set(octet_flashinfer_version 0.7.4)
set(octet_flashinfer_sha256 a051a62e09a2738e8b0de47a1944fd2f0f3eff01b728b662141ea660cb09dd32)
set(octet_flashinfer_url "https://files.pythonhosted.org/packages/7e/22/c96155b9959c0fb37ce179c7b1053552c170ab875bbbfc75406c9024c36f/flashinfer_python-${octet_flashinfer_version}-py3-none-any.whl")
set(OCTET_FLASHINFER_WHEEL
    "${octet_cache_default}/flashinfer_python-${octet_flashinfer_version}-py3-none-any.whl"
    CACHE FILEPATH "flashinfer-python ${octet_flashinfer_version} wheel (downloaded here when absent)")
set(OCTET_FLASHINFER_HEADERS_TARBALL "" CACHE FILEPATH
    "FlashInfer headers as extracted by a build tree (offline builds); empty: the wheel")

set(octet_flashinfer_deps "${CMAKE_BINARY_DIR}/_deps")
set(octet_flashinfer_dir "${octet_flashinfer_deps}/flashinfer-${octet_flashinfer_version}")
set(octet_flashinfer_stamp "${octet_flashinfer_dir}/stamp.sha256")
set(octet_flashinfer_stamped "")
if(EXISTS "${octet_flashinfer_stamp}")
  file(READ "${octet_flashinfer_stamp}" octet_flashinfer_stamped)
endif()

if(NOT octet_flashinfer_stamped STREQUAL octet_flashinfer_sha256)
  file(REMOVE_RECURSE "${octet_flashinfer_dir}")
  file(MAKE_DIRECTORY "${octet_flashinfer_deps}")
  if(OCTET_FLASHINFER_HEADERS_TARBALL)
    file(ARCHIVE_EXTRACT INPUT "${OCTET_FLASHINFER_HEADERS_TARBALL}"
         DESTINATION "${octet_flashinfer_deps}")
    file(READ "${octet_flashinfer_stamp}" octet_flashinfer_stamped)
    if(NOT octet_flashinfer_stamped STREQUAL octet_flashinfer_sha256)
      message(FATAL_ERROR "octet: ${OCTET_FLASHINFER_HEADERS_TARBALL} is not FlashInfer "
                          "${octet_flashinfer_version} (stamp '${octet_flashinfer_stamped}')")
    endif()
  else()
    if(NOT EXISTS "${OCTET_FLASHINFER_WHEEL}")
      message(STATUS "octet: downloading flashinfer-python ${octet_flashinfer_version} (97 MiB) "
                     "to ${OCTET_FLASHINFER_WHEEL}")
      get_filename_component(octet_flashinfer_wheel_dir "${OCTET_FLASHINFER_WHEEL}" DIRECTORY)
      file(MAKE_DIRECTORY "${octet_flashinfer_wheel_dir}")
      file(DOWNLOAD "${octet_flashinfer_url}" "${OCTET_FLASHINFER_WHEEL}.part"
           EXPECTED_HASH SHA256=${octet_flashinfer_sha256} STATUS octet_flashinfer_status
           TLS_VERIFY ON INACTIVITY_TIMEOUT 30 TIMEOUT 900)
      list(GET octet_flashinfer_status 0 octet_flashinfer_code)
      if(NOT octet_flashinfer_code EQUAL 0)
        file(REMOVE "${OCTET_FLASHINFER_WHEEL}.part")
        message(FATAL_ERROR "octet: could not download ${octet_flashinfer_url}: "
                            "${octet_flashinfer_status}; place the file at "
                            "OCTET_FLASHINFER_WHEEL (${OCTET_FLASHINFER_WHEEL})")
      endif()
      file(RENAME "${OCTET_FLASHINFER_WHEEL}.part" "${OCTET_FLASHINFER_WHEEL}")
    endif()
    file(SHA256 "${OCTET_FLASHINFER_WHEEL}" octet_flashinfer_actual)
    if(NOT octet_flashinfer_actual STREQUAL octet_flashinfer_sha256)
      message(FATAL_ERROR "octet: ${OCTET_FLASHINFER_WHEEL} has SHA-256 "
                          "${octet_flashinfer_actual}, expected ${octet_flashinfer_sha256}")
    endif()
    file(ARCHIVE_EXTRACT INPUT "${OCTET_FLASHINFER_WHEEL}" DESTINATION "${octet_flashinfer_dir}"
         PATTERNS "flashinfer/data/include/flashinfer/*"
                  "flashinfer/data/cccl/libcudacxx/include/*")
    file(WRITE "${octet_flashinfer_stamp}" "${octet_flashinfer_sha256}")
  endif()
  if(NOT EXISTS "${octet_flashinfer_dir}/flashinfer/data/include/flashinfer/attention/decode.cuh")
    message(FATAL_ERROR "octet: FlashInfer headers missing under ${octet_flashinfer_dir}")
  endif()
endif()
set(octet_flashinfer_include_dirs
    "${octet_flashinfer_dir}/flashinfer/data/cccl/libcudacxx/include"
    "${octet_flashinfer_dir}/flashinfer/data/include")
