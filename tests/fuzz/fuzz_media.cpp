// Fuzz target: media probing (media/media_read.h scan_media), what every uploaded keyframe or reference goes
// through. The input is written to a file and scanned with a request's limits; every outcome is a MediaInfo or
// an h3::Error, within the scan's limits.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "media/media_read.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/h3-fuzz-media-" + std::to_string(::getpid()) + ".bin";
  if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  } else {
    return 0;
  }
  try {
    const h3::MediaInfo info = h3::scan_media(path, 24, 32000, 346, 460800);
    if (info.width > h3::kMaxMediaSide || info.height > h3::kMaxMediaSide || info.frames > 346 ||
        info.audio_samples > 460800 + 65536)
      std::abort();  // a limit did not hold
  } catch (const h3::Error&) {
  }
  return 0;
}
