// How many units a VAE decode may work on at once on its device, from the room left under the device-memory budget
// (ops::device_budget_bytes less ops::device_in_use_bytes), and the refusal when not even one fits. A unit is what
// the decode splits its work into without changing its result: a (temporal chunk, spatial tile) unit of the video
// decode, a batch item (one stereo channel) of the audio decode.
#pragma once
#include <cstdint>
#include <string>

#include "core/device.h"

namespace h3 {

struct DecodeRoom {
  int64_t budget = -1;  // what h3's tensors may take on the device; -1: no limit known (the CPU, no budget)
  int64_t in_use = 0;   // what they take now
  bool known() const { return budget > 0; }
  int64_t left() const;  // budget - in_use, at least 0
};
DecodeRoom decode_room(Device device);

// Units per call for units of `unit_bytes` each: share x room.left() / unit_bytes, within [1, most] (`most` when
// no limit is known). Throws naming `model`, the unit, its need, the room, the budget and what to do when the room
// is known and one unit needs more than all of it.
int64_t decode_units_per_call(const std::string& model, const std::string& unit, int64_t unit_bytes,
                              const DecodeRoom& room, double share, int64_t most);

}  // namespace h3
