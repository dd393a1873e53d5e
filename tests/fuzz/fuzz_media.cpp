// Fuzz target: media probing (media/media_read.h scan_media), what every uploaded keyframe or reference goes
// through. The input is written to a file and scanned with a request's limits; every outcome is a MediaInfo or
// an h3::Error, within the scan's limits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "media/media_read.h"
#include "scratch_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = h3::fuzz::scratch_input("media", ".bin", data, size);
  if (path.empty()) return 0;
  try {
    const h3::MediaInfo info = h3::scan_media(path, 24, 32000, 346, 460800);
    if (info.width > h3::kMaxMediaSide || info.height > h3::kMaxMediaSide || info.frames > 346 ||
        info.audio_samples > 460800 + 65536)
      std::abort();  // a limit did not hold
  } catch (const h3::Error&) {
  }
  return 0;
}
