// OCTET_DEVICE_SAMPLING: whether the engine samples on the backend (Backend::sample_rows)
// rather than its default (the backend's samples_on_device()); tests force the CPU reference on.
#pragma once

namespace octet {

/// OCTET_DEVICE_SAMPLING, as the serve options' boolean environment variables: 1 (1, true, yes,
/// on: kSample rows on the backend, e.g. the CPU reference), 0 (0, false, no, off: never), -1
/// when unset (the backend's samples_on_device()). Throws std::invalid_argument for any other
/// value (the serve command checks it before it listens).
int device_sampling_override();

}  // namespace octet
